"""The views of a trace (`explain`, the stepper page, `graph`) on traces of
allocator code through the engine harness (docs/semantics.md#engine-harness):
each host call narrated as the call and what followed from it, the header
naming the allocator, one table per branch. Three traces: a plain
copy-on-write race on an asynchronous device, a fork with a pruned child and
a speculation whose verifier rejects a draft, and a call that raises
(allocator-error). The same views on protocol traces are tested in
tests/test_views_html.py, tests/test_views_graph.py and tests/test_views_programs.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

import cowcheck
from cowcheck.api import with_allocator
from cowcheck.cli import main
from cowcheck.views.graph import block_graph, picture, to_dot, to_svg
from cowcheck.views.html import stepper_data, stepper_html
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import allocated
from cowcheck.views.explain import explain_text
from cowcheck.views.words import action_words, doing, initial_words
from cowcheck.views.pages import decoded_on_pool, page_data
from cowcheck.traces.replay import replay
from cowcheck.engines.counterexample import Counterexample
from conftest import opened, screenshot  # browser is a fixture in conftest
from toy_allocators import TOY, double_free

TOY_FILE = TOY

SVG = "{http://www.w3.org/2000/svg}"


CORRECT, BROKEN = f"{TOY}:manager", f"{TOY}:double_free"


# -- the traces -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def race() -> Counterexample:
    """The plain copy-on-write race: a's append copies the shared tail and
    launches its kernel at once, and on an asynchronous device the kernel
    may complete before the copy (a reads an empty slot)."""
    cx = cowcheck.check(make_scenario(2, 3, [2, 2], device="async", name="race"), allocator=CORRECT) \
        .verdicts["faithful-output"].counterexample
    assert cx.length == 2 and cx.scenario.allocator == CORRECT
    return cx


FORK = [{"program": ["fork b", "speculate 2", "append"]}, {"appends": 1, "parent": "a", "may_cancel": True}]

#: the fork trace, one host call or completion at a time: (the action's text contains, its binds include)
SCRIPT = [("a (fork)", {}), ("b (append)", {}), ("b (cancel)", {}), ("copy-complete", {}), ("kernel-complete", {}),
          ("a (append)", {}), ("kernel-complete", {}), ("a (append)", {}), ("kernel-complete", {}),
          ("a (rollback)", {"accepted": 1}), ("a (append)", {}), ("kernel-complete", {}), ("a (finish)", {})]


@pytest.fixture(scope="module")
def spec() -> Counterexample:
    """A fork and a speculation, run to the end as a peak-kind trace: a
    forks b, b's append copies the shared tail (block 1 -> 2) and b is
    pruned with its kernel in flight; a drafts a1 (in place) and a2 (in a
    new block), the verifier keeps a1, the rollback drops block 2, a3 is
    written into it again, and a finishes."""
    scenario, model = with_allocator(make_scenario(2, 3, FORK, device="async", name="spec"), CORRECT)
    state = initial = model.init_state()
    run = []
    for text, binds in SCRIPT:
        tr = next(t for t in model.successors(state)
                  if text in str(t.action) and binds.items() <= dict(t.action.binds).items())
        run.append((tr.action, tr.state))
        state = tr.state
    assert model.is_final(state)
    return Counterexample.from_run(scenario, initial, run, peak=allocated(state))


@pytest.fixture(scope="module")
def error() -> Counterexample:
    """A call that raises: DoubleFree's copy-on-write append frees the
    shared tail, the other branch's free then fires the assertion."""
    cx = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream", name="double"), allocator=BROKEN) \
        .verdicts["allocator-error"].counterexample
    assert cx.actions[-1].op == "finish" and dict(cx.actions[-1].binds)["call"] == "free('b')"
    return cx


def as_file(cx: Counterexample) -> dict:
    """The JSON a page is drawn from (what `cowcheck html` reads back)."""
    return page_data(cx, replay(cx))


def narrated(cx: Counterexample) -> dict[int, list[str]]:
    """explain's text cut into its steps: {0: header and initial state, n: step n}."""
    out: dict[int, list[str]] = {}
    n = 0
    for line in explain_text(cx, width=1000).splitlines():
        if line.startswith("step "):
            n = int(line.split()[1])
        out.setdefault(n, []).append(line.strip())
    return out


