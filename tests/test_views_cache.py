"""Cache scenarios in the views (docs/semantics.md#prefix-caching): the
narration of `explain` and `cowcheck.explain()` (checker/views/words.py,
checker/views/explain.py), the stepper page and the block graph, and the
counterexample file format (counterexample.schema.json), on counterexamples
freshly checked from the shipped cache scenarios (specs/scenarios/).

Two shapes no shipped scenario's shortest traces show are reached with a
custom invariant that breaks exactly there: a full block that stays unkeyed
because another block holds its key (prefix-cache-parallel), and a request
whose atomic admission cannot start for want of free blocks (TIGHT: two
requests with one prompt in a pool of 3)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import cowcheck
from cowcheck.engines.invariants import Invariant, Kind
from cowcheck.model.scenario import load_scenario
from cowcheck.model.state import Status
from cowcheck.schemas import load as load_schema
from cowcheck.views.graph import block_graph, picture, to_dot, to_svg
from cowcheck.views.html import stepper_data, stepper_html
from conftest import check_into, fits, opened, screenshot  # browser is a fixture in conftest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"
SHIPPED = ("no-evict", "touch-after-alloc", "cache-drafts", "vllm-v1-parallel-async", "prefix-cache-evict")
#: the fields of prefix caching, which only a cache scenario's file has
CACHE_FIELDS = {"cache", "key", "verified", "hits", "from", "prompt", "after", "admit"}
TIGHT = """cache = "prefix"
protocol = "prefix-cache"
block_size = 2
pool = 3
[[branch]]
prompt = 3
[[branch]]
prompt = 3
"""


def _duplicate(model, state, final, stuck):
    """A request between operations whose first full block has no key while
    another block holds that block's key: a duplicate that stayed unkeyed."""
    B = model.B
    for i, br in enumerate(state.branches):
        if br.status is Status.RUNNING and br.op is None and br.working and br.verified >= B:
            mine, key = br.working[0], br.seq[:B]
            holders = [b for b, blk in enumerate(state.blocks) if blk.key == key]
            if state.blocks[mine].key is None and holders:
                return {"message": f"block {mine} of {model.names[i]} duplicates block {holders[0]}"}
    return None


def _blocked(model, state, final, stuck):
    """A request waiting with nothing left to wait for but free blocks."""
    for i, br in enumerate(state.branches):
        if br.status is Status.WAITING and len(state.free) < 2 and not any(b.key for b in state.blocks):
            return {"message": f"{model.names[i]} cannot be admitted yet"}
    return None


DUPLICATE = Invariant("duplicate", Kind.DISCIPLINE, "every state", "no full block duplicates a cached one", on_state=_duplicate)
BLOCKED = Invariant("blocked", Kind.DISCIPLINE, "every state", "no request waits for free blocks", on_state=_blocked)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The counterexamples and peak traces of the shipped cache scenarios,
    and the two custom invariants' traces, by file stem."""
    out = tmp_path_factory.mktemp("cache-cx")
    for name in SHIPPED:
        check_into(load_scenario(SCENARIOS / f"{name}.toml"), out)
    (out / "tight.toml").write_text(TIGHT)
    for path, inv in ((SCENARIOS / "prefix-cache-parallel.toml", DUPLICATE), (out / "tight.toml", BLOCKED)):
        result = cowcheck.check(load_scenario(path), invariants=(inv,))
        cowcheck.write_result(result, out)
    return {p.stem: p for p in out.glob("*.json")}


def text_of(files: dict[str, Path], stem: str) -> str:
    inv = {"duplicate": (DUPLICATE,), "blocked": (BLOCKED,)}.get(stem.split(".")[1], ())
    return cowcheck.explain(cowcheck.Counterexample.load(files[stem]), invariants=inv)


def step_words(text: str, step: str) -> list[str]:
    """The sentence after each step header whose action contains STEP."""
    lines = text.splitlines()
    return [lines[i + 1].strip() for i, line in enumerate(lines) if line.startswith("step ") and step in line]


