"""Branch programs in the views of a trace: `explain` (checker/views/explain.py),
the stepper page (checker/views/html.py, checker/views/assets/stepper.js) and the block
graph (checker/views/graph.py) say in words what a fork's increments, a birth
(`share`), a verify and a rollback's rewind and trim did, and show a child
that is not forked yet as unborn, never as a running branch with empty
tables.

The traces are checked here: fork-share-first's wrong output (the reference
row of docs/semantics.md), pipelined-rollback freeing a block a draft's
kernel still writes, and a correct rollback that keeps one of two drafts;
and every committed counterexample of a branch program gets its words."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cowcheck import check
from cowcheck.views.graph import block_graph, picture, to_dot, to_svg
from cowcheck.views.html import stepper_data, stepper_html
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import allocated
from cowcheck.model.system import ProtocolModel
from cowcheck.views.explain import explain_text
from cowcheck.views.words import doing, program_labels, program_summary
from cowcheck.views.pages import decoded_on_pool, page_data
from cowcheck.traces.replay import replay
from cowcheck.engines.counterexample import Counterexample
from conftest import opened, screenshot  # browser is a fixture in conftest
from test_traces_pool import FORK, SPECULATE

SVG = "{http://www.w3.org/2000/svg}"
CX = Path(__file__).resolve().parent.parent / "counterexamples"


@pytest.fixture(scope="module")
def fork() -> Counterexample:
    """fork-share-first's wrong output in 32 actions: c is born (share)
    before a increments, finishes, and its decref-all frees a's tail."""
    scenario = make_scenario(2, 3, FORK, "fork-share-first", name="fork-share-first")
    cx = check(scenario).verdicts["faithful-output"].counterexample
    assert cx.length == 32
    return cx


@pytest.fixture(scope="module")
def late_draft() -> Counterexample:
    """A pipelined rollback (appends end at their write, the rollback does
    not wait for the drafts' kernels): the verifier rejects both drafts and
    trim frees the block a2's kernel has yet to write."""
    scenario = make_scenario(2, 3, SPECULATE, "pipelined-rollback", name="late-draft")
    cx = check(scenario).verdicts["no-use-after-free"].counterexample
    assert cx.length == 17
    return cx


@pytest.fixture(scope="module")
def rollback() -> Counterexample:
    """A correct rollback run to the end, as a peak-kind trace: a drafts a1
    a2 (B = 2, L = 3: a1 fills the prompt's tail, a2 opens block 2), the
    verifier keeps a1, rewind and trim give block 2 back, and a3 is written
    into it again, where a2 was."""
    scenario = make_scenario(2, 3, [{"program": ["speculate 2", "append"]}], "cow", name="rollback")
    model = ProtocolModel(scenario)
    state = initial = model.init_state()
    run = []
    while not model.is_final(state):
        tr = next(t for t in model.successors(state) if dict(t.action.binds).get("accepted", 1) == 1)
        run.append((tr.action, tr.state))
        state = tr.state
    return Counterexample.from_run(scenario, initial, run, peak=allocated(state))


def as_file(cx: Counterexample) -> dict:
    """The JSON a page is drawn from (what `cowcheck html` reads back)."""
    return page_data(cx, replay(cx))


def step_of(cx: Counterexample, step: str) -> int:
    """The number of the first action whose step is STEP (1-based), so the
    tests hold if the search finds another trace of the same length."""
    return next(n for n, a in enumerate(cx.actions, 1) if a.step == step)


def narrated(cx: Counterexample) -> dict[int, list[str]]:
    """explain's text cut into its steps: {0: the initial state, n: step n}."""
    out: dict[int, list[str]] = {}
    n = 0
    for line in explain_text(cx, width=400).splitlines():
        if line.startswith("step "):
            n = int(line.split()[1])
        out.setdefault(n, []).append(line.strip())
    return out


