"""The block graph at one step of a counterexample (`cowcheck graph`).

The state is turned into a networkx MultiDiGraph: branches and blocks are
nodes, and the edges are table entries (working and published told apart),
in-flight copies and in-flight kernels. It is then written as SVG (drawn here,
no plotting library), as Graphviz DOT, or as PNG by rendering that same SVG in
a headless Chromium, so every format shows one drawing and cowcheck needs no
plotting dependency. Colours are always paired with a line pattern and a
label, so the pictures read in greyscale and on a projector.

A transfer scenario's picture adds the host tier, a row of host blocks
under the pool (pins, slots, key), and the remote engine beside the
branches where a recv or a send is in flight; each transfer in flight is an
arrow: a store from its GPU block down to its host block, a load back up, a
recv from the remote engine into its block, a send from its block to the
remote engine (marked where a lease expired). Pending reports are said in
the caption (docs/semantics.md#transfers).

For allocator code (the engine harness) a branch has one table, what
`table(branch)` returns: it is drawn once, as a "table" edge in the working
table's style, and the legend says so.

One idea, over 500 lines: one drawing of one state, laid out once and
written in three formats; the host tier and the transfer arrows are rows
and edges of the same layout, not a second picture."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import textwrap
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

from cowcheck.model.errors import SpecError

from cowcheck.views.html import stepper_data, trace_label
from cowcheck.views.words import cache_words, host_words, key_text

if TYPE_CHECKING:        # networkx is imported where a graph is built: every command imports this module, few draw
    import networkx as nx

FORMATS = (".svg", ".png", ".dot")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Flags for a headless Chromium that must not touch the network or a profile.
CHROMIUM_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")



class EdgeStyle(NamedTuple):
    colour: str
    dash: str       # SVG stroke-dasharray ("" for a solid line)
    width: float
    dot: str        # the Graphviz style
    legend: str


EDGE_STYLE = {
    "working":   EdgeStyle("#0b4f9c", "", 2.5, "solid", "working table (solid)"),
    "published": EdgeStyle("#6a1b9a", "9 5", 2.5, "dashed", "published table (dashed)"),
    "copy":      EdgeStyle("#8a4b00", "3 4", 4.0, "dotted", "copy in flight (dotted, thick)"),
    "kernel":    EdgeStyle("#a3001b", "12 4 3 4", 2.5, "bold", "kernel in flight (dash-dot; its write shown as ← in the block)"),
}


#: a transfer scenario's arrows (transfers in flight), beside EDGE_STYLE
TRANSFER_STYLE = {
    "store": EdgeStyle("#1b6e2e", "7 3", 3.0, "dashed", "store in flight, GPU block → host block (dashed, green)"),
    "load":  EdgeStyle("#00607a", "2 3", 3.5, "dotted", "load in flight, host block → GPU block (dotted, teal)"),
    "recv":  EdgeStyle("#4a4a4a", "", 1.5, "solid", "recv in flight, remote prefill → GPU block (thin, grey)"),
    "send":  EdgeStyle("#b33c00", "14 4", 2.5, "dashed", "send in flight, GPU block → remote reader (long dashes, orange)"),
}
STYLES = {**EDGE_STYLE, **TRANSFER_STYLE}
REMOTE = "remote engine"


# -- the graph ---------------------------------------------------------------
#: the legend of a branch's one table, for allocator code
HARNESS_TABLE = "table (solid): what table(branch) returns"


def block_graph(state: dict, block_size: int, harness: bool = False) -> nx.MultiDiGraph:
    """A state (counterexample JSON form) as a graph. Nodes are "branch X"
    and "block N"; each edge has a `kind`: working, published, copy, kernel.
    `harness`: allocator code, whose branches have one table (drawn as
    working edges keyed "table[i]"; no published ones)."""
    import networkx as nx
    g = nx.MultiDiGraph(harness=harness, cache="cache" in state,    # cache: a cache scenario's state (keys on blocks)
                        transfers="host" in state)                  # a transfer scenario's: a host tier, transfers
    for h in state.get("host", []):
        g.add_node(f"host {h['id']}", kind="host", id=h["id"], pins=h["pins"], slots=tuple(h["slots"]), free=h["free"],
                   key=None if h.get("key") is None else tuple(h["key"]))
    for name, br in state["branches"].items():
        g.add_node(f"branch {name}", kind="branch", name=name, status=br["status"], pos=br["pos"])
    for b in state["blocks"]:
        g.add_node(f"block {b['id']}", kind="block", id=b["id"], refcount=b["refcount"], holds=None if harness and not b["holds"] else b["holds"],
                   slots=tuple(b["slots"]), free=b["free"], key=None if b.get("key") is None else tuple(b["key"]))
    for name, br in state["branches"].items():
        for table in ("working",) if harness else ("working", "published"):
            for index, block in enumerate(br[table]):
                key = f"{'table' if harness else table}[{index}]"
                g.add_edge(f"branch {name}", f"block {block}", key=key, kind=table, index=index)
    for i, op in enumerate(state["queue"]):
        if "copy" in op:
            c = op["copy"]
            g.add_edge(f"block {c['src']}", f"block {c['dst']}", key=f"copy {i}", kind="copy", n=c["n"])
        elif "transfer" in op:
            _transfer_edge(g, i, op["transfer"])
        else:
            k = op["kernel"]
            if "from" in k:     # a prefill: one edge per block it writes, with that block's tokens
                written: dict[int, list[int]] = {}
                for p in range(k["from"], k["pos"] + 1):
                    written.setdefault(k["snapshot"][p // block_size], []).append(p)
                for j, (target, positions) in enumerate(written.items()):
                    g.add_edge(f"branch {k['branch']}", f"block {target}", key=f"kernel {i}.{j}", kind="kernel",
                               pos=k["pos"], token=" ".join(k["expected"][p] for p in positions),
                               slot=positions[0] % block_size, prefill=True)
                continue
            target = k["snapshot"][k["pos"] // block_size]
            g.add_edge(f"branch {k['branch']}", f"block {target}", key=f"kernel {i}", kind="kernel",
                       pos=k["pos"], token=k["token"], slot=k["pos"] % block_size)
    return g


def _transfer_edge(g: nx.MultiDiGraph, i: int, t: dict) -> None:
    """A transfer in flight as an edge: store block → host, load host →
    block, recv remote → block, send block → remote (the remote engine's
    node made on first use)."""
    kind, block = t["kind"], f"block {t['block']}"
    if kind in ("recv", "send") and REMOTE not in g:
        g.add_node(REMOTE, kind="remote")
    ends = {"store": (block, f"host {t['host']}"), "load": (f"host {t['host']}", block),
            "recv": (REMOTE, block), "send": (block, REMOTE)}[kind]
    g.add_edge(*ends, key=f"{kind} {i}", kind=kind, branch=t["branch"], block=t["block"], host=t.get("host"),
               tokens=tuple(t.get("tokens") or ()), expired=bool(t.get("reported")))


#: a transfer arrow's label by its kind (the edge's data filled in)
TRANSFER_LABEL = {"store": "store {block}→h{host} ({branch})", "load": "load h{host}→{block} ({branch})",
                  "recv": "recv {tokens} ({branch})", "send": "send {block} ({branch}){expired}"}


def transfer_label(d: dict) -> str:
    """A transfer arrow's label."""
    return TRANSFER_LABEL[d["kind"]].format(block=d["block"], host=d["host"], branch=d["branch"], tokens=" ".join(d["tokens"]),
                                            expired=": lease expired" if d["expired"] else "")