# -- the narration ----------------------------------------------------------------
def test_the_header_describes_the_requests(files):
    text = text_of(files, "no-evict.no-stale-key")
    header = text.splitlines()[0]
    assert "L=0" not in header and "prefix cache" in header
    assert ("3 requests (a: prompt p0 p1 p2, 0 appends; b: prompt x0 x1, 1 append, admitted after a; "
            "c: prompt p0 p1 p2, 0 appends, admitted after b)") in header
    assert "The fork has happened" not in text
    assert ("Nothing has happened yet: every block is free and the cache is empty; every request waits to be admitted "
            "(b only once a is done; c only once b is done).") in text


def test_a_waiting_request_says_why(files):
    text = text_of(files, "no-evict.no-stale-key")
    assert "c: waiting: admitted only once b is done (b is waiting)" in text
    assert "b: waiting: its admission can start now (a is done)" in text
    blocked = text_of(files, "tight.blocked")
    assert ("b: waiting: its atomic admission cannot start yet: it needs 2 free blocks for its prompt, and 1 is free"
            in blocked)


def test_a_lookup_names_its_hits_or_why_there_is_none(files):
    text = text_of(files, "no-evict.faithful-output")
    first, second, third = step_words(text, "lookup")
    assert first == ("a looks up its prompt p0 p1 p2 in the cache, block by block: no hit; (p0 p1) is not in the cache, "
                     "so the lookup stops there. No refcount changes.")
    assert second.startswith("b looks up its prompt x0 x1 in the cache, block by block: no hit is possible")
    assert third == "c looks up its prompt p0 p1 p2 in the cache, block by block: 1 hit, block 0 under (p0 p1). No refcount changes."
    touch = step_words(text, "touch-hits")[-1]
    assert touch.startswith("c takes a reference on each of its hits and maps them as the first entries of its working table [0]: "
                            "block 0 (refcount 0 → 1, taken off the free list: a free block still cached is reused as it is).")


def test_an_eviction_names_the_dropped_key(files):
    text = text_of(files, "touch-after-alloc.refcount-write")
    [alloc] = [w for w in step_words(text, "alloc-prompt") if w.startswith("b ")]
    assert alloc == ("b allocates block 0 for the rest of its prompt (refcount 1), appended to its working table: [0]; "
                     "it evicts block 0, dropping the key (p0 p1) from the cache (block 0 is one of the hits its own "
                     "lookup has just found, not yet touched).")
    assert "block 0: refcount 0->1, holds 0, slots [p0 p1], key (p0 p1) -> none" in text


def test_an_alloc_that_evicts(files):
    """A decode's `alloc` that takes a cached free block (the evicted bind):
    the no-evict trace's alloc-no-evict step, as a correct protocol's alloc
    would have done it."""
    from cowcheck.views.words import action_words
    cx = json.loads(files["no-evict.no-stale-key"].read_text())
    [n] = [s["n"] for s in cx["steps"] if "alloc-no-evict" in s["text"]]
    before, after = cx["steps"][n - 2]["state"], json.loads(json.dumps(cx["steps"][n - 1]["state"]))
    after["blocks"][0]["key"], after["cache"] = None, {k: v for k, v in after["cache"].items() if v != 0}
    action = {"actor": "b", "op": "append", "step": "alloc new", "binds": {"new": 0, "evicted": 0}}
    assert action_words(action, before, after, cx["scenario"]) == (
        "b takes block 0 from the free list as 'new' (refcount 1), evicting it: the key (p0 p1) leaves the cache.")


def test_a_free_cached_block_and_the_cache_map(files):
    text = text_of(files, "no-evict.no-stale-key")
    assert ("Block 0 is now FREE but stays cached under (p0 p1): a later request may hit it until an allocation evicts it."
            in text)
    assert "block 0: refcount 1->0, holds 0, slots [p0 p1], key (p0 p1) (free, cached)" in text
    assert "cache: (p0 p1) → block 0 (free: evictable); free list [1, 0]" in text
    assert "cache: (p0 p1) → block 0; (x0 x1) → block 1; free list []" in text


def test_alloc_no_evict_leaves_the_stale_key(files):
    text = text_of(files, "no-evict.no-stale-key")
    [stale] = step_words(text, "alloc-no-evict")
    assert stale == ("b takes block 0 from the free list as 'new' (refcount 1) without evicting it: the block keeps its key "
                     "(p0 p1), so the cache still maps (p0 p1) to a block b now owns and will write (a stale key).")
    assert text.rstrip().endswith("block 0 was handed out while the cache still maps the key (p0 p1) to it")


