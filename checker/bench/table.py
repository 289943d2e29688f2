"""`cowcheck bench`'s main table: exploration speed on fixed scenarios with
and without each reduction (symmetry, partial-order, compact encoding,
fingerprints), the z3 BMC engine next to the explorer on one question (time
to a shortest violation), the engine allocator through its harness next to
its protocol file, `cowcheck check` end to end, and the replay line. One
idea: the default `cowcheck bench` run, a fixed list of scenarios each
measured to completion. A benchmark, not a test: timings belong here, never
in the test suite. Each scenario runs in a fresh child process so its peak
memory is its own."""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Optional, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pathlib import Path

from cowcheck.model.scenario import Scenario, make_scenario, scenario_from_dict

from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import FORMAT, ExplicitResult

from cowcheck.bench.child import in_child
from cowcheck.bench.replay import replay_figures, replayable
from cowcheck.bench.scheduler import SCHEDULER_RUNS, measure_scheduler, row_label

def _transfer_rows() -> dict[str, dict]:
    """DESIGN.md's transfer scenarios S1, S2 and S6 (B = 2, lifo) with one
    more request, a copy of the last (two alike: request symmetry has a
    class), as scenario tables (a file's keys: the transfer keys are none of
    make_scenario's). S1 and S2 under their bug protocols on the stream
    device and `own-stream`, as the section's table gives them; S6 under
    kv-connector-lazy, which holds, on `async` with `nic`, where
    partial-order reduction explores launches and settled completions alone."""
    a3, x = {"prompt": 3}, {"prompt": ["x0", "x1", "x2"], "after": "a"}
    c = {"prompt": 3, "after": "b"}
    common = {"cache": "prefix", "block_size": 2, "reuse": "lifo"}
    return {
        "S1 store-ahead, c twice": {**common, "protocol": "store-ahead", "device": "stream", "transfer": "own-stream",
                                    "pool": 2, "host_pool": 2, "branch": [a3, x, c, c]},
        "S2 load-over-in-flight, c twice": {**common, "protocol": "load-over-in-flight", "device": "stream",
                                            "transfer": "own-stream", "pool": 2, "host_pool": 2,
                                            "branch": [a3, {**x, "appends": 1, "may_cancel": True}, c, c]},
        "S6 kv-connector-lazy async nic, c twice": {
            **common, "protocol": "kv-connector-lazy", "device": "async", "transfer": "nic", "pool": 3, "host_pool": 3,
            "branch": [{"prompt": 3, "appends": 1, "may_cancel": True}, x,
                       *[{"prompt": ["p0", "p1", "p2", "a1", "c0"], "after": "b"}] * 2]},
    }


