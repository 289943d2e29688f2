"""The sweep's HTML page: a table per grid (a row per value of the
protocol, device and reuse it varies; a column per value of its other
varying coordinates, cut into tables narrow enough to read), each cell labelled
with its verdict and linked to the stepper page of its shortest
counterexample, written with those stepper pages by `cowcheck sweep --html`."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any, Optional

from cowcheck import atomic
from cowcheck.engines.invariants import BY_ID, IDS
from cowcheck.model.errors import SpecError
from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.harness import allocator_label
from cowcheck.sweeps.cells import FAILED, INVALID, PARTIAL, Cell, branch_texts
from cowcheck.sweeps.grid import AXES, DEFAULTS, Grid
from cowcheck.sweeps.sweep import Sweep
from cowcheck.views.html import document, stepper_html
from cowcheck.views.pages import decoded_on_pool, load_for_page


VERDICT_TAG = {"unsafe": ("UNSAFE", "unsafe"), "safe but undisciplined": ("UNDISCIPLINED", "undisciplined"),
               "safe and disciplined": ("SAFE", "safe"), PARTIAL: ("PARTIAL", "partial"),
               INVALID: ("INVALID", "invalid"), FAILED: ("FAILED", "invalid"), "not run": ("NOT RUN", "notrun")}

SWEEP_CSS = """
.grid { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.85rem; }
.grid th, .grid td { border: 1px solid var(--line); padding: 0.2rem 0.35rem; vertical-align: top; }
.grid thead th { background: var(--panel); font-weight: normal; }
.grid th[scope=row] { text-align: left; background: var(--panel); min-width: 8rem; max-width: 15rem; }
.cells th[scope=col], .cells td { min-width: 8rem; max-width: 12rem; overflow-wrap: break-word; hyphens: none; }
.cells th[scope=col] { text-align: left; }
.cells .axis { color: var(--muted); }
.fixed { color: var(--muted); margin: 0.2rem 0; }
.grid-section h2 .sub { font-weight: normal; color: var(--muted); margin-left: 0.4em; }
.scroll { overflow-x: auto; }
td.v-unsafe { background: #fbe3e6; } td.v-undisciplined { background: #fdf0d9; }
td.v-safe { background: #e3f4e8; } td.v-partial, td.v-notrun { background: var(--hatch); }
td.v-invalid { background: #efe3f7; }
.v-unsafe .tag { color: var(--bad); } .v-undisciplined .tag { color: var(--warn); }
.v-safe .tag { color: var(--good); } .v-invalid .tag { color: #5b2180; }
.broken { display: block; color: var(--muted); font-size: 0.75rem; }
.broken .inv { white-space: nowrap; }
"""

#: the axes a grid's table has a row per value of; the others give its columns
ROW_AXES = ("protocol", "allocator", "scheduler", "device", "reuse")

COLUMN_AXES = tuple(a for a in AXES if a not in ROW_AXES)
#: axes not worth a word at their default: the transfer axes, which matter
#: in transfer scenarios only
SILENT_AT_DEFAULT = ("transfer", "host_pool")

#: the most columns one table has: a grid with more is drawn as several
#: tables (the rows repeated), each readable in a window 1,400 px wide
COLUMNS_PER_TABLE = 6


def _value(axis: str, c: dict[str, Any]) -> str:
    """One coordinate as the page writes it."""
    value = c.get(axis)
    if axis == "program":
        return branch_texts(c) if value is not None else "appends"
    if axis in ("allocator", "scheduler"):
        return allocator_label(value) if value else ""
    if axis == "reuse" and value is None:
        return "the allocator's"
    if axis == "appends" and isinstance(value, list):
        return "+".join(map(str, value))
    if axis == "prompts" and value is not None:
        return " + ".join(str(p) if isinstance(p, int) else " ".join(p) for p in value)
    if axis == "after" and value is not None:
        return ", ".join(f"{BRANCH_NAMES[i]} after {a}" if a else f"{BRANCH_NAMES[i]} at once" for i, a in enumerate(value))
    return str(value)


def _cell_td(c: Cell, links: dict[int, str]) -> str:
    label, css = VERDICT_TAG[c.verdict]
    tag = f'<span class="tag">{label}</span>'
    if c.index in links:
        tag = f'<a href="{escape(links[c.index])}" title="{escape(c.name)}: the shortest counterexample, step by step">{tag}</a>'
    broken = ", ".join(f'<span class="inv">{escape(i)} ({n})</span>' for i, n in c.broken().items())
    detail = broken or escape((c.data or {}).get("error") or "")
    return f'<td class="v-{css}" title="{escape(c.name)}">{tag}<span class="broken">{detail}</span></td>'


def grid_tables(grid: Grid, cells: list[Cell], links: dict[int, str]) -> str:
    """One grid's section: its fixed coordinates in a line, then a table
    with a row per value of its varying row axes and a column per value of
    its varying column axes (only this grid's), cut into tables of at most
    COLUMNS_PER_TABLE columns."""
    varying = [a for a in AXES if len(grid.axes.get(a, ())) > 1]
    row_axes = [a for a in ROW_AXES if a in varying]
    col_axes = [a for a in COLUMN_AXES if a in varying]
    code = any(grid.axes.get(a) not in (None, [None]) for a in ("allocator", "scheduler"))
    fixed = [a for a in AXES if a not in varying and (grid.axes.get(a) not in ([None], ["none"]) or (a == "reuse" and code))
             and not (a in SILENT_AT_DEFAULT and grid.axes.get(a) == [DEFAULTS[a]])]
    sample = cells[0].coordinates if cells else {}
    rows: dict[tuple[Any, ...], dict[tuple[Any, ...], Cell]] = {}
    columns: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in cells:
        k = tuple(json.dumps(c.coordinates.get(a)) for a in col_axes)
        columns.setdefault(k, c.coordinates)
        rows.setdefault(tuple(json.dumps(c.coordinates.get(a)) for a in row_axes), {})[k] = c
    keys = list(columns)
    chunks = max(1, -(-len(keys) // COLUMNS_PER_TABLE))
    per = -(-len(keys) // chunks) if keys else 0
    corner = " · ".join(row_axes) or "cell"
    tables = []
    for part in range(chunks):
        chosen = keys[part * per:(part + 1) * per]
        head = "".join("<th scope=\"col\">" + "<br>".join(f'<span class="axis">{escape(a)}</span> {escape(_value(a, columns[k]))}'
                                                          for a in col_axes) + "</th>" for k in chosen)
        body = []
        for r, row in rows.items():
            first = next(iter(row.values())).coordinates
            name = " · ".join(escape(_value(a, first)) for a in row_axes) or escape(grid.name)
            tds = "".join(_cell_td(row[k], links) if k in row else '<td class="v-notrun">—</td>' for k in chosen)
            body.append(f'<tr><th scope="row">{name}</th>{tds}</tr>')
        tables.append(f'<div class="scroll"><table class="grid cells"><thead><tr><th scope="col">{escape(corner)}</th>{head}</tr></thead>'
                      f'<tbody>{"".join(body)}</tbody></table></div>')
    fixed_line = " · ".join(f"{escape(a)} {escape(_value(a, sample))}" for a in fixed)
    return (f'<section class="grid-section" id="grid-{escape(grid.name)}"><h2>{escape(grid.name)} '
            f'<span class="sub">{len(cells)} cell(s)</span></h2>'
            + (f'<p class="description">{escape(grid.description)}</p>' if grid.description else "")
            + (f'<p class="fixed">In every cell: {fixed_line}</p>' if fixed_line else "")
            + "".join(tables) + "</section>")


def sweep_html(result: Sweep, links: dict[int, str]) -> str:
    """The sweep as a page: the per-invariant table, then one table per
    grid (a row per value of its varying protocol, allocator, device and
    reuse, a column per value of its other varying axes); each cell
    labelled with its verdict (and coloured by it), the invariants it
    breaks, and a link to the stepper page of its shortest counterexample
    (LINKS: cell index -> page)."""
    by_grid: dict[str, list[Cell]] = {}
    for c in result.cells:
        by_grid.setdefault(c.grid, []).append(c)
    sections = "".join(grid_tables(g, by_grid.get(g.name, []), links) for g in result.grids)
    per = result.by_invariant()
    inv_rows = "".join(f"<tr><td>{escape(i)}</td><td>{escape(str(BY_ID[i].kind))}</td><td>{n}</td><td>{escape(c.name)}</td>"
                       f"<td>{c.broken()[i]}</td></tr>" for i, (n, c) in per.items())
    counts: dict[str, int] = {}
    for c in result.cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    grids = ", ".join(escape(g.name) for g in result.grids)
    contents = (" · ".join(f'<a href="#grid-{escape(g.name)}">{escape(g.name)}</a>' for g in result.grids)
                if len(result.grids) > 1 else "")
    legend = " ".join(f'<span class="v-{css}"><span class="tag">{label}</span></span>' for label, css in
                      (VERDICT_TAG[v] for v in ("unsafe", "safe but undisciplined", "safe and disciplined", PARTIAL, INVALID)))
    html_body = f"""<header>
<h1>cowcheck sweep <span class="sub">{grids}: {len(result.cells)} cell(s), {', '.join(f'{n} {escape(v)}' for v, n in counts.items())}</span></h1>
{f'<p class="description">{escape(result.grids[0].description)}</p>' if len(result.grids) == 1 and result.grids[0].description else ''}
<p class="legend">Each cell is labelled with its verdict (the colour repeats the label): {legend}.
UNSAFE: a harm invariant breaks; UNDISCIPLINED: only discipline invariants break; SAFE: nothing breaks;
PARTIAL: a budget stopped the check before anything broke; INVALID: the coordinates make no valid scenario.
Under each label, the invariants the cell breaks with their shortest lengths; the label links to the shortest
counterexample's stepper page. Each grid has its own table: a row per value of the protocol, device and
reuse it varies, a column per value of its other axes; what it does not vary is said above its table.</p>
{f'<p class="contents">Grids: {contents}</p>' if contents else ''}
</header>
<main>
<style>{SWEEP_CSS}</style>
<section class="panel"><h2>Per invariant</h2><div class="scroll">
<table class="grid"><thead><tr><th scope="col">invariant</th><th scope="col">kind</th><th scope="col">cells</th>
<th scope="col">smallest cell</th><th scope="col">shortest there</th></tr></thead><tbody>{inv_rows}</tbody></table></div></section>
{sections}
</main>"""
    return document("cowcheck sweep", html_body, styles=("base.css",))



def write_sweep_pages(result: Sweep, html_path: Path, pages_dir: Path, skipped: Optional[list[str]] = None) -> dict[int, str]:
    """A stepper page per violating cell (its shortest violation; harm
    first on a tie, then the invariants' order), then the grid page.
    Returns cell index -> page link (relative to the grid page). A
    resumed cell's file that no longer replays (written by an older
    cowcheck) gets no page; why goes to `skipped`."""
    links: dict[int, str] = {}
    for c in result.cells:
        broken = c.broken()
        if not broken or not c.data:
            continue
        verdicts = c.data["verdicts"]
        inv = min(broken, key=lambda i: (broken[i], verdicts[i]["kind"] != "harm", IDS.index(i) if i in IDS else 99))
        path = verdicts[inv].get("counterexample")
        if not path or not Path(path).is_file():
            continue
        target = pages_dir / (Path(path).stem + ".html")
        try:
            cx, data = load_for_page(Path(path))
        except SpecError as err:
            if skipped is not None:
                skipped.append(str(err))
            continue
        atomic.write_text(target, stepper_html(data, decoded_on_pool(cx)))
        links[c.index] = target.relative_to(html_path.parent).as_posix() if target.is_relative_to(html_path.parent) \
            else target.resolve().as_uri()
    atomic.write_text(html_path, sweep_html(result, links))
    return links

