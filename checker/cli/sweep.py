"""`cowcheck sweep` and `cowcheck shrink` (docs/how-to/sweeps.md,
docs/how-to/shrinking.md): the progress bars and terminal summaries around
cowcheck.sweeps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click
from rich.console import Console
from rich.markup import escape as markup
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cowcheck import api, interrupts
from cowcheck.cli.common import console, emit_json, err_console, fail, writable_file, writable_folder
from cowcheck.engines.invariants import BY_ID
from cowcheck.model.errors import SpecError
from cowcheck.sweeps.page import write_sweep_pages
from cowcheck.views import fit
from cowcheck.views.fit import Column
from cowcheck.sweeps.shrink import DEFAULT_BUDGET, DEFAULT_MAX_CANDIDATES, Shrunk, write_shrunk
from cowcheck.sweeps.cells import FAILED, INVALID, PARTIAL, Cell, size_key
from cowcheck.sweeps.grid import check_size, expand, grid_files, load_grid
from cowcheck.sweeps.runner import NO_WORKERS_SECONDS, NoWorkers, Runner
from cowcheck.sweeps.sweep import Sweep, sweep as run_sweep

#: the exit status of a run the cluster left unfinished (no worker left)
INCOMPLETE_STATUS = 3
VERDICT_STYLE = {"unsafe": "bold red", "safe but undisciplined": "yellow", "safe and disciplined": "green",
                 PARTIAL: "dim", INVALID: "bold magenta", FAILED: "bold magenta", "not run": "dim"}



class SweepProgress:
    """A rich progress bar, from the start: first the cells being made
    (`made`, a big grid takes a while), then the cells checked, violating,
    and the time left."""

    def __init__(self, console: Console, total: int):
        self.bar = Progress(TextColumn("[bold]sweep[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("cells {task.fields[phase]}"),
                            TextColumn("[red]{task.fields[violating]}[/] violating"), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(), console=console, transient=False)
        self.task = self.bar.add_task("cells", total=total, violating=0, phase="made")
        self.violating = 0
        self.bar.start()

    def made(self, count: int) -> None:
        self.bar.update(self.task, completed=count)

    def checking(self, total: int) -> None:
        """The cells are made: from now on the bar counts those checked."""
        self.bar.reset(self.task, total=total, violating=0, phase="checked")

    def __call__(self, result: Sweep, cell: Cell) -> None:
        if cell.broken():
            self.violating += 1
        self.bar.update(self.task, advance=1, violating=self.violating)

    def close(self) -> None:
        self.bar.stop()


_NO_WORKERS_OPTION = click.option(
    "--no-workers-timeout", "no_workers", type=click.FloatRange(min=0, min_open=True), default=NO_WORKERS_SECONDS,
    show_default=True, metavar="SECONDS",
    help="Stop (exit 3, with what finished) when the cluster has had no worker for this long.")


def _reached(runner: Runner, needed: int) -> Runner:
    """The runner, connected first when it runs on an existing cluster
    (--scheduler): one that cannot be reached is its one error line, with no
    progress bar drawn before it."""
    if runner.scheduler is not None:
        try:
            runner.connect(needed)
        except SpecError as error:
            fail(error)
    return runner


def _close(runner: Runner) -> bool:
    """Close the runner (its cluster); False when a Ctrl-C came while it
    closed (interrupts.held keeps it until the cluster is down, then
    delivers it)."""
    try:
        runner.close()
    except KeyboardInterrupt:
        return False
    return True


#: above this many cells the per-cell table is left out unless asked for (--per-cell)
PER_CELL_MAX = 200
#: the summary's tables: their columns, and the columns by worth (the last left out first where the console is narrow)
PER_INVARIANT = (Column("invariant", name=True), Column("kind"), Column("cells", "right"), Column("smallest cell", name=True),
                 Column("shortest there", "right"))
PER_INVARIANT_WORTH = ("invariant", "smallest cell", "shortest there", "cells", "kind")
PER_CELL = (Column("#", "right"), Column("cell", name=True), Column("verdict"),
            Column("broken (shortest)", shortens_below=20), Column("states", "right"), Column("s", "right"))
PER_CELL_WORTH = ("cell", "verdict", "broken (shortest)", "#", "states", "s")
#: where the columns a narrow console leaves out are kept
KEPT = "--json and --html keep them"


def show_summary(result: Sweep, out: Console, per_cell: Optional[bool] = None) -> None:
    """The per-invariant table, the per-cell table and the counts. The
    per-cell table is left out, with a line that says so, when `per_cell`
    is False (--summary) or, by default, above PER_CELL_MAX cells."""
    per = result.by_invariant()
    if per:
        rows = [[inv, str(BY_ID[inv].kind), str(count), markup(cell.name), str(cell.broken()[inv])]
                for inv, (count, cell) in per.items()]
        fit.show(out, "per invariant: cells that break it, and the smallest of them", PER_INVARIANT, rows, PER_INVARIANT_WORTH,
                 KEPT)
    else:
        out.print("no invariant breaks in any cell")
    if per_cell is None:
        per_cell = len(result.cells) <= PER_CELL_MAX
        why = f"{len(result.cells):,} cells, more than {PER_CELL_MAX:,}"
    else:
        why = "--summary"
    if per_cell:
        _per_cell(result, out)
    else:
        out.print(f"per-cell table left out ({why}): --per-cell prints it; --json and --html keep every cell")
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


def _per_cell(result: Sweep, out: Console) -> None:
    rows = []
    for c in result.cells:
        d = c.data or {}
        broken = ", ".join(f"{k} ({v})" for k, v in c.broken().items())
        detail = broken or (d.get("error") or (f"stopped: {d.get('stopped')}" if d.get("stopped") else ""))
        states = f"{d['states']:,}" if "states" in d else ""
        rows.append([str(c.index), markup(c.name), f"[{VERDICT_STYLE[c.verdict]}]{c.verdict}[/]"
                     + (" [dim](resumed)[/]" if c.resumed else ""), markup(detail), states,
                     f"{d['seconds']:.2f}" if "seconds" in d else ""])
    fit.show(out, "per cell", PER_CELL, rows, PER_CELL_WORTH, KEPT)


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
@click.option("--summary", "per_cell", flag_value=False, default=None,
              help=f"Print the per-invariant table and the counts, not the per-cell table (left out by default above {PER_CELL_MAX} cells).")
@click.option("--per-cell", "per_cell", flag_value=True, help="Print the per-cell table however many cells there are.")
@_NO_WORKERS_OPTION
def sweep(paths, workers, scheduler, json_path, html_path, out_dir, do_shrink, shrink_out, per_cell, no_workers) -> None:
    """Check every cell of a grid of scenarios (grid files, or folders of
    them) as tasks on Dask, with a progress bar; then a summary per
    invariant and per cell. Exit 0 when no cell is unsafe, 1 when one is
    (or a task failed), 2 on bad input (an invalid cell included, after
    the others ran), 3 when the cluster was left with no worker (what
    finished is written), 130 when interrupted (143 on SIGTERM)."""
    err = err_console
    try:
        grids = [load_grid(p) for p in grid_files(paths)]
        writable_file(json_path, "--json")
        writable_file(html_path, "--html")
        if out_dir is None and html_path:
            out_dir = str(Path(html_path).with_suffix(""))
        if out_dir:
            writable_folder(Path(out_dir), "--out")
        if do_shrink:
            writable_folder(Path(shrink_out), "--shrink-out")
        if scheduler is not None and workers is not None:
            raise SpecError("--scheduler", "", "--workers is for the embedded cluster; with --scheduler the cluster's own workers run the cells")
    except SpecError as error:
        fail(error)
    try:
        err.print(f"{sum(g.size for g in grids):,} cell(s) in {len(grids)} grid(s)")   # first, before any is made
        total = check_size(grids)
    except SpecError as error:
        fail(error)
    runner = _reached(Runner(workers, scheduler, no_workers_seconds=no_workers), total)
    progress = SweepProgress(err, total)      # from the start: making a big grid's cells takes a while too
    result: Optional[Sweep] = None
    try:
        try:
            cells = expand(grids, made=progress.made)
            for c in cells:
                if c.error:
                    err.print(f"cowcheck: error: {grids[0].source if len(grids) == 1 else c.grid}: cell {c.index} ({c.name}): {c.error}",
                              markup=False, highlight=False, soft_wrap=True)
            progress.checking(len(cells))
            result = run_sweep(grids, runner=runner, json_path=json_path, out=out_dir, progress=progress, cells=cells)
        finally:
            progress.close()
        shrunk = _shrink_cells(result, runner, Path(shrink_out), console) if do_shrink and not result.interrupted else []
    except SpecError as error:
        _close(runner)
        fail(error)
    except KeyboardInterrupt:
        if result is None:
            _close(runner)
            raise
        result.interrupted = True
        shrunk = []
    finally:
        if not _close(runner) and result is not None:
            result.interrupted = True
    assert result is not None
    sys.exit(_finish(result, json_path, html_path, out_dir, shrunk, per_cell))



def _finish(result: Sweep, json_path: Optional[str], html_path: Optional[str], out_dir: Optional[str],
            shrunk: list[Shrunk], per_cell: Optional[bool] = None) -> int:
    out = console
    with interrupts.held():
        show_summary(result, out, per_cell)
        if result.stopped:
            out.print(f"[bold yellow]incomplete[/]: {markup(result.stopped)}")
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
        return interrupts.exit_status()
    if result.stopped:
        return INCOMPLETE_STATUS
    if any(c.verdict == INVALID for c in result.cells):
        return 2
    return 1 if any(c.verdict in ("unsafe", FAILED) for c in result.cells) else 0



def _shrink_cells(result: Sweep, runner: Runner, out_dir: Path, out: Console) -> list[Shrunk]:
    """Per (protocol, invariant) broken in the sweep: shrink its smallest cell."""
    from cowcheck.sweeps.shrink import shrink
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
        shrunk.original_length = cell.broken()[inv]       # the cell's own shortest, for the shrunk file's description
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
@_NO_WORKERS_OPTION
def shrink(file, out_dir, workers, scheduler, max_states, seconds, max_candidates, json_path, no_workers) -> None:
    """Find the smallest scenario on which a counterexample's invariant
    still breaks (docs/how-to/shrinking.md) and write it (TOML) with its shortest
    counterexample. Exit 0 when found (smaller or not), 1 when the
    candidate limit stopped the search, 2 on bad input, 3 when the
    cluster was left with no worker, 130 when interrupted."""
    from cowcheck.sweeps.shrink import shrink as run_shrink
    try:
        cx = api.load_counterexample(file)
        from cowcheck.sweeps.shrink import _start
        _start(cx, None)          # a peak trace, or an invariant of no built-in id: bad input before anything starts
        writable_folder(Path(out_dir), "--out")
        writable_file(json_path, "--json")
        if scheduler is not None and workers is not None:
            raise SpecError("--scheduler", "", "--workers is for the embedded cluster; with --scheduler the cluster's own workers run the cells")
    except SpecError as error:
        fail(error)
    runner = _reached(Runner(workers, scheduler, no_workers_seconds=no_workers), 1)
    bar = Progress(TextColumn("[bold]shrink[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("candidates"),
                   TimeElapsedColumn(), console=err_console, transient=True)
    task = bar.add_task("candidates", total=None)
    bar.start()
    result: Optional[Shrunk] = None
    try:
        result = run_shrink(cx, workers=workers, scheduler=scheduler, budget={"max_states": max_states, "seconds": seconds},
                            max_candidates=max_candidates, runner=runner,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))
    except SpecError as error:
        bar.stop()
        _close(runner)
        fail(error)
    except KeyboardInterrupt:
        result = None         # interrupted: nothing to write
    except NoWorkers as lost:
        bar.stop()
        _close(runner)
        click.echo(f"cowcheck: incomplete: {lost}: nothing written", err=True)
        sys.exit(INCOMPLETE_STATUS)
    bar.stop()
    if not _close(runner) or result is None:
        click.echo("interrupted: nothing written", err=True)
        sys.exit(interrupts.exit_status())
    with interrupts.held():
        try:
            write_shrunk(result, Path(out_dir))
        except SpecError as error:     # the file was not one cowcheck can load: removed, said in one line
            fail(error)
        out = console if json_path != "-" else err_console
        if result.counterexample is None:
            out.print(f"[bold yellow]gave up[/] after {result.tried} candidate(s) (--max-candidates {max_candidates}): none broke "
                      f"{result.invariant}; the original stays the smallest known")
        else:
            _show_shrunk(result, out)
        if json_path:
            emit_json(result.to_json(), json_path)
    sys.exit(0 if result.counterexample is not None else 1)

