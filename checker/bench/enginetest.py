"""`cowcheck bench --engine-test` (docs/explanation/speed.md): the
engine-test mode's schedules per second on a fork scenario and a
prefix-sharing scenario of specs/engine, and where a run's time goes: the
model's forwards in the engine, the monitor (the slot shadow and the
snapshots of the engine's tables), the reference (forwards without a
cache), the engine's setup (a manager and batch processor per schedule)
and the rest of its steps (scheduling, updates). Each row builds its own model and reference, so the
reference memoizes nothing from an earlier row. Without torch and
transformers the rows are skipped, in one line."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cowcheck.engines.results import FORMAT
from cowcheck.enginetest import missing

#: the rows: what each scenario measures, and the scenario (specs/engine)
ROWS = (("fork", "three-writers-one-tail"), ("prefix sharing", "one-past-page-live"))
#: the parts of a run, as the Harness times them, in the table's order
PARTS = (("engine setup", "setup"), ("model forward", "forward"), ("monitor", "monitor"), ("reference", "reference"))


def engine_scenarios() -> Path:
    """specs/engine: beside the installed package where it is installed from
    a checkout (editable), else under the working folder."""
    import cowcheck.specs
    folders = [Path(p) / "engine" for p in cowcheck.specs.__path__] + [Path("specs") / "engine"]
    return next((f for f in folders if f.is_dir()), folders[-1])


def measure(kind: str, name: str) -> dict[str, Any]:
    from cowcheck.enginetest.explore import explore
    from cowcheck.enginetest.run import harness
    from cowcheck.enginetest.scenario import load
    start = time.perf_counter()
    h = harness(fresh=True)
    built = time.perf_counter() - start
    result = explore(load(engine_scenarios() / f"{name}.toml"), h)
    ran = h.seconds["run"] or 1e-9
    share = {label: h.seconds[part] / ran for label, part in PARTS}
    share["engine steps (the rest)"] = max(0.0, 1 - sum(share.values()))
    return {"kind": kind, "scenario": name, "schedules": result.schedules, "distinct": result.distinct,
            "seconds": round(result.seconds, 3), "schedules_per_second": round(result.schedules / result.seconds, 2),
            "build_seconds": round(built, 3), "share": {k: round(v, 3) for k, v in share.items()},
            "release": result.release.line()}


def run_engine_benchmarks(console: Console, as_json: bool) -> dict[str, Any]:
    why = missing()
    if why is not None:
        report: dict[str, Any] = {"format": FORMAT, "skipped": why, "rows": []}
        if as_json:
            json.dump(report, sys.stdout, indent=2)
            print()
        else:
            console.print(f"engine-test rows skipped: {why}")
        return report
    rows = [measure(kind, name) for kind, name in ROWS]
    report = {"format": FORMAT, "skipped": None, "rows": rows}
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return report
    table = Table(title=f"cowcheck bench --engine-test: schedules per second ({rows[0]['release']}, "
                        f"python {sys.version.split()[0]})", title_justify="left")
    for col in ("kind", "scenario", "schedules", "distinct", "seconds", "schedules/s", "import + build s", "where the time goes"):
        table.add_column(col, justify="left" if col in ("kind", "scenario", "where the time goes") else "right")
    for r in rows:
        table.add_row(r["kind"], r["scenario"], str(r["schedules"]), str(r["distinct"]), f"{r['seconds']:.2f}",
                      f"{r['schedules_per_second']:.2f}", f"{r['build_seconds']:.2f}",
                      ", ".join(f"{k} {v:.0%}" for k, v in r["share"].items()))
    console.print(table)
    return report