#: (label, block size, prompt, branches as (appends, may_cancel) or branch tables, protocol[, make_scenario's
#: keywords]); or a scenario table, as a scenario file gives it (the transfer rows)
SCENARIOS: dict[str, tuple | dict] = {
    "cow B=4 L=6 3x2": (4, 6, [(2, False)] * 3, "cow"),
    "cow B=2 L=3 3x2, one may_cancel": (2, 3, [(2, False), (2, False), (2, True)], "cow"),
    "cow B=4 L=6 4x2": (4, 6, [(2, False)] * 4, "cow"),
    "cow B=4 L=6 5x2": (4, 6, [(2, False)] * 5, "cow"),
    "cow B=4 L=6 6x2": (4, 6, [(2, False)] * 6, "cow"),
    "cow B=4 L=6 8x1": (4, 6, [(1, False)] * 8, "cow"),
    "premature-decrement B=4 L=6 4x3": (4, 6, [(3, False)] * 4, "premature-decrement"),
    # a beam fork: a and b are roots, a forks c after its first append, then every branch appends twice more
    "cow beam B=4 L=6 a forks c": (4, 6, [{"program": ["append", "fork c", "append", "append"]}, {"appends": 3},
                                          {"appends": 2, "parent": "a"}], "cow"),
    # speculative decoding: a drafts three tokens (0-3 accepted), rolls back, appends once; b appends once
    "cow speculate B=2 L=3 a: speculate 3": (2, 3, [{"program": ["speculate 3", "append"]}, {"appends": 1}], "cow"),
    # prefix caching: parallel sampling with n = 4 as four requests with one prompt
    "prefix-cache B=2 4 requests, prompt 3": (2, 0, [{"prompt": 3, "appends": 1}] * 4, "prefix-cache", {"cache": True}),
    # a warm cache: two requests, then two more after them whose prompts share one block with theirs
    "prefix-cache B=2 warm cache, pool 6": (2, 0, [{"prompt": 3, "appends": 1}, {"prompt": ["p0", "p1", "q2"], "appends": 1},
                                                   {"prompt": ["p0", "p1", "r2"], "appends": 1, "after": "a"},
                                                   {"prompt": ["p0", "p1", "s2"], "appends": 1, "after": "b"}],
                                            "prefix-cache", {"cache": True, "pool": 6}),
    **_transfer_rows(),
}
#: what shrinks the search: (symmetry, partial-order, compact encoding, fingerprints)
NONE, SYMMETRY, POR, BOTH = (False, False, False, False), (True, False, False, False), (False, True, False, False), (True, True, False, False)
COMPACT, FINGERPRINTS = (True, False, True, False), (True, False, False, True)
#: (scenario, reductions, only with --full)
RUNS = (
    ("cow B=4 L=6 3x2", NONE, False),
    ("cow B=4 L=6 3x2", SYMMETRY, False),
    ("cow B=2 L=3 3x2, one may_cancel", NONE, False),
    ("cow B=2 L=3 3x2, one may_cancel", POR, False),
    ("cow B=2 L=3 3x2, one may_cancel", SYMMETRY, False),
    ("cow B=2 L=3 3x2, one may_cancel", BOTH, False),
    ("cow B=2 L=3 3x2, one may_cancel", COMPACT, False),
    ("cow B=2 L=3 3x2, one may_cancel", FINGERPRINTS, False),
    ("cow B=4 L=6 4x2", NONE, True),
    ("cow B=4 L=6 4x2", SYMMETRY, False),
    ("cow B=4 L=6 4x2", BOTH, False),
    ("cow B=4 L=6 4x2", COMPACT, False),
    ("cow B=4 L=6 4x2", FINGERPRINTS, False),
    ("cow beam B=4 L=6 a forks c", NONE, True),
    ("cow beam B=4 L=6 a forks c", SYMMETRY, False),
    ("cow speculate B=2 L=3 a: speculate 3", NONE, True),
    ("cow speculate B=2 L=3 a: speculate 3", SYMMETRY, False),
    ("cow B=4 L=6 5x2", SYMMETRY, True),
    ("cow B=4 L=6 5x2", BOTH, True),
    ("cow B=4 L=6 6x2", BOTH, True),
    ("cow B=4 L=6 8x1", BOTH, True),
    ("prefix-cache B=2 4 requests, prompt 3", SYMMETRY, False),
    ("prefix-cache B=2 warm cache, pool 6", NONE, False),
    ("prefix-cache B=2 warm cache, pool 6", SYMMETRY, False),
    *((label, reductions, False) for label in _transfer_rows() for reductions in (NONE, SYMMETRY, POR, BOTH)),
)
#: (scenario, invariant, only with --full): BMC's time to a shortest
#: violation, next to the explorer's for the same answer (--first)
SYMBOLIC_RUNS = (
    ("premature-decrement B=4 L=6 4x3", "exclusive-write", False),
)
#: BMC's bound in the symbolic runs (it stops at the violation)
SYMBOLIC_DEPTH = 20
#: the engine harness next to the protocol file that describes the same
#: orders: (label, branches as appends each), cow B=4 L=6, async
HARNESS_SHAPES = (("B=4 L=6 2x3", [3, 3]), ("B=4 L=6 3x2", [2, 2, 2]))
HARNESS_ALLOCATOR = "cowcheck.specs.allocators.engine:correct"
HARNESS_PROTOCOL = "engine"
#: prefix caching through the harness: the shipped V1-style pool and vLLM
#: V1's own KVCacheManager (from $COWCHECK_VLLM_SOURCE, else an installed
#: vLLM; the row says why it is skipped when neither is there), async, no
#: reduction, on the SCENARIOS entries of these labels
HARNESS_CACHE_SCENARIOS = ("prefix-cache B=2 4 requests, prompt 3", "prefix-cache B=2 warm cache, pool 6")
HARNESS_CACHE_ALLOCATORS = ("cowcheck.specs.allocators.prefix:correct", "cowcheck.adapters.vllm_v1:make")
#: the profiled run that splits the time stops after this many states
HARNESS_PROFILE_STATES = 3000


