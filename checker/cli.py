"""The `cowcheck` command line."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import builtin_names, load_builtin, read_toml
from cowcheck.model.scenario import DEVICES, REUSES, Scenario, load_scenario

from . import api, atomic, interrupts, output
from . import invariants as invs
from .narrate import explain as explain_trace
from .output import write_result
from .pages_cli import register, write_check_pages
from .rerun import judging
from .report import overview, show, show_pool
from .results import FORMAT, Result, Summary

# Wide enough for the verdict table when the output is a file or a pipe.
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)


def fail(error: SpecError) -> None:
    """Bad input: one line, exit status 2, never a traceback."""
    click.echo(f"cowcheck: error: {error}", err=True)
    sys.exit(2)


def _writable(path: Optional[str], flag: str) -> None:
    """Refuse an output file that cannot be written before a long run, not after it."""
    if not path or path == "-":
        return
    target = Path(path)
    if not target.parent.resolve().is_dir():
        raise SpecError(flag, "", f"cannot write {path}: folder {target.parent} does not exist")
    if target.is_dir():
        raise SpecError(flag, "", f"cannot write {path}: it is a folder")
    if not os.access(target.parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise SpecError(flag, "", f"cannot write {path}: permission denied")


def _writable_folder(folder: Path, flag: str) -> None:
    """An output folder must be one, or creatable, and writable."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(flag, "", f"cannot write into {folder}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(flag, "", f"cannot write into {folder}: permission denied")


