"""The symbolic engines: z3 bounded model checking and k-induction.

- encoding.py: the symbolic state and the transition relation, by symbolic
  execution of each action instance mirroring model.steps / model.device.
- invariants.py: one z3 encoding per invariant, next to its explicit predicate.
- bounds.py: the array sizes of the symbolic state (queue slots, table
  entries) and the earliest depth of each action instance, by a static
  analysis of the scenario's programs.
- reduction.py: symmetry breaking and commuting-action constraints that
  BMC adds to its run (same answers, fewer runs to refute).
- bmc.py: `run_bmc(scenario, invariants, depth, out_dir=None)`, shortest
  violations depth by depth, decoded and re-run through the explicit model
  into the usual counterexample files.
- kind.py: `run_kinduction(scenario, invariants, depth)`.

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

from .bmc import run_bmc
from .kind import run_kinduction

__all__ = ["run_bmc", "run_kinduction"]