def edges_of(g: nx.MultiDiGraph, kind: str) -> list[tuple[str, str, dict]]:
    return [(u, v, d) for u, v, d in g.edges(data=True) if d["kind"] == kind]


# -- layout --------------------------------------------------------------------
BLOCK_W, BLOCK_H, BRANCH_W, BRANCH_H = 124, 112, 124, 48
BLOCK_GAP, BRANCH_GAP, MARGIN, ROW_GAP = 34, 110, 24, 150
#: the line under a keyed block that gives its key (cache scenarios)
KEY_LINE = 18
KEYED_COLOUR = "#0b4f9c"
#: a host block's height, and the gap between the pool (with its copies) and the host tier
HOST_H, HOST_GAP = 86, 96


def _row(nodes: list[str], node_w: float, gap: float, width: float, y: float) -> dict[str, tuple[float, float]]:
    """Centres of NODES in one row, the row centred in WIDTH."""
    span = len(nodes) * (node_w + gap) - gap
    left = MARGIN + (width - span) / 2
    return {n: (left + i * (node_w + gap) + node_w / 2, y) for i, n in enumerate(nodes)}


def layout(g: nx.MultiDiGraph) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Centres of the nodes, and the drawing's width and height: branches in
    a row above the pool, blocks in id order below. (The order means
    something, the free list and LIFO reuse follow it, and networkx's
    multipartite layout does not keep the order within a layer.)"""
    branches = [n for n, d in g.nodes(data=True) if d["kind"] in ("branch", "remote")]     # the remote engine last
    blocks = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "block"), key=lambda n: g.nodes[n]["id"])
    hosts = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "host"), key=lambda n: g.nodes[n]["id"])
    width = max(len(blocks) * (BLOCK_W + BLOCK_GAP) - BLOCK_GAP, len(branches) * (BRANCH_W + BRANCH_GAP) - BRANCH_GAP,
                len(hosts) * (BLOCK_W + BLOCK_GAP) - BLOCK_GAP)
    positions = {**_row(branches, BRANCH_W, BRANCH_GAP, width, BRANCH_H / 2),
                 **_row(blocks, BLOCK_W, BLOCK_GAP, width, BRANCH_H + ROW_GAP + BLOCK_H / 2)}
    copies = len(edges_of(g, "copy"))
    keys = KEY_LINE if g.graph.get("cache") else 0    # a key's line under its block
    height = BRANCH_H + ROW_GAP + BLOCK_H + keys + (40 + 30 * copies if copies else 24)  # copies, or a mark's label
    if hosts:      # a transfer scenario's host tier, a row under the pool (and under the copies' arches)
        top = height + HOST_GAP
        positions.update(_row(hosts, BLOCK_W, BLOCK_GAP, width, top + HOST_H / 2))
        height = top + HOST_H + KEY_LINE + 24
    return positions, width + 2 * MARGIN, height


# -- SVG ----------------------------------------------------------------------------
def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "middle") -> str:
    css = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{css}>{escape(text)}</text>'


def _svg_defs(cache: bool = False, transfers: bool = False) -> str:
    markers = "".join(
        f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="13" markerHeight="13" '
        f'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{style.colour}"/></marker>'
        for kind, style in (STYLES if transfers else EDGE_STYLE).items())
    hatch = ('<pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
             '<rect width="8" height="8" fill="#ececec"/><line x1="0" y1="0" x2="0" y2="8" stroke="#b5b5b5" stroke-width="4"/></pattern>')
    style = ("<style>text{font-family:'DejaVu Sans',Verdana,sans-serif;font-size:13px;fill:#111}"
             ".bold{font-weight:bold}.mono{font-family:'DejaVu Sans Mono',Menlo,monospace}.title{font-size:17px;font-weight:bold}"
             ".muted{fill:#444}.bad{fill:#a3001b;font-weight:bold}.kernel{fill:#a3001b;font-size:11px;font-weight:bold}.halo{paint-order:stroke;stroke:#fff;stroke-width:4px;font-size:12px;font-weight:bold}"
             + (".keyed{fill:#0b4f9c;font-size:12px;font-weight:bold}" if cache else "") + "</style>")
    return f"<defs>{markers}{hatch}</defs>{style}"


def _svg_block(x: float, y: float, d: dict, pending: str = "") -> str:
    """A block: id, FREE tag, its slots' tokens, the write a kernel in
    flight will make (PENDING), refcount and holds."""
    left, top = x - BLOCK_W / 2, y - BLOCK_H / 2
    fill, dash = ("url(#hatch)", ' stroke-dasharray="5 3"') if d["free"] else ("#fff", "")
    parts = [f'<rect x="{left}" y="{top}" width="{BLOCK_W}" height="{BLOCK_H}" rx="6" fill="{fill}" stroke="#111" stroke-width="2"{dash}/>',
             _text(left + 8, top + 18, f"block {d['id']}", "bold", "start")]
    if d["free"]:
        parts += _free_tag(left, top)
    tokens = ["_" if t is None else t for t in d["slots"]]
    if len(tokens) <= 4:
        cell = (BLOCK_W - 16 - 4 * (len(tokens) - 1)) / len(tokens)
        for i, token in enumerate(tokens):
            cx = left + 8 + i * (cell + 4)
            marked = d.get("mark", {}).get("slot") == i
            stroke = ' stroke="#a3001b" stroke-width="4"' if marked else ' stroke="#111"'
            empty = ' stroke-dasharray="3 2"' if token == "_" and not marked else ""
            parts.append(f'<rect x="{cx:.1f}" y="{top + 26}" width="{cell:.1f}" height="22" fill="#fff"{stroke}{empty}/>')
            parts.append(_text(cx + cell / 2, top + 42, token + (" ✗" if marked else ""), "mono bold"))
    else:
        parts.append(_text(left + 8, top + 42, " ".join(tokens)[:16], "mono", "start"))
    if pending:
        parts.append(_text(left + 8, top + 64, pending, "kernel", "start"))
    parts.append(_text(left + 8, top + 84, f"refcount {d['refcount']}", "bold", "start"))
    if d["holds"] is not None:      # allocator code has no holds
        parts.append(_text(left + 8, top + 102, f"holds {d['holds']}", "muted", "start"))
    below = top + BLOCK_H + 18
    if d.get("key") is not None:    # in the prefix cache: a double left edge, and its key under the block
        parts += _keyed(x, left, top, BLOCK_H, below, d["key"])
        below += KEY_LINE
    if d.get("mark"):
        parts.append(_text(x, below, f"✗ {d['mark']['label']}", "bad"))
    return "".join(parts)


def _free_tag(left: float, top: float) -> list[str]:
    """A free block's FREE tag, at its top right."""
    return [f'<rect x="{left + BLOCK_W - 48}" y="{top + 5}" width="42" height="17" fill="#fff" stroke="#111"/>',
            _text(left + BLOCK_W - 27, top + 18, "FREE", "bold")]


