"""The commands that make pages and pictures: `cowcheck html`, `graph` and
`lab`, and `write_check_pages` for `cowcheck check --html DIR`.

checker/cli.py wires them in with `register(main)`; they live apart so the
page code can change without touching the checker's own commands."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cowcheck.model.errors import SpecError

from . import atomic, trace
from .executor import replay_on_pool
from .rerun import Replayed, load_replayed
from .graph import FORMATS, render
from .html import index_html, stepper_html
from .lab import MAX_REQUESTS, lab_html, report, run


def _fail(error: SpecError) -> None:
    # Imported here: cowcheck.cli imports this module to register the commands.
    from .cli import fail
    fail(error)


def load_counterexample(path: Path) -> tuple[trace.Counterexample, dict]:
    """A counterexample file and the JSON the pages are drawn from.

    The pages read every recorded state, so they are drawn from what the
    model makes of the file's actions, not from the file: a file that does
    not replay is bad input (load_replayed), and one that does gives exactly
    its own JSON back."""
    cx, replayed = load_replayed(path)
    return cx, page_data(cx, replayed)


def page_data(cx: trace.Counterexample, replayed: Replayed) -> dict:
    """The JSON a page is drawn from: the model's replay of the trace."""
    drawn = trace.Counterexample.from_run(cx.scenario, replayed.states[0],
                                          [(t.action, t.state) for t in replayed.transitions],
                                          invariant=cx.invariant, invariant_kind=cx.invariant_kind,
                                          witness=replayed.witness, peak=cx.peak)
    drawn.origin = cx.origin       # where it was checked from, not where the file was read
    return json.loads(json.dumps(drawn.to_json()))     # tuples as lists, as in the file


def decoded_on_pool(cx: trace.Counterexample) -> dict:
    """The trace replayed by the concrete executor on a numpy KV pool, in the
    form of stepper_html's `decoded` hook: {step: {branch, pos, decoded,
    expected, diverged, max_diff}} for every kernel (and check-output that
    found a wrong position)."""
    replayed = replay_on_pool(cx.scenario, cx.actions, "numpy", initial=cx.initial)
    return {k.step: {"branch": k.branch, "pos": k.pos if k.position is None else k.position, "kind": k.kind,
                     "decoded": k.decoded, "expected": k.expected, "diverged": k.diverged, "max_diff": round(k.max_diff, 4)}
            for k in replayed.kernels if k.decoded is not None}


def _pages_for(result) -> list[str]:
    """The counterexample files one check result wrote (peak trace included)."""
    paths = [v.path for v in result.verdicts.values() if v.path]
    return paths + ([result.peak_path] if getattr(result, "peak_path", None) else [])


def write_check_pages(results: list, out_dir: Path) -> list[Path]:
    """For one `cowcheck check` run (a list of cowcheck.results.Result):
    one stepper page per counterexample file, named after it, and index.html
    with each scenario's verdict table linking to them. Returns the pages,
    the index last."""
    out_dir.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    written: list[Path] = []
    for result in results:
        for path in _pages_for(result):
            target = out_dir / (Path(path).stem + ".html")
            cx, data = load_counterexample(Path(path))
            atomic.write_text(target, stepper_html(data, decoded_on_pool(cx)))
            links[path] = target.name
            written.append(target)
    index = out_dir / "index.html"
    atomic.write_text(index, index_html([r.to_json() for r in results], links))
    return written + [index]


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help="The page to write (default: FILE's name with .html, in the current folder).")
@click.option("--pool", type=click.Choice(("numpy", "none")), default="numpy", show_default=True,
              help="Also replay the trace on a real KV pool and show each kernel's decoded token, or not.")
def html(file, output, pool) -> None:
    """Write a self-contained HTML page that steps through a counterexample."""
    try:
        cx, data = load_counterexample(Path(file))
    except SpecError as error:
        _fail(error)
    out = Path(output) if output else Path(Path(file).stem + ".html")
    out.parent.mkdir(parents=True, exist_ok=True)
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
        cx, data = load_counterexample(Path(file))
        out = render(data, cx.length if step is None else step, Path(output))
    except SpecError as error:
        _fail(error)
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
        Path(html_path).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(Path(html_path), lab_html(capacity, stride))
        click.echo(f"wrote {html_path}")
        return
    click.echo(report(run(capacity, stride, time_)))


COMMANDS = (html, graph, lab)


def register(main: click.Group) -> None:
    """Add the page commands to the `cowcheck` group (once)."""
    for command in COMMANDS:
        if command.name not in main.commands:
            main.add_command(command)
