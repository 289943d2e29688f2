"""The symbolic engines: z3 bounded model checking and k-induction.

- system.py: `SymbolicSystem`, the transition system of model.system for
  z3: the action instances, scheduling through the protocol's Structure,
  and the map between explicit and symbolic states; state.py: the symbolic
  state and its facts (model.block's fact types with z3 fields, Guarded);
  steps.py: one handler per protocol step, and the device's completions,
  mirroring model.steps / model.block / model.queue; layout.py: the
  part of the system the handlers see (sizes, program counters, lookups),
  so steps.py need not import system.py; conditions.py: rule
  conditions as z3 formulas (a fold of model.condition's tree); terms.py:
  small helpers over z3 terms.
- invariants.py: one z3 encoding per invariant, next to its explicit
  predicate; an invariant without one is reported unsupported.
- bounds.py: the array sizes of the symbolic state (queue slots, table
  entries), the positions each operation can begin at and the rules each
  append can choose, and the earliest depth of each action instance, by a
  static analysis of the scenario's programs (forks and speculation too).
- reduction.py: symmetry breaking and commuting-action constraints that
  BMC adds to its run (same answers, fewer runs to refute).
- bmc.py: `run_bmc(scenario, invariants, depth) -> BmcResult`, shortest
  violations depth by depth, decoded and re-run through the explicit model
  into Counterexample objects on the verdicts (the caller writes them).
- kind.py: `run_kinduction(scenario, invariants, depth) -> KindResult`, the
  phases of k-induction (KInduction); prover.py: its candidates and the
  queries it asks z3; lemmas.py: the catalogue of strengthening lemmas,
  built on shapes.py (where a branch can be in its program, and how it got
  there) and families.py (what each shape says).

When to use which engine:

- the explorer (`--engine explicit`, the default) for exhaustive answers and
  every measure (peak blocks, copies, steady state, state counts): it is by
  far the fastest on the scenarios it can enumerate;
- BMC (`--engine bmc --depth K`) to look for shallow bugs, with shortest
  traces, in scenarios whose state space is too large to enumerate; within
  the bound its verdicts and lengths equal the explorer's, beyond it an
  unbroken invariant is "not seen" (unless every run ended within the bound,
  which makes the answer exhaustive);
- k-induction (`--engine kind --depth K`) to try to prove invariants without
  enumerating; it reports the k that closed each proof, or that none did.
"""

from cowcheck.symbolic.bmc import run_bmc
from cowcheck.symbolic.kind import run_kinduction

__all__ = ["run_bmc", "run_kinduction"]