def words(cx: Counterexample) -> list[str]:
    """The sentence of every step, as the page has it (index 0: the initial state)."""
    return [frame["words"] for frame in stepper_data(as_file(cx))["frames"]]


# -- explain ----------------------------------------------------------------------------------
def test_explain_names_the_allocator_and_tells_a_copy_on_write_append(race):
    text = narrated(race)
    assert text[0][0].startswith(f"race: allocator {CORRECT} (through the engine harness: each host call is one action), "
                                 "device async")
    assert "protocol" not in " ".join(text[0])
    assert "The allocator's start(['a', 'b'], 3) gives the root branches a and b the prompt's blocks [0, 1], shared." in text[0]
    who = race.actions[0].actor
    assert text[1][1] == (f"{who} calls append('{who}', '{who}1'): the allocator returns one copy, block 1 → block 2 (all 2 slots), "
                          f"launched first; then {who}'s kernel for position 3, which writes {who}1 into block 2, slot 1, is "
                          f"launched through its table [0, 2]. The allocator's refcounts: block 1 from 2 to 1, block 2 from 0 "
                          f"to 1 (block 2 taken from the free list).")
    # the blocks whose refcounts changed, and every branch with its one table, between host calls
    assert "block 1: refcount 2->1, slots [p2 _]" in text[1] and "block 2: refcount 0->1, slots [_ _]" in text[1]
    assert f"{who}: pos 4, table [0, 2]; between host calls (1 of 2 appends done)" in text[1]
    assert text[2][1].startswith(f"The device completes {who}'s kernel: it writes {who}1 into block 2, slot 1")
    assert "faithful-output breaks at step 2." in text[2]
    assert not any("Traceback" in line or ", holds" in line for lines in text.values() for line in lines)   # no holds


def test_explain_tells_a_fork_a_pruned_child_a_rollback_and_a_finish(spec):
    text = narrated(spec)
    assert ("The allocator's start(['a'], 3) gives the root branch a the prompt's blocks [0, 1]; "
            "b is unborn until a forks it.") in text[0]
    assert text[1][1] == ("a calls fork('a', 'b'): b is born with a's sequence p0 p1 p2 (pos 3) and its own table [0, 1], "
                          "the same blocks as a's. The allocator's refcounts: block 0 from 1 to 2, block 1 from 1 to 2.")
    assert "b: pos 3, table [0, 1], sequence p0 p1 p2; between host calls (0 of 1 operations done; next: append)" in text[1]
    assert text[2][1].startswith("b calls append('b', 'b1'): the allocator returns one copy, block 1 → block 2")
    assert text[3][1] == ("b is pruned: it calls free('b') with its table [0, 2], while its kernel for position 3 (b1) is "
                          "still in flight. The allocator's refcounts: block 0 from 2 to 1, block 2 from 1 to 0. "
                          "Block 2 is now FREE: it is on the allocator's free list.")
    assert "b: pos 4, table [], sequence p0 p1 p2 b1; cancelled" in text[3]
    assert text[8][1].startswith("a calls append('a', 'a2'): the allocator returns no copy; then a's kernel for position 4, "
                                 "which writes a2 into block 2, slot 0, is launched through its table [0, 1, 2].")
    assert text[10][1] == ("The verifier accepts 1 of a's 2 drafts; a calls rollback('a', 1): it drops a2, its pos goes back "
                           "to 4 and its table is now [0, 1] (what the rejected draft's kernel wrote stays in its slot, as "
                           "garbage past pos). The allocator's refcounts: block 2 from 1 to 0. "
                           "Block 2 is now FREE: it is on the allocator's free list.")
    assert "a: pos 4, table [0, 1], sequence p0 p1 p2 a1; between host calls (4 of 5 operations done; next: append)" in text[10]
    assert text[13][1].startswith("a has finished: it checks its output, positions 0 to 4 read through its table [0, 1, 2], "
                                  "then calls free('a'). The allocator's refcounts: block 0 from 1 to 0")
    assert text[13][1].endswith("are now FREE: they are on the allocator's free list.")
    assert "reaches the peak of 0 allocated blocks at step 13" in text[13]


