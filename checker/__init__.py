"""cowcheck: a model checker for the block ownership protocols of LLM
inference engines' paged KV caches.

This package is the public API (docs/reference/api.md); the names below are
loaded on first use, so `import cowcheck` is quick and the command line can
take over Ctrl-C before anything heavy is imported.

Its folders are its layers, top to bottom; a module imports only from the
layers below its own (the import-linter contract in pyproject.toml, checked
by `lint-imports` in CI; docs/explanation/architecture.md):

- cli/: the `cowcheck` command, one module per command group
- bench/: the measuring code of `cowcheck bench`
- fuzzing/: `cowcheck fuzz`, random scenarios with pressure, checked and shrunk
- sweeps/: grids of scenarios checked as Dask tasks, shrinking, the sweep page
- api.py: the Python API every command and sweep goes through
- views/: the words every view uses, `explain`, the HTML pages, pictures
- traces/: replay on the model and on a KV pool, counterexample files written
- symbolic/: the z3 engines (bounded model checking, k-induction)
- engines/: the explorer, the invariants, results and counterexamples
- adapters/: what an allocator adapter is (code checked through the harness)
- model/ (cowcheck.model): what a state is and how a step changes it, pure;
  model/reduce/ holds symmetry and partial-order reduction
- specs/ (cowcheck.specs): the built-in protocols and allocators, as data

interrupts.py (signals delivered where it is safe to stop) and atomic.py
(files written whole or not at all) are leaves any layer may use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> the module that defines it
_EXPORTS = {
    "SpecError": "cowcheck.model.errors",
    "Protocol": "cowcheck.model.protocol", "load_protocol": "cowcheck.model.protocol",
    "Scenario": "cowcheck.model.scenario", "load_scenario": "cowcheck.model.scenario",
    "make_scenario": "cowcheck.model.scenario",
    "State": "cowcheck.model.state", "Status": "cowcheck.model.state",
    "ProtocolModel": "cowcheck.model.system", "TransitionSystem": "cowcheck.model.system",
    "CheckFailed": "cowcheck.api", "Replay": "cowcheck.api", "assert_holds": "cowcheck.api",
    "assert_safe": "cowcheck.api", "assert_violates": "cowcheck.api", "builtin_protocol": "cowcheck.api",
    "check": "cowcheck.api", "explain": "cowcheck.api", "load_counterexample": "cowcheck.api", "make_protocol": "cowcheck.api",
    "page": "cowcheck.api", "replay": "cowcheck.api", "resolve_protocol": "cowcheck.api",
    "with_overrides": "cowcheck.api",
    "INVARIANTS": "cowcheck.engines.invariants", "Invariant": "cowcheck.engines.invariants", "Kind": "cowcheck.engines.invariants",
    "write_result": "cowcheck.traces.output",
    "BmcResult": "cowcheck.engines.results", "Engine": "cowcheck.engines.results", "ExplicitResult": "cowcheck.engines.results",
    "KindResult": "cowcheck.engines.results", "Outcome": "cowcheck.engines.results",
    "Result": "cowcheck.engines.results", "Summary": "cowcheck.engines.results", "Verdict": "cowcheck.engines.results",
    "Counterexample": "cowcheck.engines.counterexample",
    "Stop": "cowcheck.engines.stop", "StopKind": "cowcheck.engines.stop",
    "sweep": "cowcheck.sweeps.sweep", "Sweep": "cowcheck.sweeps.sweep", "load_grid": "cowcheck.sweeps.grid",
    "shrink": "cowcheck.sweeps.shrink", "Shrunk": "cowcheck.sweeps.shrink",
    "fuzz": "cowcheck.fuzzing.run", "Fuzz": "cowcheck.fuzzing.run",
    "OutOfBlocks": "cowcheck.model.harness", "HarnessModel": "cowcheck.model.harness",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cowcheck' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from cowcheck.model.errors import SpecError
    from cowcheck.model.harness import HarnessModel, OutOfBlocks
    from cowcheck.model.protocol import Protocol, load_protocol
    from cowcheck.model.scenario import Scenario, load_scenario, make_scenario
    from cowcheck.model.state import State, Status
    from cowcheck.model.system import ProtocolModel, TransitionSystem

    from cowcheck.api import (CheckFailed, Replay, assert_holds, assert_safe, assert_violates, builtin_protocol, check,
                      explain, load_counterexample, make_protocol, page, replay, resolve_protocol, with_overrides)
    from cowcheck.engines.invariants import INVARIANTS, Invariant, Kind
    from cowcheck.traces.output import write_result
    from cowcheck.engines.results import BmcResult, Engine, ExplicitResult, KindResult, Outcome, Result, Summary, Verdict
    from cowcheck.engines.counterexample import Counterexample
    from cowcheck.engines.stop import Stop, StopKind
    from cowcheck.sweeps.grid import load_grid
    from cowcheck.sweeps.sweep import Sweep, sweep
    from cowcheck.sweeps.shrink import Shrunk, shrink
    from cowcheck.fuzzing.run import Fuzz, fuzz
