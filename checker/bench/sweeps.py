"""`cowcheck bench --sweep` (docs/explanation/speed.md, docs/how-to/sweeps.md): a grid of about 200
small cells checked by the serial loop, then on an embedded Dask
LocalCluster of 1 and of 2 worker processes, in cells per second and the
speed-up; and a grid of trivial cells (a handful of states each) for the
per-task overhead of Dask over the serial loop. The cluster's start (and
the workers' first import of cowcheck) is measured apart: it is paid once
per sweep, not per cell."""

from __future__ import annotations

import json
from pathlib import Path
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from cowcheck.engines.results import FORMAT
from cowcheck.sweeps.grid import Grid
from cowcheck.sweeps.runner import Runner
from cowcheck.sweeps.sweep import sweep

#: ~200 small cells: 5 protocols x 3 devices x 3 prompts x 2 appends x 2 may_cancel = 180
SMALL = Grid("bench-small", "<bench>", Path("."), {
    "protocol": ["cow", "premature-decrement", "publish-before-copy", "spare-capacity", "double-decrement"],
    "device": ["async", "stream", "streams"], "reuse": ["lifo"], "block_size": [2], "prompt": [1, 2, 3],
    "branches": [2], "appends": [1, 2], "may_cancel": [0, 1], "pool": ["default"]})
#: 180 trivial cells: one branch, nothing to append (10 protocols x 3 devices x 3 reuses x 2 prompts)
TRIVIAL = Grid("bench-trivial", "<bench>", Path("."), {
    "protocol": ["cow", "holds", "premature-decrement", "publish-before-copy", "spare-capacity", "double-decrement",
                 "leak-on-cancel", "cancel-in-flight", "vllm-bmv1", "vllm-bmv2"],
    "device": ["async", "stream", "streams"], "reuse": ["lifo", "fifo", "any"], "block_size": [1], "prompt": [0, 1],
    "branches": [1], "appends": [0], "may_cancel": [0], "pool": ["default"]})


def _warm() -> bool:
    import cowcheck.api  # noqa: F401  (the first import in a worker)
    return True


def measure(grid: Grid, workers: int) -> dict[str, Any]:
    """One sweep of `grid` (0 workers: the serial loop), timed from the
    first task to the last answer; the cluster's start apart."""
    with Runner(workers=workers) as runner:
        start = time.perf_counter()
        if workers:
            runner.connect(workers)
            runner.client.run(_warm)
        ready = time.perf_counter() - start
        start = time.perf_counter()
        result = sweep(grid, runner=runner)
        seconds = time.perf_counter() - start
    cells = len(result.cells)
    checked = sum(c.data.get("seconds", 0) for c in result.cells if c.data)
    return {"grid": grid.name, "workers": workers, "cells": cells, "seconds": round(seconds, 3),
            "cells_per_second": round(cells / seconds, 1), "check_seconds": round(checked, 3),
            "startup_seconds": round(ready, 2),
            "verdicts": sorted({c.verdict for c in result.cells})}


def run_sweep_benchmarks(console: Console, as_json: bool) -> dict[str, Any]:
    rows = []
    for grid in (SMALL, TRIVIAL):
        for workers in (0, 1, 2):
            rows.append(measure(grid, workers))
            if not as_json:
                r = rows[-1]
                console.print(f"  {r['grid']}, {'serial' if not workers else f'{workers} worker(s)'}: "
                              f"{r['cells']} cells in {r['seconds']} s", style="dim")
    by = {(r["grid"], r["workers"]): r for r in rows}
    small1, small2, serial = by["bench-small", 1], by["bench-small", 2], by["bench-small", 0]
    trivial0, trivial1, trivial2 = by["bench-trivial", 0], by["bench-trivial", 1], by["bench-trivial", 2]
    figures = {
        "speedup_2_over_1": round(small1["seconds"] / small2["seconds"], 2),
        "speedup_2_over_serial": round(serial["seconds"] / small2["seconds"], 2),
        "overhead_ms_per_cell_1_worker": round((trivial1["seconds"] - trivial0["seconds"]) / trivial1["cells"] * 1000, 1),
        "overhead_ms_per_cell_2_workers": round((2 * trivial2["seconds"] - trivial0["seconds"]) / trivial2["cells"] * 1000, 1),
        "trivial_ms_per_cell_serial": round(trivial0["seconds"] / trivial0["cells"] * 1000, 1),
    }
    report = {"format": FORMAT, "sweep": rows, **figures}
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return report
    table = Table(title=f"cowcheck bench --sweep (python {sys.version.split()[0]})", title_justify="left")
    for col in ("grid", "run", "cells", "seconds", "cells/s", "cluster start s"):
        table.add_column(col, justify="left" if col in ("grid", "run") else "right")
    for r in rows:
        table.add_row(r["grid"], "serial loop" if not r["workers"] else f"{r['workers']} worker(s)", str(r["cells"]),
                      f"{r['seconds']:.2f}", f"{r['cells_per_second']:.1f}", f"{r['startup_seconds']:.2f}" if r["workers"] else "")
    console.print(table)
    console.print(f"2 workers over 1: {figures['speedup_2_over_1']}x; over the serial loop: {figures['speedup_2_over_serial']}x")
    console.print(f"per-task overhead on trivial cells ({trivial0['cells']} cells, {figures['trivial_ms_per_cell_serial']} ms each "
                  f"serially): {figures['overhead_ms_per_cell_1_worker']} ms per cell with 1 worker, "
                  f"{figures['overhead_ms_per_cell_2_workers']} ms per cell-worker with 2")
    return report
