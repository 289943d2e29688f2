"""Where a check's evidence goes: each violated invariant's shortest
counterexample, the peak trace (with a host tier, the host peak's too) and
the trace to a call of allocator code that did not return within its
deadline, as JSON files in an output folder, named
`<scenario>.<invariant>.json`, `<scenario>.peak.json`,
`<scenario>.host-peak.json` and `<scenario>.call-deadline.json`; for engine code whose adapter says which
tree it ran (a source folder and a digest of the files loaded),
`<scenario>+<digest>.<invariant>.json` and so on, so that a changed tree and
the unchanged release checked into one folder keep their own.

A check itself writes nothing; this is the one place that writes and deletes
counterexample files, under three rules:

- a name is a safe file name (no path separators, no control characters, no
  leading dot), so nothing is ever written outside the output folder;
- two scenarios of one run that would write the same names are refused
  before anything is written;
- after a complete run, the file of an invariant that now holds, and the
  call-deadline file (every call returned), is removed, but only if it was
  written for this same scenario (the same scenario file, or the same
  definition) and the same code (the release and tree its allocator_version
  and allocator_code record): a file another scenario or other code wrote is
  never deleted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.code import Code
from cowcheck.model.scenario import Scenario

from cowcheck.engines import counterexample as trace
from cowcheck.engines.results import ExplicitResult, Outcome, Result

_UNSAFE = re.compile(r"[^A-Za-z0-9._~+-]")


def safe_name(name: str) -> str:
    """A name as it may appear in a file name: every character outside
    letters, digits and `._~+-` becomes `_`, and no leading dot."""
    cleaned = _UNSAFE.sub("_", name)
    return ("_" + cleaned[1:] if cleaned.startswith(".") else cleaned) or "_"


def refuse_collisions(scenarios: Iterable[Scenario], out_dir: Path) -> None:
    """Two scenarios of one run must not share output files."""
    seen: dict[str, Scenario] = {}
    for scenario in scenarios:
        name = safe_name(scenario.name)
        other = seen.get(name)
        if other is not None:
            raise SpecError(scenario.source, "", f"would write the same counterexample files ({out_dir}/{name}.*.json) "
                            f"as {other.source}; rename one of the two files, or check them in separate runs with different --out")
        seen[name] = scenario


def _written_for(path: Path, scenario: Scenario, code: Optional[Code]) -> bool:
    """Was this existing file written for this scenario, by this code?"""
    try:
        data = json.loads(path.read_text())
        recorded = data["scenario"]
        source = recorded["source"]
        by = {k: data[k] for k in ("allocator_version", "allocator_code") if k in data}
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False        # not a file we understand: leave it alone
    if by != (code.fields() if code is not None else {}):
        return False        # found in other code (another tree of the engine, another release)
    if isinstance(source, str) and Path(source).resolve() == Path(scenario.source).resolve():
        return True
    mine = trace.as_recorded(scenario.definition())
    return isinstance(recorded, dict) and {k: v for k, v in trace.as_recorded(recorded).items() if k not in ("name", "source")} == \
        {k: v for k, v in mine.items() if k not in ("name", "source")}


def file_for(out_dir: Path, scenario_name: str, what: str) -> Path:
    """The file `<scenario>.<what>.json` (what: an invariant id, peak or host-peak)
    in `out_dir`, both names made safe; never outside the folder."""
    name = f"{safe_name(scenario_name)}.{safe_name(what)}.json"
    path = Path(out_dir) / name
    if path.resolve().parent != Path(out_dir).resolve():
        raise SpecError(str(out_dir), "", f"refusing to write {name!r} outside the output folder")
    return path


def stem(result: Result) -> str:
    """The first part of a result's file names (coded_name)."""
    return coded_name(result.scenario.name, result.allocator_code)


def coded_name(scenario_name: str, code: Optional[Code]) -> str:
    """A scenario's name, and the digest of the engine code it checked
    where the adapter gave one: the first part of its files' names."""
    return scenario_name + (f"+{code.short}" if code is not None and code.digest else "")


def write_result(result: Result, out_dir: Path, peak: bool = True) -> None:
    """Write the result's counterexamples (and, unless `peak` is False,
    its peak and host-peak traces) and its call-deadline trace into `out_dir`, recording
    each path in its verdict or result; remove this scenario's files of
    invariants that a complete run of the same code found to hold, and its
    call-deadline file after a complete run."""
    out_dir = Path(out_dir)
    for verdict in result.verdicts.values():
        path = file_for(out_dir, stem(result), verdict.invariant)
        cx = verdict.counterexample
        if cx is not None:
            verdict.path = str(cx.write(path))
        elif verdict.outcome is Outcome.HOLDS:
            _remove_stale(path, result)
    if not isinstance(result, ExplicitResult):
        return
    if peak and result.peak_trace is not None:
        result.peak_path = str(result.peak_trace.write(file_for(out_dir, stem(result), trace.PEAK)))
    if peak and result.host_peak_trace is not None:
        result.host_peak_path = str(result.host_peak_trace.write(file_for(out_dir, stem(result), trace.HOST_PEAK)))
    hung = file_for(out_dir, stem(result), trace.CALL_DEADLINE)
    if result.deadline_trace is not None:
        result.deadline_path = str(result.deadline_trace.write(hung))
    elif result.complete:
        _remove_stale(hung, result)


def _remove_stale(path: Path, result: Result) -> None:
    """Remove a file a complete run found stale, if this scenario and
    this code wrote it."""
    if path.is_file() and _written_for(path, result.scenario, result.allocator_code):
        path.unlink(missing_ok=True)
