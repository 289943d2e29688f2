"""`cowcheck fuzz` (docs/how-to/fuzz.md): the progress bar and the terminal
report around cowcheck.fuzzing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click
from rich.markup import escape as markup
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from cowcheck import interrupts
from cowcheck.cli.common import console, emit_json, err_console, fail, writable_file, writable_folder
from cowcheck.cli.sweep import _NO_WORKERS_OPTION, INCOMPLETE_STATUS, _close, _reached
from cowcheck.fuzzing.generators import KINDS, Knobs
from cowcheck.fuzzing.engine import DEFAULT_MAX_SCHEDULES, judged as engine_judged
from cowcheck.fuzzing.run import (DEFAULT_CHECK_BUDGET, DEFAULT_SCENARIOS, Fuzz, engine_subject, fuzz as run_fuzz, subject_kind,
                                  write_fuzz)
from cowcheck.model.errors import SpecError
from cowcheck.sweeps.runner import Runner
from cowcheck.views import fit
from cowcheck.views.fit import Column

FINDINGS = (Column("invariant", name=True), Column("kind"), Column("scenarios", "right"), Column("first", "right"),
            Column("length", "right"), Column("shrunk to", name=True), Column("shrunk length", "right"))
FINDINGS_WORTH = ("invariant", "shrunk to", "shrunk length", "first", "length", "kind", "scenarios")


@click.command()
@click.option("--protocol", "protocol", metavar="NAME|FILE", help="The protocol to fuzz (a built-in name or a protocol file).")
@click.option("--allocator", "allocator", metavar="MODULE:FACTORY|FILE.py:FACTORY",
              help="Allocator code to fuzz through the engine harness instead.")
@click.option("--scheduler-code", "scheduler_code", metavar="MODULE:FACTORY|FILE.py:FACTORY",
              help="Scheduler code to fuzz through the scheduler harness instead (`check --scheduler`; here --scheduler "
                   "is the Dask scheduler's address, as in sweep).")
@click.option("--engine-test", "engine_test", is_flag=True,
              help="Fuzz the actual engine instead (`cowcheck engine-test`: transformers' continuous batching on the CPU; "
                   "needs torch and transformers, on each worker too): engine scenarios, each explored within --max-schedules.")
@click.option("--kind", type=click.Choice(KINDS),
              help="The scenarios to draw [default: the protocol's own kind: transfer where it launches transfers, cache "
                   "where only a cache scenario runs it, else fork; for allocator code, cache where it answers admit, else fork; "
                   "for scheduler code, transfer].")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="The same seed draws the same scenarios.")
@click.option("--scenarios", "scenarios", type=click.IntRange(min=1), metavar="N",
              help=f"Draw at most N scenarios [default: {DEFAULT_SCENARIOS}, or no bound with --seconds].")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), help="Stop drawing after this many seconds.")
@click.option("--keep-going", is_flag=True, help="Go on past the first violation, to the end of the budget.")
@click.option("--max-states", type=click.IntRange(min=1), default=DEFAULT_CHECK_BUDGET["max_states"], show_default=True,
              help="Each scenario's check stops after this many distinct states (undecided).")
@click.option("--check-seconds", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_CHECK_BUDGET["seconds"],
              show_default=True, help="Each scenario's check stops after this many seconds (undecided).")
@click.option("--max-schedules", type=click.IntRange(min=1), default=DEFAULT_MAX_SCHEDULES, show_default=True,
              help="With --engine-test: each scenario's exploration runs at most this many schedules (shortest first).")
@click.option("--invariant", "invariant_ids", multiple=True, metavar="ID", help="Judge only this invariant (repeatable).")
@click.option("--skip", "skip_ids", multiple=True, metavar="ID",
              help="Judge every invariant but this one (repeatable): an engine's known findings, to look past them.")
@click.option("--device", "devices", multiple=True, type=click.Choice(Knobs().devices),
              help="Draw only this device model (repeatable) [default: all].")
@click.option("--max-branches", type=click.IntRange(min=1, max=8), default=Knobs().max_branches, show_default=True,
              help="Branches (roots and children) or requests per scenario, at most.")
@click.option("--max-ops", type=click.IntRange(min=0, max=8), default=Knobs().max_ops, show_default=True,
              help="Operations per branch program, at most.")
@click.option("--no-cancels", is_flag=True, help="Draw no may_cancel branch.")
@click.option("--no-speculation", is_flag=True,
              help="Draw no `speculate K` (for code without speculative decoding; scheduler code never gets one).")
@click.option("--no-faults", is_flag=True, help="Draw no failing transfer.")
@click.option("--no-leases", is_flag=True, help="Draw no lease on a P/D producer's blocks.")
@click.option("--max-host-pool", type=click.IntRange(min=0, max=8), default=Knobs().max_host_pool, show_default=True,
              help="Host blocks of a transfer scenario, at most; 0 draws P/D roles only.")
@click.option("--no-shrink", is_flag=True, help="Write the drawn scenarios as found, unshrunk.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="counterexamples/fuzz", show_default=True,
              help="Where each finding's drawn scenario, its shrunk scenario and their counterexamples are written.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the report as JSON to this file ('-' for stdout).")
@click.option("--workers", type=click.IntRange(min=0), metavar="N", default=None,
              help="Worker processes of an embedded Dask LocalCluster; 0 (the default without --scheduler) checks serially in this process.")
@click.option("--scheduler", metavar="tcp://HOST:PORT", help="Run on an existing Dask cluster instead.")
@_NO_WORKERS_OPTION
def fuzz(protocol, allocator, scheduler_code, engine_test, kind, seed, scenarios, seconds, keep_going, max_states, check_seconds,
         max_schedules, invariant_ids, skip_ids, devices, max_branches, max_ops, no_cancels, no_speculation, no_faults, no_leases, max_host_pool, no_shrink,
         out_dir, json_path, workers, scheduler, no_workers) -> None:
    """Draw random scenarios for a protocol, allocator code, scheduler
    code or the actual engine (--engine-test), check each exhaustively within a budget, stop at the first
    violation (or go on, --keep-going), shrink the first scenario that
    broke each invariant to the smallest that still breaks it, and write
    both with their counterexamples. Exit 0 when nothing unsafe was found, 1 when a harm
    invariant broke, 2 on bad input, 3 when the cluster was left with no
    worker (what was found is written), 130 when interrupted (143 on
    SIGTERM; what was found is written, unshrunk)."""
    try:
        if scheduler is not None and workers is not None:
            raise SpecError("--scheduler", "", "--workers is for the embedded cluster; with --scheduler the cluster's own workers check the scenarios")
        if engine_test:                                                # bad input before anything starts
            engine_subject(protocol, allocator, scheduler_code, kind, here=scheduler is None)
        else:
            subject_kind(protocol, allocator, kind, scheduler_code)
        writable_folder(Path(out_dir), "--out")
        writable_file(json_path, "--json")
        knobs = Knobs(max_branches=max_branches, max_ops=max_ops, cancels=not no_cancels, speculation=not no_speculation,
                      max_host_pool=max_host_pool, faults=() if no_faults else Knobs().faults, leases=not no_leases, devices=tuple(dict.fromkeys(devices)) if devices else Knobs().devices)
        from cowcheck.engines.invariants import select
        for ident in (*invariant_ids, *skip_ids):
            select((ident,), "--skip" if ident in skip_ids else "--invariant")
        if engine_test:
            engine_judged(tuple(invariant_ids) or None, tuple(skip_ids))
    except SpecError as error:
        fail(error)
    runner = _reached(Runner(0 if workers is None and scheduler is None else workers, scheduler, no_workers_seconds=no_workers), 8)
    out = console if json_path != "-" else err_console
    bar = Progress(TextColumn("[bold]fuzz[/]"), TextColumn("{task.fields[tried]} scenarios, {task.fields[states]:,} states,"),
                   TextColumn("[red]{task.fields[found]}[/] invariant(s) broken"), BarColumn(), TimeElapsedColumn(),
                   console=err_console, transient=True)
    task = bar.add_task("fuzz", total=scenarios or None, tried=0, states=0, found=0)
    bar.start()
    result: Optional[Fuzz] = None
    try:
        result = run_fuzz(protocol, allocator=allocator, scheduler_code=scheduler_code, kind=kind, seed=seed,
                          scenarios=scenarios if scenarios or seconds else DEFAULT_SCENARIOS, seconds=seconds,
                          check_budget={"max_schedules": max_schedules} if engine_test else {"max_states": max_states, "seconds": check_seconds},
                          keep_going=keep_going, knobs=knobs, engine_test=engine_test,
                          invariants=tuple(invariant_ids) or None, skip=tuple(skip_ids), do_shrink=not no_shrink, runner=runner,
                          progress=lambda r: bar.update(task, completed=len(r.tried), tried=len(r.tried), states=r.states,
                                                        found=len(r.findings)))
    except SpecError as error:
        bar.stop()
        _close(runner)
        fail(error)
    finally:
        bar.stop()
    assert result is not None
    if not _close(runner):
        result.interrupted = True
    sys.exit(_finish(result, Path(out_dir), json_path, out))


def _finish(result: Fuzz, out_dir: Path, json_path: Optional[str], out) -> int:
    """Write what was found (whole, a further Ctrl-C held off), report it,
    and return the exit status."""
    with interrupts.held():
        try:
            write_fuzz(result, out_dir)
        except SpecError as error:
            fail(error)
        show(result, out)
        if json_path:
            emit_json(result.to_json(), json_path)
    if result.interrupted:
        return interrupts.exit_status()
    if result.stopped:
        return INCOMPLETE_STATUS
    return 1 if result.unsafe else 0


def show(result: Fuzz, out) -> None:
    """The findings table and the closing counts."""
    if result.findings:
        rows = []
        for f in result.findings.values():
            shrunk, length = f.shrunk_to()
            rows.append([f.invariant, f.kind, str(f.scenarios), str(f.drawn.index), str(f.length), markup(shrunk), length])
        fit.show(out, "per invariant: the first scenario that broke it (by index) and its shrunk form", FINDINGS, rows,
                 FINDINGS_WORTH, "--json keeps them")
        for f in result.findings.values():
            out.print(f"  [dim]{markup(f.invariant)}: wrote {markup(', '.join(f.files))}[/]")
    else:
        out.print("no invariant broke in any scenario drawn")
    undecided = sum(not t.complete for t in result.tried)
    where = f"scheduler {result.scheduler}" if result.scheduler else ("serially" if result.workers == 0 else f"{result.workers} worker process(es)")
    out.print(f"[bold]{len(result.tried)} {result.kind} scenario(s)[/] for {markup(result.subject)} from seed {result.seed} "
              f"(generator version {result.generator}): {result.states:,} {'schedules' if result.kind == 'engine' else 'states'}, {sum(bool(t.broken) for t in result.tried)} "
              f"violating, {undecided} undecided within the budget [dim]({result.seconds:.1f} s, {where})[/]")
    if result.stopped:
        out.print(f"[bold yellow]incomplete[/]: {markup(result.stopped)}")
    if result.interrupted:
        out.print("[bold yellow]interrupted[/]: what was found is written, unshrunk")
