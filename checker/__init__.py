"""cowcheck: a model checker for the copy-on-write block ownership protocols
of LLM inference engines.

This package is the public API (see README "Python API"); its modules are
the engines and tools behind it: the explorer, invariant evaluation, traces,
replay, explanation, the z3 engines (cowcheck.symbolic, loaded on demand)
and the command line. The model (cowcheck.model) knows nothing of search;
the engines know nothing of how a step changes a state."""

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol, load_builtin as builtin_protocol, load_protocol
from cowcheck.model.scenario import Scenario, load_scenario, make_scenario
from cowcheck.model.state import State, Status
from cowcheck.model.system import ProtocolModel, TransitionSystem

from .api import (CheckFailed, Replay, assert_holds, assert_safe, assert_violates, check, explain,
                  load_counterexample, page, replay, resolve_protocol, with_overrides)
from .invariants import INVARIANTS, Invariant
from .output import write_result
from .results import BmcResult, Engine, ExplicitResult, Kind, KindResult, Outcome, Result, Summary, Verdict
from .trace import Counterexample

__all__ = [
    "BmcResult", "CheckFailed", "Counterexample", "Engine", "ExplicitResult", "INVARIANTS", "Invariant", "Kind",
    "KindResult", "Outcome", "Protocol", "ProtocolModel", "Replay", "Result", "Scenario", "SpecError", "State",
    "Status", "Summary", "TransitionSystem", "Verdict", "assert_holds", "assert_safe", "assert_violates",
    "builtin_protocol", "check", "explain", "load_counterexample", "load_protocol", "load_scenario",
    "make_scenario", "page", "replay", "resolve_protocol", "with_overrides", "write_result",
]
