"""An engine test's counterexample file: the shortest schedule that breaks
one invariant in the real engine, written like every other counterexample
(`<scenario>.<invariant>.json`, counterexample.schema.json, kind "engine")
and read back by `explain`, `html` and `replay`.

It is self-contained: the scenario as its file has it, the schedule, the
engine's tables, shared ref counts, hashed and free blocks at every step
(read before the step's forward), the outputs, the witness (the wrong
token, the engine's own traceback) and which transformers, torch and model
ran. No timestamps and no machine paths, so rerunning an unchanged engine
rewrites it byte for byte. Reading one needs neither torch nor
transformers; only `replay` runs the engine again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cowcheck import atomic
from cowcheck.engines.counterexample import ENGINE
from cowcheck.engines.invariants import BY_ID
from cowcheck.enginetest import engine
from cowcheck.enginetest.run import Schedule, harness, run
from cowcheck.enginetest.scenario import INVARIANTS, EngineScenario, parse
from cowcheck.model.errors import SpecError

FORMAT = 1
#: the counterexample file's kind (counterexample.schema.json)
KIND = ENGINE


def invariant_kind(invariant: str) -> str:
    """harm or discipline, as `check` names the same invariant."""
    return str(BY_ID[invariant].kind)


def step_text(step: dict[str, Any]) -> str:
    """One engine step in words: what the schedule did there and the batch
    the engine's scheduler chose."""
    batch = ", ".join(f"{rid} ({q} token{'s' if q != 1 else ''})" for rid, q in step["batch"]) or "nothing scheduled"
    return "; ".join([*step["events"], f"forward of {batch}"])


def model_json(release: engine.Release) -> dict[str, Any]:
    """Which engine and model ran: the releases, the source tree (null: the
    installed package) and the random model's recipe."""
    return {"transformers": release.transformers, "torch": release.torch, "source": release.source,
            "model": dict(engine.MODEL), "dtype": "float32", "seed": engine.SEED, "attention": engine.ATTENTION,
            "reference_attention": "eager", "sampling": engine.SAMPLING}


def trace_json(scenario: EngineScenario, invariant: str, schedule: Schedule, violation: Any, outcome: Any,
               release: engine.Release) -> dict[str, Any]:
    """The file's content for one broken invariant."""
    steps = [{"n": n, "step": s["step"], "text": step_text(s), "events": s["events"], "batch": s["batch"],
              "tables": s["tables"], "ref_counts": s["ref_counts"], "hashed": s["hashed"], "free": s["free"]}
             for n, s in enumerate(outcome.steps, 1)]
    return {"cowcheck": FORMAT, "kind": KIND,
            "scenario": {"name": scenario.name, "source": scenario.source or "<scenario>", **scenario.to_toml_data()},
            "invariant": invariant, "invariant_kind": invariant_kind(invariant),
            "witness": {"message": violation.detail, "step": violation.step, **violation.facts},
            "engine": model_json(release),
            "schedule": {"submits": [[n, k] for n, k in schedule.submits], "cancels": [list(c) for c in schedule.cancels],
                         "events": schedule.events(), "measure": schedule.length()},
            "length": len(steps), "steps": steps,
            "outputs": {rid: list(tokens) for rid, tokens in sorted(outcome.outputs.items())}}


def file_for(out_dir: Path, scenario: str, invariant: str) -> Path:
    return Path(out_dir) / f"{scenario}.{invariant}.json"


def write(data: dict[str, Any], out_dir: Path) -> Path:
    path = file_for(out_dir, data["scenario"]["name"], data["invariant"])
    return atomic.write_text(path, json.dumps(data, indent=1) + "\n")


def remove_stale(out_dir: Path, scenario: str, holds: list[str]) -> None:
    """Remove this scenario's engine files of invariants a complete run
    found to hold (never a file `check` wrote)."""
    for invariant in holds:
        path = file_for(out_dir, scenario, invariant)
        if path.is_file() and is_engine_trace(path):
            path.unlink(missing_ok=True)


