"""How `cowcheck diff` looks in the terminal: a rich table of what changed
between two runs, scenario by scenario, and the closing line."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cowcheck.traces.comparison import Change, Comparison

#: a change that is not worse, shown green when it is better, yellow when it is only different
BETTER = frozenset({Change.NO_LONGER, Change.LATER, Change.PEAK_DOWN})


def show_comparison(comparison: Comparison, console: Console) -> None:
    """One row per difference (the scenario named on its first row only),
    worse ones in bold red; then how many scenarios were compared, and how
    many differences there are and how many of them are worse."""
    if comparison.differences:
        table = Table(title=f"{escape(comparison.before)} → {escape(comparison.after)}", title_justify="left",
                      show_edge=False, pad_edge=False)
        table.add_column("scenario", overflow="fold")      # the one column that may wrap: an override's long name
        for column in ("what", "before", "after", "change"):          # what: an invariant, the peak, the scenario
            table.add_column(column, no_wrap=True)
        shown = None
        for d in comparison.differences:
            style = "bold red" if d.worse else "green" if d.change in BETTER else "yellow"
            table.add_row(escape(d.scenario) if d.scenario != shown else "", escape(d.item),
                          escape(d.words(d.before)), escape(d.words(d.after)), f"[{style}]{d.change}[/]")
            shown = d.scenario
        console.print(table)
    console.print(closing_line(comparison))


def closing_line(comparison: Comparison) -> str:
    line = f"[bold]{comparison.compared} scenario(s) compared[/]"
    others = [f"{n} {what}" for n, what in ((comparison.count(Change.MISSING), "missing"), (comparison.count(Change.NEW), "new"))
              if n]
    if others:
        line += f" ({', '.join(others)})"
    changed = [d for d in comparison.differences if d.change not in (Change.MISSING, Change.NEW)]
    if not comparison.differences:
        return line + ": no verdict, shortest length or peak changed"
    line += f": {len(changed)} change(s)"
    worse = len(comparison.worse)
    return line + (f", [bold red]{worse} worse[/]" if worse else ", [green]none worse[/]")