# -- the words every view shares -----------------------------------------------------
def test_a_program_is_counted_as_the_model_counts_it():
    assert program_labels({"program": ["append", "speculate 2", "fork c"]}) == \
        ["append", "draft 1 of 2", "draft 2 of 2", "verify 2 drafts", "fork c"]
    assert program_labels({"appends": 2, "may_cancel": False}) == ["append", "append"]
    assert program_summary({"appends": 1, "may_cancel": True}) == "1 append, may cancel"
    assert program_summary({"program": ["append"], "parent": "a", "may_cancel": False}) == "program [append], forked by a"


def test_where_a_branch_is_in_its_program(fork, late_draft):
    data = as_file(fork)
    protocol, specs = data["scenario"]["protocol"], data["scenario"]["branch"]
    c = data["initial"]["branches"]["c"]
    assert doing(protocol, specs[2], c) == "unborn: not forked yet (its parent a brings it to life with a fork)"
    share = step_of(fork, "share")
    a = data["steps"][share - 2]["state"]["branches"]["a"]              # after the fork's wait-kernel
    assert doing(protocol, specs[0], a) == "fork c, next: share"
    data = as_file(late_draft)
    verify = step_of(late_draft, "verify")
    a = data["steps"][verify - 1]["state"]["branches"]["a"]
    assert doing(data["scenario"]["protocol"], data["scenario"]["branch"][0], a) == "rollback, next: rewind (rejected=2)"
    a = data["steps"][0]["state"]["branches"]["a"]
    assert doing(data["scenario"]["protocol"], data["scenario"]["branch"][0], a) == "copy path (draft 1 of 2), next: alloc new (tail=1)"


# -- explain ------------------------------------------------------------------------------
def test_explain_tells_a_birth_and_the_increments_after_it(fork):
    steps = narrated(fork)
    text = "\n".join(line for lines in steps.values() for line in lines)
    assert "c: program [append], forked by a" in text.splitlines()[0]
    share, incref = step_of(fork, "share"), step_of(fork, "incref-all")
    for n in range(share):                           # unborn until the share, never "running" with empty tables
        assert "c: unborn: not forked yet (its parent a brings it to life with a fork)" in steps[n], n
        assert not any(line.startswith("c: pos") for line in steps[n]), n
    assert steps[share][1] == ("a brings c to life: c starts with a's working table [0, 2] as both of its tables, "
                               "and with a's sequence p0 p1 p2 a1 (pos 4). No refcount changes.")
    assert "c: pos 4, working [0, 2], published [0, 2], sequence p0 p1 p2 a1; between operations " \
           "(0 of 1 operations done; next: append)" in steps[share]
    assert steps[incref][1] == ("a takes one more reference on every block of its working table [0, 2], for its child: "
                                "block 0 refcount 1 → 2; block 2 refcount 0 → 1. "
                                "Block 2 stays FREE: an increment does not take a block off the free list.")
    assert "faithful-output breaks at step 32." in text
    assert "expected p2 and read a2" in text


def test_explain_tells_a_verify_a_rewind_and_a_trim(late_draft, rollback):
    steps = narrated(late_draft)
    verify, rewind, trim = (step_of(late_draft, s) for s in ("verify", "rewind", "trim"))
    assert steps[verify][1] == "The verifier accepts 0 of a's 2 drafts and rejects the last 2 (a1 a2): a rolls back."
    assert steps[rewind][1] == ("a rewinds by 2 to pos 3: its sequence drops a1 a2. What the rejected drafts' kernels "
                                "write stays in their slots, as garbage past pos that no faithful read reaches.")
    assert steps[trim][1].startswith("a trims its working table to [0, 2], the blocks its positions below 3 use: "
                                     "it drops block 3 and its reference to it (block 3 refcount 1 → 0). Block 3 is now FREE")
    assert "no-use-after-free breaks at step 17." in steps[trim]
    steps = narrated(rollback)
    verify, rewind, trim = (step_of(rollback, s) for s in ("verify", "rewind", "trim"))
    assert steps[verify][1] == "The verifier accepts 1 of a's 2 drafts and rejects the last 1 (a2): a rolls back."
    assert steps[rewind][1].startswith("a rewinds by 1 to pos 4: its sequence drops a2.")
    assert "a: pos 4, working [0, 1, 2], published [0, 1, 2], sequence p0 p1 p2 a1; rollback, next: trim (rejected=1)" in steps[rewind]
    assert steps[trim][1].startswith("a trims its working table to [0, 1], the blocks its positions below 4 use: it drops block 2")
    assert any("reaches the peak" in line for line in steps[len(rollback.actions)])


