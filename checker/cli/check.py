"""`cowcheck check` (explore every scenario and judge every invariant) and
`cowcheck list` (the built-in protocols and the invariants)."""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from cowcheck import api, atomic, interrupts
from cowcheck.adapters import deadline
from cowcheck.cli.common import console, emit_json, err_console, fail, scenario_files, writable_file, writable_folder
from cowcheck.engines import invariants as invs
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import PARTIAL, Result, Summary
from cowcheck.model.errors import KindMismatch, SpecError
from cowcheck.model.protocol import builtin_names, load_builtin
from cowcheck.model.device import Device, Transfer
from cowcheck.model.scenario import DEVICES, REUSES, TRANSFERS, Scenario, load_scenario
from cowcheck.traces import output
from cowcheck.traces.output import write_result
from cowcheck.traces.pool import POOLS
from cowcheck.views.pages import write_check_pages
from cowcheck.views.junit import junit_xml
from cowcheck.views.report import overview, show, show_failing


class Progress:
    """A progress line that appears once a run takes longer than a second,
    and names the allocator call in progress (cowcheck.adapters.deadline):
    it is drawn again four times a second, so a call that does not return
    shows, growing, even before the explorer reports anything."""

    def __init__(self, name: str):
        self.name = name
        self.start = time.perf_counter()
        self.live: Optional[Live] = None
        self.explorer = None
        self.queued = 0
        self.closed = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(1.0, self._show)   # a first call that hangs shows too
        self.timer.daemon = True
        self.timer.start()

    def line(self) -> str:
        now = time.perf_counter()
        elapsed = now - self.start
        words = f"[bold]{escape(self.name)}[/]: "
        explorer = self.explorer
        if explorer is not None:
            states = explorer.count
            words += (f"{states:,} states, {explorer.result.transitions:,} transitions, "
                      f"depth {explorer.result.depth}, {self.queued:,} queued, {states / elapsed:,.0f} states/s, "
                      f"{len(explorer.result.violations)} invariant(s) broken so far")
            levels = getattr(explorer, "levels", None)      # the frontier engine: its frontier per depth
            if levels and len(levels) > 1:
                words += f"; frontier {levels[-1]:,} at depth {len(levels) - 1}, x{levels[-1] / max(levels[-2], 1):.2f} on the level before"
        else:
            words += f"starting, {elapsed:.0f} s"
        call = deadline.running()
        if call is not None:
            words += f"; calling {escape(call.describe(now))}"
        return words

    def __rich__(self) -> str:
        return self.line()

    def __call__(self, explorer, queued: int) -> None:
        self.explorer, self.queued = explorer, queued
        if time.perf_counter() - self.start >= 1.0:
            self._show()

    def _show(self) -> None:
        with self.lock:
            if self.live is None and not self.closed:
                live = Live(self, console=err_console, transient=True, refresh_per_second=4)
                try:
                    live.start()
                except (RuntimeError, MemoryError):
                    # no memory left for its refresh thread ("can't start new thread": a search that
                    # fills the address space): the run goes on without the line, and reports as it would
                    with contextlib.suppress(Exception):
                        live.stop()
                    self.closed = True
                    return
                self.live = live

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            self.closed = True
            if self.live is not None:
                self.live.stop()


#: the two kinds of scenario: branches forked from one prompt, and requests
#: with their own prompts through a prefix cache (cache = "prefix")
KINDS = ("fork", "cache")


def kind_of(scenario: Scenario) -> str:
    return "cache" if scenario.cache else "fork"


def engine_unavailable(scenario: Scenario) -> Optional[str]:
    """Why the engine a scenario's shipped scheduler adapter drives
    (`cowcheck.adapters.*`, whose module says in `unavailable()`) cannot be
    loaded here, or None: a folder's such scenarios are then skipped and
    counted, as where no vLLM sources were fetched."""
    ref = scenario.scheduler
    if ref is None or not ref.startswith("cowcheck.adapters."):
        return None
    why = getattr(importlib.import_module(ref.partition(":")[0]), "unavailable", None)
    return why() if callable(why) else None


