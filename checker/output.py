"""Where a check's evidence goes: each violated invariant's shortest
counterexample and the peak trace, as JSON files in an output folder.

A check itself writes nothing; this is the one place that writes and deletes
counterexample files, so what may be removed is decided here: after a
complete run, the file of an invariant that now holds (made by an earlier
version of the protocol) no longer applies and is removed."""

from __future__ import annotations

from pathlib import Path

from . import trace
from .results import ExplicitResult, Outcome, Result


def write_result(result: Result, out_dir: Path) -> None:
    """Write the result's counterexamples (and peak trace) into `out_dir`,
    recording each path in its verdict."""
    out_dir = Path(out_dir)
    for verdict in result.verdicts.values():
        cx = verdict.counterexample
        if cx is not None:
            verdict.path = str(cx.write(out_dir / cx.file_name))
        elif verdict.outcome is Outcome.HOLDS:
            (out_dir / trace.file_name(result.scenario, verdict.invariant)).unlink(missing_ok=True)
    if isinstance(result, ExplicitResult) and result.peak_trace is not None:
        result.peak_path = str(result.peak_trace.write(out_dir / result.peak_trace.file_name))
