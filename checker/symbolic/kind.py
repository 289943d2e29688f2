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
  S_0 .. S_k of pairwise distinct states inside SymbolicSystem.domain and the
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

Branch programs (forks, speculation) get the same procedure with fewer
lemmas where forks make the plain-program ones useless
(cowcheck.symbolic.lemmas.Lemmas.catalogue), so more invariants may be
left "not closed" there; none is ever claimed without its proof.

An invariant is proven (closed_at k) once all its parts are. Nothing is
reported proved without unsatisfiable step queries and base cases for
exactly the set those queries assumed; a lemma that is false for a buggy
protocol fails one half or the other and is never used. Invariants left open
at the bound get BMC to the same bound (violated with a shortest
counterexample, not seen, or holds when every run ended within it).

`KInduction` runs these phases in order, one method each: per k the base
case, the lemma step, the implication, the invariant step and the closing
of proofs; then the closing BMC and the tally of verdicts and lemmas. An
invariant with no z3 encoding gets an unsupported verdict."""

from __future__ import annotations

import time
from typing import Optional

from cowcheck.model.scenario import Scenario

from cowcheck.engines.invariants import INVARIANTS, Invariant, validate_expect
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import KindResult, Outcome, Verdict
from cowcheck.engines.stop import Stop, StopKind, interrupted
from cowcheck.symbolic.bmc import run_bmc, scenario_invariants
from cowcheck.symbolic.invariants import encoded, unsupported
from cowcheck.symbolic.prover import Candidate, Prover
from cowcheck.symbolic.terms import solving


class KInduction:
    """One k-induction run: the open candidates, what is proven and refuted
    so far, and the k that closed each invariant's proof."""

    def __init__(self, scenario: Scenario, invariants: tuple[Invariant, ...], depth: int, lemma_depth: int = 2):
        self.scenario, self.invariants, self.depth, self.lemma_depth = scenario, invariants, depth, lemma_depth
        self.checked, self.left_out = encoded(invariants)
        self.prover = Prover(scenario, self.checked)
        self.lemmas = list(self.prover.lemma_parts)          # open lemma parts
        self.parts = [c for inv in self.checked for c in self.prover.parts_of[inv.id]]   # open invariant parts
        self.proven: list[Candidate] = []
        self.refuted: list[Candidate] = []
        self.closed_at: dict[str, Optional[int]] = {}
        self.k_seconds: list[float] = []

    def settled(self) -> bool:
        """Every invariant is proven or has a refuted part (BMC will find its violation)."""
        return all(inv.id in self.closed_at or any(c in self.refuted for c in self.prover.parts_of[inv.id])
                   for inv in self.checked)

    # -- the phases at one k -------------------------------------------------------------
    def base_case(self, k: int) -> None:
        """Drop the open candidates that fail in a state reachable in k-1 actions."""
        if k <= self.lemma_depth:
            self.lemmas, bad = self.prover.base(self.lemmas, k - 1)
            self.refuted += bad
        self.parts, bad = self.prover.base(self.parts, k - 1)
        self.refuted += bad

    def lemma_step(self, k: int) -> None:
        """Houdini on the open lemma parts, assuming the proven ones."""
        if k <= self.lemma_depth and self.lemmas:
            good, self.lemmas = self.prover.step(self.lemmas, self.proven_lemmas(), k)
            self.proven += good

    def implication(self) -> None:
        """The invariant parts the proven lemma parts imply in one state."""
        implied = self.prover.implied(self.parts, self.proven_lemmas())
        self.proven += implied
        self.parts = [c for c in self.parts if c not in implied]

    def invariant_step(self, k: int) -> None:
        """Houdini on the remaining invariant parts, assuming everything proven."""
        if self.parts:
            good, self.parts = self.prover.step(self.parts, self.proven, k)
            self.proven += good

    def close(self, k: int) -> None:
        """An invariant whose parts are all proven is closed at k."""
        for inv in self.checked:
            if inv.id not in self.closed_at and all(c in self.proven for c in self.prover.parts_of[inv.id]):
                self.closed_at[inv.id] = k

    def proven_lemmas(self) -> list[Candidate]:
        return [c for c in self.proven if c.lemma]

    # -- the run -----------------------------------------------------------------------
    def run(self) -> KindResult:
        """Prove what k-induction with lemmas can prove for k = 1 .. depth,
        then settle the rest by BMC to depth.

        Lemma parts are tried only while k <= lemma_depth: one that is not
        inductive at small k is almost always false for the protocol, and
        larger steps cost more than they find."""
        try:
            with solving():
                self.prove()
        except KeyboardInterrupt as interrupt:    # the proofs closed so far stand; the rest is open
            return self.tally({inv.id: Verdict(inv.id, Kind(inv.kind), Outcome.NOT_SEEN) for inv in self.checked},
                              [], 0, interrupted(interrupt))
        return self.tally(*self.closing_bmc())

    def prove(self) -> None:
        """k = 1 .. depth: the base case, the lemmas' step, what they imply,
        the invariants' step; stop once every invariant is settled."""
        for k in range(1, self.depth + 1):
            start = time.perf_counter()
            self.base_case(k)
            if self.settled():
                self.k_seconds.append(time.perf_counter() - start)
                return
            self.lemma_step(k)
            self.implication()
            self.invariant_step(k)
            self.close(k)
            self.k_seconds.append(time.perf_counter() - start)
            if self.settled():
                return

    def closing_bmc(self) -> tuple[dict[str, Verdict], list[float], int, Optional[Stop]]:
        """BMC to the bound for the invariants left open: (their verdicts,
        its seconds per depth, the deepest depth it decided, and why it
        stopped if it was interrupted)."""
        left = tuple(inv for inv in self.checked if inv.id not in self.closed_at)
        if not left:
            return {}, [], 0, None
        rest = run_bmc(self.scenario, left, self.depth)
        return rest.verdicts, rest.depth_seconds, rest.reached, rest.stop if rest.interrupted else None

    def tally(self, bmc_verdicts: dict[str, Verdict], bmc_seconds: list[float], reached: int,
              interrupt: Optional[Stop] = None) -> KindResult:
        """The verdicts, the k that closed each proof, and each lemma's parts
        proven (and so used) and dropped."""
        verdicts = dict(bmc_verdicts)
        closed_at = self.closed_at
        for inv in self.checked:
            if inv.id in closed_at:
                verdicts[inv.id] = Verdict(inv.id, Kind(inv.kind), Outcome.HOLDS)
            elif verdicts[inv.id].outcome is Outcome.HOLDS:      # every run ended within the bound: exhaustive
                closed_at[inv.id] = reached + 1
            else:
                closed_at[inv.id] = None
        for inv in self.left_out:
            verdicts[inv.id] = unsupported(inv)
        verdicts = {inv.id: verdicts[inv.id] for inv in self.invariants}
        open_ids = [inv.id for inv in self.checked if closed_at[inv.id] is None and verdicts[inv.id].holds is None]
        complete = not open_ids      # every invariant proven or violated: both are final (as in BMC)
        stop = None if complete else interrupt or Stop(StopKind.NOT_CLOSED, self.depth, open=tuple(open_ids))
        used = self.proven_lemmas()
        tally: dict[str, list[int]] = {name: [0, 0] for name in self.prover.lemmas.names()}
        for name in (c.lemma for c in used if c.lemma):
            tally[name][0] += 1
        for name in (c.lemma for c in self.lemmas + self.refuted if c.lemma):
            tally[name][1] += 1
        return KindResult(self.scenario, verdicts, complete, stop, sum(self.k_seconds) + sum(bmc_seconds),
                          bound=self.depth, closed_at={inv.id: closed_at[inv.id] for inv in self.checked},
                          k_seconds=self.k_seconds, bmc_seconds=bmc_seconds,
                          lemmas={name: (v[0], v[1]) for name, v in tally.items() if sum(v)},
                          proven_parts=[c.key for c in used])


def run_kinduction(scenario: Scenario, invariants: tuple[Invariant, ...] = INVARIANTS, depth: int = 10,
                   lemma_depth: int = 2) -> KindResult:
    """k-induction for k = 1 .. depth, then BMC to depth for what is left
    open (KInduction). `closed_at` maps each invariant to the k that closed
    its proof (None: not closed within the bound)."""
    validate_expect(scenario)
    invariants, unjudged = scenario_invariants(scenario, invariants)
    if not encoded(invariants)[0]:     # nothing to prove: no lemmas either
        return KindResult(scenario, {**{inv.id: unsupported(inv) for inv in invariants}, **unjudged}, True, bound=depth)
    try:
        with solving():
            prover = KInduction(scenario, invariants, depth, lemma_depth)
    except KeyboardInterrupt as interrupt:       # while building the lemmas: nothing decided yet
        return KindResult(scenario, {**{inv.id: Verdict(inv.id, Kind(inv.kind), Outcome.NOT_SEEN) for inv in invariants},
                                     **unjudged}, False, interrupted(interrupt), bound=depth)
    result = prover.run()
    result.verdicts.update(unjudged)
    return result