class Skipped:
    """The scenarios a check passed over, counted per kind and reason, for
    its closing lines ("skipped 40 fork scenario(s): protocol 'vllm-v1' is
    a prefix-cache protocol")."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, kind: str, why: str) -> None:
        self.counts[kind, why] += 1

    def lines(self) -> list[str]:
        return [f"skipped {n} {kind} scenario(s): {why}" for (kind, why), n in self.counts.items()]


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--device", type=click.Choice(DEVICES), help=f"Override every scenario's device model ({Device.help()}).")
@click.option("--reuse", type=click.Choice(REUSES), help="Override every scenario's free-list order.")
@click.option("--transfer", type=click.Choice(TRANSFERS),
              help=f"Override every cache scenario's transfer model ({Transfer.help()}); a scenario without a cache "
                   "is skipped in a folder and bad input when named.")
@click.option("--protocol", "protocol", metavar="NAME|FILE", help="Override every scenario's protocol.")
@click.option("--allocator", "allocator", metavar="MODULE:FACTORY|FILE.py:FACTORY",
              help="Check allocator code through the engine harness instead of each scenario's protocol.")
@click.option("--scheduler", "scheduler", metavar="MODULE:FACTORY|FILE.py:FACTORY",
              help="Check scheduler code through the scheduler harness instead of each cache scenario's protocol "
                   "(docs/how-to/scheduler-code.md).")
@click.option("--kind", type=click.Choice(KINDS),
              help="Check only the fork scenarios or only the cache scenarios (cache = \"prefix\") of the paths; "
                   "the others are skipped and counted. Without it, a folder's scenarios that --protocol or "
                   "--allocator does not fit are skipped and counted too.")
@click.option("--invariant", "invariant_ids", multiple=True, metavar="ID", help="Check only this invariant (repeatable).")
@click.option("--first", is_flag=True, help="Stop at the first violation.")
@click.option("--max-states", type=click.IntRange(min=1), help="Stop after this many distinct states (partial result).")
@click.option("--max-depth", type=click.IntRange(min=0), help="Explore traces of at most this many actions (partial result).")
@click.option("--max-memory", "max_memory", type=click.IntRange(min=0), metavar="MIB",
              help="Stop once the process holds this many MiB (partial result) [default: the memory available "
                   "at the start, less a fifth; 0: no bound].")
@click.option("--call-deadline", "call_deadline", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Allocator code: stop the check once one adapter call has run this long, naming it "
                   "[default: the scenario's call_deadline, else 10; 0: no deadline].")
@click.option("--engine", type=click.Choice(["explicit", "frontier", "bmc", "kind"]), default=None,
              help="explicit: breadth-first exploration (exhaustive, every measure); frontier: the same search over "
                   "states as rows of integers, a level at a time (numpy or CuPy; symmetry and partial-order reduction "
                   "as rows, off with --no-symmetry and --no-por; protocol files it covers, others refused); bmc: z3 "
                   "bounded model checking (shortest bugs in deep scenarios); kind: z3 k-induction (proofs) [default: "
                   "explicit; frontier for a protocol file it covers with 5 branches or more, without --compact "
                   "or --fingerprints].")
@click.option("--array", type=click.Choice(POOLS), default="numpy", show_default=True,
              help="--engine frontier: the array module its rows live in (cupy: on a CUDA GPU).")
@click.option("--depth", type=click.IntRange(min=0), default=20, show_default=True,
              help="Bound for --engine bmc|kind: actions per run.")
@click.option("--symmetry/--no-symmetry", default=True, show_default=True,
              help="Store each orbit of interchangeable branches and renamed blocks once.")
@click.option("--por/--no-por", default=None,
              help="Partial-order reduction: explore a branch's local step on private blocks alone (exhaustive "
                   "runs only; violations are re-searched without it for true shortest lengths) [default: the "
                   "check chooses: with it up to the first violation where settled completions apply, then, if "
                   "one breaks, without it; every figure as without it].")
@click.option("--compact", is_flag=True, help="Keep visited states as fixed-width byte encodings (exact, smaller).")
@click.option("--fingerprints", is_flag=True, help="Keep 64-bit fingerprints of visited states instead of the states.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the results as JSON to this file ('-' for stdout).")
@click.option("--junit-xml", "junit_path", type=click.Path(dir_okay=False),
              help="Also write the results as JUnit XML to this file: a test case per scenario and per invariant.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Where counterexample files are written [default: counterexamples for the explorer's default run, "
                   "else counterexamples/overrides: with --protocol, --allocator, --device, --reuse, --transfer, --engine bmc|kind, "
                   "--invariant, --first, --max-states, --max-depth, --no-symmetry, --por/--no-por, --compact or "
                   "--fingerprints].")
@click.option("--html", "html_dir", type=click.Path(file_okay=False),
              help="Also write one stepper page per counterexample and an index.html into this folder.")
@click.option("--quiet", "-q", is_flag=True,
              help="Print only the closing lines, and one line per scenario that fails the run (its expect not met; "
                   "under an override, unsafe), instead of every scenario's table.")
def check(paths, device, reuse, transfer, protocol, allocator, scheduler, kind, invariant_ids, first, max_states, max_depth, max_memory,
          call_deadline, engine, array, depth, symmetry, por, compact, fingerprints, json_path, junit_path, out_dir, html_dir,
          quiet) -> None:
    """Explore every reachable state of each scenario (files or folders) and
    judge every invariant. Exit 0 when every scenario meets its `expect`,
    1 when one does not, 2 on bad input, 3 when a run without an `expect`
    to judge it stopped part way (a bound) before it found harm, so it
    proves nothing safe, 130 when interrupted (143 on SIGTERM). With an
    override (--protocol, --allocator, --device, --reuse, --transfer) the files'
    `expect` no longer applies: exit 1 only when a scenario is unsafe.
    A folder's scenarios of the other kind than an override's (a
    prefix-cache protocol or adapter on fork scenarios, a fork adapter on
    cache scenarios) are skipped and counted; a file named on the command
    line that the override does not fit is bad input."""
    overridden = bool(protocol or device or reuse or allocator or transfer or scheduler)
    try:
        options = SearchOptions(max_states=max_states, max_depth=max_depth, first=first, symmetry=symmetry, por=por,
                                compact=compact, fingerprints=fingerprints, max_memory_mib=max_memory,
                                call_deadline=call_deadline)
    except SpecError as error:
        fail(error)
    chosen = default_out(overridden, engine, options, invariant_ids)
    committed = out_dir is None and chosen == DEFAULT_OUT     # this run writes over the committed files
    out_dir = Path(out_dir or chosen)
    try:
        selected = invs.select(invariant_ids)
        override = api.resolve_protocol(protocol) if protocol else None
        scenarios: list[Scenario] = []
        skipped = Skipped()
        named = {Path(p) for p in paths if Path(p).is_file()}     # an override that does not fit one of these is bad input
        for path in scenario_files(paths):
            loaded = load_scenario(path)
            if kind is not None and kind_of(loaded) != kind:
                skipped.add(kind_of(loaded), f"--kind {kind}")
                continue
            try:
                scenario = api.with_overrides(loaded, override, device, reuse, allocator, transfer, scheduler)
            except KindMismatch as mismatch:
                if path in named:
                    raise
                skipped.add(mismatch.scenario_kind, mismatch.why)
                continue
            gone = engine_unavailable(scenario) if path not in named else None
            if gone is not None:
                skipped.add(kind_of(loaded), gone)
                continue
            invs.validate_expect(scenario, scenario.code_ref is not None)
            scenarios.append(scenario)
        if not scenarios:
            raise SpecError(", ".join(paths), "", "no scenario to check: " + "; ".join(skipped.lines()))
        output.refuse_collisions(scenarios, out_dir)
        writable_file(json_path, "--json")
        writable_file(junit_path, "--junit-xml")
        writable_folder(out_dir, "--out")
        if html_dir:
            writable_folder(Path(html_dir), "--html")
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
                result = api.check(scenario, engine=engine, invariants=selected, depth=depth, options=options,
                                   progress=progress, array=array)
            finally:
                progress.close()
            results.append(result)
            if refused is None:
                try:
                    # a partial run's peak is only the peak of what it explored: not over a committed file
                    write_result(result, out_dir, peak=result.complete or not committed)
                except OSError as error:      # the folder refused a file after all: the results still come
                    refused = error
            if not quiet:
                show(result, out)
            elif fails(result, overridden):
                show_failing(result, overridden, out)
            if result.interrupted:
                interrupted = True
                break
    except KeyboardInterrupt:
        interrupted = True
    except SpecError as error:
        fail(error)
    try:
        status = _finish(results, out, Outputs(json_path, junit_path, html_dir), overridden, interrupted, skipped, quiet)
    except OSError as error:
        refused = refused or error
    if refused is not None:
        fail(SpecError(refused.filename or str(out_dir), "", f"cannot write ({refused.strerror or refused})"))
    sys.exit(status)



DEFAULT_OUT, OVERRIDE_OUT = Path("counterexamples"), Path("counterexamples") / "overrides"


#: the search as `cowcheck check specs/` runs it, for what decides the traces it writes
DEFAULT_SEARCH = SearchOptions()
TRACE_OPTIONS = ("max_states", "max_depth", "first", "symmetry", "por", "compact", "fingerprints")


def default_out(overridden: bool, engine: Optional[str], options: SearchOptions = DEFAULT_SEARCH,
                invariant_ids: tuple[str, ...] = ()) -> Path:
    """Where counterexamples go without --out. The committed files in
    counterexamples/ are the explorer's default run's, on the scenarios as
    written: every invariant, no bound, the default reductions. Any other
    run may find another trace of the same length (a z3 engine, another
    reduction), a partial peak (a bound, --first) or judge fewer
    invariants, so it writes where an override does and never rewrites a
    committed file."""
    default_search = all(getattr(options, o) == getattr(DEFAULT_SEARCH, o) for o in TRACE_OPTIONS)
    if overridden or engine not in (None, "explicit") or not default_search or invariant_ids:
        return OVERRIDE_OUT
    return DEFAULT_OUT



@dataclass(frozen=True)
class Outputs:
    """The files a check writes besides its counterexamples, when asked."""
    json: Optional[str] = None
    junit_xml: Optional[str] = None
    html: Optional[str] = None


def fails(result: Result, overridden: bool) -> bool:
    """Does the scenario make the exit status 1? Its `expect` is not met;
    under an override (the files' `expect` dropped), it is unsafe."""
    return result.summary is Summary.UNSAFE if overridden else not result.expect_met


def _finish(results: list[Result], out: Console, outputs: Outputs, overridden: bool, interrupted: bool,
            skips: Optional[Skipped] = None, quiet: bool = False) -> int:
    """The closing summary and the JSON and HTML of what was checked, with
    further interrupts held off until they are written (`quiet`: without
    the overview table). Returns the exit status."""
    with interrupts.held():     # a further Ctrl-C waits until the results are written whole
        by_category = Counter(r.category for r in results)
        tally = ", ".join(f"{by_category[c]} {c}" for c in (*map(str, Summary), PARTIAL))
        partial = [r for r in results if r.undecided]
        undecided = (f"; [bold yellow]partial, so not judged: {escape(', '.join(r.scenario.name for r in partial))}[/]"
                     if partial else "")
        if len(results) > 1 and not quiet:
            overview(results, out)
        if interrupted:
            out.print(f"[bold yellow]interrupted[/]: {interrupted_line(results)}")
        if overridden:
            out.print(f"[bold]{len(results)} scenario(s) checked[/] under the override: {tally}{undecided} "
                      "[dim](the files' expect does not apply to an override)[/]")
        else:
            unmet = [r for r in results if not r.expect_met]
            met = len(results) - len(unmet) - len(partial)
            out.print(f"[bold]{len(results)} scenario(s) checked[/], {met} met their expect"
                      + (f"; [bold red]not met: {escape(', '.join(r.scenario.name for r in unmet))}[/]" if unmet else "")
                      + f"{undecided} [dim]({tally})[/]")
        for line in skips.lines() if skips else ():
            out.print(f"[yellow]{escape(line)}[/]")
        if outputs.html:
            skipped: list[SpecError] = []
            write_check_pages(results, Path(outputs.html), skipped)
            for error in skipped:
                err_console.print(f"[yellow]no page[/]: {escape(str(error))}", soft_wrap=True)
        if outputs.json:
            emit_json([r.to_json() for r in results], outputs.json)
        if outputs.junit_xml:
            atomic.write_text(Path(outputs.junit_xml), junit_xml(results, overridden))
    if interrupted:
        return interrupts.exit_status()
    if any(fails(r, overridden) for r in results):
        return 1
    return PARTIAL_STATUS if any(r.undecided for r in results) else 0


#: the exit status of a run that failed nothing but was partial (a bound
#: stopped a scenario that had no verdict to find): not success
PARTIAL_STATUS = 3



def interrupted_line(results: list[Result]) -> str:
    """What an interrupt left: the scenarios checked whole before it, and the
    one it stopped, whose partial result is shown with them."""
    whole = sum(1 for r in results if not r.interrupted)
    stopped = len(results) - whole
    return (f"{whole} scenario(s) checked whole before it" + (", 1 stopped part way" if stopped else "")
            + ("; partial results above" if results else "; nothing checked yet"))


@click.command(name="list")
def list_() -> None:
    """The built-in protocols and the invariants."""
    protocols = Table(title="built-in protocols (specs/protocols)", title_justify="left", box=None, show_header=False)
    protocols.add_column(style="bold", no_wrap=True)
    protocols.add_column()
    for name in builtin_names():
        protocol = load_builtin(name)
        description = " ".join(protocol.description.split())
        protocols.add_row(name, description.split(". ")[0].rstrip(".") + "." + (" (cache scenarios)" if protocol.cache_only else ""))
    console.print(protocols)
    console.print()
    table = Table(title="invariants", title_justify="left", box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    for inv in invs.INVARIANTS + invs.CACHE_INVARIANTS + invs.HOST_INVARIANTS + (invs.ALLOCATOR_ERROR,):
        note = " (allocator code only)" if inv is invs.ALLOCATOR_ERROR else " (cache scenarios only)" if inv in invs.CACHE_INVARIANTS \
            else " (transfer scenarios only)" if inv in invs.HOST_INVARIANTS else ""
        table.add_row(inv.id, inv.kind, inv.holds_when + note)
    console.print(table)