def _label(reductions: tuple[bool, bool, bool, bool]) -> str:
    symmetry, por, compact, fingerprints = reductions
    parts = (["symmetry"] if symmetry else []) + (["partial-order"] if por else []) + \
        (["compact"] if compact else []) + (["fingerprints"] if fingerprints else [])
    return " + ".join(parts) or "none"


def bench_scenario(label: str, spec: tuple | dict | None = None) -> Scenario:
    """A benchmark scenario: `spec` (a SCENARIOS entry's shape), by default
    SCENARIOS[label], named `label`."""
    spec = spec or SCENARIOS[label]
    if isinstance(spec, dict):
        return scenario_from_dict(spec, label, Path("."), label)
    B, L, branches, protocol, *keywords = spec
    return make_scenario(B, L, branches, protocol, name=label, **(keywords[0] if keywords else {}))


#: the runs the frontier engine measures too, beside the explicit engine
FRONTIER = "frontier"


def _frontier_covers(label: str, reductions: tuple[bool, bool, bool, bool]) -> bool:
    """Whether the frontier engine runs this row too: without reductions,
    with symmetry, partial-order reduction or both (its reductions, as rows),
    on a scenario it covers."""
    from cowcheck.engines.rows import refusal
    return reductions in (NONE, SYMMETRY, POR, BOTH) and refusal(bench_scenario(label)) is None


def _measure(args, conn) -> None:
    from cowcheck.engines.explicit import explore
    from cowcheck.engines.frontier import explore_frontier
    label, (symmetry, por, compact, fingerprints), *engine = args
    scenario = bench_scenario(label)
    start, cpu = time.perf_counter(), time.process_time()
    options = SearchOptions(symmetry=symmetry, por=por, compact=compact, fingerprints=fingerprints)
    result = explore_frontier(scenario, options) if engine == [FRONTIER] else explore(scenario, options)
    cpu = time.process_time() - cpu
    x = result.x
    conn.send({
        "benchmark": label,
        "engine": engine[0] if engine else "explicit",
        "reductions": _label((symmetry, por, compact, fingerprints)),
        "states": x.states,
        "transitions": x.transitions,
        "depth": x.depth,
        "explore_seconds": round(x.seconds, 2),
        "total_seconds": round(time.perf_counter() - start, 2),
        # this process's CPU time for the whole check: on a shared machine two rows' ratio in CPU time holds where wall clock does not
        "cpu_seconds": round(cpu, 2),
        "states_per_second": round(x.rate),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "bytes_per_state": round(x.bytes_per_state or 0),
        "collision_probability": x.collision_probability,
        "summary": str(result.summary),
    })
    conn.close()


def _measure_symbolic(args, conn) -> None:
    """BMC and the explorer (stopping at its first violation) on the same
    question: the shortest violation of one invariant."""
    from cowcheck.engines.explicit import explore
    from cowcheck.engines.invariants import select
    from cowcheck.symbolic import run_bmc
    label, invariant = args
    scenario = bench_scenario(label)
    protocol = scenario.protocol.name
    wanted = select([invariant])
    start = time.perf_counter()
    explicit = explore(scenario, SearchOptions(first=True), invariants=wanted)
    explicit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    bmc = run_bmc(scenario, wanted, SYMBOLIC_DEPTH)
    conn.send({
        "benchmark": f"BMC finds {protocol}'s {invariant} on {label.removeprefix(protocol).strip()}",
        "invariant": invariant,
        "bmc_length": bmc.verdicts[invariant].length,
        "bmc_z3_seconds": round(sum(bmc.depth_seconds), 2),
        "bmc_total_seconds": round(time.perf_counter() - start, 2),
        "explicit_length": explicit.verdicts[invariant].length,
        "explicit_states": explicit.x.states,
        "explicit_seconds": round(explicit_seconds, 2),
    })
    conn.close()