def _keyed(x: float, left: float, top: float, height: float, below: float, key: tuple) -> list[str]:
    """A keyed block's double left edge, and its key under it."""
    return [f'<line x1="{left + off}" y1="{top + 3}" x2="{left + off}" y2="{top + height - 3}" stroke="{KEYED_COLOUR}" stroke-width="2"/>'
            for off in (2.5, 6)] + [_text(x, below - 3, _fit(f"key {key_text(key)}", BLOCK_W + BLOCK_GAP - 6), "mono keyed")]


def _svg_host(x: float, y: float, d: dict) -> str:
    """A host block: its name, FREE tag, slots, pins, and its key under it
    (the host cache). A violation about it (host-key-content) is marked."""
    left, top = x - BLOCK_W / 2, y - HOST_H / 2
    fill, dash = ("url(#hatch)", ' stroke-dasharray="5 3"') if d["free"] else ("#f7f7ef", "")
    marked = bool(d.get("mark"))
    border = ' stroke="#a3001b" stroke-width="4"' if marked else ' stroke="#111" stroke-width="2"'
    parts = [f'<rect x="{left}" y="{top}" width="{BLOCK_W}" height="{HOST_H}" rx="2"{border} fill="{fill}"{dash}/>',
             _text(left + 8, top + 18, f"host h{d['id']}", "bold", "start")]
    if d["free"]:
        parts += _free_tag(left, top)
    tokens = ["_" if t is None else t for t in d["slots"]]
    parts.append(_text(left + 8, top + 44, _fit(" ".join(tokens), BLOCK_W - 16), "mono bold", "start"))
    parts.append(_text(left + 8, top + 70, f"pins {d['pins']}", "bold", "start"))
    below = top + HOST_H + 18
    if d.get("key") is not None:    # in the host cache: drawn as a GPU block's key
        parts += _keyed(x, left, top, HOST_H, below, d["key"])
        below += KEY_LINE
    if marked:
        parts.append(_text(x, below, _fit(f"✗ {d['mark']['label']}", BLOCK_W + BLOCK_GAP), "bad"))
    return "".join(parts)


