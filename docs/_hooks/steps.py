"""MkDocs hook: the step tables of the manual generated from the step kinds
(cowcheck.model.stepkinds.STEPS), so the reference lists every step the
parser accepts, where it may stand and what it does, and cannot drift from
the code.

A page writes `<!-- steps: core -->` (the steps every scenario may use),
`<!-- steps: cache -->` (those only a cache scenario may use) or
`<!-- steps: transfer -->` (the cache steps of transfers) on a line of its
own; the hook replaces it with a table of those steps in STEPS order."""

from __future__ import annotations

import re

from cowcheck.model.stepkinds import STEPS, TABLES, TRANSFER_STEPS, StepKind

MARKER = re.compile(r"^<!-- steps: (core|cache|transfer) -->$", re.M)


def _where(kind: StepKind) -> str:
    if kind.tables == TABLES:
        return "anywhere"
    where = " or ".join("append paths" if table == "append" else f"`[{table}]`" for table in kind.tables)
    return where + (f", {kind.once.value}" if kind.once else "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(section: str) -> str:
    rows = ["| step | where | effect |", "| --- | --- | --- |"]
    for name, kind in STEPS.items():
        of = "transfer" if name in TRANSFER_STEPS else "cache" if kind.cache_only else "core"
        if of == section:
            rows.append(f"| `{kind.usage}` | {_where(kind)} | {_cell(kind.effect)} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    return MARKER.sub(lambda m: render(m.group(1)), markdown)
