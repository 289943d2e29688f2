"""`cowcheck bench --branches`, `--profile` and `--floor`: how symmetry
reduction scales as branches are added (cow, B=4, L=6, async). --branches:
distinct states, seconds and states/s per branch count, with symmetry and
with symmetry + partial-order; --profile: where a search's time goes per
stored state (successors, invariants, canonical form, storage, measures);
--floor: the same search with the canonical form looked up in a table a
first run recorded, what a free canonical form would leave. One idea: the
cost of the canonical form as the search grows, on rows that may not finish,
so each stops itself after a limit (--limit) and reports what it explored."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cowcheck.model.scenario import make_scenario

from cowcheck.engines.explorer import Exploration
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import FORMAT

from cowcheck.bench.child import in_child

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


def measure_branches(args, conn) -> None:
    from cowcheck.engines.explicit import explore
    n, appends, por, limit = args
    scenario = make_scenario(4, 6, [(appends, False)] * n, "cow", name=_branch_label(n, appends))
    result = explore(scenario, SearchOptions(symmetry=True, por=por, max_seconds=limit))
    x = result.x
    conn.send({"benchmark": _branch_label(n, appends), "branches": n, "appends": appends,
               "reductions": "symmetry + partial-order" if por else "symmetry",
               "states": x.states, "transitions": x.transitions, "complete": x.complete,
               "explore_seconds": round(x.seconds, 2), "states_per_second": round(x.rate)})
    conn.close()


def measure_profile(args, conn) -> None:
    """One search with the explorer's profiling on: seconds per part."""
    from cowcheck.model.state import allocated
    from cowcheck.model.reduce.symmetry import Symmetry
    from cowcheck.model.system import ProtocolModel

    from cowcheck.engines.explorer import Explorer
    from cowcheck.engines.invariants import INVARIANTS
    n, appends, limit = args
    scenario = make_scenario(4, 6, [(appends, False)] * n, "cow", name=_branch_label(n, appends))
    model, symmetry = ProtocolModel(scenario), Symmetry(scenario)
    explorer = Explorer(model, INVARIANTS, SearchOptions(max_seconds=limit), gauge=allocated, steady=model.is_steady,
                        cost=model.is_copy_launch, representative=symmetry.representative, mirror=symmetry.unmirrored,
                        reductions=("symmetry",), profile=True)
    x = explorer.run()
    assert explorer.times is not None
    conn.send({"benchmark": _branch_label(n, appends), "states": x.states, "transitions": x.transitions,
               "complete": x.complete, "explore_seconds": round(x.seconds, 2),
               "seconds": {part: round(t, 3) for part, t in explorer.times.items()},
               "rest_seconds": round(x.seconds - sum(explorer.times.values()), 3)})
    conn.close()


#: (branches, appends each) for `--floor`: the rows whose target is 10 s
FLOOR_SHAPES = ((6, 1), (5, 2))


def measure_floor(args, conn) -> None:
    """The search twice, unprofiled: as it is, recording each
    representative and each state's mirrored branches; then with both
    looked up in what the first run recorded. The second run is the
    search a free canonical form would leave: successors, invariants,
    storage, measures and the loop, the same states and transitions."""
    from cowcheck.model.state import State, allocated
    from cowcheck.model.reduce.symmetry import Symmetry, without_actors
    from cowcheck.model.system import ProtocolModel

    from cowcheck.engines.explorer import Explorer
    from cowcheck.engines.invariants import INVARIANTS
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
        return Explorer(model, INVARIANTS, SearchOptions(max_seconds=limit), gauge=allocated, steady=model.is_steady,
                        cost=model.is_copy_launch, representative=representative, mirror=mirror).run()

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
        row = in_child(measure_floor, (n, appends, limit), _backstop(limit) + limit)
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
            row = in_child(measure_branches, (n, appends, por, limit), _backstop(limit))
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
    from cowcheck.engines.explorer import Explorer
    rows: list[dict] = []
    for n, appends in PROFILE_SHAPES:
        row = in_child(measure_profile, (n, appends, limit), _backstop(limit))
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