def test_a_prefill_and_its_completion(files):
    text = text_of(files, "no-evict.faithful-output")
    launch = step_words(text, "prefill")
    assert launch[0] == ("a launches its prefill: one kernel that will write p0 p1 p2 at positions 0 to 2 into blocks 0, 1 "
                         "through its published table [0, 1], then read positions 0 to 2. pos 0 → 3, verified 3.")
    assert launch[-1] == ("c launches its prefill: one kernel that will write p2 at position 2 into block 1 through its "
                          "published table [0, 1], then read positions 0 to 2; positions 0 to 1 are its cache hits, not "
                          "recomputed. pos 0 → 3, verified 3.")
    assert ("The device completes a's prefill kernel: it writes p0 p1 p2 (positions 0 to 2) into blocks 0, 1, then reads "
            "positions 0 to 2 through its snapshot.") in text


def test_keying_names_each_block_and_its_key(files):
    text = text_of(files, "cache-drafts.verified-only-cached")
    assert ("a keys its full blocks, counting its verified positions (verified 2): block 0 under (p0 p1); the cache now "
            "maps each key to its block.") in step_words(text, "cache-full")
    assert step_words(text, "cache-drafts")[-1] == (
        "a keys its full blocks, counting every position it has written, drafts included (pos 4, verified 2): "
        "block 1 under (p0 p1 a1 a2); the cache now maps each key to its block.")
    assert "It is a draft: verified stays 2 until the verifier accepts it." in text


def test_verify_and_rewind_update_verified(files):
    text = text_of(files, "cache-drafts.cache-immutable")
    [verify] = step_words(text, "verify")
    assert verify.endswith("a rolls back. Verified: 2 → 3.")
    [rewind] = step_words(text, "rewind")
    assert rewind.endswith("Verified stays 3.")
    assert text.rstrip().endswith("which the cache holds under the key (p0 p1 a1 a2) (that slot must keep a2)")


def test_a_duplicate_stays_unkeyed(files):
    text = text_of(files, "prefix-cache-parallel.duplicate")
    [last] = [w for w in step_words(text, "cache-full") if "duplicate" in w]
    assert last == ("b keys no block, counting its verified positions (verified 3): no full block of its working table is new "
                    "to the cache. Block 2 is a full duplicate: block 0 already holds (p0 p1), so block 2 stays unkeyed.")


def test_every_cache_step_has_words(files):
    """No step of a cache trace falls through to the bare "a: step." form."""
    for stem in files:
        text = text_of(files, stem)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("step "):
                words = lines[i + 1].strip()
                assert words.endswith("."), (stem, line)
                assert not words.startswith(f"{line.split()[2]}: "), (stem, words)


# -- the file format -----------------------------------------------------------------
def _keys(node) -> set:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def test_cache_files_validate_and_plain_ones_have_no_cache_field(files):
    validator = Draft202012Validator(load_schema("counterexample"))
    for stem, path in files.items():
        data = json.loads(path.read_text())
        errors = [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(data)]
        assert not errors, (stem, errors)
        assert data["scenario"]["cache"] == "prefix" and data["initial"]["cache"] == {}
    plain = json.loads((ROOT / "counterexamples" / "premature-decrement.faithful-output.json").read_text())
    assert not (_keys({k: v for k, v in plain.items() if k != "scenario"}) & CACHE_FIELDS)
    assert not (_keys(plain["scenario"]["branch"]) & CACHE_FIELDS) and not ({"cache", "admit"} & _keys(plain["scenario"]))
    assert not any(s["action"]["op"] == "admit" or s["state"] and "waiting" in str(s["state"]["branches"]) for s in plain["steps"])
    # the schema refuses a cache field in a file without a cache, and a cache file without its fields
    for where, change in (("initial", lambda d: d["initial"].update(cache={})),
                          ("block key", lambda d: d["initial"]["blocks"][0].update(key=None)),
                          ("verified", lambda d: d["steps"][0]["state"]["branches"]["a"].update(verified=0)),
                          ("prompt", lambda d: d["scenario"]["branch"][0].update(prompt=["p0"]))):
        broken = json.loads(json.dumps(plain))
        change(broken)
        assert list(validator.iter_errors(broken)), where
    cache = json.loads(files["no-evict.no-stale-key"].read_text())
    del cache["steps"][3]["state"]["blocks"][0]["key"]
    assert list(validator.iter_errors(cache))