def _svg_remote(x: float, y: float) -> str:
    """The remote engine: the prefill node a recv comes from, the reader a send goes to."""
    left, top = x - BRANCH_W / 2, y - BRANCH_H / 2
    return (f'<rect x="{left}" y="{top}" width="{BRANCH_W}" height="{BRANCH_H}" rx="2" fill="#f2f2f2" stroke="#4a4a4a" '
            f'stroke-width="2" stroke-dasharray="2 2"/>' + _text(x, top + 20, "remote engine", "bold")
            + _text(x, top + 38, "its NIC: recv, send", "muted"))


def _fit(text: str, width: float, char: float = 7.8) -> str:
    """TEXT cut with an ellipsis to about WIDTH pixels of monospace."""
    most = max(4, int(width / char))
    return text if len(text) <= most else text[:most - 1] + "…"


def branch_label(d: dict) -> str:
    """A branch node's second line: its pos and status, or only that it is
    unborn (no pos, no tables: its parent has not forked it yet)."""
    if d["status"] == "waiting":     # a request not admitted yet: no tables either
        return "waiting (not admitted)"
    return "unborn" if d["status"] == "unborn" else f"pos {d['pos']} · {d['status']}"


def _svg_branch(x: float, y: float, d: dict) -> str:
    """A branch: solid and blue, or dashed and grey while unborn."""
    left, top = x - BRANCH_W / 2, y - BRANCH_H / 2
    unborn = d["status"] in ("unborn", "waiting")
    look = 'fill="#f3f3f3" stroke="#555" stroke-dasharray="6 4"' if unborn else 'fill="#eef3fb" stroke="#0b4f9c"'
    return (f'<rect x="{left}" y="{top}" width="{BRANCH_W}" height="{BRANCH_H}" rx="16" {look} stroke-width="2"/>'
            + _text(x, top + 20, f"branch {d['name']}", "bold") + _text(x, top + 38, branch_label(d), "muted"))


