"""cowcheck: a model checker for the copy-on-write block ownership protocols
of LLM inference engines.

This package is the public API (see README "Python API"); its modules are
the engines and tools behind it: the explorer, invariant evaluation, traces,
replay, explanation, the z3 engines (cowcheck.symbolic) and the command
line. The model (cowcheck.model) knows nothing of search; the engines know
nothing of how a step changes a state.

The names below are loaded on first use, so `import cowcheck` is quick and
the command line can take over Ctrl-C before anything heavy is imported."""

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
    "INVARIANTS": "cowcheck.invariants", "Invariant": "cowcheck.invariants",
    "write_result": "cowcheck.output",
    "BmcResult": "cowcheck.results", "Engine": "cowcheck.results", "ExplicitResult": "cowcheck.results",
    "Kind": "cowcheck.results", "KindResult": "cowcheck.results", "Outcome": "cowcheck.results",
    "Result": "cowcheck.results", "Summary": "cowcheck.results", "Verdict": "cowcheck.results",
    "Counterexample": "cowcheck.trace",
    "sweep": "cowcheck.sweeps", "Sweep": "cowcheck.sweeps", "load_grid": "cowcheck.sweeps",
    "shrink": "cowcheck.shrinking", "Shrunk": "cowcheck.shrinking",
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

    from .api import (CheckFailed, Replay, assert_holds, assert_safe, assert_violates, builtin_protocol, check,
                      explain, load_counterexample, make_protocol, page, replay, resolve_protocol, with_overrides)
    from .invariants import INVARIANTS, Invariant
    from .output import write_result
    from .results import BmcResult, Engine, ExplicitResult, Kind, KindResult, Outcome, Result, Summary, Verdict
    from .trace import Counterexample
    from .sweeps import Sweep, load_grid, sweep
    from .shrinking import Shrunk, shrink