def is_engine_trace(path: Path) -> bool:
    """Whether the file is an engine test's counterexample (kind "engine");
    False for anything else, unreadable files included, which the
    ordinary reader then reports."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == KIND


@dataclass(frozen=True)
class EngineTrace:
    """An engine counterexample file read back."""
    data: dict[str, Any]
    scenario: EngineScenario
    schedule: Schedule
    path: str

    @property
    def invariant(self) -> str:
        return str(self.data["invariant"])

    @property
    def step(self) -> int:
        return int(self.data["witness"]["step"])

    def release_line(self) -> str:
        e = self.data["engine"]
        return engine.Release(e["transformers"], e["torch"], e["source"]).line()


def load(path: Path) -> EngineTrace:
    """Read an engine counterexample file; anything malformed is a
    SpecError naming the file and the key."""
    source = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SpecError(source, "", f"cannot be read ({error})") from None
    if not isinstance(data, dict) or data.get("cowcheck") != FORMAT or data.get("kind") != KIND:
        raise SpecError(source, "kind", "not an engine-test counterexample file")
    try:
        sc = dict(data["scenario"])
        scenario = parse(sc, str(sc.pop("name")), str(sc.pop("source")))
        if data["invariant"] not in INVARIANTS:
            raise SpecError(source, "invariant", f"{data['invariant']!r} is not an invariant the engine test judges")
        sched = data["schedule"]
        schedule = Schedule(tuple((str(n), int(k)) for n, k in sched["submits"]),
                            tuple((str(r), int(s), str(p)) for r, s, p in sched["cancels"]))
        for key in ("witness", "engine", "steps", "length"):
            data[key]
        int(data["witness"]["step"])
    except SpecError:
        raise
    except KeyError as error:
        raise SpecError(source, str(error.args[0]), "missing; expected an engine-test counterexample file") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise SpecError(source, "schedule", f"malformed ({error})") from None
    return EngineTrace(data, scenario, schedule, source)


def narrate(trace: EngineTrace) -> list[str]:
    """The trace in words, one line per step, for `explain`."""
    d, w = trace.data, trace.data["witness"]
    e = d["engine"]
    lines = [f"{trace.scenario.name}: {trace.invariant} ({d['invariant_kind']}) in the real engine, {trace.release_line()}",
             f"model: a random Llama-style model ({e['model']['num_hidden_layers']} layers, hidden {e['model']['hidden_size']}), "
             f"{e['dtype']}, seed {e['seed']}, {e['attention']} attention paged by continuous batching; {e['sampling']}",
             f"schedule: {'; '.join(d['schedule']['events']) or 'every request at once, no cancel'}"]
    for s in d["steps"]:
        tables = ", ".join(f"{rid} {t}" for rid, t in s["tables"].items()) or "none"
        lines.append(f"step {s['step']}: {s['text']}")
        lines.append(f"    tables {tables}; shared ref counts {s['ref_counts'] or '{}'}; hashed {s['hashed']}; free {s['free']}")
    lines.append(f"{trace.invariant} breaks at step {w['step']}: {w['message']}")
    lines += [f"    {frame}" for frame in w.get("traceback", [])]
    if d["outputs"]:
        lines.append("outputs: " + "; ".join(f"{rid} {tokens}" for rid, tokens in d["outputs"].items()))
    return lines


@dataclass(frozen=True)
class Replayed:
    ok: bool
    message: str
    #: the release that ran the replay, when it is not the file's
    other_release: Optional[str] = None


def replay(trace: EngineTrace, h: Any = None) -> Replayed:
    """Run the file's schedule again in the engine (torch and transformers
    needed): the same invariant broken at the same step?"""
    h = h or harness()
    _, _, release = engine.modules()
    recorded = trace.release_line()
    other = release.line() if release.line() != recorded else None
    outcome = run(h, trace.scenario, trace.schedule)
    found = next((v for v in outcome.violations if v.invariant == trace.invariant), None)
    if found is None:
        return Replayed(False, f"{trace.invariant} holds on this schedule in {release.line()} (the file found it at step {trace.step})", other)
    if found.step != trace.step:
        return Replayed(False, f"{trace.invariant} breaks at step {found.step}, not {trace.step} as recorded: {found.detail}", other)
    return Replayed(True, f"{trace.invariant} breaks at step {found.step}, as recorded: {found.detail}", other)