def test_explain_of_a_plain_trace_keeps_its_lines():
    """Without programs: no sequences, appends counted as before."""
    cx = check(make_scenario(2, 3, [2, 2], "premature-decrement")).verdicts["faithful-output"].counterexample
    text = explain_text(cx, width=400)
    assert "(a: 2 appends; b: 2 appends)" in text
    assert "a: pos 3, working [0, 1], published [0, 1]; between operations (0 of 2 appends done)" in text
    assert ", sequence " not in text and "unborn" not in text
    assert "The fork has happened: every branch maps the prompt's blocks." in text


# -- the stepper page -------------------------------------------------------------------
def test_stepper_data_words_and_unborn_children(fork, rollback):
    data = stepper_data(as_file(fork))
    assert data["programs"] is True
    assert [b["summary"] for b in data["branches"]] == ["program [append, fork c, append]", "1 append", "program [append], forked by a"]
    assert data["frames"][0]["words"] == ("The fork has happened: every root branch maps the prompt's blocks; "
                                          "c is unborn until a forks it.")
    share = step_of(fork, "share")
    assert all(f["doing"]["c"].startswith("unborn") for f in data["frames"][:share])
    assert data["frames"][share]["words"].startswith("a brings c to life")
    assert data["frames"][share]["doing"]["c"].startswith("between operations")
    assert data["frames"][step_of(fork, "incref-all")]["words"].startswith("a takes one more reference on every block")
    data = stepper_data(as_file(rollback))
    words = {f["n"]: f["words"] for f in data["frames"]}
    assert words[step_of(rollback, "verify")].startswith("The verifier accepts 1 of a's 2 drafts")
    assert words[step_of(rollback, "trim")].startswith("a trims its working table to [0, 1]")
    assert stepper_data(as_file(check(make_scenario(2, 3, [1, 1])).peak_trace))["programs"] is False


def test_the_pool_replay_in_the_page_follows_the_sequences(fork):
    decoded = decoded_on_pool(fork)
    diverged = sorted(step for step, d in decoded.items() if d["diverged"])
    assert diverged[0] == 32                      # where the model's faithful-output breaks
    child = next(d for d in decoded.values() if d["branch"] == "c" and d["kind"] == "kernel")
    assert not child["diverged"] and child["expected"] == "a1"    # c's reference: the sequence inherited at the fork


READ_BRANCHES = """() => Object.fromEntries([...document.querySelectorAll("#branches .branch")].map(b => [b.dataset.branch, {
  unborn: b.classList.contains("unborn"),
  status: b.querySelector(".status").textContent,
  pos: b.querySelector(".pos") ? b.querySelector(".pos").textContent : null,
  tables: b.querySelectorAll(".table:not(.sequence)").length,
  empty: b.querySelectorAll(".empty-table").length,
  sequence: [...b.querySelectorAll(".sequence .token")].map(t => t.textContent),
  doing: b.querySelector(".doing").textContent,
}]))"""


def test_the_stepper_shows_an_unborn_child_until_its_birth(browser, tmp_path, fork):
    page_file = tmp_path / "fork.html"
    page_file.write_text(stepper_html(as_file(fork)))
    share = step_of(fork, "share")
    with opened(browser, page_file) as page:
        c = page.evaluate(READ_BRANCHES)["c"]
        assert c == {"unborn": True, "status": "unborn", "pos": None, "tables": 0, "empty": 0, "sequence": [],
                     "doing": "unborn: not forked yet (its parent a brings it to life with a fork)"}
        screenshot(page, "stepper-fork-unborn")
        for _ in range(share):
            page.keyboard.press("ArrowRight")
        assert page.inner_text("#action .words").startswith("a brings c to life")
        branches = page.evaluate(READ_BRANCHES)
        assert branches["c"]["unborn"] is False and branches["c"]["status"] == "running" and branches["c"]["pos"] == "pos 4"
        assert branches["c"]["sequence"] == branches["a"]["sequence"] == ["p0", "p1", "p2", "a1"]
        assert branches["c"]["tables"] == 2
        screenshot(page, "stepper-fork-share")


