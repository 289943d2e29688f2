"""`cowcheck sweep` and `cowcheck shrink` (README "Sweeps", "Shrinking"),
and the sweep's HTML page. checker/cli.py adds the commands with
`register(main)`."""

from __future__ import annotations

import json
import sys
from html import escape
from pathlib import Path
from typing import Any, Optional

import click
from rich.console import Console
from rich.markup import escape as markup
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cowcheck.model.errors import SpecError

from . import atomic, interrupts
from .shrinking import DEFAULT_BUDGET, DEFAULT_MAX_CANDIDATES, Shrunk, write_shrunk
from .sweeps import FAILED, INVALID, PARTIAL, Cell, Runner, Sweep, branch_texts, grid_files, load_grid, size_key, sweep as run_sweep

VERDICT_TAG = {"unsafe": ("UNSAFE", "unsafe"), "safe but undisciplined": ("UNDISCIPLINED", "undisciplined"),
               "safe and disciplined": ("SAFE", "safe"), PARTIAL: ("PARTIAL", "partial"),
               INVALID: ("INVALID", "invalid"), FAILED: ("FAILED", "invalid"), "not run": ("NOT RUN", "notrun")}
VERDICT_STYLE = {"unsafe": "bold red", "safe but undisciplined": "yellow", "safe and disciplined": "green",
                 PARTIAL: "dim", INVALID: "bold magenta", FAILED: "bold magenta", "not run": "dim"}


def _cli() -> Any:
    from . import cli       # imported here: cowcheck.cli imports this module to register the commands
    return cli


def _fail(error: SpecError) -> None:
    _cli().fail(error)


