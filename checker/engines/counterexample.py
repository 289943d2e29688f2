"""Traces and counterexample files (docs/semantics.md#traces).

A counterexample file is self-contained: it embeds the scenario and the whole
protocol definition, every action with the block ids it bound, the state after
each action, and the invariant's witness, so `cowcheck replay` and `explain`
need nothing else. Files hold no timestamps, so regenerating them on an
unchanged model leaves them byte-identical."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cowcheck.model.action import Action
from cowcheck.model.errors import SpecError
from cowcheck.model.code import Code, code_from_json
from cowcheck.model.harness import allocator_file
from cowcheck.model.scenario import Scenario, scenario_from_dict
from cowcheck.model.state import State, state_to_json

from cowcheck import atomic


FORMAT = 1
PEAK = "peak"
#: a transfer scenario's shortest run to its host peak (the most host blocks allocated)
HOST_PEAK = "host-peak"
#: a trace to a call of allocator code that did not return within its deadline
CALL_DEADLINE = "call-deadline"
#: a shortest schedule that breaks an invariant in the real engine (cowcheck.enginetest.trace)
ENGINE = "engine"
#: every kind of trace a check's file holds
KINDS = ("counterexample", PEAK, HOST_PEAK, CALL_DEADLINE)


@dataclass
class Counterexample:
    """A trace from the initial state: a shortest violation of one invariant,
    a shortest run to the peak (a transfer scenario's: also to its host
    peak, `host_peak`), or the run to the state from which a call of
    allocator code did not return within its deadline (`call`, `deadline`).
    Built by a check (`from_run`) or read from a file (`load`); `to_json` is
    the file's content, `write` writes it (atomically: a temporary file
    renamed into place)."""
    scenario: Scenario
    kind: str                    # "counterexample" | "peak" | "host-peak" | "call-deadline"
    invariant: Optional[str]     # the violated invariant's id (None for a peak trace)
    length: int
    actions: list[Action]
    states: list[Optional[dict]]  # the state after each action (JSON form; None after a kernel-table-miss)
    initial: dict
    witness: dict
    peak: Optional[int] = None
    #: a host-peak trace: the most host blocks allocated, reached at its last step
    host_peak: Optional[int] = None
    origin: str = ""             # the scenario file it was checked from, as recorded
    invariant_kind: Optional[str] = None
    #: allocator code: the engine code its adapter ran when the trace was
    #: found, its release ("vLLM 0.33.0") and, where the adapter says,
    #: which tree of it (source folder and digest); or None
    allocator_code: Optional[Code] = None
    #: a call-deadline trace: the call as written ("append('a', 'a2')") and
    #: the seconds it was given
    call: Optional[str] = None
    deadline: Optional[float] = None
    #: the Invariant that judged it, when it came from a check in this process
    #: (a custom invariant replays by it); not part of the file
    judged_by: Any = field(default=None, compare=False, repr=False)
    loaded_from: str = field(default="", compare=False)   # the file it was read from, if it was

    @classmethod
    def from_run(cls, scenario: Scenario, initial: State, run: list[tuple[Action, Optional[State]]], *,
                 invariant: Optional[str] = None, invariant_kind: Optional[str] = None,
                 witness: Optional[dict] = None, peak: Optional[int] = None,
                 judged_by: Any = None, allocator_code: Optional[Code] = None,
                 call: Optional[str] = None, deadline: Optional[float] = None,
                 host_peak: Optional[int] = None) -> "Counterexample":
        return cls(
            scenario=scenario,
            kind="counterexample" if invariant else CALL_DEADLINE if call else HOST_PEAK if host_peak is not None else PEAK,
            invariant=invariant,
            length=len(run),
            actions=[action for action, _ in run],
            states=[None if state is None else state_to_json(state, scenario) for _, state in run],
            initial=state_to_json(initial, scenario),
            witness=witness or {},
            peak=peak,
            host_peak=host_peak,
            origin=scenario.source,
            invariant_kind=invariant_kind,
            allocator_code=allocator_code,
            call=call,
            deadline=deadline,
            judged_by=judged_by,
        )

    def to_json(self) -> dict[str, Any]:
        scenario = self.scenario
        data: dict[str, Any] = {
            "cowcheck": FORMAT,
            "kind": self.kind,
            "scenario": scenario.definition(),
            "protocol": scenario.subject,
            **({"allocator": scenario.allocator} if scenario.allocator is not None else {}),
            **({"scheduler": scenario.scheduler} if scenario.scheduler is not None else {}),
            "device": scenario.device,
        }
        data["scenario"] = as_recorded(data["scenario"])
        data["reuse"] = data["scenario"]["reuse"]
        data["scenario"]["source"] = self.origin or scenario.source
        base = allocator_base(scenario, self.origin)
        if base is not None:
            data["allocator_base"] = base
        if self.allocator_code is not None:
            data.update(self.allocator_code.fields())
        if self.invariant:
            data.update(invariant=self.invariant, invariant_kind=self.invariant_kind, witness=self.witness)
        elif self.kind == CALL_DEADLINE:
            data.update(call=self.call, deadline=self.deadline)
        elif self.kind == HOST_PEAK:
            data["host_peak_blocks"] = self.host_peak
        else:
            data["peak_blocks"] = self.peak
        data["length"] = self.length
        data["initial"] = self.initial
        data["steps"] = [
            {"n": n, "action": action.to_json(), "text": str(action), "state": state}
            for n, (action, state) in enumerate(zip(self.actions, self.states), 1)
        ]
        return data

    @property
    def allocator_version(self) -> Optional[str]:
        """The release alone ("vLLM 0.33.0"), or None."""
        return self.allocator_code.release if self.allocator_code is not None else None

    def write(self, path: Path) -> Path:
        return write(Path(path), self.to_json())

    @staticmethod
    def load(path: Path) -> "Counterexample":
        return load(path)


def as_recorded(definition: dict[str, Any]) -> dict[str, Any]:
    """A scenario's definition as a file records it: allocator code takes
    free blocks in its own order, so its `reuse` is null, as in `check
    --json` and the text (files written before said "lifo", the model's
    unused default; they still load)."""
    code = definition.get("allocator") is not None or definition.get("scheduler") is not None
    return {**definition, "reuse": None} if code else definition


def allocator_base(scenario: Scenario, origin: str = "") -> Optional[str]:
    """The absolute folder a path to allocator code is relative to, for the
    file: the reference stays as the user wrote it (so it compares equal to
    the scenario's), and the file reopens from any working folder. None
    when there is no allocator code, or it is a module (imported by name)."""
    ref = scenario.code_ref
    if ref is None:
        return None
    base = Path(scenario.allocator_base or Path(origin or scenario.source).parent).resolve()
    return str(base) if allocator_file(ref, base) is not None else None


def write(path: Path, data: dict) -> Path:
    return atomic.write_text(path, json.dumps(data, indent=1) + "\n")


def load(path: Path) -> Counterexample:
    """Read a counterexample file; anything malformed is a SpecError naming
    the file and the key."""
    source = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(source, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(source, "", f"cannot be read ({err})") from None
    except json.JSONDecodeError as err:
        raise SpecError(source, "", f"invalid JSON ({err}); expected a counterexample file written by cowcheck") from None
    except (RecursionError, MemoryError):
        raise SpecError(source, "", "nested too deeply to read; expected a counterexample file written by cowcheck") from None
    cx = from_json(data, source)
    cx.loaded_from = source
    return cx


def from_json(data: Any, source: str = "<counterexample>") -> Counterexample:
    """A counterexample from its JSON (a file's content, or what a sweep's
    worker sent back); anything malformed is a SpecError naming `source`
    and the key."""
    if not isinstance(data, dict) or data.get("cowcheck") != FORMAT:
        raise SpecError(source, "cowcheck", f"not a cowcheck counterexample file (format {FORMAT} expected)")
    if data.get("kind") == ENGINE:
        raise SpecError(source, "kind", "an engine-test counterexample (cowcheck engine-test): explain, html and replay read it")
    try:
        sc = dict(data["scenario"])
        name, origin = sc.pop("name"), sc.pop("source")
        if (sc.get("allocator") is not None or sc.get("scheduler") is not None) and sc.get("reuse") is None:
            sc.pop("reuse", None)        # allocator code's own order (as_recorded): the model's default stands in
        for key, value in (("name", name), ("source", origin)):
            if not isinstance(value, str) or not value:
                raise SpecError(source, f"scenario.{key}", "must be a non-empty string")
        base = data.get("allocator_base", str(Path(origin).parent))
        if not isinstance(base, str) or not base:
            raise SpecError(source, "allocator_base", "must be the folder the allocator's path is relative to")
        scenario = scenario_from_dict(sc, f"{source} (scenario)", Path(base), name)
        kind = data["kind"]
        if kind not in KINDS:
            raise SpecError(source, "kind", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
        if kind == "counterexample" and (not isinstance(data["invariant"], str) or not data["invariant"]):
            raise SpecError(source, "invariant", "must be an invariant id")
        if kind == "counterexample" and data.get("invariant_kind") not in ("harm", "discipline"):
            raise SpecError(source, "invariant_kind", "must be harm or discipline")
        if kind == PEAK and type(data["peak_blocks"]) is not int:
            raise SpecError(source, "peak_blocks", "must be an integer in a peak trace")
        if kind == HOST_PEAK and (type(data["host_peak_blocks"]) is not int or not scenario.transfers):
            raise SpecError(source, "host_peak_blocks", "must be an integer in a host-peak trace, which only a transfer scenario has")
        if kind == CALL_DEADLINE:
            _call_deadline(data, source, scenario)
        version = data.get("allocator_version")
        if version is not None and (not isinstance(version, str) or not version or scenario.code_ref is None):
            raise SpecError(source, "allocator_version", "must be the engine code's release, a non-empty string, "
                            "and only in a counterexample of allocator or scheduler code")
        code = code_from_json(version, data.get("allocator_code"), source)
        steps = data["steps"]
        actions = [Action.from_json(s["action"]) for s in steps]
        states = [s["state"] for s in steps]
        return Counterexample(
            scenario=scenario,
            kind=kind,
            invariant=data.get("invariant"),
            length=data["length"],
            actions=actions,
            states=states,
            initial=data["initial"],
            witness=data.get("witness", {}),
            peak=data.get("peak_blocks"),
            host_peak=data.get("host_peak_blocks"),
            origin=origin,
            invariant_kind=data.get("invariant_kind"),
            allocator_code=code,
            call=data.get("call"),
            deadline=data.get("deadline"),
        )
    except SpecError:
        raise
    except KeyError as err:
        raise SpecError(source, str(err.args[0]), "missing; expected a counterexample file written by cowcheck") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise SpecError(source, "steps", f"malformed ({err})") from None


def _call_deadline(data: dict, source: str, scenario: Scenario) -> None:
    """A call-deadline trace names the call and its deadline, and only
    allocator code has calls."""
    if scenario.allocator is None:
        raise SpecError(source, "kind", f"{CALL_DEADLINE} only in a trace of allocator code")
    if not isinstance(data["call"], str) or not data["call"]:
        raise SpecError(source, "call", "must be the call as written, a non-empty string")
    deadline = data["deadline"]
    if type(deadline) not in (int, float) or not deadline > 0:
        raise SpecError(source, "deadline", "must be the call's deadline, a number of seconds above 0")
