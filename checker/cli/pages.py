"""`cowcheck html`, `graph` and `lab`: the pages and pictures of a
counterexample, and the cache lab."""

from __future__ import annotations

from pathlib import Path

import click

from cowcheck import atomic
from cowcheck.cli import enginetraces
from cowcheck.cli.common import fail, say_engine_folder, writable_file
from cowcheck.model.errors import SpecError
from cowcheck.views.graph import FORMATS, render
from cowcheck.views.html import stepper_html
from cowcheck.views.lab import MAX_REQUESTS, lab_html, report, run
from cowcheck.views.pages import decoded_on_pool, load_for_page


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="The page to write (default: FILE's name with .html, in the current folder).")
@click.option("--pool", type=click.Choice(("numpy", "none")), default="numpy", show_default=True,
              help="Also replay the trace on a real KV pool and show each kernel's decoded token, or not.")
def html(file, output, pool) -> None:
    """Write a self-contained HTML page that steps through a counterexample
    (an engine test's: the engine's own tables at every step)."""
    out = Path(output) if output else Path(Path(file).stem + ".html")
    try:
        writable_file(str(out), "--output")
    except SpecError as error:
        fail(error)
    engine = enginetraces.engine_trace(file)
    if engine is not None:
        enginetraces.html(file, engine, output)
        return
    try:
        cx, data = load_for_page(Path(file))
    except SpecError as error:
        fail(error)
    say_engine_folder(cx)
    atomic.write_text(out, stepper_html(data, None if pool == "none" else decoded_on_pool(cx)))
    click.echo(f"wrote {out} ({cx.length} steps)")


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--step", "step", type=int, help="The step to draw (0: the initial state; default: the last, where the invariant breaks).")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help=f"The picture to write: {', '.join(FORMATS)} (PNG needs a Chromium browser).")
def graph(file, step, output) -> None:
    """Draw the block graph at one step of a counterexample: branches, blocks
    with their refcounts, working and published table edges, copies and
    kernels in flight."""
    try:
        writable_file(output, "--output")
        cx, data = load_for_page(Path(file))
        out = render(data, cx.length if step is None else step, Path(output))
    except SpecError as error:
        fail(error)
    say_engine_folder(cx)
    click.echo(f"wrote {out}")


@click.command()
@click.option("--capacity", "-C", default=4, show_default=True, type=click.IntRange(1, MAX_REQUESTS), help="Cache capacity C.")
@click.option("--stride", "-s", default=2, show_default=True, type=click.IntRange(0, MAX_REQUESTS), help="Request stride s.")
@click.option("--time", "-t", "time_", default=0.0, show_default=True, type=click.FloatRange(min=0), help="Seconds of play t.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), metavar="OUT.html",
              help="Write the interactive lab (starting from C and s) instead of printing a run.")
def lab(capacity, stride, time_, html_path) -> None:
    """The cache lab: an LRU cache of capacity C fed requests (k * s) mod 16;
    after t seconds N = min(4096, 16 + floor(2t)) requests are served."""
    if html_path:
        try:
            writable_file(html_path, "--html")
        except SpecError as error:
            fail(error)
        atomic.write_text(Path(html_path), lab_html(capacity, stride))
        click.echo(f"wrote {html_path}")
        return
    click.echo(report(run(capacity, stride, time_)))