def _line(kind: str, path: str) -> str:
    style = STYLES[kind]
    dashes = f' stroke-dasharray="{style.dash}"' if style.dash else ""
    return f'<path d="{path}" fill="none" stroke="{style.colour}" stroke-width="{style.width}"{dashes} marker-end="url(#arrow-{kind})"/>'


def _svg_table_edges(g: nx.MultiDiGraph, pos: dict) -> list[str]:
    """Branch-to-block edges (tables and kernels). Each branch and each kind
    leaves and lands at its own offset, so parallel edges stay apart."""
    branches = [n for n, d in g.nodes(data=True) if d["kind"] == "branch"]
    offsets = {"working": (-22, -7), "published": (22, 7), "kernel": (0, 0)}   # x: leaving the branch, landing
    out = []
    for u, v, d in g.edges(data=True):
        if d["kind"] not in offsets:       # copies and transfers: drawn on their own
            continue
        leave, land = offsets[d["kind"]]
        (bx, by), (kx, ky) = pos[u], pos[v]
        start = bx + leave
        end = kx + (branches.index(u) - (len(branches) - 1) / 2) * 30 + land
        y0, y1 = by + BRANCH_H / 2, ky - BLOCK_H / 2 - 2
        out.append(_line(d["kind"], f"M{start:.1f},{y0:.1f} L{end:.1f},{y1:.1f}"))
    return out


