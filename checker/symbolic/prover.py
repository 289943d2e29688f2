"""The candidates of k-induction (lemma parts and invariant parts) and the
three questions cowcheck.symbolic.kind asks z3 about them: the base case,
the Houdini inductive step and the one-state implication."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import z3

from cowcheck.model.scenario import Scenario

from cowcheck.engines.invariants import Invariant
from cowcheck.symbolic.bmc import Unrolling, solve
from cowcheck.symbolic.lemmas import Lemmas, Part
from cowcheck.symbolic.terms import Renaming, decided

#: z3's limit on one falsification round of Prover.step: proving in one query
#: that no candidate fails can take longer than the per-candidate sweeps do
ROUND_MS = 3000


@dataclass(eq=False)
class Candidate:
    key: str                  # "inv:<id>:<part>" or "lemma:<name>:<label>"
    formula: z3.BoolRef       # over the Unrolling's template state: true when good
    invariant: Optional[str] = None
    lemma: Optional[str] = None
    pieces: list["Candidate"] = field(default_factory=list)    # finer candidates whose conjunction this is

    @staticmethod
    def of(part: Part) -> "Candidate":
        return Candidate(part.key, part.formula, lemma=part.lemma, pieces=[Candidate.of(p) for p in part.pieces])


class Prover:
    """The candidates of one scenario and the queries about them."""

    def __init__(self, scenario: Scenario, invariants: tuple[Invariant, ...]):
        self.u = u = Unrolling(scenario, invariants)
        self.system = u.system
        self.lemmas = Lemmas(u.system)
        self.lemma_parts = [Candidate.of(p) for p in self.lemmas.parts(u.pre)]
        self.parts_of: dict[str, list[Candidate]] = {}
        for inv in invariants:
            bad = [("state", u.judge.state(inv.id))]
            bad += [(inst.label, u.judge.action(inv.id, which=n)) for n, inst in enumerate(self.system.instances)]
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
        u, system = self.u, self.system
        if k == 1:
            pairs, enabled = self.successor()
            domain = system.domain(u.pre)
            rename = Renaming(pairs)
            frame = [domain, rename(domain), enabled, z3.Or([a != b for a, b in pairs])]

            def at(c: Candidate, i: int):
                if i == 0:
                    return c.formula
                key = (c.key, "next")
                if key not in self._at:
                    self._at[key] = rename(c.formula)
                return self._at[key]
            return frame, at
        run = f"k{k}_"
        states = [u.state(i, run) for i in range(k + 1)]
        frame = [system.domain(s) for s in states] + [u.step(i, run) for i in range(k)]
        frame += [z3.Not(system.same(a, b)) for n, a in enumerate(states) for b in states[n + 1:]]
        return frame, (lambda c, i: self.at(c, i, run))

    # -- the three questions --------------------------------------------------------------
    def base(self, cands: list[Candidate], d: int) -> tuple[list[Candidate], list[Candidate]]:
        """(the candidates true in every state reachable in exactly d
        actions, those false in one). A failing candidate made of pieces is
        replaced by its pieces, which are asked in turn."""
        u, system = self.u, self.system
        path = [system.init(u.state(0))] + [u.step(i) for i in range(d)]
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
        goal: dict[Candidate, z3.BoolRef] = {}
        alive, rest, todo = list(cands), list[Candidate](), list[Candidate]()     # rest: dropped; todo: to ask in this sweep

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
                answer = decided(solver, solver.check(asked(c)))
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
        solver.add(self.system.domain(self.u.pre))
        solver.add([c.formula for c in proven])
        goals = [z3.Bool(f"implied{n}") for n in range(len(cands))]
        solver.add([z3.Implies(g, z3.Not(c.formula)) for g, c in zip(goals, cands)])
        out = []
        for g, c in zip(goals, cands):
            answer = decided(solver, solver.check(g))
            if answer == z3.unsat:
                out.append(c)
        return out