def test_the_stepper_shows_a_rollback(browser, tmp_path, rollback):
    page_file = tmp_path / "rollback.html"
    page_file.write_text(stepper_html(as_file(rollback)))
    with opened(browser, page_file) as page:
        for _ in range(step_of(rollback, "rewind")):
            page.keyboard.press("ArrowRight")
        assert page.inner_text("#action .words").startswith("a rewinds by 1 to pos 4: its sequence drops a2.")
        assert page.evaluate(READ_BRANCHES)["a"]["sequence"] == ["p0", "p1", "p2", "a1"]
        page.keyboard.press("ArrowRight")
        assert "drops block 2" in page.inner_text("#action .words")
        assert page.locator('.block[data-block="2"] .free-tag').count() == 1
        screenshot(page, "stepper-rollback-trim")


# -- the block graph ---------------------------------------------------------------------
def test_the_graph_draws_an_unborn_child_and_the_birth(fork):
    data = as_file(fork)
    share = step_of(fork, "share")
    g = block_graph(data["initial"], 2)
    assert g.nodes["branch c"]["status"] == "unborn" and g.degree("branch c") == 0
    g, title, caption = picture(data, share - 1)
    root = ET.fromstring(to_svg(g, title, caption))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "unborn" in texts and "pos 0 · unborn" not in texts
    assert any(r.get("stroke-dasharray") == "6 4" for r in root.iter(f"{SVG}rect"))    # the unborn branch's outline
    assert '"branch c" [shape=box, style="rounded,dashed", label="branch c\\nunborn"]' in to_dot(g, title)
    g, title, caption = picture(data, share)
    assert caption[1].startswith("a brings c to life")
    assert g.nodes["branch c"]["status"] == "running"
    assert sorted(v for u, v, d in g.edges(data=True) if u == "branch c") == ["block 0", "block 0", "block 2", "block 2"]
    _, _, caption = picture(data, step_of(fork, "incref-all"))
    assert caption[1].startswith("a takes one more reference on every block of its working table [0, 2]")


def test_the_graph_captions_a_rollback(late_draft, rollback):
    data = as_file(late_draft)
    for step, start in (("verify", "The verifier accepts 0 of a's 2 drafts"), ("rewind", "a rewinds by 2 to pos 3"),
                        ("trim", "a trims its working table to [0, 2]")):
        _, _, caption = picture(data, step_of(late_draft, step))
        assert caption[1].startswith(start), step
    _, _, caption = picture(data, late_draft.length)
    assert caption[2].startswith("✗ no-use-after-free (discipline) breaks at step 17.")
    data = as_file(rollback)
    _, _, caption = picture(data, step_of(rollback, "verify"))
    assert caption[1].startswith("The verifier accepts 1 of a's 2 drafts and rejects the last 1 (a2)")
    json.dumps(data)                                   # the page data stays plain JSON


def test_every_committed_program_counterexample_reads_in_words():
    """Each step of each committed branch-program trace gets a sentence of
    its own (no step falls through to the bare step text), and no frame
    shows an unborn branch as anything but unborn."""
    paths = [p for p in sorted(CX.glob("*.json")) if any("program" in b for b in json.loads(p.read_text())["scenario"]["branch"])]
    assert paths, "the committed counterexamples hold no branch program"
    for path in paths:
        cx = json.loads(path.read_text())
        data = stepper_data(cx)
        for frame, step in zip(data["frames"][1:], cx["steps"]):
            action = step["action"]
            assert frame["words"].endswith("."), (path.name, frame["n"])
            assert not frame["words"].startswith(f"{action['actor']}: {action['step']}"), (path.name, frame["n"])   # the fallback
        for frame in data["frames"]:
            for name, br in frame["state"]["branches"].items():
                assert (br["status"] == "unborn") == frame["doing"][name].startswith("unborn"), (path.name, frame["n"], name)