def test_explain_tells_a_call_that_raised(error):
    text = narrated(error)
    n = error.length
    assert text[0][0].startswith(f"double: allocator {BROKEN} ")
    assert text[n][1].startswith("b has finished: it checks its output, positions 0 to ")
    assert ("then calls free('b'), which raises AssertionError: Double free! block 1 — allocator-error: the allocator's "
            "own code fails, and no state follows.") in text[n][1]
    frames = error.witness["traceback"]
    # the action, its sentence; then the verdict (no state follows the call) and the allocator's traceback
    assert len(text[n]) == 2 + 4 + 1 + len(frames)
    assert f"allocator-error breaks at step {n}." in text[n]
    assert f"what happened: free('b') raised AssertionError: Double free! block 1 at {error.witness['at']}" in text[n]
    assert text[n][-1 - len(frames):] == ["the allocator's traceback (innermost last):"] + frames


def test_an_allocator_error_keeps_the_allocators_own_file_line_and_frames(tmp_path):
    """Only the allocator's frames, labelled the same on every machine: a
    module by its name, a file the scenario names by path by its path
    relative to the scenario's folder (its name when outside it)."""
    toy_line = next(i for i, line in enumerate(TOY_FILE.read_text().splitlines(), 1) if "Double free! block" in line)
    by_module = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=double_free).verdicts["allocator-error"]
    frames = by_module.witness["traceback"]
    assert by_module.witness["at"] == f"toy_allocators:{toy_line}"
    assert frames[-1] == f'toy_allocators:{toy_line} in _dec: assert self.rc[b] > 0, f"Double free! block {{b}}"'
    assert frames[0].startswith("toy_allocators:") and " in free: " in frames[0]
    assert not any("cowcheck" in f or "harness" in f for f in frames)
    assert by_module.witness["message"].endswith(f" at toy_allocators:{toy_line}")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "alloc.py").write_text(TOY_FILE.read_text())
    (tmp_path / "s.toml").write_text('allocator = "code/alloc.py:double_free"\ndevice = "stream"\nblock_size = 2\nprompt = 3\n'
                                     "[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n")
    by_path = cowcheck.check(tmp_path / "s.toml").verdicts["allocator-error"]
    assert by_path.witness["at"] == f"code/alloc.py:{toy_line}"
    assert [f.split(":", 1)[1] for f in by_path.witness["traceback"]] == [f.split(":", 1)[1] for f in frames]
    outside = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=f"{tmp_path}/code/alloc.py:double_free")
    assert outside.verdicts["allocator-error"].witness["at"] == f"alloc.py:{toy_line}"


def test_explain_says_when_a_block_in_use_stays_free():
    scenario, model = with_allocator(make_scenario(2, 3, [1, 1], device="stream", name="released"), f"{TOY}:released")
    initial = model.init_state()
    tr = next(t for t in model.successors(initial) if t.action.actor == "a")
    cx = Counterexample.from_run(scenario, initial, [(tr.action, tr.state)], peak=allocated(tr.state))
    assert narrated(cx)[1][1].endswith("The allocator's refcounts: block 1 from 2 to 1. Block 2 stays FREE: the allocator "
                                       "keeps it on its free list, though it is a copy's destination and in a's table.")


def test_the_explain_command_on_harness_files(tmp_path, race, spec, error):
    for cx in (race, spec, error):
        path = cx.write(tmp_path / f"{cx.scenario.name}.json")
        result = CliRunner().invoke(main, ["explain", str(path)])
        assert result.exit_code == 0, result.output
        assert f"allocator {cx.scenario.allocator}" in " ".join(result.output.split())


# -- the stepper page ---------------------------------------------------------------------------
def test_the_page_data_shares_explains_sentences(race, spec, error):
    for cx in (race, spec, error):
        text = narrated(cx)
        frames = words(cx)
        assert frames[0] in text[0]
        for n in range(1, cx.length + 1):
            assert frames[n] == text[n][1], n


def test_the_page_names_the_allocator_and_one_table_per_branch(spec):
    data = stepper_data(as_file(spec))
    assert data["protocol"]["name"] == CORRECT and data["subject"] == "allocator" and data["harness"] is True
    assert "engine harness" in data["protocol"]["description"]
    assert data["frames"][1]["doing"] == {"a": "between host calls (1 of 5 operations done; next: draft 1 of 2)",
                                          "b": "between host calls (0 of 1 operations done; next: append)"}
    assert data["frames"][0]["doing"]["b"] == "unborn: not forked yet (its parent a brings it to life with a fork)"
    assert data["frames"][2]["touched"] == [1, 2]              # the copy's source and destination
    page = stepper_html(as_file(spec))
    assert f"allocator <b>{CORRECT}</b>" in page
    assert "what the allocator's table(branch) returns" in page and "published table (what" not in page


