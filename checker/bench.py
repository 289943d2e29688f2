"""`cowcheck bench`: exploration speed on fixed scenarios. A benchmark, not a
test: timings belong here, never in the test suite. Each scenario runs in a
fresh child process so its peak memory is its own."""

from __future__ import annotations

import json
import multiprocessing
import resource
import sys
import time

from rich.console import Console
from rich.table import Table

from model.scenario import make_scenario

#: (label, block size, prompt, branches as (appends, may_cancel), protocol)
BENCHMARKS = (
    ("cow B=4 L=6 3x2", 4, 6, [(2, False)] * 3, "cow"),
    ("cow B=2 L=3 3x2, one may_cancel", 2, 3, [(2, False), (2, False), (2, True)], "cow"),
)


def _measure(args, conn) -> None:
    from .check import check
    label, B, L, branches, protocol = args
    scenario = make_scenario(B, L, branches, protocol, name=label)
    start = time.perf_counter()
    result = check(scenario)
    x = result.exploration
    conn.send({
        "benchmark": label,
        "states": x.states,
        "transitions": x.transitions,
        "depth": x.depth,
        "explore_seconds": round(x.seconds, 2),
        "total_seconds": round(time.perf_counter() - start, 2),
        "states_per_second": round(x.rate),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "summary": result.summary,
    })
    conn.close()


def run_benchmarks(console: Console, as_json: bool) -> None:
    ctx = multiprocessing.get_context("fork")
    rows = []
    for bench in BENCHMARKS:
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_measure, args=(bench, send))
        proc.start()
        send.close()
        rows.append(receive.recv())
        proc.join()
        if not as_json:
            console.print(f"  {bench[0]}: {rows[-1]['states']:,} states in {rows[-1]['explore_seconds']} s", style="dim")
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    table = Table(title=f"cowcheck bench (python {sys.version.split()[0]})", title_justify="left")
    for col in ("benchmark", "states", "transitions", "depth", "explore s", "total s", "states/s", "peak RSS MiB", "summary"):
        table.add_column(col, justify="left" if col in ("benchmark", "summary") else "right")
    for r in rows:
        table.add_row(r["benchmark"], f"{r['states']:,}", f"{r['transitions']:,}", str(r["depth"]), str(r["explore_seconds"]),
                      str(r["total_seconds"]), f"{r['states_per_second']:,}", str(r["peak_rss_mib"]), r["summary"])
    console.print(table)
