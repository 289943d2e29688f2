"""`cowcheck replay` and `cowcheck explain`: a counterexample file read back,
re-applied to the model (and replayed on a real KV pool), or narrated."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape

from cowcheck import api
from cowcheck.cli import enginetraces
from cowcheck.cli.common import console, fail, say_engine_folder
from cowcheck.engines.results import FORMAT
from cowcheck.model.errors import SpecError
from cowcheck.traces.replay import judging
from cowcheck.views.report import show_pool
from cowcheck.views.explain import explain as explain_trace


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), help="Refuse the file unless it was made for this scenario.")
@click.option("--pool", type=click.Choice(("numpy", "cupy", "none")), default="numpy", show_default=True,
              help="Also replay the trace on a real KV pool (cupy: on a GPU), or not at all.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay(file, scenario_path, pool, as_json) -> None:
    """Re-apply a counterexample's actions to the model and confirm the same
    violation at the same step; then replay it on a real KV pool and show
    each kernel's output next to the reference. Exit 0 when both agree with
    the file, 1 when not (saying where). An engine test's counterexample
    reruns its schedule in the engine (torch and transformers needed)."""
    engine = enginetraces.engine_trace(file)
    if engine is not None:
        enginetraces.replay(file, engine, scenario_path, as_json)
    try:
        cx = api.load_counterexample(file, scenario_path)
        say_engine_folder(cx)
        replayed = api.replay(cx, pool=pool)
    except SpecError as error:
        fail(error)
    result, on_pool, pool_message, ok = replayed.model, replayed.pool, replayed.pool_message, replayed.ok
    if as_json:
        click.echo(json.dumps({"format": FORMAT, "file": file, "ok": ok, "step": result.step, "message": result.message,
                               "pool_message": pool_message, "invariant": cx.invariant, "length": cx.length,
                               "pool": on_pool.to_json() if on_pool else None}, indent=2))
    else:
        colour = "green" if result.ok else "bold red"
        console.print(f"[{colour}]{'replays' if result.ok else 'DOES NOT REPLAY'}[/] in the model: {escape(file)}: {escape(result.message)}")
        if on_pool is not None:
            show_pool(on_pool, console)
        if pool_message:
            console.print(f"[bold red]{'pool' if on_pool is None else 'pool and model disagree'}[/]: {escape(pool_message)}")
    sys.exit(0 if ok else 1)



@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
def explain(file) -> None:
    """Narrate a counterexample step by step."""
    engine = enginetraces.engine_trace(file)
    if engine is not None:
        enginetraces.explain(engine)
    try:
        cx = api.load_counterexample(file)
        say_engine_folder(cx)
        inv = judging(cx)
        result = api.replay(cx, pool="none").model
    except SpecError as error:
        fail(error)
    if result.other_code is not None:
        console.print(f"[bold yellow]other code[/]: {escape(result.other_code)}")
    if not result.ok and result.step is not None and result.step < len(result.transitions):
        console.print(f"[bold red]warning[/]: {escape(result.message)}")
    explain_trace(cx, result, console, holds_when=inv.holds_when if inv else None)
    sys.exit(0 if result.ok else 1)

