"""`cowcheck diff`: what changed between two runs of `cowcheck check`
(cowcheck.traces.comparison), shown as a table (cowcheck.views.comparison)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cowcheck.cli.common import console, emit_json, err_console, fail, writable_file
from cowcheck.model.errors import SpecError
from cowcheck.traces.comparison import compare, read_run
from cowcheck.views.comparison import show_comparison


@click.command()
@click.argument("before")
@click.argument("after")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the comparison as JSON to this file ('-' for stdout).")
def diff(before: str, after: str, json_path: str | None) -> None:
    """Compare two runs of `cowcheck check`: BEFORE and AFTER are each its
    --json file or its folder of counterexamples. Per scenario, each
    invariant whose verdict or shortest length changed, and the peak if it
    changed. Exit 0 when nothing got worse, 1 when something did (an
    invariant that did not break now breaks, or breaks sooner; a scenario
    of BEFORE is missing from AFTER), 2 on bad input."""
    try:
        writable_file(json_path, "--json")
        comparison = compare(read_run(Path(before)), read_run(Path(after)))
    except SpecError as error:
        fail(error)
    show_comparison(comparison, console if json_path != "-" else err_console)
    if json_path:
        emit_json(comparison.to_json(), json_path)
    sys.exit(1 if comparison.worse else 0)