class SweepProgress:
    """A rich progress bar: cells done, cells violating, time left."""

    def __init__(self, console: Console, total: int):
        self.bar = Progress(TextColumn("[bold]sweep[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                            TextColumn("[red]{task.fields[violating]}[/] violating"), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(), console=console, transient=False)
        self.task = self.bar.add_task("cells", total=total, violating=0)
        self.violating = 0
        self.bar.start()

    def __call__(self, result: Sweep, cell: Cell) -> None:
        if cell.broken():
            self.violating += 1
        self.bar.update(self.task, advance=1, violating=self.violating)

    def close(self) -> None:
        self.bar.stop()


def show_summary(result: Sweep, out: Console) -> None:
    from .invariants import BY_ID
    table = Table(title="per invariant: cells that break it, and the smallest of them", title_justify="left",
                  show_edge=False, pad_edge=False)
    for col in ("invariant", "kind", "cells", "smallest cell", "shortest there"):
        table.add_column(col, justify="right" if col in ("cells", "shortest there") else "left")
    per = result.by_invariant()
    for inv, (count, cell) in per.items():
        table.add_row(inv, str(BY_ID[inv].kind), str(count), markup(cell.name), str(cell.broken()[inv]))
    if per:
        out.print(table)
    else:
        out.print("no invariant breaks in any cell")
    cells = Table(title="per cell", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("#", "cell", "verdict", "broken (shortest)", "states", "s"):
        cells.add_column(col, justify="right" if col in ("#", "states", "s") else "left", overflow="fold")
    for c in result.cells:
        d = c.data or {}
        broken = ", ".join(f"{k} ({v})" for k, v in c.broken().items())
        detail = broken or (d.get("error") or (f"stopped: {d.get('stopped')}" if d.get("stopped") else ""))
        states = f"{d['states']:,}" if "states" in d else ""
        cells.add_row(str(c.index), markup(c.name), f"[{VERDICT_STYLE[c.verdict]}]{c.verdict}[/]"
                      + (" [dim](resumed)[/]" if c.resumed else ""), markup(detail), states,
                      f"{d['seconds']:.2f}" if "seconds" in d else "")
    out.print(cells)
    counts: dict[str, int] = {}
    for c in result.cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    where = f"scheduler {result.scheduler}" if result.scheduler else \
        ("serially" if result.workers == 0 else f"{result.workers} worker process(es)")
    ran = sum(1 for c in result.cells if c.done and not c.resumed)
    out.print(f"[bold]{len(result.cells)} cell(s)[/]: {tally} [dim]({ran} checked in {result.seconds:.1f} s, {where}"
              + (f", {sum(1 for c in result.cells if c.resumed)} resumed" if any(c.resumed for c in result.cells) else "")
              + ")[/]")


# -- the HTML page --------------------------------------------------------------------------
SWEEP_CSS = """
.grid { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.85rem; }
.grid th, .grid td { border: 1px solid var(--line); padding: 0.2rem 0.35rem; vertical-align: top; }
.grid thead th { background: var(--panel); font-weight: normal; }
.grid th[scope=row] { text-align: left; white-space: nowrap; background: var(--panel); }
.scroll { overflow-x: auto; }
td.v-unsafe { background: #fbe3e6; } td.v-undisciplined { background: #fdf0d9; }
td.v-safe { background: #e3f4e8; } td.v-partial, td.v-notrun { background: var(--hatch); }
td.v-invalid { background: #efe3f7; }
.v-unsafe .tag { color: var(--bad); } .v-undisciplined .tag { color: var(--warn); }
.v-safe .tag { color: var(--good); } .v-invalid .tag { color: #5b2180; }
.broken { display: block; color: var(--muted); font-size: 0.75rem; }
"""
ROW_AXES = ("protocol", "allocator", "device", "reuse")
COLUMN_AXES = ("block_size", "prompt", "branches", "appends", "program", "may_cancel", "pool")


def _column_label(c: dict[str, Any]) -> str:
    if c.get("program") is not None:
        what = escape(branch_texts(c))
    else:
        what = f"{c['branches']} br × " + (str(c["appends"]) if isinstance(c["appends"], int) else "+".join(map(str, c["appends"])))
    label = f"B={c['block_size']} L={c['prompt']}<br>{what}"
    if c["may_cancel"]:
        label += f"<br>{c['may_cancel']} may cancel"
    if c["pool"] != "default":
        label += f"<br>pool {c['pool']}"
    return label


def sweep_html(result: Sweep, links: dict[int, str]) -> str:
    """The grid as a table: a row per (grid, protocol, device, reuse), a
    column per the other coordinates; each cell labelled with its verdict
    (and coloured by it), the invariants it breaks, and a link to the
    stepper page of its shortest counterexample (LINKS: cell index -> page)."""
    from .html import page
    rows: dict[tuple[Any, ...], dict[tuple[Any, ...], Cell]] = {}
    columns: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in result.cells:
        r = (c.grid,) + tuple(c.coordinates.get(a) for a in ROW_AXES)
        k = tuple(json.dumps(c.coordinates.get(a)) for a in COLUMN_AXES)
        columns.setdefault(k, c.coordinates)
        rows.setdefault(r, {})[k] = c
    head = "".join(f'<th scope="col">{_column_label(columns[k])}</th>' for k in columns)
    body = []
    for r, row in rows.items():
        tds = []
        for k in columns:
            found = row.get(k)
            if found is None:
                tds.append('<td class="v-notrun">—</td>')
                continue
            c = found
            label, css = VERDICT_TAG[c.verdict]
            tag = f'<span class="tag">{label}</span>'
            if c.index in links:
                tag = f'<a href="{escape(links[c.index])}" title="{escape(c.name)}: the shortest counterexample, step by step">{tag}</a>'
            broken = ", ".join(f"{escape(i)} ({n})" for i, n in c.broken().items())
            detail = broken or escape((c.data or {}).get("error") or "")
            tds.append(f'<td class="v-{css}" title="{escape(c.name)}">{tag}<span class="broken">{detail}</span></td>')
        name = " · ".join(escape(str(v)) for v in r[1:] if v is not None) + (f" <small>({escape(r[0])})</small>" if len(result.grids) > 1 else "")
        body.append(f'<tr><th scope="row">{name}</th>{"".join(tds)}</tr>')
    per = result.by_invariant()
    from .invariants import BY_ID
    inv_rows = "".join(f"<tr><td>{escape(i)}</td><td>{escape(str(BY_ID[i].kind))}</td><td>{n}</td><td>{escape(c.name)}</td>"
                       f"<td>{c.broken()[i]}</td></tr>" for i, (n, c) in per.items())
    counts: dict[str, int] = {}
    for c in result.cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    grids = ", ".join(escape(g.name) for g in result.grids)
    legend = " ".join(f'<span class="v-{css}"><span class="tag">{label}</span></span>' for label, css in
                      (VERDICT_TAG[v] for v in ("unsafe", "safe but undisciplined", "safe and disciplined", PARTIAL, INVALID)))
    html_body = f"""<header>
<h1>cowcheck sweep <span class="sub">{grids}: {len(result.cells)} cell(s), {', '.join(f'{n} {escape(v)}' for v, n in counts.items())}</span></h1>
<p class="description">{' '.join(escape(g.description) for g in result.grids)}</p>
<p class="legend">Each cell is labelled with its verdict (the colour repeats the label): {legend}.
UNSAFE: a harm invariant breaks; UNDISCIPLINED: only discipline invariants break; SAFE: nothing breaks;
PARTIAL: a budget stopped the check before anything broke; INVALID: the coordinates make no valid scenario.
Under each label, the invariants the cell breaks with their shortest lengths; the label links to the shortest
counterexample's stepper page.</p>
</header>
<main>
<style>{SWEEP_CSS}</style>
<section class="panel"><h2>Per invariant</h2>
<table class="grid"><thead><tr><th scope="col">invariant</th><th scope="col">kind</th><th scope="col">cells</th>
<th scope="col">smallest cell</th><th scope="col">shortest there</th></tr></thead><tbody>{inv_rows}</tbody></table></section>
<section><h2>The grid</h2><div class="scroll">
<table class="grid"><thead><tr><th scope="col">protocol · device · reuse</th>{head}</tr></thead>
<tbody>{''.join(body)}</tbody></table></div></section>
</main>"""
    return page("cowcheck sweep", html_body, styles=("base.css",))


def write_sweep_pages(result: Sweep, html_path: Path, pages_dir: Path, skipped: Optional[list[str]] = None) -> dict[int, str]:
    """A stepper page per violating cell (its shortest violation; harm
    first on a tie, then the invariants' order), then the grid page.
    Returns cell index -> page link (relative to the grid page). A
    resumed cell's file that no longer replays (written by an older
    cowcheck) gets no page; why goes to `skipped`."""
    from .html import stepper_html
    from .invariants import IDS
    from .pages_cli import decoded_on_pool, load_counterexample
    links: dict[int, str] = {}
    for c in result.cells:
        broken = c.broken()
        if not broken or not c.data:
            continue
        verdicts = c.data["verdicts"]
        inv = min(broken, key=lambda i: (broken[i], verdicts[i]["kind"] != "harm", IDS.index(i) if i in IDS else 99))
        path = verdicts[inv].get("counterexample")
        if not path or not Path(path).is_file():
            continue
        target = pages_dir / (Path(path).stem + ".html")
        try:
            cx, data = load_counterexample(Path(path))
        except SpecError as err:
            if skipped is not None:
                skipped.append(str(err))
            continue
        atomic.write_text(target, stepper_html(data, decoded_on_pool(cx)))
        links[c.index] = target.relative_to(html_path.parent).as_posix() if target.is_relative_to(html_path.parent) \
            else target.resolve().as_uri()
    atomic.write_text(html_path, sweep_html(result, links))
    return links


def _sweep_json(result: Sweep) -> str:
    return json.dumps(result.to_json(), indent=1)


# -- the commands ---------------------------------------------------------------------------------
@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--workers", type=click.IntRange(min=0), metavar="N",
              help="Worker processes of an embedded Dask LocalCluster [default: the machine's cores]; 0 runs the cells serially in this process.")
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="Run on an existing Dask cluster instead.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write every cell's result to this file; rerunning with the same file skips the cells already done.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Write the grid as a page, with each violating cell's counterexample and stepper page in a folder next to it.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Where the cells' counterexample files go [default: next to --html (FILE's name without .html), else none].")
@click.option("--shrink", "do_shrink", is_flag=True, help="Then shrink, per protocol and invariant, the smallest cell that breaks it.")
@click.option("--shrink-out", type=click.Path(file_okay=False), default="counterexamples/shrunk", show_default=True,
              help="Where --shrink writes its scenarios and counterexamples.")
def sweep(paths, workers, scheduler, json_path, html_path, out_dir, do_shrink, shrink_out) -> None:
    """Check every cell of a grid of scenarios (grid files, or folders of
    them) as tasks on Dask, with a progress bar; then a summary per
    invariant and per cell. Exit 0 when no cell is unsafe, 1 when one is
    (or a task failed), 2 on bad input (an invalid cell included, after
    the others ran), 130 when interrupted (143 on SIGTERM)."""
    cli = _cli()
    err = cli.err_console
    try:
        grids = [load_grid(p) for p in grid_files(paths)]
        cli._writable(json_path, "--json")
        cli._writable(html_path, "--html")
        if out_dir is None and html_path:
            out_dir = str(Path(html_path).with_suffix(""))
        if out_dir:
            cli._writable_folder(Path(out_dir), "--out")
        if do_shrink:
            cli._writable_folder(Path(shrink_out), "--shrink-out")
        if scheduler is not None and workers is not None:
            raise SpecError("--scheduler", "", "--workers is for the embedded cluster; with --scheduler the cluster's own workers run the cells")
    except SpecError as error:
        _fail(error)
    from .sweeps import expand
    try:
        cells = expand(grids)
    except SpecError as error:
        _fail(error)
    for c in cells:
        if c.error:
            click.echo(f"cowcheck: error: {grids[0].source if len(grids) == 1 else c.grid}: cell {c.index} ({c.name}): {c.error}", err=True)
    runner = Runner(workers, scheduler)
    progress = SweepProgress(err, len(cells))
    result: Optional[Sweep] = None
    try:
        try:
            result = run_sweep(grids, runner=runner, json_path=json_path, out=out_dir, progress=progress)
        finally:
            progress.close()
        shrunk = _shrink_cells(result, runner, Path(shrink_out), cli.console) if do_shrink and not result.interrupted else []
    except SpecError as error:
        runner.close()
        _fail(error)
    except KeyboardInterrupt:
        if result is None:
            runner.close()
            raise
        result.interrupted = True
        shrunk = []
    finally:
        runner.close()
    assert result is not None
    sys.exit(_finish(result, json_path, html_path, out_dir, shrunk))


def _finish(result: Sweep, json_path: Optional[str], html_path: Optional[str], out_dir: Optional[str],
            shrunk: list[Shrunk]) -> int:
    from .__main__ import interrupt_status
    cli = _cli()
    out = cli.console
    with interrupts.held():
        show_summary(result, out)
        if result.interrupted:
            out.print(f"[bold yellow]interrupted[/]: {sum(1 for c in result.cells if c.done)} of {len(result.cells)} cell(s) done"
                      + (f", written to {markup(json_path)}; rerun with the same --json to go on" if json_path else ""))
        if html_path:
            pages = Path(out_dir) if out_dir else Path(html_path).with_suffix("")
            skipped: list[str] = []
            links = write_sweep_pages(result, Path(html_path), pages, skipped)
            out.print(f"wrote {markup(html_path)} ({len(links)} counterexample page(s) in {markup(str(pages))})")
            if skipped:
                out.print(f"[yellow]{len(skipped)} page(s) not drawn[/]: {markup(skipped[0])} (delete the --json file to check those cells again)")
        if json_path:
            out.print(f"wrote {markup(json_path)}")
    if result.interrupted:
        return interrupt_status()
    if any(c.verdict == INVALID for c in result.cells):
        return 2
    return 1 if any(c.verdict in ("unsafe", FAILED) for c in result.cells) else 0


def _shrink_cells(result: Sweep, runner: Runner, out_dir: Path, out: Console) -> list[Shrunk]:
    """Per (protocol, invariant) broken in the sweep: shrink its smallest cell."""
    from .shrinking import shrink
    smallest: dict[tuple[str, str], Cell] = {}
    for c in result.cells:
        if c.scenario is None:
            continue
        for inv in c.broken():
            key = (c.scenario.subject, inv)
            best = smallest.get(key)
            if best is None or (size_key(c.scenario), c.index) < (size_key(best.scenario), best.index):  # type: ignore[arg-type]
                smallest[key] = c
    done = []
    for (protocol, inv), cell in sorted(smallest.items()):
        assert cell.scenario is not None
        shrunk = shrink(cell.scenario, inv, runner=runner)
        write_shrunk(shrunk, out_dir)
        _show_shrunk(shrunk, out)
        done.append(shrunk)
    return done


def _show_shrunk(s: Shrunk, out: Console) -> None:
    length = s.counterexample.length if s.counterexample else None
    verdict = "smaller" if s.smaller else "already the smallest"
    out.print(f"[bold]{markup(s.original.name)}[/] {s.invariant}: {verdict}: {markup(s.describe())}, "
              f"{length} actions (was {markup(s.describe(s.original))}"
              + (f", {s.original_length} actions" if s.original_length is not None else "") + ")")
    out.print(f"  [dim]{s.tried} candidate(s) checked in {s.seconds:.1f} s"
              + (f"; {len(s.undecided)} smaller candidate(s) undecided within the budget: the result is the smallest among the decided" if s.undecided else "")
              + (f"; wrote {markup(', '.join(s.paths))}" if s.paths else "") + "[/]")


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="counterexamples/shrunk", show_default=True,
              help="Where the smallest scenario (TOML) and its counterexample are written.")
