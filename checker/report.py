"""How results look: a rich table per scenario, the one-line summary, the
measures, and whether the scenario met its `expect`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .check import UNSAFE, UNDISCIPLINED, CheckResult


def show(result: CheckResult, console: Console) -> None:
    s, x = result.scenario, result.exploration
    title = (f"{escape(s.name)}  [dim]protocol[/] {escape(s.protocol.name)}  [dim]device[/] {s.device}  "
             f"[dim]reuse[/] {s.reuse}  [dim]B[/]={s.block_size} [dim]L[/]={s.prompt} [dim]pool[/]={s.pool} "
             f"[dim]branches[/]={len(s.branches)}")
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("invariant")
    table.add_column("kind")
    table.add_column("verdict")
    table.add_column("shortest", justify="right")
    table.add_column("counterexample", overflow="fold")
    for v in result.verdicts.values():
        if v.holds is False:
            verdict, style = "VIOLATED", "bold red" if v.kind == "harm" else "yellow"
        elif v.holds:
            verdict, style = "holds", "green"
        else:
            verdict, style = "not seen (partial)", "dim"
        table.add_row(v.invariant, v.kind, f"[{style}]{verdict}[/]", str(v.length or ""), escape(v.path or ""))
    console.print(table)
    colour = {UNSAFE: "bold red", UNDISCIPLINED: "yellow"}.get(result.summary.split(" so far")[0], "bold green")
    console.print(f"[{colour}]{escape(result.summary)}[/]")
    copies = f"{x.cost_range[0]}-{x.cost_range[1]}" if x.cost_range else "n/a"
    steady = "n/a" if x.steady is None else str(x.steady)
    console.print(
        f"[dim]states[/] {x.states:,}  [dim]transitions[/] {x.transitions:,}  [dim]depth[/] {x.depth}  "
        f"[dim]time[/] {x.seconds:.2f}s  [dim]states/s[/] {x.rate:,.0f}  "
        f"[dim]peak blocks[/] {x.peak} / steady {steady}  [dim]copies[/] {copies}"
        + ("" if x.complete else f"  [bold yellow]partial: {escape(x.stopped or '')}[/]")
    )
    if s.expect:
        if result.expect_met:
            console.print(f"[green]expect met[/]: {escape(', '.join(s.expect))}")
        else:
            for failure in result.expectation_failures:
                console.print(f"[bold red]expect NOT met[/]: {escape(failure)}")
    console.print()