def scenario_files(paths: tuple[str, ...]) -> list[Path]:
    """Scenario files named on the command line, or found in folders. In a
    folder, TOML files with an [append] table are protocols and those with a
    [grid] table are grids (cowcheck sweep); both are skipped."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for candidate in sorted(path.rglob("*.toml")):
                data = read_toml(candidate)
                if "append" not in data and "grid" not in data:
                    out.append(candidate)
        elif path.exists():
            if path.suffix == ".toml" and "append" in read_toml(path):
                raise SpecError(str(path), "append", "this is a protocol file; pass a scenario, or apply it with --protocol")
            out.append(path)
        else:
            raise SpecError(str(path), "", "file not found")
    if not out:
        raise SpecError(", ".join(paths), "", "no scenario files found")
    return out


class Progress:
    """A progress line that appears once a run takes longer than a second."""

    def __init__(self, name: str):
        self.name = name
        self.start = time.perf_counter()
        self.live: Optional[Live] = None

    def __call__(self, explorer, queued: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < 1.0:
            return
        states = explorer.count
        line = (f"[bold]{escape(self.name)}[/]: {states:,} states, {explorer.result.transitions:,} transitions, "
                f"depth {explorer.result.depth}, {queued:,} queued, {states / elapsed:,.0f} states/s, "
                f"{len(explorer.result.violations)} invariant(s) broken so far")
        if self.live is None:
            self.live = Live(line, console=err_console, transient=True, refresh_per_second=4)
            self.live.start()
        else:
            self.live.update(line)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """cowcheck: model checking for the copy-on-write block ownership
    protocols of LLM inference engines."""


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--device", type=click.Choice(DEVICES), help="Override every scenario's device model.")
@click.option("--reuse", type=click.Choice(REUSES), help="Override every scenario's free-list order.")
@click.option("--protocol", "protocol", metavar="NAME|FILE", help="Override every scenario's protocol.")
@click.option("--allocator", "allocator", metavar="MODULE:FACTORY|FILE.py:FACTORY",
              help="Check allocator code through the engine harness instead of each scenario's protocol.")
@click.option("--invariant", "invariant_ids", multiple=True, metavar="ID", help="Check only this invariant (repeatable).")
@click.option("--first", is_flag=True, help="Stop at the first violation.")
@click.option("--max-states", type=click.IntRange(min=1), help="Stop after this many distinct states (partial result).")
@click.option("--max-depth", type=click.IntRange(min=0), help="Explore traces of at most this many actions (partial result).")
@click.option("--max-memory", "max_memory", type=click.IntRange(min=0), metavar="MIB",
              help="Stop once the process holds this many MiB (partial result) [default: the memory available "
                   "at the start, less a fifth; 0: no bound].")
@click.option("--engine", type=click.Choice(["explicit", "bmc", "kind"]), default="explicit", show_default=True,
              help="explicit: breadth-first exploration (exhaustive, every measure); bmc: z3 bounded model checking "
                   "(shortest bugs in deep scenarios); kind: z3 k-induction (proofs).")
@click.option("--depth", type=click.IntRange(min=0), default=20, show_default=True,
              help="Bound for --engine bmc|kind: actions per run.")
@click.option("--symmetry/--no-symmetry", default=True, show_default=True,
              help="Store each orbit of interchangeable branches and renamed blocks once.")
@click.option("--por/--no-por", default=False, show_default=True,
              help="Partial-order reduction: explore a branch's local step on private blocks alone (exhaustive "
                   "runs only; violations are re-searched without it for true shortest lengths).")
@click.option("--compact", is_flag=True, help="Keep visited states as fixed-width byte encodings (exact, smaller).")
@click.option("--fingerprints", is_flag=True, help="Keep 64-bit fingerprints of visited states instead of the states.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the results as JSON to this file ('-' for stdout).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Where counterexample files are written [default: counterexamples, or counterexamples/overrides "
                   "with --protocol, --device or --reuse].")
@click.option("--html", "html_dir", type=click.Path(file_okay=False),
              help="Also write one stepper page per counterexample and an index.html into this folder.")
def check(paths, device, reuse, protocol, allocator, invariant_ids, first, max_states, max_depth, max_memory, engine, depth, symmetry,
          por, compact, fingerprints, json_path, out_dir, html_dir) -> None:
    """Explore every reachable state of each scenario (files or folders) and
    judge every invariant. Exit 0 when every scenario meets its `expect`,
    1 when one does not, 2 on bad input, 130 when interrupted (143 on
    SIGTERM). With an override (--protocol, --device, --reuse) the files'
    `expect` no longer applies: exit 1 only when a scenario is unsafe."""
    overridden = bool(protocol or device or reuse or allocator)
    out_dir = Path(out_dir or (OVERRIDE_OUT if overridden else DEFAULT_OUT))
    try:
        selected = invs.select(invariant_ids)
        override = api.resolve_protocol(protocol) if protocol else None
        scenarios: list[Scenario] = []
        for path in scenario_files(paths):
            scenario = api.with_overrides(load_scenario(path), override, device, reuse, allocator)
            invs.validate_expect(scenario, scenario.allocator is not None)
            scenarios.append(scenario)
        output.refuse_collisions(scenarios, out_dir)
        _writable(json_path, "--json")
        _writable_folder(out_dir, "--out")
        if html_dir:
            _writable_folder(Path(html_dir), "--html")
    except SpecError as error:
        fail(error)
    out = console if json_path != "-" else err_console
    results: list[Result] = []
    interrupted = False
    refused: Optional[OSError] = None
    try:
        for scenario in scenarios:
            progress = Progress(scenario.name)
            try:
                result = api.check(scenario, engine=engine, invariants=selected, depth=depth, max_states=max_states,
                                   max_depth=max_depth, first=first, symmetry=symmetry, por=por, compact=compact,
                                   fingerprints=fingerprints, progress=progress, max_memory_mib=max_memory)
            finally:
                progress.close()
            results.append(result)
            if refused is None:
                try:
                    write_result(result, out_dir)
                except OSError as error:      # the folder refused a file after all: the results still come
                    refused = error
            show(result, out)
            if result.interrupted:
                interrupted = True
                break
    except KeyboardInterrupt:
        interrupted = True
    except SpecError as error:
        fail(error)
    try:
        status = _finish(results, out, json_path, html_dir, overridden, interrupted)
    except OSError as error:
        refused = refused or error
    if refused is not None:
        fail(SpecError(refused.filename or str(out_dir), "", f"cannot write ({refused.strerror or refused})"))
    sys.exit(status)


DEFAULT_OUT, OVERRIDE_OUT = Path("counterexamples"), Path("counterexamples") / "overrides"


def emit_json(data: Any, json_path: str) -> None:
    """--json: to stdout for '-', else written atomically."""
    payload = json.dumps(data, indent=2)
    if json_path == "-":
        click.echo(payload)
    else:
        atomic.write_text(Path(json_path), payload + "\n")


def _finish(results: list[Result], out: Console, json_path: Optional[str], html_dir: Optional[str],
            overridden: bool, interrupted: bool) -> int:
    """The closing summary and the JSON and HTML of what was checked, with
    further interrupts held off until they are written. Returns the exit status."""
    from .__main__ import interrupt_status
    with interrupts.held():     # a further Ctrl-C waits until the results are written whole
        by_summary = Counter(r.summary for r in results)
        tally = ", ".join(f"{by_summary[s]} {s}" for s in Summary)
        if len(results) > 1:
            overview(results, out)
        if interrupted:
            out.print(f"[bold yellow]interrupted[/]: {len(results)} scenario(s) checked before it, partial results above")
        if overridden:
            out.print(f"[bold]{len(results)} scenario(s) checked[/] under the override: {tally} "
                      "[dim](the files' expect does not apply to an override)[/]")
        else:
            unmet = [r for r in results if not r.expect_met]
            out.print(f"[bold]{len(results)} scenario(s) checked[/], {len(results) - len(unmet)} met their expect"
                      + (f"; [bold red]not met: {escape(', '.join(r.scenario.name for r in unmet))}[/]" if unmet else "")
                      + f" [dim]({tally})[/]")
        if html_dir:
            write_check_pages(results, Path(html_dir))
        if json_path:
            emit_json([r.to_json() for r in results], json_path)
    if interrupted:
        return interrupt_status()
    if overridden:
        return 1 if any(r.summary is Summary.UNSAFE for r in results) else 0
    return 1 if any(not r.expect_met for r in results) else 0


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), help="Refuse the file unless it was made for this scenario.")
@click.option("--pool", type=click.Choice(("numpy", "cupy", "none")), default="numpy", show_default=True,
              help="Also replay the trace on a real KV pool (cupy: on a GPU), or not at all.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def replay(file, scenario_path, pool, as_json) -> None:
    """Re-apply a counterexample's actions to the model and confirm the same
    violation at the same step; then replay it on a real KV pool and show
    each kernel's output next to the reference. Exit 0 when both agree with
    the file, 1 when not (saying where)."""
    try:
        cx = api.load_counterexample(file, scenario_path)
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


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def explain(file) -> None:
    """Narrate a counterexample step by step."""
    try:
        cx = api.load_counterexample(file)
        inv = judging(cx)
        result = api.replay(cx, pool="none").model
    except SpecError as error:
        fail(error)
    if not result.ok and result.step is not None and result.step < len(result.transitions):
        console.print(f"[bold red]warning[/]: {escape(result.message)}")
    explain_trace(cx, result, console, holds_when=inv.holds_when if inv else None)
    sys.exit(0 if result.ok else 1)


@main.command(name="list")
def list_() -> None:
    """The built-in protocols and the invariants."""
    protocols = Table(title="built-in protocols (specs/protocols)", title_justify="left", box=None, show_header=False)
    protocols.add_column(style="bold", no_wrap=True)
    protocols.add_column()
    for name in builtin_names():
        description = " ".join(load_builtin(name).description.split())
        protocols.add_row(name, description.split(". ")[0].rstrip(".") + ".")
    console.print(protocols)
    console.print()
    table = Table(title="invariants", title_justify="left", box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    for inv in invs.INVARIANTS + (invs.ALLOCATOR_ERROR,):
        table.add_row(inv.id, inv.kind, inv.holds_when + (" (allocator code only)" if inv is invs.ALLOCATOR_ERROR else ""))
    console.print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--counterexamples", "folder", default="counterexamples", show_default=True, type=click.Path(file_okay=False),
              help="Whose files the replay line replays.")
@click.option("--full", is_flag=True, help="Also run the slow ones: 4x2 unreduced (3.3 million states) and 5x2.")
@click.option("--branches", is_flag=True, help="Instead: symmetry as branches grow (cow B=4 L=6, 2-8 x 1 and 2-6 x 2 appends).")
@click.option("--profile", is_flag=True, help="Instead: where the time goes per state (successors, invariants, canonical form, storage).")
@click.option("--floor", is_flag=True, help="Instead: 6x1 and 5x2 as they are and with the canonical form looked up "
              "in a table the first run recorded (what a free canonical form would leave).")
@click.option("--limit", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a --branches, --profile or --floor row may search; then it stops and reports what it explored.")
def bench(as_json, folder, full, branches, profile, floor, limit) -> None:
    """Measure exploration and replay speed on fixed benchmarks, with and
    without reductions, and z3 BMC's time to a shortest violation next to
    the explorer's."""
    from .bench import run_benchmarks, run_branches, run_floor, run_profile
    try:
        if branches or profile or floor:
            if branches:
                run_branches(console, as_json, limit)
            if profile:
                run_profile(console, as_json, limit)
            if floor:
                run_floor(console, as_json, limit)
            return
        run_benchmarks(console, as_json, folder, full)
    except SpecError as error:
        fail(error)


register(main)  # html, graph, lab (cowcheck.pages_cli)
__import__("cowcheck.sweep_cli").sweep_cli.register(main)  # sweep, shrink (cowcheck.sweep_cli)


def run() -> None:
    """The `cowcheck` command: click's usage errors (an unknown option, a
    value out of range) and unusable paths (an output under a file, a folder
    without write permission) become one line and exit status 2, like every
    other kind of bad input. Output that the terminal's encoding cannot
    show (a unicode name on an ASCII terminal) is escaped, not a crash."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        main.main(standalone_mode=False)
    except click.exceptions.Exit as done:  # --help, or a command's own exit
        sys.exit(done.exit_code)
    except click.UsageError as error:
        where = error.ctx.command_path if error.ctx else "cowcheck"
        click.echo(f"{where}: error: {error.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"cowcheck: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):   # Ctrl-C or SIGTERM in a command with nothing to save
        from .__main__ import interrupt_status
        sys.exit(interrupt_status())
    except OSError as error:   # a path given on the command line that cannot be written or read
        where = f"{error.filename}: " if error.filename else ""
        click.echo(f"cowcheck: error: {where}{error.strerror or error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