@click.option("--workers", type=click.IntRange(min=0), metavar="N",
              help="Worker processes of an embedded Dask LocalCluster [default: the machine's cores]; 0: serially.")
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="Run on an existing Dask cluster instead.")
@click.option("--max-states", type=click.IntRange(min=1), default=DEFAULT_BUDGET["max_states"], show_default=True,
              help="Budget of each candidate's check.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_BUDGET["seconds"], show_default=True,
              help="Budget of each candidate's check.")
@click.option("--max-candidates", type=click.IntRange(min=1), default=DEFAULT_MAX_CANDIDATES, show_default=True,
              help="Give up after this many candidates.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write what was found as JSON ('-' for stdout).")
def shrink(file, out_dir, workers, scheduler, max_states, seconds, max_candidates, json_path) -> None:
    """Find the smallest scenario on which a counterexample's invariant
    still breaks (README "Shrinking") and write it (TOML) with its shortest
    counterexample. Exit 0 when found (smaller or not), 1 when the
    candidate limit stopped the search, 2 on bad input, 130 when
    interrupted."""
    from .__main__ import interrupt_status
    from .shrinking import shrink as run_shrink
    from . import api
    cli = _cli()
    try:
        cx = api.load_counterexample(file)
        from .shrinking import _start
        _start(cx, None)          # a peak trace, or an invariant of no built-in id: bad input before anything starts
        cli._writable_folder(Path(out_dir), "--out")
        cli._writable(json_path, "--json")
        if scheduler is not None and workers is not None:
            raise SpecError("--scheduler", "", "--workers is for the embedded cluster; with --scheduler the cluster's own workers run the cells")
    except SpecError as error:
        _fail(error)
    runner = Runner(workers, scheduler)
    bar = Progress(TextColumn("[bold]shrink[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("candidates"),
                   TimeElapsedColumn(), console=cli.err_console, transient=True)
    task = bar.add_task("candidates", total=None)
    bar.start()
    try:
        result = run_shrink(cx, workers=workers, scheduler=scheduler, budget={"max_states": max_states, "seconds": seconds},
                            max_candidates=max_candidates, runner=runner,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))
    except SpecError as error:
        bar.stop()
        runner.close()
        _fail(error)
    except KeyboardInterrupt:
        bar.stop()
        runner.close()
        click.echo("interrupted: nothing written", err=True)
        sys.exit(interrupt_status())
    bar.stop()
    runner.close()
    with interrupts.held():
        write_shrunk(result, Path(out_dir))
        out = cli.console if json_path != "-" else cli.err_console
        if result.counterexample is None:
            out.print(f"[bold yellow]gave up[/] after {result.tried} candidate(s) (--max-candidates {max_candidates}): none broke "
                      f"{result.invariant}; the original stays the smallest known")
        else:
            _show_shrunk(result, out)
        if json_path:
            cli.emit_json(result.to_json(), json_path)
    sys.exit(0 if result.counterexample is not None else 1)


COMMANDS = (sweep, shrink)


def register(main: click.Group) -> None:
    """Add `sweep` and `shrink` to the `cowcheck` group (once), and the
    `--sweep` option to `cowcheck bench` (README "Speed", "Sweeps")."""
    for command in COMMANDS:
        if command.name not in main.commands:
            main.add_command(command)
    bench = main.commands.get("bench")
    if bench is None or any(p.name == "sweep_bench" for p in bench.params) or bench.callback is None:
        return
    bench.params.append(click.Option(["--sweep", "sweep_bench"], is_flag=True,
                                     help="Measure sweeps instead: ~200 small cells serially and on 1 and 2 Dask "
                                          "workers (cells/s, speed-up), and the per-task overhead on trivial cells."))
    original = bench.callback

    def callback(*args: Any, sweep_bench: bool = False, **kwargs: Any) -> Any:
        if not sweep_bench:
            return original(*args, **kwargs)
        from .bench import run_sweep_benchmarks
        return run_sweep_benchmarks(_cli().console, kwargs.get("as_json", False))

    bench.callback = callback
