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


def run_benchmarks(console: Console, as_json: bool, counterexamples: str = "counterexamples") -> None:
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
    replays = replay_figures(counterexamples)
    if as_json:
        json.dump({"explore": rows, "replay": replays}, sys.stdout, indent=2)
        print()
        return
    table = Table(title=f"cowcheck bench (python {sys.version.split()[0]})", title_justify="left")
    for col in ("benchmark", "states", "transitions", "depth", "explore s", "total s", "states/s", "peak RSS MiB", "summary"):
        table.add_column(col, justify="left" if col in ("benchmark", "summary") else "right")
    for r in rows:
        table.add_row(r["benchmark"], f"{r['states']:,}", f"{r['transitions']:,}", str(r["depth"]), str(r["explore_seconds"]),
                      str(r["total_seconds"]), f"{r['states_per_second']:,}", str(r["peak_rss_mib"]), r["summary"])
    console.print(table)
    console.print(f"{replays['benchmark']}: {replays['actions']:,} actions in {replays['seconds']} s, "
                  f"{replays['replays_per_second']} replays/s; one {replays['long_trace_actions']}-action run "
                  f"on the pool: {replays['long_trace_pool_seconds'] * 1000:.1f} ms")


def _long_walk(seed: int = 0):
    """A complete run of a larger scenario (over 100 actions), for timing a
    single long replay."""
    import random

    from model.system import Model

    scenario = make_scenario(2, 3, [5, 5, 5], "cow", name="walk")
    model, rnd = Model(scenario), random.Random(seed)
    state, actions = model.init_state(), []
    while not model.is_final(state):
        tr = rnd.choice(model.successors(state))
        actions.append(tr.action)
        state = tr.state
    return scenario, actions


def replay_figures(folder) -> dict:
    """Replays per second (model and numpy pool) over the counterexample
    files in `folder`, and the time of one replay of a 100+-action run."""
    from pathlib import Path

    from . import trace
    from .executor import replay_on_pool
    from .replay import replay

    files = sorted(Path(folder).glob("*.json"))
    traces = [trace.load(f) for f in files]
    start = time.perf_counter()
    for cx in traces:
        replay(cx)
        replay_on_pool(cx.scenario, cx.actions)
    spent = time.perf_counter() - start
    scenario, actions = _long_walk()
    start = time.perf_counter()
    replay_on_pool(scenario, actions)
    long_seconds = time.perf_counter() - start
    return {
        "benchmark": f"replay {len(traces)} counterexamples (model + numpy pool)",
        "replays": len(traces),
        "actions": sum(len(cx.actions) for cx in traces),
        "seconds": round(spent, 3),
        "replays_per_second": round(len(traces) / spent) if spent else None,
        "long_trace_actions": len(actions),
        "long_trace_pool_seconds": round(long_seconds, 4),
    }