def _measure_harness(args, conn) -> None:
    """The shipped correct allocator through the harness and its protocol
    file on one scenario; where the harness's time goes, from a profile of
    a second run: snapshots (pickling and unpickling the allocator), the
    allocator's own calls, the rest (search, hashing, invariants)."""
    import cProfile
    import pstats

    from cowcheck import api
    label, appends = args
    scenario = make_scenario(4, 6, appends, HARNESS_PROTOCOL, name=label)
    start = time.perf_counter()
    harness = cast(ExplicitResult, api.check(scenario, allocator=HARNESS_ALLOCATOR, symmetry=False))
    harness_seconds = time.perf_counter() - start
    start = time.perf_counter()
    protocol = cast(ExplicitResult, api.check(scenario, symmetry=False))
    protocol_seconds = time.perf_counter() - start
    profile = cProfile.Profile()
    profile.runcall(api.check, scenario, allocator=HARNESS_ALLOCATOR, symmetry=False)
    stats = pstats.Stats(profile).stats        # type: ignore[attr-defined]  # pstats keeps its table here
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    snapshots = sum(ct for (_, _, name), (_, _, _, ct, _) in stats.items() if name in ("_freeze", "_thaw"))

    def spent(suffix: str) -> float:
        return sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if path.endswith(suffix))
    calls, bookkeeping, judging = spent("allocators/engine.py"), spent("model/harness.py"), spent("invariants.py")
    conn.send({"benchmark": f"engine allocator {label}", "harness_states": harness.x.states,
               "harness_seconds": round(harness_seconds, 2), "harness_summary": str(harness.summary),
               "protocol_states": protocol.x.states, "protocol_seconds": round(protocol_seconds, 2),
               "protocol_summary": str(protocol.summary),
               "ratio": round(harness_seconds / protocol_seconds, 1) if protocol_seconds else None,
               "share": {"snapshots (pickle)": round(snapshots / total, 2), "allocator calls": round(calls / total, 2),
                         "harness bookkeeping": round(bookkeeping / total, 2), "invariants": round(judging / total, 2),
                         "search and hashing": round(max(0.0, 1 - (snapshots + calls + bookkeeping + judging) / total), 2)}})
    conn.close()



def _shares(stats: dict, adapter_file: str) -> dict[str, float]:
    """Where a harness run's time goes, from its profile: snapshots
    (_freeze and _thaw: pickling, unpickling and the adapter's snapshot()),
    the allocator's own calls (every adapter method the harness calls, with
    all it calls: for a real engine, the engine's code), the harness's
    bookkeeping, the invariants, and the rest (search and hashing)."""
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    snapshots = sum(ct for (_, _, name), (_, _, _, ct, _) in stats.items() if name in ("_freeze", "_thaw"))
    calls = sum(by[3] for (path, _, name), (_, _, _, _, callers) in stats.items()
                if path == adapter_file and name not in ("snapshot", "__reduce__")
                for (cpath, _, _), by in callers.items() if cpath.endswith("model/harness.py"))

    def spent(suffix: str) -> float:
        return sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if path.endswith(suffix))
    bookkeeping, judging = spent("model/harness.py"), spent("invariants.py")
    # three places: a memoised toy allocator's calls are under 1% of the time, and must not round to nothing
    return {"allocator calls": round(calls / total, 3), "snapshots (pickle)": round(snapshots / total, 3),
            "harness bookkeeping": round(bookkeeping / total, 3), "invariants": round(judging / total, 3),
            "search and hashing": round(max(0.0, 1 - (snapshots + calls + bookkeeping + judging) / total), 3)}


def _figures(result: ExplicitResult) -> tuple:
    """What two runs of one check must share: states, transitions, every verdict and its length."""
    return (result.x.states, result.x.transitions, {k: (str(v.outcome), v.length) for k, v in result.verdicts.items()})


