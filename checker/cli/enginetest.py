"""`cowcheck engine-test`: engine scenarios (specs/engine/) run in the real
engine, every schedule (cowcheck.enginetest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click

from cowcheck import api
from cowcheck.cli.common import emit_json, fail
from cowcheck.enginetest import missing
from cowcheck.enginetest.scenario import load
from cowcheck.model.errors import SpecError


@click.command("engine-test")
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the results as JSON to this file ('-' for stdout), in the shape of check --json's (engine \"engine-test\").")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="counterexamples/engine", show_default=True,
              help="Where each broken invariant's shortest schedule is written, as SCENARIO.INVARIANT.json "
                   "(a counterexample file of kind engine, which explain, html and replay read).")
@click.option("--max-schedules", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Run at most this many schedules per scenario (shortest first).")
def engine_test(scenarios: tuple[str, ...], json_path: Optional[str], out_dir: str, max_schedules: int) -> None:
    """Run each engine scenario in transformers' continuous batching on the
    CPU, every schedule of its submissions and cancels, and judge every
    invariant from a shadow of the KV slots. Exit 0 when every scenario
    meets its `expect` (or, without one, breaks nothing), 1 when one does
    not, 2 on bad input or without torch and transformers."""
    why = missing()
    if why is not None:
        click.echo(f"cowcheck: error: {why}", err=True)
        sys.exit(2)
    try:
        loaded = [load(Path(p)) for p in scenarios]
    except SpecError as error:
        fail(error)
    from cowcheck.enginetest.explore import write_counterexamples
    results, ok = [], True
    rows = []
    for sc in loaded:
        result = api.engine_test(sc, max_schedules=max_schedules)
        results.append(result)
        broken = sorted(result.violated())
        meets = result.meets_expect()
        good = meets if meets is not None else not broken
        ok &= bool(good)
        bound = f" (bound: {result.schedules} of {result.total})" if result.bounded else ""
        click.echo(f"{sc.name}: {result.schedules} schedules, {result.distinct} distinct{bound}, {result.seconds:.1f} s; "
                   f"{'violates ' + ', '.join(broken) if broken else 'every invariant holds'}"
                   + ("" if meets is None else ("; meets expect" if meets else "; DOES NOT meet expect")))
        for v in result.verdicts:
            if not v.holds and v.schedule is not None:
                click.echo(f"  {v.invariant}: step {v.step}, schedule [{'; '.join(v.schedule.events()) or 'no choices'}]: {v.detail}")
        rows.append(result.to_json(write_counterexamples(result, Path(out_dir))))
    if results:
        click.echo(results[0].release.line())
    if json_path:
        emit_json(rows, json_path)
    sys.exit(0 if ok else 1)
