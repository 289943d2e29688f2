"""`cowcheck bench --fuzz` (docs/how-to/fuzz.md, docs/explanation/speed.md):
scenarios per second that `cowcheck fuzz` draws and checks, per scenario
kind, on a protocol that holds (so every scenario is checked whole), and
on the actual engine where torch is here (its states: schedules); and,
from seed 0, how many scenarios and seconds it takes to find a violation
of each shipped bug protocol, and of the actual engine's in-flight cancel
(shrinking apart: the find alone)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from cowcheck.engines.results import FORMAT
from cowcheck.fuzzing.generators import kind_for
from cowcheck.bench.choice import shipped_scenarios
from cowcheck.fuzzing.run import fuzz
from cowcheck.model.protocol import builtin_names, load_builtin
from cowcheck.model.scenario import load_scenario

#: a protocol that holds, per kind: every drawn scenario is checked to its end
RATE_PROTOCOLS = {"fork": "cow", "cache": "prefix-cache", "transfer": "kv-connector-lazy"}
RATE_SCENARIOS = 20
#: the actual engine's rate: fewer scenarios (each schedule runs a model)
ENGINE_RATE_SCENARIOS = 4
#: the budget of the actual engine's find, from seed 0
ENGINE_FIND_SCENARIOS = 10
#: the budget of a find: scenarios drawn at most, from seed 0
FIND_SCENARIOS = 100


def bug_protocols() -> dict[str, str]:
    """The shipped bug protocols (name -> the kind `cowcheck fuzz` draws
    for it): those a shipped scenario expects to break an invariant other
    than no-deadlock (which a tight pool breaks in any protocol)."""
    out: dict[str, str] = {}
    shipped = set(builtin_names())
    for path in shipped_scenarios():
        scenario = load_scenario(path)
        if scenario.allocator is None and scenario.scheduler is None and any(e.startswith("violates ") and e != "violates no-deadlock" for e in scenario.expect):
            name = scenario.protocol.name
            if name not in shipped:       # a scenario's own protocol, written inline
                continue
            out.setdefault(name, kind_for(load_builtin(name)))
    return dict(sorted(out.items()))


def rate(kind: str) -> dict[str, Any]:
    result = fuzz(RATE_PROTOCOLS[kind], kind=kind, seed=0, scenarios=RATE_SCENARIOS, keep_going=True, do_shrink=False)
    return {"kind": kind, "protocol": RATE_PROTOCOLS[kind], "scenarios": len(result.tried), "states": result.states,
            "seconds": round(result.seconds, 3), "scenarios_per_second": round(len(result.tried) / result.seconds, 2)}


def engine_rate() -> Optional[dict[str, Any]]:
    """The actual engine's row (`cowcheck fuzz --engine-test`, every scenario
    explored within its default schedules; torch's import and the model's
    build included); None without torch and transformers."""
    from cowcheck.enginetest import missing
    if missing() is not None:
        return None
    result = fuzz(engine_test=True, seed=0, scenarios=ENGINE_RATE_SCENARIOS, keep_going=True, do_shrink=False)
    return {"kind": result.kind, "protocol": result.subject, "scenarios": len(result.tried), "states": result.states,
            "seconds": round(result.seconds, 3), "scenarios_per_second": round(len(result.tried) / result.seconds, 2)}


def find(protocol: str) -> dict[str, Any]:
    start = time.perf_counter()
    return _found(protocol, fuzz(protocol, seed=0, scenarios=FIND_SCENARIOS, do_shrink=False), start)


def engine_find() -> Optional[dict[str, Any]]:
    """The time to find the actual engine's bug (the in-flight cancel,
    specs/engine/fork-cancel-in-flight.toml) from seed 0; None without torch."""
    from cowcheck.enginetest import missing
    if missing() is not None:
        return None
    start = time.perf_counter()
    result = fuzz(engine_test=True, seed=0, scenarios=ENGINE_FIND_SCENARIOS, do_shrink=False)
    return _found(result.subject, result, start)


def _found(label: str, result: Any, start: float) -> dict[str, Any]:
    first = min((f.drawn.index for f in result.findings.values()), default=None)
    return {"protocol": label, "kind": result.kind, "found": sorted(result.findings), "scenario": first,
            "tried": len(result.tried), "states": result.states, "seconds": round(time.perf_counter() - start, 3)}


def run_fuzz_benchmarks(console: Console, as_json: bool) -> dict[str, Any]:
    rates = [rate(kind) for kind in RATE_PROTOCOLS]
    engine = engine_rate()
    if engine is not None:
        rates.append(engine)
    elif not as_json:
        console.print("  engine: skipped (no torch and transformers here)", style="dim")
    finds = []
    for protocol in bug_protocols():
        finds.append(find(protocol))
        if not as_json:
            console.print(f"  {protocol}: {finds[-1]['seconds']} s", style="dim")
    engine_found = engine_find()
    if engine_found is not None:
        finds.append(engine_found)
    report = {"format": FORMAT, "rates": rates, "finds": finds}
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return report
    table = Table(title=f"cowcheck bench --fuzz: scenarios per second (python {sys.version.split()[0]})", title_justify="left")
    for col in ("kind", "protocol", "scenarios", "states", "seconds", "scenarios/s"):
        table.add_column(col, justify="left" if col in ("kind", "protocol") else "right")
    for r in rates:
        table.add_row(r["kind"], r["protocol"], str(r["scenarios"]), f"{r['states']:,}", f"{r['seconds']:.2f}",
                      f"{r['scenarios_per_second']:.1f}")
    console.print(table)
    table = Table(title=f"time to find each shipped bug protocol's violation from seed 0 (at most {FIND_SCENARIOS} scenarios)",
                  title_justify="left")
    for col in ("protocol", "kind", "scenario", "seconds", "broken"):
        table.add_column(col, justify="right" if col in ("scenario", "seconds") else "left")
    for r in finds:
        table.add_row(r["protocol"], r["kind"], "not found" if r["scenario"] is None else str(r["scenario"]),
                      f"{r['seconds']:.2f}", ", ".join(r["found"]))
    console.print(table)
    return report