def _svg_copy_edges(g: nx.MultiDiGraph, pos: dict) -> list[str]:
    """Copies arch under the pool, from the source's bottom to the destination's."""
    out = []
    for i, (u, v, d) in enumerate(edges_of(g, "copy")):
        (sx, sy), (tx, _) = pos[u], pos[v]
        bottom = sy + BLOCK_H / 2
        dip = bottom + 36 + 30 * i
        out.append(_line("copy", f"M{sx - 10:.1f},{bottom:.1f} C{sx - 10:.1f},{dip:.1f} {tx + 10:.1f},{dip:.1f} {tx + 10:.1f},{bottom + 2:.1f}"))
        apex = 0.25 * bottom + 0.75 * dip
        out.append(_text((sx + tx) / 2, apex + 15, f"copy {d['n']} slot{'s' if d['n'] != 1 else ''}: {g.nodes[u]['id']} → {g.nodes[v]['id']}", "halo"))
    return out


def _svg_transfer_edges(g: nx.MultiDiGraph, pos: dict) -> list[str]:
    """Transfers in flight: a store from its block's bottom down to its host
    block, a load back up beside it, a recv from the remote engine down to
    its block's top, a send up from its block's top to the remote engine;
    each labelled at its middle."""
    out = []
    for n, (u, v, d) in enumerate((u, v, d) for u, v, d in g.edges(data=True) if d["kind"] in TRANSFER_STYLE):
        kind = d["kind"]
        (ux, uy), (vx, vy) = pos[u], pos[v]
        if kind == "store":
            x0, y0, x1, y1 = ux - 14, uy + BLOCK_H / 2, vx - 14, vy - HOST_H / 2 - 2
        elif kind == "load":
            x0, y0, x1, y1 = ux + 14, uy - HOST_H / 2, vx + 14, vy + BLOCK_H / 2 + 2
        elif kind == "recv":
            x0, y0, x1, y1 = ux - 20, uy + BRANCH_H / 2, vx + 36, vy - BLOCK_H / 2 - 2
        else:
            x0, y0, x1, y1 = ux + 44, uy - BLOCK_H / 2, vx + 20, vy + BRANCH_H / 2 + 2
        out.append(_line(kind, f"M{x0:.1f},{y0:.1f} L{x1:.1f},{y1:.1f}"))
        t = 0.5 + 0.12 * (n % 3 - 1)        # labels of parallel arrows at different heights
        out.append(_text(x0 + t * (x1 - x0), y0 + t * (y1 - y0), transfer_label(d), "halo"))
    return out


def _svg_legend(x: float, y: float, harness: bool = False, cache: bool = False, transfers: bool = False) -> tuple[str, float]:
    parts = []
    kinds = [(kind, style) for kind, style in (STYLES if transfers else EDGE_STYLE).items() if not (harness and kind == "published")]
    for i, (kind, style) in enumerate(kinds):
        row = y + i * 20
        parts.append(_line(kind, f"M{x},{row} L{x + 46},{row}"))
        parts.append(_text(x + 56, row + 4, HARNESS_TABLE if harness and kind == "working" else style.legend, "", "start"))
    row = y + len(kinds) * 20
    parts.append(f'<rect x="{x}" y="{row - 8}" width="46" height="16" fill="url(#hatch)" stroke="#111" stroke-dasharray="5 3"/>')
    parts.append(_text(x + 56, row + 4, "FREE block (hatched, dashed border)", "", "start"))
    if cache:
        row += 20
        parts.append(f'<rect x="{x}" y="{row - 8}" width="46" height="16" fill="#fff" stroke="#111"/>')
        parts += [f'<line x1="{x + off}" y1="{row - 6}" x2="{x + off}" y2="{row + 6}" stroke="{KEYED_COLOUR}" stroke-width="2.5"/>' for off in (4, 9)]
        parts.append(_text(x + 56, row + 4, "KEYED block, in the prefix cache (double left edge; its key under it)", "", "start"))
    return "".join(parts), row + 12 - y