# -- the pictures and the page ---------------------------------------------------------
def test_the_graph_marks_keyed_blocks_and_gives_the_cache(files):
    cx = json.loads(files["no-evict.cache-immutable"].read_text())
    g, title, caption = picture(cx, cx["length"])
    assert g.nodes["block 0"]["key"] == ("p0", "p1") and g.graph["cache"]
    assert "Prefix cache: (p0 p1) → block 0; (x0 x1) → block 1." in caption
    svg = to_svg(g, title, caption)
    ET.fromstring(svg)
    assert "key (p0 p1)" in svg and "KEYED block, in the prefix cache" in svg
    assert "key (p0 p1)" in to_dot(g, title)
    # a prefill in flight is drawn into every block it writes
    [prefill] = [s["n"] for s in cx["steps"] if s["text"].startswith("a (admit): prefill")]
    g = block_graph(cx["steps"][prefill - 1]["state"], 2)
    assert sorted(v for _, v, d in g.edges(data=True) if d["kind"] == "kernel") == ["block 0", "block 1"]


def test_the_stepper_data_of_a_cache_trace(files):
    cx = json.loads(files["no-evict.no-stale-key"].read_text())
    data = stepper_data(cx)
    assert data["cache"] is True
    [stale] = [f for f in data["frames"] if "alloc-no-evict" in f["text"]]
    assert "(a stale key)" in stale["words"] and stale["touched"] == [0]
    html = stepper_html(cx)
    assert "Prefix cache" in html and "L=0" not in html and "requests a (prompt p0 p1 p2" in html
    plain = stepper_html(json.loads((ROOT / "counterexamples" / "premature-decrement.faithful-output.json").read_text()))
    assert 'id="cache-panel"' not in plain and '"cache":false' in plain


def test_the_page_shows_the_cache_map(browser, files, tmp_path):
    cx = json.loads(files["no-evict.cache-immutable"].read_text())
    page_file = tmp_path / "no-evict.html"
    page_file.write_text(stepper_html(cx))
    [keyed] = [s["n"] for s in cx["steps"] if s["text"].startswith("a (admit): cache-full")]
    [freed] = [s["n"] for s in cx["steps"] if s["text"].startswith("a (finish): decref-all")]
    with opened(browser, page_file) as page:
        assert page.inner_text("#cache-rows") == "empty: no block has a key"
        for _ in range(keyed):
            page.keyboard.press("ArrowRight")
        rows = page.locator("#cache-rows tr")
        assert rows.count() == 1
        assert rows.nth(0).inner_text().split("\t") == ["(p0 p1)", "block 0", "in use (refcount 1)"]
        block = page.locator('.block[data-block="0"]')
        assert "keyed" in block.get_attribute("class") and block.locator(".keyed-tag").inner_text() == "KEYED"
        assert block.locator(".key").inner_text() == "key (p0 p1)"
        for _ in range(freed - keyed):
            page.keyboard.press("ArrowRight")
        assert "FREE, still cached" in rows.nth(0).inner_text()
        assert "Free but still cached: block 0" in page.inner_text("#free-list")
        assert "waiting: its admission can start now (a is done)" in page.inner_text('[data-branch="b"]')
        screenshot(page, "cache-stepper-freed")
        page.keyboard.press("End")
        assert page.is_visible("#violation") and "cache-immutable (discipline)" in page.inner_text("#violation")
        assert block.locator(".slot.marked").get_attribute("data-slot") == "0"
    with opened(browser, page_file, width=480) as page:
        for _ in range(keyed):
            page.keyboard.press("ArrowRight")
        assert fits(page, 480)
        page.keyboard.press("End")
        assert fits(page, 480)
        screenshot(page, "cache-stepper-480-violation")
