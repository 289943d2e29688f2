"""The sweep's HTML page: the grid as a table (a row per grid, protocol,
device and reuse; a column per the other coordinates), each cell labelled
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
from cowcheck.sweeps.cells import FAILED, INVALID, PARTIAL, Cell, branch_texts
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
.grid th[scope=row] { text-align: left; white-space: nowrap; background: var(--panel); }
.scroll { overflow-x: auto; }
td.v-unsafe { background: #fbe3e6; } td.v-undisciplined { background: #fdf0d9; }
td.v-safe { background: #e3f4e8; } td.v-partial, td.v-notrun { background: var(--hatch); }
td.v-invalid { background: #efe3f7; }
.v-unsafe .tag { color: var(--bad); } .v-undisciplined .tag { color: var(--warn); }
.v-safe .tag { color: var(--good); } .v-invalid .tag { color: #5b2180; }
.broken { display: block; color: var(--muted); font-size: 0.75rem; }
"""

ROW_AXES = ("protocol", "allocator", "device", "reuse")

COLUMN_AXES = ("block_size", "prompt", "branches", "appends", "program", "may_cancel", "pool")



def _column_label(c: dict[str, Any]) -> str:
    if c.get("program") is not None:
        what = escape(branch_texts(c))
    else:
        what = f"{c['branches']} br × " + (str(c["appends"]) if isinstance(c["appends"], int) else "+".join(map(str, c["appends"])))
    label = f"B={c['block_size']} L={c['prompt']}<br>{what}"
    if c["may_cancel"]:
        label += f"<br>{c['may_cancel']} may cancel"
    if c["pool"] != "default":
        label += f"<br>pool {c['pool']}"
    return label



def sweep_html(result: Sweep, links: dict[int, str]) -> str:
    """The grid as a table: a row per (grid, protocol, device, reuse), a
    column per the other coordinates; each cell labelled with its verdict
    (and coloured by it), the invariants it breaks, and a link to the
    stepper page of its shortest counterexample (LINKS: cell index -> page)."""
    rows: dict[tuple[Any, ...], dict[tuple[Any, ...], Cell]] = {}
    columns: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in result.cells:
        r = (c.grid,) + tuple(c.coordinates.get(a) for a in ROW_AXES)
        k = tuple(json.dumps(c.coordinates.get(a)) for a in COLUMN_AXES)
        columns.setdefault(k, c.coordinates)
        rows.setdefault(r, {})[k] = c
    head = "".join(f'<th scope="col">{_column_label(columns[k])}</th>' for k in columns)
    body = []
    for r, row in rows.items():
        tds = []
        for k in columns:
            found = row.get(k)
            if found is None:
                tds.append('<td class="v-notrun">—</td>')
                continue
            c = found
            label, css = VERDICT_TAG[c.verdict]
            tag = f'<span class="tag">{label}</span>'
            if c.index in links:
                tag = f'<a href="{escape(links[c.index])}" title="{escape(c.name)}: the shortest counterexample, step by step">{tag}</a>'
            broken = ", ".join(f"{escape(i)} ({n})" for i, n in c.broken().items())
            detail = broken or escape((c.data or {}).get("error") or "")
            tds.append(f'<td class="v-{css}" title="{escape(c.name)}">{tag}<span class="broken">{detail}</span></td>')
        name = " · ".join(escape(str(v)) for v in r[1:] if v is not None) + (f" <small>({escape(r[0])})</small>" if len(result.grids) > 1 else "")
        body.append(f'<tr><th scope="row">{name}</th>{"".join(tds)}</tr>')
    per = result.by_invariant()
    inv_rows = "".join(f"<tr><td>{escape(i)}</td><td>{escape(str(BY_ID[i].kind))}</td><td>{n}</td><td>{escape(c.name)}</td>"
                       f"<td>{c.broken()[i]}</td></tr>" for i, (n, c) in per.items())
    counts: dict[str, int] = {}
    for c in result.cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    grids = ", ".join(escape(g.name) for g in result.grids)
    legend = " ".join(f'<span class="v-{css}"><span class="tag">{label}</span></span>' for label, css in
                      (VERDICT_TAG[v] for v in ("unsafe", "safe but undisciplined", "safe and disciplined", PARTIAL, INVALID)))
    html_body = f"""<header>
<h1>cowcheck sweep <span class="sub">{grids}: {len(result.cells)} cell(s), {', '.join(f'{n} {escape(v)}' for v, n in counts.items())}</span></h1>
<p class="description">{' '.join(escape(g.description) for g in result.grids)}</p>
<p class="legend">Each cell is labelled with its verdict (the colour repeats the label): {legend}.
UNSAFE: a harm invariant breaks; UNDISCIPLINED: only discipline invariants break; SAFE: nothing breaks;
PARTIAL: a budget stopped the check before anything broke; INVALID: the coordinates make no valid scenario.
Under each label, the invariants the cell breaks with their shortest lengths; the label links to the shortest
counterexample's stepper page.</p>
</header>
<main>
<style>{SWEEP_CSS}</style>
<section class="panel"><h2>Per invariant</h2>
<table class="grid"><thead><tr><th scope="col">invariant</th><th scope="col">kind</th><th scope="col">cells</th>
<th scope="col">smallest cell</th><th scope="col">shortest there</th></tr></thead><tbody>{inv_rows}</tbody></table></section>
<section><h2>The grid</h2><div class="scroll">
<table class="grid"><thead><tr><th scope="col">protocol · device · reuse</th>{head}</tr></thead>
<tbody>{''.join(body)}</tbody></table></div></section>
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

