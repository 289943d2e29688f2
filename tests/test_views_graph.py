"""`cowcheck graph`: the block graph of a counterexample's state (networkx),
and its SVG, DOT and PNG pictures."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from cowcheck import cli
from cowcheck.views.graph import block_graph, edges_of, find_chromium, picture, render, svg_size, to_dot, to_svg


ROOT = Path(__file__).resolve().parent.parent
RACE = ROOT / "counterexamples" / "premature-decrement.faithful-output.json"
SVG = "{http://www.w3.org/2000/svg}"


def load() -> dict:
    return json.loads(RACE.read_text())


def state_at(cx: dict, n: int) -> dict:
    return cx["initial"] if n == 0 else cx["steps"][n - 1]["state"]


def invoke(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


def test_the_graph_is_the_state_at_every_step():
    cx = load()
    for n in range(cx["length"] + 1):
        state = state_at(cx, n)
        g = block_graph(state, 2)
        for b in state["blocks"]:
            node = g.nodes[f"block {b['id']}"]
            assert (node["refcount"], node["holds"], node["free"], list(node["slots"])) == \
                   (b["refcount"], b["holds"], b["free"], b["slots"])
        for table in ("working", "published"):
            edges = sorted((u, d["index"], v) for u, v, d in edges_of(g, table))
            assert edges == sorted((f"branch {name}", i, f"block {block}")
                                   for name, br in state["branches"].items() for i, block in enumerate(br[table])), (n, table)
        copies = [(u, v, d["n"]) for u, v, d in edges_of(g, "copy")]
        assert copies == [(f"block {q['copy']['src']}", f"block {q['copy']['dst']}", q["copy"]["n"])
                          for q in state["queue"] if "copy" in q]
        assert len(edges_of(g, "kernel")) == sum("kernel" in q for q in state["queue"])


def race_steps(cx: dict) -> tuple[int, int, int]:
    """The three moments of the race (found by their text, so the test holds
    when the committed trace is regenerated in another order): the decref
    that frees the shared tail while both copies still read it, a's write into
    the reused tail, and the read of the wrong token."""
    decrefs = [s["n"] for s in cx["steps"] if "decref tail [tail=1]" in s["text"]]
    reused = next(s["n"] for s in cx["steps"] if "alloc new [new=1]" in s["text"])
    write = next(s["n"] for s in cx["steps"] if s["n"] > reused and s["action"]["step"] == "write")
    return decrefs[-1], write, cx["length"]


def test_the_race_in_three_steps():
    cx = load()
    freed, write, read = race_steps(cx)
    assert (freed, write, read) == (8, 20, 27), "the tutorial's three pictures (docs/tutorial.md) name these steps: regenerate them"
    g = block_graph(state_at(cx, freed), 2)          # b dropped the last reference: block 1 freed, two copies still read it
    assert g.nodes["block 1"]["free"] and g.nodes["block 1"]["refcount"] == 0
    assert sorted(v for _, v, _ in edges_of(g, "copy")) == ["block 2", "block 3"]
    g = block_graph(state_at(cx, write), 2)          # a reused block 1; its kernel will overwrite p2 while 1 -> 3 is in flight
    [(u, v, k)] = edges_of(g, "kernel")
    assert (u, v, k["token"], k["slot"]) == ("branch a", "block 1", "a2", 0)
    assert [(u, v) for u, v, _ in edges_of(g, "copy")] == [("block 1", "block 3")]
    g, title, caption = picture(cx, read)            # b reads a2 where p2 belongs
    assert g.nodes["block 3"]["slots"] == ("a2", "b1")
    assert g.nodes["block 3"]["mark"]["label"] == "expected p2, read a2"
    assert title == "premature-decrement (faithful-output), step 27 of 27"
    assert caption[0] == cx["steps"][26]["text"] and caption[2].startswith("✗ faithful-output (harm) breaks at step 27.")


def test_svg_is_well_formed_and_labels_what_colour_shows():
    cx = load()
    freed, write, _ = race_steps(cx)
    g, title, caption = picture(cx, freed)
    svg = to_svg(g, title, caption)
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert title in texts
    assert texts.count("FREE") == 3                         # blocks 1, 4 and 5
    assert "refcount 0" in texts and "refcount 2" in texts
    assert "copy 1 slot: 1 → 2" in texts and "copy 1 slot: 1 → 3" in texts
    for legend in ("working table (solid)", "published table (dashed)", "copy in flight (dotted, thick)"):
        assert legend in texts
    # published edges are dashed, working edges solid: 4 of each (2 branches x 2 blocks) plus the legend's
    paths = [p for p in root.iter(f"{SVG}path") if p.get("marker-end")]
    dashed = [p for p in paths if p.get("marker-end") == "url(#arrow-published)"]
    solid = [p for p in paths if p.get("marker-end") == "url(#arrow-working)"]
    assert len(dashed) == len(solid) == 5
    assert all(p.get("stroke-dasharray") for p in dashed) and not any(p.get("stroke-dasharray") for p in solid)
    width, height = svg_size(svg)
    assert (root.get("width"), root.get("height")) == (str(width), str(height))
    # a kernel in flight: its write is written into the target block, its edge dash-dotted
    root = ET.fromstring(to_svg(*picture(cx, write)))
    assert "← a2 in slot 0" in [t.text for t in root.iter(f"{SVG}text")]
    assert sum(p.get("marker-end") == "url(#arrow-kernel)" for p in root.iter(f"{SVG}path")) == 2  # edge + legend


def test_dot_has_the_same_edges():
    write = race_steps(load())[1]
    g, title, _ = picture(load(), write)
    dot = to_dot(g, title)
    assert dot.startswith(f'digraph "premature-decrement (faithful-output), step {write} of 27" {{') and dot.rstrip().endswith("}")
    assert dot.count("->") == g.number_of_edges()
    assert '"block 1" -> "block 3" [style=dotted' in dot
    assert '"branch a" -> "block 1" [style=bold' in dot and 'label="kernel @4: a2"' in dot
    assert dot.count("style=dashed") == len(edges_of(g, "published"))


def test_command_writes_each_format(tmp_path):
    for suffix in (".svg", ".dot"):
        out = tmp_path / f"race{suffix}"
        result = invoke("graph", RACE, "--step", 8, "-o", out)
        assert result.exit_code == 0, result.output
        assert result.output.strip() == f"wrote {out}"
    assert "step 8 of 27" in (tmp_path / "race.svg").read_text()
    result = invoke("graph", RACE, "-o", tmp_path / "last.svg")      # default: the violating step
    assert result.exit_code == 0 and "step 27 of 27" in (tmp_path / "last.svg").read_text()


def test_command_refuses_bad_input_in_one_line(tmp_path):
    cases = (
        (RACE, ("--step", 28), "x.svg", "step 28 is out of range: this trace has steps 0 (the initial state) to 27"),
        (RACE, ("--step", -1), "x.svg", "step -1 is out of range"),
        (RACE, (), "x.gif", "unknown picture format '.gif'; allowed: .svg, .png, .dot"),
        (tmp_path / "missing.json", (), "x.svg", "file not found"),
    )
    for source, options, out, message in cases:
        result = invoke("graph", source, *options, "-o", tmp_path / out)
        assert result.exit_code == 2, (options, out)
        assert result.output.startswith("cowcheck: error: ") and message in result.output
        assert result.output.count("\n") == 1 and not (tmp_path / out).exists()


def test_png_from_the_same_svg(tmp_path):
    if find_chromium() is None:
        pytest.skip("PNG output needs a Chromium browser (apt-get install chromium)")
    cx = load()
    out = render(cx, 8, tmp_path / "race.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == tuple(2 * v for v in svg_size(to_svg(*picture(cx, 8))))


def test_the_tutorial_pictures(tmp_path):
    """The command the tutorial (docs/tutorial.md) names for its three
    pictures of the race."""
    for n in race_steps(load()):
        result = invoke("graph", RACE, "--step", n, "-o", tmp_path / f"premature-decrement-{n}.svg")
        assert result.exit_code == 0, result.output
        ET.parse(tmp_path / f"premature-decrement-{n}.svg")


@pytest.mark.parametrize("trace, step", [("premature-decrement.faithful-output", 8), ("premature-decrement.faithful-output", 20),
                                         ("premature-decrement.faithful-output", 27),
                                         ("offload-eager-store.host-key-content", 11), ("offload-eager-store.host-key-content", 13)])
def test_committed_tutorial_pictures_are_current(trace, step, tmp_path):
    """The tutorial (docs/tutorial.md) and the transfers how-to
    (docs/how-to/transfers.md) show counterexamples/pictures/; they must be
    what this version draws from the committed trace."""
    out = tmp_path / f"{trace.split('.')[0]}-{step}.svg"
    result = invoke("graph", str(ROOT / "counterexamples" / f"{trace}.json"), "--step", str(step), "-o", str(out))
    assert result.exit_code == 0, result.output
    committed = ROOT / "counterexamples" / "pictures" / out.name
    assert out.read_text() == committed.read_text(), "regenerate the pictures with the commands in docs/tutorial.md and docs/how-to/transfers.md"


# -- transfer scenarios: the host tier, the remote engine, transfers as arrows ---------
def _cx(name: str) -> dict:
    return json.loads((ROOT / "counterexamples" / f"{name}.json").read_text())


def test_a_store_in_flight_is_an_arrow_from_its_block_to_its_host_block():
    """S1 under store-ahead, step 11: a's store of block 0 to h0 launched
    while a's prefill is in flight; the host tier is a row of its own."""
    g, _, caption = picture(_cx("offload-eager-store.host-key-content"), 11)
    assert sorted(n for n, d in g.nodes(data=True) if d["kind"] == "host") == ["host 0", "host 1"]
    (u, v, d), = edges_of(g, "store")
    assert (u, v, d["branch"]) == ("block 0", "host 0", "a")
    assert any(line.startswith("Host tier: h0 unkeyed holding [_ _], pins 1") for line in caption)
    svg = to_svg(g, "t", caption)
    ET.fromstring(svg)
    assert "store 0→h0 (a)" in svg and "host h0" in svg and "store in flight, GPU block → host block" in svg
    dot = to_dot(g, "t")
    assert '"block 0" -> "host 0"' in dot and "host h0" in dot


