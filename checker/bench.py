"""`cowcheck bench`: exploration speed on fixed scenarios, and the z3 BMC
engine next to the explorer on one question. A benchmark, not a test:
timings belong here, never in the test suite. Each scenario runs in a fresh
child process so its peak memory is its own."""

from __future__ import annotations

import json
import multiprocessing
import resource
import sys
import time
from typing import Optional, cast

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cowcheck.model.scenario import make_scenario

from .explorer import Exploration
from .results import FORMAT, ExplicitResult

#: (label, block size, prompt, branches as (appends, may_cancel) or branch tables, protocol)
SCENARIOS: dict[str, tuple] = {
    "cow B=4 L=6 3x2": (4, 6, [(2, False)] * 3, "cow"),
    "cow B=2 L=3 3x2, one may_cancel": (2, 3, [(2, False), (2, False), (2, True)], "cow"),
    "cow B=4 L=6 4x2": (4, 6, [(2, False)] * 4, "cow"),
    "cow B=4 L=6 5x2": (4, 6, [(2, False)] * 5, "cow"),
    "premature-decrement B=4 L=6 4x3": (4, 6, [(3, False)] * 4, "premature-decrement"),
    # a beam fork: a and b are roots, a forks c after its first append, then every branch appends twice more
    "cow beam B=4 L=6 a forks c": (4, 6, [{"program": ["append", "fork c", "append", "append"]}, {"appends": 3},
                                          {"appends": 2, "parent": "a"}], "cow"),
    # speculative decoding: a drafts three tokens (0-3 accepted), rolls back, appends once; b appends once
    "cow speculate B=2 L=3 a: speculate 3": (2, 3, [{"program": ["speculate 3", "append"]}, {"appends": 1}], "cow"),
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


def _label(reductions: tuple[bool, bool, bool, bool]) -> str:
    symmetry, por, compact, fingerprints = reductions
    parts = (["symmetry"] if symmetry else []) + (["partial-order"] if por else []) + \
        (["compact"] if compact else []) + (["fingerprints"] if fingerprints else [])
    return " + ".join(parts) or "none"


def _measure(args, conn) -> None:
    from .explicit import explore
    label, (symmetry, por, compact, fingerprints) = args
    B, L, branches, protocol = SCENARIOS[label]
    scenario = make_scenario(B, L, branches, protocol, name=label)
    start = time.perf_counter()
    result = explore(scenario, symmetry=symmetry, por=por, compact=compact, fingerprints=fingerprints)
    x = result.x
    conn.send({
        "benchmark": label,
        "reductions": _label((symmetry, por, compact, fingerprints)),
        "states": x.states,
        "transitions": x.transitions,
        "depth": x.depth,
        "explore_seconds": round(x.seconds, 2),
        "total_seconds": round(time.perf_counter() - start, 2),
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
    from .explicit import explore
    from .invariants import select
    from .symbolic import run_bmc
    label, invariant = args
    B, L, branches, protocol = SCENARIOS[label]
    scenario = make_scenario(B, L, branches, protocol, name=label)
    wanted = select([invariant])
    start = time.perf_counter()
    explicit = explore(scenario, invariants=wanted, first=True)
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

    from . import api
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


def _in_child(target, args, limit: Optional[float] = None) -> Optional[dict]:
    """Run target(args, conn) in a fresh process and return what it sends;
    None when `limit` seconds pass first (the child is then killed)."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(args, send))
    proc.start()
    send.close()
    if limit is not None and not receive.poll(limit):
        proc.kill()
        proc.join()
        return None
    row = receive.recv()
    proc.join()
    return row


# -- symmetry as branches grow (--branches) and where the time goes (--profile)
#: (branches, appends each) for `--branches`: cow, B=4, L=6, async
BRANCH_SHAPES = tuple((n, 1) for n in range(2, 9)) + tuple((n, 2) for n in range(2, 7))
#: the per-row limit in seconds when none is given
ROW_LIMIT = 60.0
#: (branches, appends each) for `--profile`
PROFILE_SHAPES = ((4, 2), (5, 2), (6, 1), (8, 1))


def _backstop(limit: float) -> float:
    """A row's search stops itself after `limit` seconds and reports what it
    explored; its process is killed only if it has not answered well after."""
    return 2 * limit + 30


def _branch_label(n: int, appends: int) -> str:
    return f"cow B=4 L=6 {n}x{appends}"


def _measure_branches(args, conn) -> None:
    from .explicit import explore
    n, appends, por, limit = args
    scenario = make_scenario(4, 6, [(appends, False)] * n, "cow", name=_branch_label(n, appends))
    result = explore(scenario, symmetry=True, por=por, max_seconds=limit)
    x = result.x
    conn.send({"benchmark": _branch_label(n, appends), "branches": n, "appends": appends,
               "reductions": "symmetry + partial-order" if por else "symmetry",
               "states": x.states, "transitions": x.transitions, "complete": x.complete,
               "explore_seconds": round(x.seconds, 2), "states_per_second": round(x.rate)})
    conn.close()


def _measure_profile(args, conn) -> None:
    """One search with the explorer's profiling on: seconds per part."""
    from cowcheck.model.state import allocated
    from cowcheck.model.symmetry import Symmetry
    from cowcheck.model.system import ProtocolModel

    from .explorer import Explorer
    from .invariants import INVARIANTS
    n, appends, limit = args
    scenario = make_scenario(4, 6, [(appends, False)] * n, "cow", name=_branch_label(n, appends))
    model, symmetry = ProtocolModel(scenario), Symmetry(scenario)
    explorer = Explorer(model, INVARIANTS, gauge=allocated, steady=model.is_steady, cost=model.is_copy_launch,
                        representative=symmetry.representative, mirror=symmetry.unmirrored, reductions=("symmetry",), profile=True,
                        max_seconds=limit)
    x = explorer.run()
    assert explorer.times is not None
    conn.send({"benchmark": _branch_label(n, appends), "states": x.states, "transitions": x.transitions,
               "complete": x.complete, "explore_seconds": round(x.seconds, 2),
               "seconds": {part: round(t, 3) for part, t in explorer.times.items()},
               "rest_seconds": round(x.seconds - sum(explorer.times.values()), 3)})
    conn.close()


#: (branches, appends each) for `--floor`: the rows whose target is 10 s
FLOOR_SHAPES = ((6, 1), (5, 2))


def _measure_floor(args, conn) -> None:
    """The search twice, unprofiled: as it is, recording each
    representative and each state's mirrored branches; then with both
    looked up in what the first run recorded. The second run is the
    search a free canonical form would leave: successors, invariants,
    storage, measures and the loop, the same states and transitions."""
    from cowcheck.model.state import State, allocated
    from cowcheck.model.symmetry import Symmetry, without_actors
    from cowcheck.model.system import ProtocolModel

    from .explorer import Explorer
    from .invariants import INVARIANTS
    n, appends, limit = args
    scenario = make_scenario(4, 6, [(appends, False)] * n, "cow", name=_branch_label(n, appends))
    model, symmetry = ProtocolModel(scenario), Symmetry(scenario)
    reps: dict[State, State] = {}
    skipped: dict[State, frozenset[str]] = {}

    def recorded(state: State) -> State:
        rep = reps[state] = symmetry.representative(state)
        return rep

    def recorded_mirror(state: State, transitions):
        names = skipped[state] = symmetry.mirrored_actors(state)
        return without_actors(transitions, names)

    def looked_up_mirror(state: State, transitions):
        return without_actors(transitions, skipped[state])

    def search(representative, mirror) -> Exploration:
        return Explorer(model, INVARIANTS, gauge=allocated, steady=model.is_steady, cost=model.is_copy_launch,
                        representative=representative, mirror=mirror, max_seconds=limit).run()

    full = search(recorded, recorded_mirror)
    free = search(reps.__getitem__, looked_up_mirror) if full.complete else None
    conn.send({"benchmark": _branch_label(n, appends), "states": full.states, "transitions": full.transitions,
               "complete": full.complete, "explore_seconds": round(full.seconds, 2),
               "looked_up_seconds": None if free is None else round(free.seconds, 2)})
    conn.close()


def run_floor(console: Console, as_json: bool, limit: float = ROW_LIMIT) -> list[dict]:
    """What the search would take if the canonical form cost nothing."""
    rows: list[dict] = []
    for n, appends in FLOOR_SHAPES:
        row = _in_child(_measure_floor, (n, appends, limit), _backstop(limit) + limit)
        rows.append(row if row is not None else {"benchmark": _branch_label(n, appends), "over_seconds": limit})
    if as_json:
        json.dump({"format": FORMAT, "floor": rows, "limit_seconds": limit}, sys.stdout, indent=2)
        print()
        return rows
    table = Table(title="the search with the canonical form looked up (what a free canonical form would leave)",
                  title_justify="left")
    for col, justify in (("benchmark", "left"), ("states", "right"), ("transitions", "right"), ("seconds", "right"),
                         ("seconds, canonical form looked up", "right"), ("canonical form's share", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        if r.get("looked_up_seconds") is None:
            table.add_row(r["benchmark"], f"{r['states']:,} so far" if "states" in r else "-", "-",
                          f"stopped at {limit:g}", "-", "-")
            continue
        share = 1 - r["looked_up_seconds"] / r["explore_seconds"]
        table.add_row(r["benchmark"], f"{r['states']:,}", f"{r['transitions']:,}", str(r["explore_seconds"]),
                      str(r["looked_up_seconds"]), f"{share:.0%}")
    console.print(table)
    return rows


def run_branches(console: Console, as_json: bool, limit: float = ROW_LIMIT) -> list[dict]:
    """Distinct states, seconds and states/s as branches are added, with
    symmetry and with symmetry + partial-order reduction, a row per child
    process, each stopped after `limit` seconds."""
    rows: list[dict] = []
    for n, appends in BRANCH_SHAPES:
        for por in (False, True):
            row = _in_child(_measure_branches, (n, appends, por, limit), _backstop(limit))
            if row is None:
                row = {"benchmark": _branch_label(n, appends), "branches": n, "appends": appends,
                       "reductions": "symmetry + partial-order" if por else "symmetry", "over_seconds": limit}
            rows.append(row)
            if not as_json:
                done = f"{row['states']:,} states in {row['explore_seconds']} s" + ("" if row.get("complete") else " (stopped)") \
                    if "states" in row else f"over {limit:g} s"
                console.print(f"  {escape(row['benchmark'])} {escape('[' + row['reductions'] + ']')}: {done}", style="dim")
    if as_json:
        json.dump({"format": FORMAT, "branches": rows, "limit_seconds": limit}, sys.stdout, indent=2)
        print()
        return rows
    table = Table(title=f"symmetry as branches grow (python {sys.version.split()[0]}, {limit:g} s a row)", title_justify="left")
    for col in ("benchmark", "reductions", "states", "seconds", "states/s"):
        table.add_column(col, justify="left" if col in ("benchmark", "reductions") else "right")
    for r in rows:
        if "states" in r:
            complete = r["complete"]
            table.add_row(r["benchmark"], r["reductions"], f"{r['states']:,}" + ("" if complete else " so far"),
                          str(r["explore_seconds"]) if complete else f"stopped at {limit:g}", f"{r['states_per_second']:,}")
        else:
            table.add_row(r["benchmark"], r["reductions"], "-", f"over {limit:g} s", "-")
    console.print(table)
    return rows


def run_profile(console: Console, as_json: bool, limit: float = ROW_LIMIT) -> list[dict]:
    """Where a search's time goes, per stored state: successor generation,
    invariants, canonical form, hashing and storage, measures."""
    from .explorer import Explorer
    rows: list[dict] = []
    for n, appends in PROFILE_SHAPES:
        row = _in_child(_measure_profile, (n, appends, limit), _backstop(limit))
        rows.append(row if row is not None else {"benchmark": _branch_label(n, appends), "over_seconds": limit})
    if as_json:
        json.dump({"format": FORMAT, "profile": rows, "limit_seconds": limit}, sys.stdout, indent=2)
        print()
        return rows
    parts = [p for p in Explorer.PARTS if p != "partial-order"]
    table = Table(title="where the time goes (symmetry on), microseconds per stored state", title_justify="left")
    table.add_column("benchmark")
    for col in ("states", "seconds", *parts, "rest", "canonical / successors"):
        table.add_column(col, justify="right")
    for r in rows:
        if "states" not in r:
            table.add_row(r["benchmark"], "-", f"over {limit:g} s", *["-"] * (len(parts) + 2))
            continue
        per = [r["seconds"][p] / r["states"] * 1e6 for p in parts]
        ratio = r["seconds"]["canonical form"] / r["seconds"]["successors"] if r["seconds"]["successors"] else 0.0
        table.add_row(r["benchmark"], f"{r['states']:,}" + ("" if r["complete"] else " so far"),
                      str(r["explore_seconds"]) if r["complete"] else f"stopped at {limit:g}", *(f"{v:.1f}" for v in per),
                      f"{r['rest_seconds'] / r['states'] * 1e6:.1f}", f"{ratio:.2f}")
    console.print(table)
    console.print("[dim](timing each part adds its own cost: the seconds here are longer than in a plain run)[/]")
    return rows


def _end_to_end(label: str) -> dict:
    """`cowcheck check` on a scenario file, timed from process start."""
    import subprocess
    import tempfile
    from pathlib import Path

    B, L, branches, protocol = SCENARIOS[label]
    text = f'protocol = "{protocol}"\nblock_size = {B}\nprompt = {L}\n' + "".join(
        f"[[branch]]\nappends = {a}\nmay_cancel = {'true' if c else 'false'}\n" for a, c in branches)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.toml"
        path.write_text(text)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cowcheck.cli", "check", str(path), "--out", folder],
                       check=True, capture_output=True)
        return {"benchmark": f"cowcheck check ({label}), process start included",
                "seconds": round(time.perf_counter() - start, 2)}


def run_benchmarks(console: Console, as_json: bool, counterexamples: str = "counterexamples", full: bool = False) -> None:
    traces = replayable(counterexamples)     # a bad file fails now, not after minutes of exploring
    rows = []
    for label, reductions, heavy in RUNS:
        if heavy and not full:
            continue
        row = _in_child(_measure, (label, reductions))
        assert row is not None      # no limit
        rows.append(row)
        if not as_json:
            console.print(f"  {escape(label)} {escape('[' + _label(reductions) + ']')}: {rows[-1]['states']:,} states in {rows[-1]['explore_seconds']} s", style="dim")
    symbolic = [row for label, invariant, heavy in SYMBOLIC_RUNS if full or not heavy
                if (row := _in_child(_measure_symbolic, (label, invariant))) is not None]
    harness = [row for shape in HARNESS_SHAPES if (row := _in_child(_measure_harness, shape)) is not None]
    end_to_end = _end_to_end("cow B=4 L=6 4x2")
    replays = replay_figures(traces)
    if as_json:
        json.dump({"format": FORMAT, "explore": rows, "symbolic": symbolic, "harness": harness, "end_to_end": end_to_end,
                   "replay": replays}, sys.stdout, indent=2)
        print()
        return
    table = Table(title=f"cowcheck bench (python {sys.version.split()[0]})", title_justify="left")
    for col in ("benchmark", "reductions", "states", "transitions", "explore s", "states/s", "peak RSS MiB", "bytes/state"):
        table.add_column(col, justify="left" if col in ("benchmark", "reductions") else "right")
    for r in rows:
        table.add_row(r["benchmark"], r["reductions"], f"{r['states']:,}", f"{r['transitions']:,}", str(r["explore_seconds"]),
                      f"{r['states_per_second']:,}", str(r["peak_rss_mib"]), f"{r['bytes_per_state']:,}")
    console.print(table)
    if not full:
        console.print("[dim](--full adds the unreduced 4x2 run, about 3.3 million states, and the 5x2 run)[/]")
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
    console.print(f"{end_to_end['benchmark']}: {end_to_end['seconds']} s")
    console.print(f"{replays['benchmark']}: {replays['actions']:,} actions in {replays['seconds']} s, "
                  f"{replays['replays_per_second']} replays/s; one {replays['long_trace_actions']}-action run "
                  f"on the pool: {replays['long_trace_pool_seconds'] * 1000:.1f} ms")


def _long_walk(seed: int = 0):
    """A complete run of a larger scenario (over 100 actions), for timing a
    single long replay."""
    import random

    from cowcheck.model.system import ProtocolModel

    scenario = make_scenario(2, 3, [5, 5, 5], "cow", name="walk")
    model, rnd = ProtocolModel(scenario), random.Random(seed)
    state, actions = model.init_state(), []
    while not model.is_final(state):
        tr = rnd.choice(model.successors(state))
        assert tr.state is not None          # cow never misses its table
        actions.append(tr.action)
        state = tr.state
    return scenario, actions


def replayable(folder) -> list:
    """The counterexample files in `folder`, each one the model replays."""
    from pathlib import Path

    from .rerun import load_replayed

    return [load_replayed(f)[0] for f in sorted(Path(folder).glob("*.json"))]


def replay_figures(traces: list) -> dict:
    """Replays per second (model and numpy pool) over counterexamples, and
    the time of one replay of a 100+-action run."""
    from .executor import replay_on_pool
    from .rerun import replay

    start = time.perf_counter()
    for cx in traces:
        replay(cx)
        replay_on_pool(cx.scenario, cx.actions, initial=cx.initial)
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


def run_sweep_benchmarks(console: Console, as_json: bool) -> dict:
    """`cowcheck bench --sweep`: sweeps on Dask against the serial loop (cowcheck.sweep_bench)."""
    from .sweep_bench import run_sweep_benchmarks as run
    return run(console, as_json)