def test_doing_and_initial_words_without_a_protocol():
    branch = {"status": "running", "done": 1, "op": None}
    assert doing(None, {"appends": 2}, branch) == "between host calls (1 of 2 appends done)"
    assert doing(None, {"program": ["append", "speculate 1"]}, branch) == \
        "between host calls (1 of 3 operations done; next: draft 1 of 1)"
    scenario = {"allocator": "m:f", "prompt": 0, "branch": [{"appends": 1}]}
    initial = {"branches": {"a": {"working": []}}}
    assert initial_words(scenario, initial) == "The allocator's start(['a'], 0) gives the root branch a no block (the prompt is empty)."


def test_words_for_several_copies_and_a_table_that_misses_the_position():
    blocks = [{"id": i, "refcount": 1, "holds": 0, "slots": [None, None], "free": False} for i in range(4)]
    state = {"blocks": blocks, "free": [], "queue": [],
             "branches": {"a": {"status": "running", "pos": 3, "working": [0, 1], "sequence": ["p0", "p1", "p2"]}}}
    action = {"actor": "a", "op": "append", "step": "append",
              "binds": {"token": "a1", "copy_src": [0, 1], "copy_dst": [2, 3], "table": [2, 3]}}
    assert action_words(action, state, state) == (
        "a calls append('a', 'a1'): the allocator returns 2 copies, block 0 → block 2, block 1 → block 3 (all 2 slots "
        "each), launched first in that order; then a's kernel for position 3, which writes a1 into block 3, slot 1, is "
        "launched through its table [2, 3]. No refcount changes.")
    action["binds"] = {"token": "a1", "copy_src": [], "copy_dst": [], "table": [0]}
    assert action_words(action, state, None) == (
        "a calls append('a', 'a1'): the allocator returns no copy; but its table [0] has no block for position 3: "
        "no kernel is launched (kernel-table-miss).")


def test_the_html_command_with_the_pool_replay(tmp_path, race, error):
    for cx in (race, error):
        path = cx.write(tmp_path / f"{cx.scenario.name}.json")
        out = tmp_path / f"{cx.scenario.name}.html"
        result = CliRunner().invoke(main, ["html", str(path), "-o", str(out)])
        assert result.exit_code == 0, result.output
        page = out.read_text()
        assert f"allocator <b>{cx.scenario.allocator}</b>" in page
    decoded = decoded_on_pool(race)
    assert decoded[2]["diverged"] and decoded[2]["expected"] == "p2"        # the slot the copy had yet to fill