def to_svg(g: nx.MultiDiGraph, title: str, caption: tuple[str, ...] = ()) -> str:
    """The whole picture: a title, caption lines, the graph and a legend."""
    pos, width, height = layout(g)
    chars = max(40, int((width - 2 * MARGIN) / 7.2))
    lines = [line for text in caption for line in textwrap.wrap(text, chars)]
    header = MARGIN + 22 + 18 * len(lines) + 26
    transfers = bool(g.graph.get("transfers"))
    legend, legend_h = _svg_legend(MARGIN, header + height + 28, bool(g.graph.get("harness")), bool(g.graph.get("cache")),
                                   transfers)
    total = header + height + 28 + legend_h + MARGIN
    pending = {v: f"← {d['token']}" + (" (prefill)" if d.get("prefill") else f" in slot {d['slot']}") for _, v, d in edges_of(g, "kernel")}
    draw = {"block": lambda n, d: _svg_block(*pos[n], d, pending.get(n, "")), "branch": lambda n, d: _svg_branch(*pos[n], d),
            "host": lambda n, d: _svg_host(*pos[n], d), "remote": lambda n, d: _svg_remote(*pos[n])}
    body = [draw[d["kind"]](n, d) for n, d in g.nodes(data=True)]
    text = [_text(MARGIN, MARGIN + 14, title, "title", "start")]
    text += [_text(MARGIN, MARGIN + 36 + 18 * i, line, "", "start") for i, line in enumerate(lines)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{total:.0f}" '
            f'viewBox="0 0 {width:.0f} {total:.0f}" role="img" aria-label="{escape(title)}">'
            f'{_svg_defs(bool(g.graph.get("cache")), transfers)}<rect width="100%" height="100%" fill="#fff"/>{"".join(text)}'
            f'<g transform="translate(0,{header})">{"".join(body)}'
            f'{"".join(_svg_table_edges(g, pos))}{"".join(_svg_copy_edges(g, pos))}{"".join(_svg_transfer_edges(g, pos))}</g>'
            f'{legend}</svg>\n')


