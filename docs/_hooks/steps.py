"""MkDocs hook: the step tables of the manual generated from the step kinds
(cowcheck.model.stepkinds.STEPS), so the reference lists every step the
parser accepts, where it may stand and what it does, and cannot drift from
the code.

A page writes `<!-- steps: core -->` (the steps every scenario may use) or
`<!-- steps: cache -->` (those only a cache scenario may use) on a line of
its own; the hook replaces it with a table of those steps in STEPS order."""

from __future__ import annotations

import re

from cowcheck.model.stepkinds import STEPS, TABLES, StepKind

MARKER = re.compile(r"^<!-- steps: (core|cache) -->$", re.M)


def _where(kind: StepKind) -> str:
    if kind.tables == TABLES:
        return "anywhere"
    where = " or ".join("append paths" if table == "append" else f"`[{table}]`" for table in kind.tables)
    return where + (f", {kind.once.value}" if kind.once else "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(section: str) -> str:
    rows = ["| step | where | effect |", "| --- | --- | --- |"]
    for kind in STEPS.values():
        if kind.cache_only == (section == "cache"):
            rows.append(f"| `{kind.usage}` | {_where(kind)} | {_cell(kind.effect)} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    return MARKER.sub(lambda m: render(m.group(1)), markdown)