def test_check_html_writes_harness_pages_and_an_index_naming_the_allocator(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'allocator = "{CORRECT}"\nblock_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n')
    result = CliRunner().invoke(main, ["check", str(scenario), "--out", str(tmp_path / "cx"), "--html", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    index = (tmp_path / "site" / "index.html").read_text()
    assert f"allocator <b>{CORRECT}</b>" in index
    page = (tmp_path / "site" / "s.faithful-output.html").read_text()
    assert "calls append(" in page and f"allocator <b>{CORRECT}</b>" in page


# -- the block graph ---------------------------------------------------------------------------
def test_the_graph_draws_one_table_per_branch_and_the_calls_in_words(spec):
    data = as_file(spec)
    g = block_graph(data["initial"], 2, harness=True)
    assert g.nodes["branch b"]["status"] == "unborn" and g.degree("branch b") == 0
    assert sorted(k for _, _, k in g.edges(keys=True)) == ["table[0]", "table[1]"]
    g, title, caption = picture(data, 1)
    assert title == "spec (peak), step 1 of 13"
    assert caption[1].startswith("a calls fork('a', 'b'): b is born with a's sequence p0 p1 p2 (pos 3)")
    assert {d["kind"] for _, _, d in g.edges(data=True)} == {"working"}      # no published edges
    assert sorted(v for u, v in g.edges() if u == "branch b") == ["block 0", "block 1"]
    svg = to_svg(g, title, caption)
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "table (solid): what table(branch) returns" in texts
    assert not any(t and t.startswith(("holds", "published")) for t in texts)
    dot = to_dot(g, title)
    assert 'label="table[0]"' in dot and "holds" not in dot
    g, _, caption = picture(data, 3)
    assert caption[1].startswith("b is pruned: it calls free('b') with its table [0, 2], while its kernel for position 3")
    assert [d["token"] for _, _, d in g.edges(data=True) if d["kind"] == "kernel"] == ["b1"]   # still in flight


def test_the_graph_of_a_call_that_raised(tmp_path, error):
    data = as_file(error)
    g, title, caption = picture(data, error.length)
    assert caption[1].startswith("b has finished") and "raises AssertionError: Double free!" in caption[1]
    assert caption[2].startswith(f"✗ allocator-error (harm) breaks at step {error.length}.")
    path = error.write(tmp_path / "error.json")
    for suffix in (".svg", ".dot"):
        result = CliRunner().invoke(main, ["graph", str(path), "-o", str(tmp_path / f"g{suffix}")])
        assert result.exit_code == 0, result.output
    ET.fromstring((tmp_path / "g.svg").read_text())


# -- in the browser ----------------------------------------------------------------------------
READ = """() => ({
  words: document.querySelector("#action .words").textContent,
  meta: document.querySelector(".meta").textContent,
  branches: Object.fromEntries([...document.querySelectorAll("#branches .branch")].map(b => [b.dataset.branch, {
    tables: [...b.querySelectorAll(".table:not(.sequence) .table-label")].map(l => l.textContent),
    chips: [...b.querySelectorAll(".table:not(.sequence) .chip")].map(c => Number(c.dataset.block)),
    doing: b.querySelector(".doing").textContent,
  }])),
  holds: document.querySelectorAll("#pool .holds").length,
  refcounts: [...document.querySelectorAll("#pool .refcount")].map(r => r.textContent),
  free: document.getElementById("free-list").textContent,
})"""


def test_the_stepper_steps_through_host_calls(browser, tmp_path, spec):
    data = as_file(spec)
    page_file = tmp_path / "spec.html"
    page_file.write_text(stepper_html(data, decoded_on_pool(spec)))
    expected = words(spec)
    with opened(browser, page_file) as page:
        seen = page.evaluate(READ)
        assert seen["meta"].startswith(f"allocator {CORRECT} · device async")
        assert seen["words"] == expected[0] and seen["holds"] == 0
        for n in range(1, spec.length + 1):
            page.keyboard.press("ArrowRight")
            seen = page.evaluate(READ)
            state = data["steps"][n - 1]["state"]
            assert seen["words"] == expected[n], n
            assert seen["refcounts"] == [f"refcount {b['refcount']}" for b in state["blocks"]]
            for name, br in state["branches"].items():
                if br["status"] != "unborn":
                    assert seen["branches"][name]["tables"] == ["table"] and seen["branches"][name]["chips"] == br["working"]
            assert seen["free"] == "Free blocks, as the allocator reports them: " + ", ".join(map(str, state["free"])) + "."
            if n == 3:
                screenshot(page, "stepper-harness-prune")


def test_the_stepper_shows_allocator_error(browser, tmp_path, error):
    page_file = tmp_path / "error.html"
    page_file.write_text(stepper_html(as_file(error)))
    with opened(browser, page_file) as page:
        page.click("#goto-violation")
        assert page.inner_text("#position") == f"step {error.length} of {error.length}"
        assert "raises AssertionError: Double free! block 1 — allocator-error" in page.inner_text("#action .words")
        panel = page.inner_text("#violation")
        assert f"allocator-error (harm) breaks at step {error.length}" in panel
        assert "free('b') raised AssertionError: Double free! block 1" in panel
        assert "the allocator raises nothing but out-of-blocks" in panel
        assert "The allocator's traceback (innermost last):" in panel
        assert page.inner_text("#violation pre.traceback").splitlines() == error.witness["traceback"]
        screenshot(page, "stepper-harness-allocator-error")


def test_a_kernel_that_reads_an_empty_slot_reads_underscore_not_none():
    """Item 20: an empty slot is `_` in the narration and on the page, as everywhere else."""
    scenario = make_scenario(4, 6, [1, 1], device="async")
    result = cowcheck.check(scenario, allocator="cowcheck.specs.allocators.engine:correct")
    cx = result.verdicts["faithful-output"].counterexample
    assert cx.witness["read"] is None               # the copy of the tail had not landed
    text = cowcheck.explain(cx)
    assert "and read _ (expected" in text and "None" not in text
    page = cowcheck.page(cx, pool=False)
    assert "read None" not in page and "read _" in page