def _measure_cache_harness(args, conn) -> None:
    """One allocator through the harness on one prefix-caching scenario:
    states per second of a full run, and where the time goes, from a
    profile of a second run stopped after HARNESS_PROFILE_STATES states."""
    import cProfile
    import importlib
    import inspect
    import pstats

    from cowcheck import api
    from cowcheck.model import memo
    from cowcheck.model.errors import SpecError
    label, allocator = args
    row = {"benchmark": label, "allocator": allocator}
    scenario = bench_scenario(label)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        result = cast(ExplicitResult, api.check(scenario, allocator=allocator, symmetry=False))
    except SpecError as err:
        conn.send({**row, "skipped": str(err)})
        conn.close()
        return
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    # the same check without the harness's memo of host calls (cowcheck.model.memo): what it saves, and the same search
    memo.LIMIT, kept = 0, memo.LIMIT
    start, bare_cpu = time.perf_counter(), time.process_time()
    bare = cast(ExplicitResult, api.check(scenario, allocator=allocator, symmetry=False))
    bare_seconds, bare_cpu = time.perf_counter() - start, time.process_time() - bare_cpu
    memo.LIMIT = kept
    profile = cProfile.Profile()
    profile.runcall(api.check, scenario, allocator=allocator, symmetry=False, max_states=HARNESS_PROFILE_STATES)
    stats = pstats.Stats(profile).stats        # type: ignore[attr-defined]  # pstats keeps its table here
    module = importlib.import_module(allocator.split(":")[0])
    conn.send({**row, "states": result.x.states, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
               "states_per_second": round(result.x.states / seconds),
               "without_memo": {"states": bare.x.states, "transitions": bare.x.transitions, "seconds": round(bare_seconds, 2),
                                "cpu_seconds": round(bare_cpu, 2), "same": _figures(bare) == _figures(result)},
               "summary": str(result.summary), "share": _shares(stats, inspect.getsourcefile(module) or "")})
    conn.close()


def _end_to_end(label: str) -> dict:
    """`cowcheck check` on a scenario file, timed from process start."""
    import subprocess
    import tempfile
    from pathlib import Path

    B, L, branches, protocol = cast(tuple, SCENARIOS[label])
    text = f'protocol = "{protocol}"\nblock_size = {B}\nprompt = {L}\n' + "".join(
        f"[[branch]]\nappends = {a}\nmay_cancel = {'true' if c else 'false'}\n" for a, c in branches)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.toml"
        path.write_text(text)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cowcheck", "check", str(path), "--out", folder],
                       check=True, capture_output=True)
        return {"benchmark": f"cowcheck check ({label}), process start included",
                "seconds": round(time.perf_counter() - start, 2)}


def selected(label: str, only: Optional[str]) -> bool:
    """Whether `bench --only TEXT` keeps the row of this label (TEXT a
    case-blind part of it; no TEXT keeps every row)."""
    return only is None or only.casefold() in label.casefold()


