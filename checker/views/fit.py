"""A table that fits its console with every cell readable: in a narrow
terminal or a CI log, a table that squeezes all its columns in cuts each
cell to a few letters (`un…`), and one that folds breaks names mid-word.

Here a name column never wraps, the other columns wrap at word boundaries
and are never narrower than their longest word, and the columns that do not
fit whole are left out, the least worth first, and named under the table
(`show`). A column may give the width below which its cells
shorten with an ellipsis instead (an error message with a long path)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

#: what one column costs besides its cells: " │ " between two columns
SEPARATOR = 3


@dataclass(frozen=True)
class Column:
    """A column of a fitted table. `name`: its cells are names, never
    wrapped; `shortens_below`: a word longer than this is shortened with an
    ellipsis rather than the column left out."""
    header: str
    justify: JustifyMethod = "left"
    name: bool = False
    shortens_below: Optional[int] = None


def fitted(console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]],
           worth: Sequence[str]) -> tuple[Table, tuple[str, ...]]:
    """The table of `rows` (markup strings, one per column) on `console`,
    and the headers of the columns left out to fit it. `worth` orders the
    headers, most worth first: a column is shown when it fits beside the
    ones worth more (the first always is); the table keeps the columns'
    own order."""
    options = console.options
    least, most = [], []
    for i, column in enumerate(columns):
        sizes = [Measurement.get(console, options, cell) for cell in (column.header, *(row[i] for row in rows))]
        widest = max(size.maximum for size in sizes)
        word = widest if column.name else max(size.minimum for size in sizes)
        if column.shortens_below is not None:
            word = min(word, max(column.shortens_below, Measurement.get(console, options, column.header).minimum))
        least.append(word)
        most.append(widest)
    order = sorted(range(len(columns)), key=lambda i: worth.index(columns[i].header))
    shown: list[int] = []
    for i in order:
        if not shown or sum(least[j] for j in (*shown, i)) + SEPARATOR * len(shown) <= console.width:
            shown.append(i)
    shown.sort()
    widths = _widths([least[i] for i in shown], [most[i] for i in shown], console.width - SEPARATOR * (len(shown) - 1))
    out = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, width in zip(shown, widths):
        column = columns[i]
        out.add_column(column.header, justify=column.justify, no_wrap=column.name, width=width, overflow="ellipsis")
    for row in rows:
        out.add_row(*(row[i] for i in shown))
    return out, tuple(columns[i].header for i in range(len(columns)) if i not in shown)


def _widths(least: list[int], most: list[int], room: int) -> list[Optional[int]]:
    """Each shown column's width: as wide as its cells where they all fit
    (None: rich measures it), else its least width and a share of the room
    left, the columns that want least more given it whole first (the
    widest column wraps, not a verdict beside it)."""
    if sum(most) <= room:
        return [None] * len(most)
    widths: list[Optional[int]] = list(least)
    spare = max(0, room - sum(least))
    wanting = sorted(range(len(least)), key=lambda i: most[i] - least[i])
    for n, i in enumerate(wanting):
        more = min(most[i] - least[i], spare // (len(wanting) - n))
        widths[i], spare = least[i] + more, spare - more
    return widths


def show(console: Console, title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], worth: Sequence[str],
         where: str) -> None:
    """Print the fitted table and, when columns were left out, a line under
    it naming them and `where` to read them."""
    table, left_out = fitted(console, title, columns, rows, worth)
    console.print(table)
    if left_out:
        console.print(f"[dim]left out to fit {console.width} columns: {escape(', '.join(left_out))} ({escape(where)})[/]")
