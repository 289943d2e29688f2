"""`replay`, `explain` and `html` of an engine-test counterexample (kind
"engine", cowcheck.enginetest.trace): each command hands such a file here
before it reads it as a check's trace. Reading and drawing it needs
neither torch nor transformers; replaying it does, and without them says
so in one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import click

from cowcheck import atomic
from cowcheck.cli.common import fail
from cowcheck.engines.results import FORMAT
from cowcheck.enginetest import missing
from cowcheck.enginetest.trace import EngineTrace, is_engine_trace, load, narrate
from cowcheck.model.errors import SpecError


def engine_trace(file: str) -> Optional[EngineTrace]:
    """The engine trace in FILE, None when FILE is not one (bad input: exit 2)."""
    if not is_engine_trace(Path(file)):
        return None
    try:
        return load(Path(file))
    except SpecError as error:
        fail(error)
        raise


def replay(file: str, trace: EngineTrace, scenario_path: Optional[str], as_json: bool) -> None:
    """Run the trace's schedule again in the engine: exit 0 when the same
    invariant breaks at the same step, 1 when not, 2 without the extra."""
    if scenario_path is not None:
        from cowcheck.enginetest.scenario import load as load_scenario
        try:
            theirs = load_scenario(Path(scenario_path))
        except SpecError as error:
            fail(error)
        if theirs.to_toml_data() != trace.scenario.to_toml_data():
            fail(SpecError(file, "scenario", f"this counterexample is for another scenario than {scenario_path}"))
    why = missing()
    if why is not None:
        click.echo(f"cowcheck: error: replaying {file} in the engine: {why}", err=True)
        sys.exit(2)
    from cowcheck.enginetest.trace import replay as rerun
    done = rerun(trace)
    if done.other_release:
        click.echo(f"other engine: the file was found in {trace.release_line()}; this replay runs {done.other_release}", err=True)
    if as_json:
        click.echo(json.dumps({"format": FORMAT, "file": file, "ok": done.ok, "step": trace.step, "message": done.message,
                               "pool_message": None, "invariant": trace.invariant, "length": trace.data["length"], "pool": None},
                              indent=2))
    else:
        click.echo(f"{'replays' if done.ok else 'DOES NOT REPLAY'} in the engine: {file}: {done.message}")
    sys.exit(0 if done.ok else 1)


def explain(trace: EngineTrace) -> None:
    for line in narrate(trace):
        click.echo(line)
    sys.exit(0)


def html(file: str, trace: EngineTrace, output: Optional[str]) -> None:
    from cowcheck.enginetest.page import engine_page
    out = Path(output) if output else Path(Path(file).stem + ".html")
    atomic.write_text(out, engine_page(trace))
    click.echo(f"wrote {out} ({len(trace.data['steps'])} engine steps)")