def test_the_host_block_a_violation_is_about_is_marked():
    g, _, caption = picture(_cx("offload-eager-store.host-key-content"), 13)
    assert g.nodes["host 0"]["mark"]["label"] == "holds _ _ ≠ key" and g.nodes["host 0"]["key"] == ("p0", "p1")
    assert any("reports pending" not in line and "h0 keyed (p0 p1) holding [_ _]" in line for line in caption)
    assert "✗ holds _ _ ≠ key" in to_svg(g, "t", caption)


def test_sends_go_to_the_remote_engine_and_an_expired_lease_is_marked():
    g, _, caption = picture(_cx("pd-producer-lease.faithful-output"), 29)
    sends = edges_of(g, "send")
    assert [(u, v, d["expired"]) for u, v, d in sends] == [("block 0", "remote engine", True), ("block 1", "remote engine", True)]
    assert not [n for n, d in g.nodes(data=True) if d["kind"] == "host"]      # a P/D scenario: no host tier
    assert any("lease expired, still in flight: send of a's block 0" in line for line in caption)
    assert "send 0 (a): lease expired" in to_svg(g, "t", caption)


def test_a_recv_comes_from_the_remote_engine_and_a_report_pending_is_said():
    cx = _cx("pd-consumer-abort.faithful-output")
    steps = [s["n"] for s in cx["steps"] if any(q.get("transfer", {}).get("kind") == "recv" for q in s["state"]["queue"])]
    g, _, _ = picture(cx, steps[0])
    (u, v, d), = edges_of(g, "recv")
    assert u == "remote engine" and v.startswith("block ") and d["tokens"] == ("p0", "p1")
    pending = next(s["n"] for s in cx["steps"] if s["state"].get("reports"))
    _, _, caption = picture(cx, pending)
    assert any("reports pending: recv into block" in line for line in caption)


def test_a_picture_without_transfers_has_no_host_tier_in_its_legend():
    g, title, caption = picture(load(), 8)
    assert not g.graph["transfers"] and "host block" not in to_svg(g, title, caption)
