"""k-induction: prove invariants without visiting every state.

For an invariant, let good(S) say that S does not break it and no action
enabled in S breaks it. The proof has two halves:

- base case: no run of at most `depth` actions from the initial state breaks
  the invariant. That is exactly BMC to the same bound (run_bmc), which also
  settles the invariants it breaks (verdict False) or that hold because every
  run ended within the bound (verdict True, closed at the depth where runs ran
  out).
- inductive step at k (1 <= k <= depth): there is no path S_0 .. S_k of
  pairwise distinct states, each inside the type invariants of
  Encoding.domain, with good(S_0) .. good(S_{k-1}) and not good(S_k). When
  that query is unsatisfiable, every reachable state is good: one at depth
  below k is covered by the base case, one at depth n >= k ends a run whose
  last k+1 states are distinct (the state graph is acyclic) and good up to
  the last by induction on n.

The verdict is True with the k that closed the proof, or None when no k up to
the bound closed it: never "proved" without an unsatisfiable step query."""

from __future__ import annotations

import time
from typing import Optional

import z3

from ..invariants import INVARIANTS, Invariant
from .bmc import SymbolicResult, Unrolling, _result, run_bmc, solve


def inductive_step(u: Unrolling, inv_id: str, k: int) -> bool:
    """Is the invariant k-inductive (relative to the domain constraints)?"""
    run = f"i{k}_"
    enc = u.enc
    states = [u.state(i, run) for i in range(k + 1)]
    parts = [enc.domain(s) for s in states]
    parts += [u.step(i, run) for i in range(k)]
    parts += [z3.Not(z3.Or(u.state_bad(inv_id, i, run), u.action_bad(inv_id, i, run))) for i in range(k)]
    parts += [z3.Not(enc.same(a, b)) for n, a in enumerate(states) for b in states[n + 1:]]
    parts.append(z3.Or(u.state_bad(inv_id, k, run), u.action_bad(inv_id, k, run)))
    return solve(parts) is None


def run_kinduction(scenario, invariants: tuple[Invariant, ...] = INVARIANTS, depth: int = 10,
                   out_dir=None) -> SymbolicResult:
    """Settle each invariant by BMC to `depth` and try to prove the others by
    k-induction for k = 1 .. depth. `closed_at` maps each invariant to the k
    that closed its proof (None: not closed within the bound)."""
    base = run_bmc(scenario, invariants, depth, out_dir)
    verdicts = base.verdicts
    closed_at: dict[str, Optional[int]] = {}
    seconds = list(base.depth_seconds)
    for inv in invariants:
        if verdicts[inv.id].holds is True:   # every run ended within the bound: exhaustive
            closed_at[inv.id] = base.exploration.depth + 1
    open_ = [inv for inv in invariants if verdicts[inv.id].holds is None]
    if open_:
        u = Unrolling(scenario, invariants)
        for k in range(1, depth + 1):
            start = time.perf_counter()
            for inv in list(open_):
                if inductive_step(u, inv.id, k):
                    verdicts[inv.id].holds = True
                    closed_at[inv.id] = k
                    open_.remove(inv)
            seconds.append(time.perf_counter() - start)
            if not open_:
                break
    for inv in open_:
        closed_at[inv.id] = None
    complete = not open_
    stopped = None if complete else f"k-induction did not close within k <= {depth}: {', '.join(i.id for i in open_)}"
    result = _result(scenario, invariants, verdicts, "kind", depth, seconds, complete, stopped, base.exploration.depth)
    result.closed_at = closed_at
    return result
