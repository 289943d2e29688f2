"""How results look: a rich table per scenario, the one-line summary, the
measures, and whether the scenario met its `expect`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cowcheck.model.harness import allocator_label
from cowcheck.traces.pool import PoolReplay
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import ExplicitResult, Outcome, Result, Summary
from cowcheck.engines.stop import Stop, StopKind
from cowcheck.views import fit
from cowcheck.views.fit import Column
from cowcheck.views.words import against_reference, reuse_words, token

VERDICT_STYLE = {Outcome.HOLDS: ("holds", "green"), Outcome.NOT_SEEN: ("not seen (partial)", "dim"),
                 Outcome.UNSUPPORTED: ("unsupported", "dim")}
SUMMARY_STYLE = {Summary.UNSAFE: "bold red", Summary.UNDISCIPLINED: "yellow", Summary.DISCIPLINED: "bold green"}


def show(result: Result, console: Console) -> None:
    s = result.scenario
    what = "[dim]allocator[/] " if s.allocator is not None else "[dim]protocol[/] "
    title = (f"{escape(s.name)}  {what}{escape(s.subject)}  [dim]device[/] {s.device}  "
             f"[dim]reuse[/] {escape(reuse_words(s.reuse, s.allocator is not None))}  [dim]B[/]={s.block_size} [dim]L[/]={s.prompt} [dim]pool[/]={s.pool} "
             f"[dim]branches[/]={len(s.branches)}")
    console.print(title, soft_wrap=True)     # one line, however narrow the table under it: the terminal wraps
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("invariant")
    table.add_column("kind")
    table.add_column("verdict")
    table.add_column("shortest", justify="right")
    table.add_column("counterexample", overflow="fold")
    for v in result.verdicts.values():
        if v.outcome is Outcome.VIOLATED:
            verdict, style = "VIOLATED", "bold red" if v.kind is Kind.HARM else "yellow"
        else:
            verdict, style = VERDICT_STYLE[v.outcome]
        table.add_row(escape(v.invariant), str(v.kind), f"[{style}]{verdict}[/]", str(v.length or ""),
                      escape(v.path or v.note or ""))
    console.print(table)
    console.print(f"[{headline_style(result)}]{escape(result.summary_line)}[/]")
    if not isinstance(result, ExplicitResult):  # z3 engines: no states or measures, their own line
        console.print(f"[dim]{escape(result.engine_line())}[/]")
        _show_expect(result, console)
        return
    x = result.x
    copies = span(x.cost_range)
    steady = "n/a" if x.steady is None else str(x.steady)
    hits = f"  [dim]hits[/] {span(x.hits_range)}" if result.scenario.cache else ""
    if result.scenario.transfers:
        hits += f"  [dim]host peak[/] {x.host_peak}  [dim]transfers[/] {span(x.transfers_range)}"
    console.print(
        f"[dim]states[/] {x.states:,}  [dim]transitions[/] {x.transitions:,}  [dim]depth[/] {x.depth}  "
        f"[dim]time[/] {x.seconds:.2f}s  [dim]states/s[/] {x.rate:,.0f}  "
        f"[dim]peak blocks[/] {x.peak} / steady {steady}  [dim]copies[/] {copies}{hits}"
        + ("" if x.complete else f"  [bold yellow]partial: {escape(x.stopped or '')}[/]")
    )
    if result.deadline_trace is not None and result.deadline_path:
        console.print(f"[yellow]the run to that call[/]: {escape(result.deadline_path)} ({result.deadline_trace.length} "
                      "actions; explain, html and replay read it)", soft_wrap=True)
    reductions = ", ".join(x.reductions) or "none"
    line = f"[dim]reductions[/] {escape(reductions)}"
    if x.bytes_per_state and x.states >= 10_000:  # below that, page granularity swamps it
        line += f"  [dim]memory[/] ~{x.bytes_per_state:,.0f} bytes/state"
    if x.encoding:
        line += f"  [dim]visited set[/] {x.encoding} encodings"
    if x.fingerprints:
        line += f"  [dim]fingerprints[/] 64-bit, collision probability ~{x.collision_probability:.1e}"
    console.print(line)
    if result.choice:       # one line, as the title: a pipe or a CI log keeps it whole, a terminal wraps it
        console.print(f"[dim]chosen[/] {escape(result.choice)}", soft_wrap=True)
    if len(result.searches) > 1:
        console.print("[dim]searches[/] " + escape("; ".join(
            f"{s.purpose} ({'with' if any('partial-order' in r for r in s.reductions) else 'without'} partial-order) "
            f"{s.states:,} states {s.seconds:.2f}s" for s in result.searches)))
    hint = bound_hint(x.stop, tuple(r for search in result.searches for r in search.reductions) or x.reductions)
    if hint:
        console.print(f"[yellow]{escape(hint)}[/]")
    _show_expect(result, console)


def headline_style(result: Result) -> str:
    """The colour of a result's headline: its summary's, or a warning's for a
    call that did not return."""
    return "bold yellow" if result.hung else SUMMARY_STYLE[result.summary]


def span(values: tuple[int, int] | None) -> str:
    """A measure's fewest-most over complete runs, or n/a."""
    return f"{values[0]}-{values[1]}" if values else "n/a"


#: the closing table's columns, in its order: a measure is right-justified
OVERVIEW = (Column("scenario", name=True), Column("protocol / allocator"), Column("device"), Column("verdict"),
            Column("broken (shortest)"), Column("peak", "right"), Column("steady", "right"), Column("copies", "right"),
            Column("hits", "right"))
