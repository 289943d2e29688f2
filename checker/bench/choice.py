"""`cowcheck bench --choice`: what the default check's choice of
partial-order reduction (cowcheck.engines.explicit) costs and saves, next to
the two explicit choices, `--por` and `--no-por`, in one run. One idea: the
default must be about as fast as the better of the two, so every row runs
all three.

- Protocols that hold, as branches grow: cow B=4 L=6 async, 6x1, 5x2, 8x1,
  6x2, and the beam and speculation rows of the main table. The default
  should be within a few tenths of `--por`, far under `--no-por`.
- Every shipped scenario (specs/scenarios), holding or buggy (buggy: some
  invariant breaks). On a buggy one the default pays for the reduced search
  up to its first violation on top of `--no-por`; the sum and the worst
  case of default / `--no-por` over the buggy ones say what that costs (and
  of default / `--por` over the holding ones).

Each row runs in its own process; a row is the whole check (every search,
the traces built), timed from the call to the result. Rows that take under
half a second are run again until half a second has passed, and the fastest
run counts: at a few milliseconds one run is mostly noise. A row still
searching after `--limit` seconds stops there and reports what it explored."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cowcheck.model.scenario import load_scenario

from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import FORMAT, Outcome

from cowcheck.bench.child import in_child
from cowcheck.bench.table import SCENARIOS, bench_scenario, selected

#: the explicit choices and the default, as `SearchOptions.por`, with their labels
MODES: tuple[tuple[str, Optional[bool]], ...] = (("default", None), ("--por", True), ("--no-por", False))
#: protocols that hold, as branches grow: label -> (block size, prompt, branches, protocol)
HOLDING: dict[str, tuple | dict] = {
    **{f"cow B=4 L=6 {n}x{a}": (4, 6, [(a, False)] * n, "cow") for n, a in ((6, 1), (5, 2), (8, 1), (6, 2))},
    **{label: SCENARIOS[label] for label in ("cow beam B=4 L=6 a forks c", "cow speculate B=2 L=3 a: speculate 3",
                                             "prefix-cache B=2 4 requests, prompt 3", "prefix-cache B=2 warm cache, pool 6")},
}
#: a row faster than this is run again until this much time has passed; the fastest run counts
REPEAT_FOR = 0.5


def _measure(args, conn) -> None:
    """One check, the whole of it: (label, scenario source, por, limit)."""
    from cowcheck.engines.explicit import explore
    label, source, por, limit = args
    if isinstance(source, str):
        scenario = load_scenario(Path(source))
    else:
        scenario = bench_scenario(label, source)
    options = SearchOptions(por=por, max_seconds=limit)
    best, spent, runs = float("inf"), 0.0, 0
    while spent < REPEAT_FOR:
        start = time.perf_counter()
        result = explore(scenario, options)
        took = time.perf_counter() - start
        best, spent, runs = min(best, took), spent + took, runs + 1
    x = result.x
    conn.send({"benchmark": label, "mode": dict((p, m) for m, p in MODES)[por], "states": x.states,
               "transitions": x.transitions, "complete": x.complete, "stopped": x.stopped,
               "seconds": round(best, 4), "runs": runs, "summary": str(result.summary),
               "broken": sorted(k for k, v in result.verdicts.items() if v.outcome is Outcome.VIOLATED),
               "searches": [s.purpose for s in result.searches], "choice": result.choice})
    conn.close()


def _rows(label: str, source: Any, limit: float) -> dict[str, dict]:
    """The three modes of one benchmark, each in its own process."""
    out = {}
    for mode, por in MODES:
        row = in_child(_measure, (label, source, por, limit), 2 * limit + 60)
        out[mode] = row if row is not None else {"benchmark": label, "mode": mode, "over_seconds": limit}
    return out


def shipped_scenarios() -> list[Path]:
    """specs/scenarios: beside the installed package where it is installed
    from a checkout (editable), else under the working folder (a wheel
    ships the protocols, not the scenarios: run it from a checkout's root)."""
    import cowcheck.specs
    folders = [Path(p) / "scenarios" for p in cowcheck.specs.__path__] + [Path("specs") / "scenarios"]
    folder = next((f for f in folders if f.is_dir()), None)
    return sorted(folder.glob("*.toml")) if folder is not None else []


def _ratio(a: dict, b: dict) -> Optional[float]:
    """a's seconds over b's, where both completed."""
    if not (a.get("complete") and b.get("complete")) or not b["seconds"]:
        return None
    return a["seconds"] / b["seconds"]


def run_choice(console: Console, as_json: bool, limit: float, only: Optional[str] = None) -> dict:
    """Every row (with `only`, those whose label holds it) in the three
    modes, then the summaries: per holding row, default / --por; over the
    shipped buggy (and holding) scenarios, the sum and the worst case of
    default / --no-por."""
    holding = []
    for label, source in HOLDING.items():
        if not selected(label, only):
            continue
        holding.append(_rows(label, source, limit))
        if not as_json:
            console.print(f"  {escape(label)}: " + ", ".join(
                f"{mode} {r['seconds']} s" if r.get("complete") else f"{mode} stopped" for mode, r in holding[-1].items()),
                style="dim")
    shipped = []
    for path in shipped_scenarios():
        if not selected(path.stem, only):
            continue
        shipped.append(_rows(path.stem, str(path), limit))
        if not as_json:
            console.print(f"  {escape(path.stem)}: " + ", ".join(f"{mode} {r.get('seconds')} s"
                                                                 for mode, r in shipped[-1].items()), style="dim")
    # a buggy protocol's default is held to --no-por (what it ran before), a holding one's to --por
    summary = {group: _summary([rows for rows in shipped if bool(rows["--no-por"].get("broken")) == buggy], against)
               for group, buggy, against in (("buggy", True, "--no-por"), ("holding", False, "--por"))}
    figures = {"format": FORMAT, "holding": holding, "shipped": shipped, "summary": summary, "limit_seconds": limit}
    if as_json:
        json.dump(figures, sys.stdout, indent=2)
        print()
        return figures
    _show(console, holding, shipped, summary, limit)
    return figures


def _summary(group: list[dict[str, dict]], against: str) -> dict:
    """Sum and worst case of default / `against` over a group of shipped scenarios."""
    complete = [rows for rows in group if all(r.get("complete") for r in rows.values())]
    if not complete:
        return {"scenarios": 0}
    seconds = {mode: round(sum(rows[mode]["seconds"] for rows in complete), 3) for mode, _ in MODES}
    worst = max(complete, key=lambda rows: rows["default"]["seconds"] / rows[against]["seconds"])
    return {"scenarios": len(complete), "seconds": seconds, "against": against,
            "sum_ratio": round(seconds["default"] / seconds[against], 3), "worst": worst["default"]["benchmark"],
            "worst_ratio": round(worst["default"]["seconds"] / worst[against]["seconds"], 3)}


def _cell(row: dict, limit: float) -> str:
    if "over_seconds" in row:
        return f"over {limit:g} s"
    return f"{row['seconds']:.3f} ({row['states']:,})" if row["complete"] else f"stopped at {limit:g} ({row['states']:,} so far)"


def _show(console: Console, holding: list, shipped: list, summary: dict, limit: float) -> None:
    for title, groups in (("protocols that hold, as branches grow", holding), ("the shipped scenarios", shipped)):
        if not groups:
            continue
        table = Table(title=f"{title}: seconds (states), the whole check", title_justify="left")
        for col in ("benchmark", "verdict", "default", "--por", "--no-por", "default / --por", "default / --no-por",
                    "the default's searches"):
            table.add_column(col, justify="left" if col in ("benchmark", "verdict", "the default's searches") else "right")
        for rows in groups:
            default = rows["default"]
            ratios = (_ratio(default, rows[mode]) for mode in ("--por", "--no-por"))
            table.add_row(escape(default["benchmark"]), default.get("summary", "-"),
                          *(_cell(rows[mode], limit) for mode, _ in MODES),
                          *("-" if r is None else f"{r:.2f}x" for r in ratios), " + ".join(default.get("searches", [])))
        console.print(table)
    for group, s in summary.items():
        if s["scenarios"]:
            console.print(f"shipped {group} scenarios ({s['scenarios']}): " + ", ".join(
                f"{mode} {t} s" for mode, t in s["seconds"].items()) + f"; default / {s['against']}: sum "
                f"{s['sum_ratio']:.2f}x, worst {s['worst_ratio']:.2f}x ({escape(s['worst'])})")
