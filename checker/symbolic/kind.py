"""k-induction: prove invariants without visiting every state.

For an invariant, let good(S) say that S does not break it and no action
enabled in S breaks it. Alone, good is rarely inductive: the inductive step
starts from an arbitrary state, and most arbitrary states are unreachable
ones from which the invariant breaks at once. So the invariants are proven
with the help of the strengthening lemmas of cowcheck.symbolic.lemmas (named
reachable-state invariants: refcounts agree with the tables, the free list
holds exactly the unowned blocks, each branch is where its program can be,
...). None of them is trusted: each is a *candidate*, proven or dropped.

Candidates are lemma parts and invariant parts (an invariant's good split
into "the state is not bad" and, per action instance, "this action, if
enabled, does not break it": many small questions are far easier for z3
than their disjunction). At each k = 1, 2, ... up to the bound:

- base case: no run of k-1 actions from the initial state reaches a state
  where an open candidate fails (smaller depths were checked at smaller k).
  One that fails is false and is dropped for good (a lemma part made of
  pieces is replaced by its pieces, which get the same test); an invariant
  with a failing part is left to BMC, which finds its shortest violation.
- inductive step for the open lemma parts (Houdini): is there a path
  S_0 .. S_k of pairwise distinct states inside Encoding.domain and the
  lemma parts proven so far, with every open lemma part true in
  S_0 .. S_{k-1} and one of them false in S_k? If so, every open part false
  in S_k is dropped at this k (a part made of pieces is replaced by its
  pieces) and the question is asked again. When no part fails, what is left
  is k-inductive and, with the base cases, true in every reachable state: a
  state at depth below k was checked directly; one at depth n >= k ends a
  shortest run whose last k+1 states are distinct, inside the proven parts,
  and satisfy the open ones up to the last by induction on n.
- invariant parts: one that the proven lemma parts imply in a single state
  (no transition: a small query) holds in every reachable state. The others
  get the same Houdini step at k, with the proven lemma parts assumed in
  every state of the path S_0 .. S_k.

An invariant is proven (closed_at k) once all its parts are. Nothing is
reported proved without unsatisfiable step queries and base cases for
exactly the set those queries assumed; a lemma that is false for a buggy
protocol fails one half or the other and is never used. Invariants left open
at the bound get BMC to the same bound (verdict False with a shortest
counterexample, None when not seen, True when every run ended within it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Optional

import z3

from ..check import Verdict
from ..invariants import INVARIANTS, Invariant, validate_expect
from .bmc import SymbolicResult, Unrolling, _result, run_bmc, solve
from .lemmas import Lemmas, Part

#: z3's limit on one falsification round of Prover.step: proving in one query
#: that no candidate fails can take longer than the per-candidate sweeps do
ROUND_MS = 3000


@dataclass
class KindResult(SymbolicResult):
    """A SymbolicResult with k-induction's own numbers: seconds per k (the
    base case and the inductive steps) apart from the closing BMC's, and
    the lemmas' fate: per lemma, how many parts were proven (and so used)
    and how many were dropped."""
    k_seconds: list = field(default_factory=list)
    bmc_seconds: list = field(default_factory=list)
    lemmas: dict = field(default_factory=dict)
    proven_parts: list = field(default_factory=list)   # keys of the lemma parts proven (and so used)

    def engine_line(self) -> str:
        """The engine, its bound, z3's time in total, per k and (apart, so
        that it is not read as the proof's cost) in the closing BMC, the k
        that closed each proof (or violated / not closed), and the lemmas."""
        def shown(inv_id, k):
            if k is not None:
                return f"{inv_id}={k}"
            return f"{inv_id}={'violated' if self.verdicts[inv_id].holds is False else 'not closed'}"
        used = sum(p for p, _ in self.lemmas.values())
        total = sum(p + d for p, d in self.lemmas.values())
        line = (f"engine kind  bound {self.bound}  z3 {sum(self.depth_seconds):.2f}s  per k (s): "
                + " ".join(f"{t:.2f}" for t in self.k_seconds))
        if self.bmc_seconds:
            line += f"  then bmc {sum(self.bmc_seconds):.2f}s"
        line += "  closed at k: " + ", ".join(shown(i, k) for i, k in self.closed_at.items())
        return line + f"  lemma parts proven: {used}/{total}"

    def to_json(self) -> dict:
        data = super().to_json()
        data["z3_seconds_per_k"] = [round(t, 3) for t in self.k_seconds]
        data["lemmas"] = {name: {"proven": p, "dropped": d} for name, (p, d) in self.lemmas.items()}
        return data


@dataclass(eq=False)
class Candidate:
    key: str                  # "inv:<id>:<part>" or "lemma:<name>:<label>"
    formula: z3.BoolRef       # over the Unrolling's template state: true when good
    invariant: Optional[str] = None
    lemma: Optional[str] = None
    pieces: list = field(default_factory=list)    # finer candidates whose conjunction this is

    @staticmethod
    def of(part: Part) -> "Candidate":
        return Candidate(part.key, part.formula, lemma=part.lemma, pieces=[Candidate.of(p) for p in part.pieces])


class Prover:
    """The candidates of one scenario and the queries about them."""

    def __init__(self, scenario, invariants: tuple[Invariant, ...]):
        self.u = u = Unrolling(scenario, invariants)
        self.enc = u.enc
        self.lemmas = Lemmas(u.enc)
        self.lemma_parts = [Candidate.of(p) for p in self.lemmas.parts(u.pre)]
        self.parts_of: dict[str, list[Candidate]] = {}
        for inv in invariants:
            bad = [("state", u.judge.state(inv.id))]
            bad += [(inst.label, u.judge.action(inv.id, which=n)) for n, inst in enumerate(self.enc.instances)]
            self.parts_of[inv.id] = [Candidate(f"inv:{inv.id}:{label}", z3.Not(f), invariant=inv.id)
                                     for label, f in bad if not z3.is_false(f)]
        self._at: dict[tuple, z3.BoolRef] = {}
        self._successor = None

    # -- a candidate in a state ---------------------------------------------------------
    def at(self, c: Candidate, d: int, run: str) -> z3.BoolRef:
        key = (c.key, d, run)
        if key not in self._at:
            self._at[key] = self.u.at(c.formula, d, run)
        return self._at[key]

    def successor(self):
        """(template field, its value after the action `act`) pairs and the
        condition that `act` names an enabled action with a successor: the
        transition relation of Unrolling._relation, written as terms."""
        if self._successor is None:
            u = self.u
            posts = [x.post.flat() for x in u.executed]
            pairs = []
            for f, old in enumerate(u.pre.flat()):
                value = old
                for i in reversed(range(len(posts))):
                    v = posts[i][f]
                    if not (z3.is_expr(v) and v.eq(old)):
                        value = z3.If(u.act == i, v, value)
                pairs.append((old, value))
            enabled = z3.And([z3.ULT(u.act, len(u.executed))]
                             + [z3.Implies(u.act == i, z3.And(x.guard, x.leads)) for i, x in enumerate(u.executed)])
            self._successor = (pairs, enabled)
        return self._successor

    def path(self, k: int):
        """The inductive step's path S_0 .. S_k: its constraints (each state
        inside the domain, each linked to the next by the transition
        relation, all pairwise distinct) and a function (candidate, i) ->
        the candidate in S_i. For k = 1 the path is the template state and
        its successor written as terms over it and the action (no variables
        for S_1, which z3 would otherwise have to solve away)."""
        u, enc = self.u, self.enc
        if k == 1:
            pairs, enabled = self.successor()
            domain = enc.domain(u.pre)
            frame = [domain, z3.substitute(domain, *pairs), enabled, z3.Or([a != b for a, b in pairs])]

            def at(c: Candidate, i: int):
                if i == 0:
                    return c.formula
                key = (c.key, "next")
                if key not in self._at:
                    self._at[key] = z3.substitute(c.formula, *pairs)
                return self._at[key]
            return frame, at
        run = f"k{k}_"
        states = [u.state(i, run) for i in range(k + 1)]
        frame = [enc.domain(s) for s in states] + [u.step(i, run) for i in range(k)]
        frame += [z3.Not(enc.same(a, b)) for n, a in enumerate(states) for b in states[n + 1:]]
        return frame, (lambda c, i: self.at(c, i, run))

    # -- the three questions --------------------------------------------------------------
    def base(self, cands: list[Candidate], d: int) -> tuple[list[Candidate], list[Candidate]]:
        """(the candidates true in every state reachable in exactly d
        actions, those false in one). A failing candidate made of pieces is
        replaced by its pieces, which are asked in turn."""
        u, enc = self.u, self.enc
        path = [enc.init(u.state(0))] + [u.step(i) for i in range(d)]
        alive, refuted = list(cands), []
        while alive:
            m = solve(path + [z3.Or([z3.Not(self.at(c, d, "s")) for c in alive])])
            if m is None:
                break
            bad = [c for c in alive if z3.is_false(m.eval(self.at(c, d, "s"), model_completion=True))]
            assert bad, "a model without a failing candidate"
            alive = [c for c in alive if c not in bad] + [p for c in bad for p in c.pieces]
            refuted += [c for c in bad if not c.pieces]
        return alive, refuted

    def step(self, cands: list[Candidate], proven: list[Candidate], k: int) -> tuple[list[Candidate], list[Candidate]]:
        """Houdini at k: (the largest subset of `cands`, and of the pieces
        of the ones that fail, that is k-inductive relative to the domain
        and `proven`; the rest).

        One incremental SAT solver holds the path S_0 .. S_k with `proven`
        in every state, and per candidate a switch that asks for it to be
        false in S_k. Every query assumes the alive candidates in
        S_0 .. S_{k-1}; a model drops every alive candidate false in S_k (a
        candidate made of pieces is replaced by its pieces).

        First come falsification rounds: one query asks whether any alive
        candidate fails. While many fail (a buggy protocol) each round drops
        a batch of them at the cost of one query instead of one per
        candidate; an unsatisfiable round proves every alive candidate at
        once. A round that runs past ROUND_MS ends them. Then sweeps flip
        the switches one by one; after a drop the rest of the sweep assumes
        only what is left (an answer that assumes a dropped candidate proves
        nothing that lasts, and a candidate that fails only without it is
        found in this sweep, not the next). Sweeps repeat until one drops
        nothing: then each alive candidate was shown to follow in S_k from
        all of them in S_0 .. S_{k-1}."""
        solver = z3.SolverFor("QF_FD")
        frame, at = self.path(k)
        solver.add(frame)
        solver.add([at(c, i) for c in proven for i in range(k + 1)])
        goal: dict = {}

        def asked(c: Candidate):
            if c not in goal:
                goal[c] = z3.Bool(f"goal{k}_{len(goal)}")
                solver.add(z3.Implies(goal[c], z3.Not(at(c, k))))
            return goal[c]

        def assume():
            """A scope with the alive candidates in S_0 .. S_{k-1}."""
            solver.push()
            solver.add([at(c, i) for c in alive for i in range(k)])

        def drop(m: z3.ModelRef, failed: Optional[Candidate] = None) -> None:
            """Drop `failed` and every alive candidate false in S_k in `m`;
            their pieces get switches outside the current scope (it is
            popped first), so the switches outlive it."""
            nonlocal alive
            bad = [x for x in alive if x is failed or z3.is_false(m.eval(at(x, k), model_completion=True))]
            assert bad, "a model without a failing candidate"
            solver.pop()
            pieces = [p for x in bad for p in x.pieces]
            alive = [x for x in alive if x not in bad] + pieces
            rest.extend(x for x in bad if not x.pieces)
            for p in pieces:
                asked(p)
            todo.extend(pieces)

        for c in cands:
            asked(c)
        alive, rest, todo = list(cands), [], []
        answer = None
        solver.set("timeout", ROUND_MS)
        while alive:                 # falsification rounds
            assume()
            solver.add(z3.Or([asked(c) for c in alive]))
            answer = solver.check()
            if answer != z3.sat:
                solver.pop()
                break
            drop(solver.model())
        solver.set("timeout", 0)     # no limit
        if answer == z3.unsat:
            return alive, rest
        clean = False
        while not clean:             # sweeps, until one drops nothing
            clean = True
            assume()
            todo = list(alive)
            while todo:
                c = todo.pop(0)
                if c not in alive:
                    continue
                answer = solver.check(asked(c))
                if answer == z3.unknown:
                    raise RuntimeError(f"z3 answered unknown ({solver.reason_unknown()})")
                if answer == z3.sat:
                    drop(solver.model(), c)
                    clean = False
                    assume()
            solver.pop()
        return alive, rest

    def implied(self, cands: list[Candidate], proven: list[Candidate]) -> list[Candidate]:
        """The candidates that hold in every state inside the domain where
        `proven` holds (so in every reachable state): one state, no
        transition, so these queries are small."""
        solver = z3.SolverFor("QF_FD")
        solver.add(self.enc.domain(self.u.pre))
        solver.add([c.formula for c in proven])
        goals = [z3.Bool(f"implied{n}") for n in range(len(cands))]
        solver.add([z3.Implies(g, z3.Not(c.formula)) for g, c in zip(goals, cands)])
        out = []
        for g, c in zip(goals, cands):
            answer = solver.check(g)
            if answer == z3.unknown:
                raise RuntimeError(f"z3 answered unknown ({solver.reason_unknown()})")
            if answer == z3.unsat:
                out.append(c)
        return out


def run_kinduction(scenario, invariants: tuple[Invariant, ...] = INVARIANTS, depth: int = 10,
                   out_dir=None, lemma_depth: int = 2) -> KindResult:
    """Prove what k-induction with lemmas can prove for k = 1 .. depth, then
    settle the rest by BMC to `depth`. `closed_at` maps each invariant to
    the k that closed its proof (None: not closed within the bound).

    Lemma parts are tried only while k <= lemma_depth: one that is not
    inductive at small k is almost always false for the protocol, and
    larger steps cost more than they find."""
    validate_expect(scenario)
    prover = Prover(scenario, invariants)
    lemmas = list(prover.lemma_parts)          # open lemma parts
    parts = [c for inv in invariants for c in prover.parts_of[inv.id]]   # open invariant parts
    proven: list[Candidate] = []
    refuted: list[Candidate] = []
    closed_at: dict[str, Optional[int]] = {}
    seconds: list[float] = []

    def settled() -> bool:
        return all(inv.id in closed_at or any(c in refuted for c in prover.parts_of[inv.id]) for inv in invariants)

    for k in range(1, depth + 1):
        start = time.perf_counter()
        if k <= lemma_depth:
            lemmas, bad = prover.base(lemmas, k - 1)
            refuted += bad
        parts, bad = prover.base(parts, k - 1)
        refuted += bad
        if settled():
            seconds.append(time.perf_counter() - start)
            break
        if k <= lemma_depth and lemmas:
            good, lemmas = prover.step(lemmas, [c for c in proven if c.lemma], k)
            proven += good
        known = [c for c in proven if c.lemma]
        implied = prover.implied(parts, known)
        proven += implied
        parts = [c for c in parts if c not in implied]
        if parts:
            good, parts = prover.step(parts, proven, k)
            proven += good
        for inv in invariants:
            if inv.id not in closed_at and all(c in proven for c in prover.parts_of[inv.id]):
                closed_at[inv.id] = k
        seconds.append(time.perf_counter() - start)
        if settled():
            break
    left = [inv for inv in invariants if inv.id not in closed_at]
    verdicts: dict = {}
    reached = max(closed_at.values(), default=0)
    bmc_seconds: list[float] = []
    if left:
        rest = run_bmc(scenario, tuple(left), depth, out_dir)
        bmc_seconds = rest.depth_seconds
        verdicts = rest.verdicts
        reached = rest.exploration.depth
    for inv in invariants:
        if inv.id in closed_at:
            verdicts[inv.id] = Verdict(inv.id, inv.kind, True)
        elif verdicts[inv.id].holds is True:      # every run ended within the bound: exhaustive
            closed_at[inv.id] = reached + 1
        else:
            closed_at[inv.id] = None
    verdicts = {inv.id: verdicts[inv.id] for inv in invariants}
    open_ids = [inv.id for inv in invariants if closed_at[inv.id] is None and verdicts[inv.id].holds is None]
    complete = not open_ids      # every invariant proven or violated: both are final (as in BMC)
    stopped = None if complete else f"k-induction did not close within k <= {depth}: {', '.join(open_ids)}"
    result = _result(scenario, invariants, verdicts, "kind", depth, seconds + bmc_seconds, complete, stopped, reached)
    result.closed_at = {inv.id: closed_at[inv.id] for inv in invariants}
    out = KindResult(**{f.name: getattr(result, f.name) for f in fields(result) if f.init})
    out.k_seconds, out.bmc_seconds = seconds, bmc_seconds
    used = [c for c in proven if c.lemma]
    tally: dict[str, list[int]] = {name: [0, 0] for name in prover.lemmas.names()}
    for c in used:
        tally[c.lemma][0] += 1
    for c in lemmas + [c for c in refuted if c.lemma]:
        tally[c.lemma][1] += 1
    out.lemmas = {name: tuple(v) for name, v in tally.items() if sum(v)}
    out.proven_parts = [c.key for c in used]
    return out