#: its columns by worth, the first left out last, when the console is too narrow for them all
OVERVIEW_WORTH = ("scenario", "verdict", "broken (shortest)", "protocol / allocator", "device", "peak", "steady", "copies", "hits")


def overview(results: list[Result], console: Console) -> None:
    """One row per scenario checked, so runs of one shape under several
    protocols read side by side: a rollback that never trims is safe, and
    only its peak or steady count beside cow's shows what it costs.

    Every shown cell is whole, however narrow the console (views/fit.py): a
    scenario's name never breaks, the other columns wrap at word
    boundaries, and below the width the whole table needs the lesser
    columns are left out, named in a line under it (the scenario's own
    section above gives everything). Allocator and scheduler code are named
    by their short label (module and factory)."""
    any_cache = any(r.scenario.cache for r in results)
    columns = OVERVIEW if any_cache else OVERVIEW[:-1]
    rows = []
    for r in results:
        broken = ", ".join(f"{v.invariant} ({v.length})" for v in r.verdicts.values() if v.outcome is Outcome.VIOLATED)
        peak = steady = copies = hits = ""
        if isinstance(r, ExplicitResult):
            x = r.x
            peak = str(x.peak)
            steady = "n/a" if x.steady is None else str(x.steady)
            copies = span(x.cost_range)
            hits = span(x.hits_range) if r.scenario.cache else ""
        subject = r.scenario.protocol.name if r.scenario.code_ref is None else allocator_label(r.scenario.code_ref)
        row = [escape(r.scenario.name), escape(subject), r.scenario.device,
               f"[{headline_style(r)}]{escape(r.headline)}[/]", escape(broken), peak, steady, copies]
        rows.append(row + [hits] if any_cache else row)
    fit.show(console, "scenarios", columns, rows, OVERVIEW_WORTH, "each scenario's section above has them")


#: the stops that less stored per state, or fewer states, would push further
BOUNDS = frozenset({StopKind.STATES, StopKind.MEMORY, StopKind.OUT_OF_MEMORY})


def bound_hint(stop: Stop | None, reductions: tuple[str, ...]) -> str | None:
    """What to try when a bound on states or memory stopped the search; not
    a reduction that one of the check's searches already used."""
    if stop is None or stop.kind not in BOUNDS:
        return None
    tries = [] if any("symmetry" in r for r in reductions) else ["--symmetry"]
    tries += ["--fingerprints (8 bytes a state)", "--compact"]
    tries += [] if any("partial-order" in r for r in reductions) else ["--por"]
    tries += ["--first (stop at the first violation)", "--engine bmc --depth K (no states stored)"]
    return f"stopped by {stop}: the verdicts above are partial; to get further try " + ", ".join(tries)


def show_failing(result: Result, overridden: bool, console: Console) -> None:
    """`check --quiet`: one line for a scenario that fails the run, why:
    its `expect` not met, or under an override, the harm found."""
    name = f"[bold]{escape(result.scenario.name)}[/]"
    if overridden:
        broken = ", ".join(v.invariant for v in result.violated() if v.kind == Kind.HARM)
        console.print(f"{name}: [bold red]unsafe[/]: {escape(broken)} broke", soft_wrap=True)
    else:
        console.print(f"{name}: [bold red]expect NOT met[/]: {escape('; '.join(result.expectation_failures))}", soft_wrap=True)


def _show_expect(result: Result, console: Console) -> None:
    s = result.scenario
    if s.expect:
        if result.expect_met:
            console.print(f"[green]expect met[/]: {escape(', '.join(s.expect))}")
        else:
            for failure in result.expectation_failures:
                console.print(f"[bold red]expect NOT met[/]: {escape(failure)}")
    console.print()


def show_pool(replay: PoolReplay, console: Console) -> None:
    """Each kernel of a pool replay beside its reference; the first
    divergence highlighted."""
    first = replay.first_divergence
    table = Table(title=f"replay on a {replay.pool} KV pool (H={replay.head_dim})", title_justify="left",
                  show_edge=False, pad_edge=False)
    for col in ("step", "read by", "branch", "pos", "max |diff|", "decoded", "expected", ""):
        table.add_column(col, justify="right" if col in ("step", "pos", "max |diff|") else "left")
    for k in replay.kernels:
        style = "bold red" if k is first else ("yellow" if k.diverged else None)
        verdict = "FIRST DIVERGENCE" if k is first else ("diverges" if k.diverged else "ok")
        table.add_row(str(k.step), k.kind, k.branch, str(k.pos), f"{k.max_diff:.2e}", str(k.decoded or "_"),
                      str(k.expected or "_"), verdict, style=style)
    console.print(table)
    if first is None:
        console.print("[green]every output matches the reference[/]")
    elif first.kind == "kernel":
        console.print(f"[bold red]first divergence at step {first.step}[/]: branch {first.branch}'s kernel for position "
                      f"{first.pos} decodes [bold]{escape(token(first.decoded))}[/]"
                      + escape(against_reference(first.decoded, first.expected, first.max_diff)))
    else:
        reader = "send (the remote reader)" if first.kind == "send" else first.kind
        console.print(f"[bold red]first divergence at step {first.step}[/]: branch {first.branch}'s {reader} reads "
                      f"[bold]{first.decoded or '_'}[/] at position {first.position} where its reference has [bold]{first.expected}[/]")