def run_benchmarks(console: Console, as_json: bool, counterexamples: str = "counterexamples", full: bool = False,
                   only: Optional[str] = None) -> None:
    """The main table; with `only`, just the rows whose label holds it (and
    neither the end-to-end nor the replay line, which have no label)."""
    traces = replayable(counterexamples) if only is None else []    # a bad file fails now, not after minutes of exploring
    rows = []
    for label, reductions, heavy in RUNS:
        if (heavy and not full) or not selected(label, only):
            continue
        # the runs without compact or fingerprints: the frontier engine beside the explicit one, where
        # it covers the scenario (docs/explanation/speed.md)
        for engine in ("explicit", FRONTIER) if _frontier_covers(label, reductions) else ("explicit",):
            row = in_child(_measure, (label, reductions, engine))
            assert row is not None      # no limit
            rows.append(row)
            if not as_json:
                console.print(f"  {escape(label)} {escape('[' + _label(reductions) + ']')} ({engine}): "
                              f"{rows[-1]['states']:,} states in {rows[-1]['explore_seconds']} s", style="dim")
    symbolic = [row for label, invariant, heavy in SYMBOLIC_RUNS if (full or not heavy) and selected(label, only)
                if (row := in_child(_measure_symbolic, (label, invariant))) is not None]
    harness = [row for shape in HARNESS_SHAPES if selected(f"engine allocator {shape[0]}", only)
               if (row := in_child(_measure_harness, shape)) is not None]
    cache_harness = [row for label in HARNESS_CACHE_SCENARIOS for allocator in HARNESS_CACHE_ALLOCATORS
                     if selected(f"{label} {allocator}", only)
                     if (row := in_child(_measure_cache_harness, (label, allocator))) is not None]
    scheduler = [row for section, stem, connector in SCHEDULER_RUNS if selected(row_label(section, stem, connector), only)
                 if (row := in_child(measure_scheduler, (section, stem, connector))) is not None]
    end_to_end = _end_to_end("cow B=4 L=6 4x2") if only is None else None
    replays = replay_figures(traces) if only is None else None
    if as_json:
        json.dump({"format": FORMAT, "explore": rows, "symbolic": symbolic, "harness": harness, "cache_harness": cache_harness, "scheduler": scheduler, "end_to_end": end_to_end,
                   "replay": replays}, sys.stdout, indent=2)
        print()
        return
    table = Table(title=f"cowcheck bench (python {sys.version.split()[0]})", title_justify="left")
    for col in ("benchmark", "engine", "reductions", "states", "transitions", "explore s", "states/s", "CPU s", "peak RSS MiB",
                "bytes/state"):
        table.add_column(col, justify="left" if col in ("benchmark", "engine", "reductions") else "right")
    for r in rows:
        table.add_row(r["benchmark"], r["engine"], r["reductions"], f"{r['states']:,}", f"{r['transitions']:,}", str(r["explore_seconds"]),
                      f"{r['states_per_second']:,}", str(r["cpu_seconds"]), str(r["peak_rss_mib"]), f"{r['bytes_per_state']:,}")
    if rows:
        console.print(table)
    if not full and only is None:
        console.print("[dim](--full adds the unreduced 4x2 run, about 3.3 million states, the 5x2 runs and the 6x2 and 8x1 runs)[/]")
    for r in symbolic:
        console.print(f"{r['benchmark']}: length {r['bmc_length']}, z3 {r['bmc_z3_seconds']} s "
                      f"({r['bmc_total_seconds']} s in all); explicit --first: length {r['explicit_length']}, "
                      f"{r['explicit_states']:,} states, {r['explicit_seconds']} s")
    if harness:
        htable = Table(title="allocator code (engine harness) next to its protocol file (async, lifo, no reduction)",
                       title_justify="left")
        for col in ("scenario", "harness states", "harness s", "protocol states", "protocol s", "ratio", "where the harness's time goes"):
            htable.add_column(col, justify="left" if col in ("scenario", "where the harness's time goes") else "right")
        for r in harness:
            htable.add_row(r["benchmark"], f"{r['harness_states']:,}", str(r["harness_seconds"]), f"{r['protocol_states']:,}",
                           str(r["protocol_seconds"]), f"{r['ratio']}x",
                           ", ".join(f"{k} {v:.0%}" for k, v in r["share"].items()))
        console.print(htable)
    if cache_harness:
        ctable = Table(title="prefix caching through the harness: the V1-style pool and vLLM V1's own code (async, no reduction)",
                       title_justify="left")
        for col in ("scenario", "allocator", "states", "s", "states/s", "s without memo", "where the time goes"):
            ctable.add_column(col, justify="left" if col in ("scenario", "allocator", "where the time goes") else "right")
        for r in cache_harness:
            if "skipped" in r:
                ctable.add_row(r["benchmark"], r["allocator"], "", "", "", "", f"skipped: {r['skipped']}")
            else:
                bare = r["without_memo"]
                ctable.add_row(r["benchmark"], r["allocator"], f"{r['states']:,}", str(r["seconds"]), f"{r['states_per_second']:,}",
                               f"{bare['seconds']}" + ("" if bare["same"] else " (a different search!)"), ", ".join(f"{k} {v:.0%}" for k, v in r["share"].items()))
        console.print(ctable)
    if scheduler:
        stable = Table(title="vLLM's V1 Scheduler through the scheduler harness, each connector (no reduction)",
                       title_justify="left")
        for col in ("scenario and connector", "states", "s", "states/s", "CPU s", "where the time goes"):
            stable.add_column(col, justify="left" if col in ("scenario and connector", "where the time goes") else "right")
        for r in scheduler:
            if "skipped" in r:
                stable.add_row(r["benchmark"], "", "", "", "", f"skipped: {r['skipped']}")
            else:
                stable.add_row(r["benchmark"], f"{r['states']:,}", str(r["seconds"]), f"{r['states_per_second']:,}",
                               str(r["cpu_seconds"]), ", ".join(f"{k} {v:.0%}" for k, v in r["share"].items()))
        console.print(stable)
    if end_to_end is None or replays is None:
        return
    console.print(f"{end_to_end['benchmark']}: {end_to_end['seconds']} s")
    console.print(f"{replays['benchmark']}: {replays['actions']:,} actions in {replays['seconds']} s, "
                  f"{replays['replays_per_second']} replays/s; one {replays['long_trace_actions']}-action run "
                  f"on the pool: {replays['long_trace_pool_seconds'] * 1000:.1f} ms")
