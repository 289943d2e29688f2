"""Traces and counterexample files (DESIGN.md "Traces and counterexamples").

A counterexample file is self-contained: it embeds the scenario and the whole
protocol definition, every action with the block ids it bound, the state after
each action, and the invariant's witness, so `cowcheck replay` and `explain`
need nothing else. Files hold no timestamps, so regenerating them on an
unchanged model leaves them byte-identical."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario, scenario_from_dict
from cowcheck.model.state import State, state_to_json
from cowcheck.model.action import Action

from .invariants import BY_ID

FORMAT = 1
PEAK = "peak"


@dataclass
class Counterexample:
    scenario: Scenario
    kind: str                    # "counterexample" | "peak"
    invariant: Optional[str]     # the violated invariant (None for a peak trace)
    length: int
    actions: list[Action]
    states: list[Optional[dict]]  # the recorded state after each action (JSON form)
    initial: dict
    witness: dict
    peak: Optional[int] = None
    origin: str = ""             # the scenario file it was checked from, as recorded


def to_json(scenario: Scenario, initial: State, trace: list[tuple[Action, Optional[State]]], *,
            invariant: Optional[str] = None, invariant_kind: Optional[str] = None,
            witness: Optional[dict] = None, peak: Optional[int] = None) -> dict:
    data: dict[str, Any] = {
        "cowcheck": FORMAT,
        "kind": "counterexample" if invariant else PEAK,
        "scenario": scenario.definition(),
        "protocol": scenario.protocol.name,
        "device": scenario.device,
        "reuse": scenario.reuse,
    }
    if invariant:
        data.update(invariant=invariant, invariant_kind=invariant_kind, witness=witness or {})
    else:
        data["peak_blocks"] = peak
    data["length"] = len(trace)
    data["initial"] = state_to_json(initial, scenario)
    data["steps"] = [
        {"n": n, "action": action.to_json(), "text": str(action),
         "state": None if state is None else state_to_json(state, scenario)}
        for n, (action, state) in enumerate(trace, 1)
    ]
    return data


def file_name(scenario: Scenario, what: str) -> str:
    return f"{scenario.name}.{what}.json"


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


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
    if not isinstance(data, dict) or data.get("cowcheck") != FORMAT:
        raise SpecError(source, "cowcheck", f"not a cowcheck counterexample file (format {FORMAT} expected)")
    try:
        sc = dict(data["scenario"])
        name, origin = sc.pop("name"), sc.pop("source")
        for key, value in (("name", name), ("source", origin)):
            if not isinstance(value, str) or not value:
                raise SpecError(source, f"scenario.{key}", "must be a non-empty string")
        scenario = scenario_from_dict(sc, f"{source} (scenario)", Path(origin).parent, name)
        kind = data["kind"]
        if kind not in ("counterexample", PEAK):
            raise SpecError(source, "kind", f"unknown kind {kind!r}; allowed: counterexample, {PEAK}")
        if kind == "counterexample" and data["invariant"] not in BY_ID:
            raise SpecError(source, "invariant", f"unknown invariant {data['invariant']!r}; allowed: {', '.join(BY_ID)}")
        if kind == PEAK and type(data["peak_blocks"]) is not int:
            raise SpecError(source, "peak_blocks", "must be an integer in a peak trace")
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
            origin=origin,
        )
    except SpecError:
        raise
    except KeyError as err:
        raise SpecError(source, str(err.args[0]), "missing; expected a counterexample file written by cowcheck") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise SpecError(source, "steps", f"malformed ({err})") from None