# -- DOT ----------------------------------------------------------------------------
def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(g: nx.MultiDiGraph, title: str) -> str:
    """The same graph for Graphviz, with the same line styles and labels."""
    lines = [f"digraph {_dot_quote(title)} {{", f"  label={_dot_quote(title)}; labelloc=t; rankdir=TB;",
             '  node [fontname="DejaVu Sans"]; edge [fontname="DejaVu Sans"];']
    for n, d in g.nodes(data=True):
        if d["kind"] == "branch":
            outline = '"rounded,dashed"' if d["status"] in ("unborn", "waiting") else "rounded"
            label = f"{n}\n{branch_label(d)}"
            lines.append(f"  {_dot_quote(n)} [shape=box, style={outline}, label={_dot_quote(label)}];")
        elif d["kind"] == "remote":
            lines.append(f"  {_dot_quote(n)} [shape=box, style=dotted, label={_dot_quote(n)}];")
        elif d["kind"] == "host":
            slots = " ".join("_" if t is None else t for t in d["slots"])
            key = "" if d.get("key") is None else f"\nkey {key_text(d['key'])}"
            label = f"host h{d['id']}{' FREE' if d['free'] else ''}\n[{slots}]\npins {d['pins']}{key}"
            box_style = ("dashed,filled" if d["free"] else "solid") + (",bold" if d.get("key") is not None else "")
            lines.append(f"  {_dot_quote(n)} [shape=box3d, style={_dot_quote(box_style)}, fillcolor=lightgrey, label={_dot_quote(label)}];")
        else:
            slots = " ".join("_" if t is None else t for t in d["slots"])
            holds = "" if d["holds"] is None else f" · holds {d['holds']}"
            key = "" if d.get("key") is None else f"\nkey {key_text(d['key'])}"
            label = f"{n}{' FREE' if d['free'] else ''}\n[{slots}]\nrefcount {d['refcount']}{holds}{key}"
            box_style = ("dashed,filled" if d["free"] else "solid") + (",bold" if d.get("key") is not None else "")
            lines.append(f"  {_dot_quote(n)} [shape=box, style={_dot_quote(box_style)}, fillcolor=lightgrey, label={_dot_quote(label)}];")
    blocks = " ".join(_dot_quote(n) for n, d in g.nodes(data=True) if d["kind"] == "block")
    lines.append(f"  {{ rank=same; {blocks} }}")
    hosts = " ".join(_dot_quote(n) for n, d in g.nodes(data=True) if d["kind"] == "host")
    if hosts:
        lines.append(f"  {{ rank=same; {hosts} }}")
    for u, v, key, d in g.edges(keys=True, data=True):
        style = STYLES[d["kind"]]
        label = (transfer_label(d) if d["kind"] in TRANSFER_STYLE else
                 {"copy": f"copy {d.get('n')}", "kernel": f"kernel @{d.get('pos')}: {d.get('token')}"}.get(d["kind"], key))
        lines.append(f"  {_dot_quote(u)} -> {_dot_quote(v)} [style={style.dot}, color={_dot_quote(style.colour)}, "
                     f"penwidth={style.width / 1.5:.1f}, label={_dot_quote(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- PNG: the SVG rendered by a headless Chromium -------------------------------------
def find_chromium() -> Optional[str]:
    """The system's Chromium-family browser, if any."""
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def svg_size(svg: str) -> tuple[int, int]:
    head = svg[:svg.index(">")]
    get = lambda name: int(float(head.split(f'{name}="', 1)[1].split('"', 1)[0]))
    return get("width"), get("height")


def to_png(svg: str, out: Path, scale: int = 2) -> Path:
    """Render SVG to OUT at SCALE x its size with headless Chromium (no
    plotting library, the same drawing as the SVG)."""
    browser = find_chromium()
    if browser is None:
        raise SpecError(str(out), "", f"PNG output needs a Chromium browser on PATH ({', '.join(BROWSERS)}); "
                                      "write .svg or .dot instead")
    width, height = svg_size(svg)
    with tempfile.TemporaryDirectory(prefix="cowcheck-png-") as tmp:
        source = Path(tmp) / "graph.svg"
        source.write_text(svg, encoding="utf-8")
        command = [browser, *CHROMIUM_ARGS, f"--user-data-dir={tmp}/profile", "--hide-scrollbars",
                   f"--window-size={width},{height}", f"--force-device-scale-factor={scale}",
                   f"--screenshot={out.resolve()}", source.as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not out.exists():
        raise SpecError(str(out), "", f"{browser} could not render the PNG (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    return out


# -- a picture of one step ----------------------------------------------------------------
def picture(cx: dict, step: int) -> tuple[nx.MultiDiGraph, str, tuple[str, ...]]:
    """The block graph at STEP of a counterexample (0: the initial state),
    with a title and, as caption, the step's action in words (and at the last
    step what broke)."""
    data = stepper_data(cx)
    last = len(data["frames"]) - 1
    if not 0 <= step <= last:
        raise SpecError("--step", "", f"step {step} is out of range: this trace has steps 0 (the initial state) to {last}")
    frame, violation = data["frames"][step], data["violation"]
    title = f"{data['scenario']['name']} ({trace_label(violation)}), step {step} of {last}"
    caption: tuple[str, ...] = (frame["text"], frame["words"])
    if data.get("cache"):
        caption += (f"Prefix cache: {cache_words(frame['state'])}.",)
    if "host" in frame["state"]:
        caption += (f"{host_words(frame['state'])}.",)
    g = block_graph(frame["state"], data["scenario"]["block_size"], bool(data.get("harness")))
    if step == violation["step"]:
        caption += (f"✗ {violation['title']} {violation.get('sentence', '')}".rstrip(),)
        mark = violation.get("mark")
        if mark:
            g.nodes[f"host {mark['host']}" if "host" in mark else f"block {mark['block']}"]["mark"] = mark
    return g, title, caption


def render(cx: dict, step: int, out: Path) -> Path:
    """Write the picture of STEP to OUT as .svg, .png or .dot (by suffix)."""
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise SpecError(str(out), "", f"unknown picture format {suffix or '(none)'!r}; allowed: {', '.join(FORMATS)}")
    g, title, caption = picture(cx, step)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".dot":
        out.write_text(to_dot(g, title), encoding="utf-8")
    elif suffix == ".svg":
        out.write_text(to_svg(g, title, caption), encoding="utf-8")
    else:
        to_png(to_svg(g, title, caption), out)
    return out
