"""The stepper and index pages (checker/views/html.py, `cowcheck html`, `check
--html`): the data they are built from, and their behaviour in a real
headless Chromium, driven through Playwright with the system browser.

The browser tests skip, saying why, where /usr/bin/chromium or Playwright is
missing; .ci/run installs both. Screenshots go to the system's temporary
folder (cowcheck-screenshots/), never into the checkout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from click.testing import CliRunner

from cowcheck import cli

from cowcheck.engines import counterexample as trace
from cowcheck import check
from cowcheck.views.html import stepper_data, stepper_html
from cowcheck.views.pages import decoded_on_pool, write_check_pages
from cowcheck.model.scenario import load_scenario
from conftest import check_into, fits, opened, screenshot  # browser is a fixture in conftest


ROOT = Path(__file__).resolve().parent.parent
CX = ROOT / "counterexamples"
RACE = CX / "premature-decrement.faithful-output.json"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def invoke(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


# -- the page's data, no browser -------------------------------------------------
def steps_with(cx: dict, text: str) -> list[int]:
    """The numbers of the steps whose text contains TEXT (so the tests hold
    when the committed traces are regenerated in another order)."""
    return [s["n"] for s in cx["steps"] if text in s["text"]]


def test_frames_follow_the_file():
    cx = load(RACE)
    data = stepper_data(cx)
    assert len(data["frames"]) == cx["length"] + 1 == 28
    assert data["frames"][0]["state"] == cx["initial"]
    for frame, step in zip(data["frames"][1:], cx["steps"]):
        assert (frame["n"], frame["text"], frame["state"]) == (step["n"], step["text"], step["state"])
    first_decref, last_decref = steps_with(cx, "decref tail [tail=1]")
    assert data["frames"][last_decref]["touched"] == [1]           # the shared tail, now freed
    assert data["frames"][steps_with(cx, "copy-complete [src=1, dst=2")[0]]["touched"] == [1, 2]
    v = data["violation"]
    assert (v["step"], v["invariant"], v["kind"]) == (27, "faithful-output", "harm")
    # position 2 through snapshot [0, 3] is block 3, slot 0
    assert v["mark"] == {"block": 3, "slot": 0, "label": "expected p2, read a2"}
    assert "expected p2 and read a2" in v["sentence"]


def test_action_words_say_what_happened():
    cx = load(RACE)
    words = {f["n"]: f["words"] for f in stepper_data(cx)["frames"]}
    first_decref, last_decref = steps_with(cx, "decref tail [tail=1]")
    assert words[steps_with(cx, "a (append): decide [path=copy")[0]] == \
        "a decides how to write position 3: the copy path, with block 1 as its tail."
    assert words[steps_with(cx, "a (append): copy tail new")[0]] == (
        "a launches an asynchronous copy of block 1's first 1 slot into block 2; "
        "the device may complete it at any later step.")
    assert words[first_decref].endswith("drops its reference to block 1: refcount 2 → 1.")
    assert words[last_decref].endswith("drops its reference to block 1: refcount 1 → 0. Block 1 is now FREE: "
                                       "it is back on the free list and will be the next one allocated.")
    assert words[steps_with(cx, "alloc new [new=1]")[0]] == "a takes block 1 from the free list as 'new' (refcount 1)."
    assert words[steps_with(cx, "wait-copy new [new=3]")[0]] == "b's wait for copies into block 3 passes: none is in flight."
    assert words[27].startswith("The device completes b's kernel: it writes b1 into block 3, slot 1")


def test_every_committed_counterexample_has_a_page():
    """Every witness shape and every step the model has (cancel, finish,
    check-output, hold, underflow, deadlock) gets words and a violation."""
    for path in sorted(CX.glob("*.json")):
        cx = load(path)
        data = stepper_data(cx)
        assert len(data["frames"]) == cx["length"] + 1, path.name
        assert all(f["words"].endswith(".") for f in data["frames"]), path.name
        assert data["violation"]["step"] == cx["length"]
        if cx["kind"] == "counterexample":
            assert data["violation"]["sentence"], path.name
        html = stepper_html(cx)
        assert "<script src" not in html and "<link" not in html, path.name


def test_the_page_is_one_self_contained_file():
    html = stepper_html(load(RACE))
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "premature-decrement" in html


def test_data_cannot_close_the_script_element():
    cx = load(RACE)
    cx["scenario"]["name"] = "evil</script><script>alert(1)</script>"
    html = stepper_html(cx)
    assert "</script><script>alert(1)" not in html
    assert "evil&lt;/script&gt;" in html      # the header shows it as text


def test_decoded_tokens_are_carried_into_the_page():
    decoded = {27: {"branch": "b", "pos": 3, "decoded": "x7", "expected": "b2"}}
    data = stepper_data(load(RACE), decoded)
    assert data["decoded"] == {"27": {**decoded[27], "against": " where the reference decodes b2"}}
    assert stepper_data(load(RACE))["decoded"] == {}


# -- the commands ----------------------------------------------------------------------
def test_html_command_writes_the_page_with_the_executors_tokens(tmp_path):
    out = tmp_path / "race.html"
    result = invoke("html", RACE, "-o", out)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out} (27 steps)"
    decoded = decoded_on_pool(trace.load(RACE))
    assert sorted(decoded) == [14, 21, 27]          # the three kernel completions
    assert decoded[27]["diverged"] and decoded[27]["branch"] == "b" and not decoded[14]["diverged"]
    assert out.read_text() == stepper_html(load(RACE), decoded)
    assert invoke("html", RACE, "--pool", "none", "-o", out).exit_code == 0
    assert out.read_text() == stepper_html(load(RACE))


def test_html_command_refuses_bad_input_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = invoke("html", bad, "-o", tmp_path / "x.html")
    assert result.exit_code == 2
    assert result.output.startswith("cowcheck: error: ") and "Traceback" not in result.output
    assert result.output.count("\n") == 1 and not (tmp_path / "x.html").exists()


def _check_results(tmp_path: Path):
    names = ("premature-decrement", "cow-stream")
    return [check_into(load_scenario(ROOT / "specs" / "scenarios" / f"{n}.toml"), tmp_path / "cx") for n in names]


def test_check_pages_one_per_counterexample_and_an_index(tmp_path):
    results = _check_results(tmp_path)
    pages = write_check_pages(results, tmp_path / "site")
    names = sorted(p.name for p in pages)
    assert names == sorted(["premature-decrement.faithful-output.html", "premature-decrement.exclusive-write.html",
                            "premature-decrement.no-use-after-free.html", "premature-decrement.peak.html",
                            "cow-stream.peak.html", "index.html"])
    index = (tmp_path / "site" / "index.html").read_text()
    for name in names:
        if name != "index.html":
            assert f'href="{name}"' in index
    assert index.count("VIOLATED") == 3 and "UNSAFE" in index and "safe and disciplined" in index


def test_check_html_option(tmp_path):
    """`cowcheck check --html DIR` writes the index and one page per counterexample."""
    scenario = ROOT / "specs" / "scenarios" / "premature-decrement.toml"
    result = invoke("check", scenario, "--out", tmp_path / "cx", "--html", tmp_path / "site")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "premature-decrement.faithful-output.html").exists()


# -- in the browser ------------------------------------------------------------------------
READ_DOM = """() => {
  const texts = (root, sel) => [...root.querySelectorAll(sel)].map(e => e.textContent);
  const ids = (root, sel) => [...root.querySelectorAll(sel)].map(e => Number(e.dataset.block));
  return {
    position: document.getElementById("position").textContent,
    action: document.querySelector("#action .raw").textContent,
    blocks: [...document.querySelectorAll("#pool .block")].map(b => ({
      id: Number(b.dataset.block),
      refcount: b.querySelector(".refcount").textContent,
      holds: b.querySelector(".holds").textContent,
      free: b.querySelector(".free-tag") !== null,
      slots: [...b.querySelectorAll(".slot")].map(s => s.firstChild.textContent),
    })),
    branches: Object.fromEntries([...document.querySelectorAll("#branches .branch")].map(b =>
      [b.dataset.branch, {working: ids(b, ".working .chip"), published: ids(b, ".published .chip")}])),
    queue: texts(document, "#queue li:not(.nothing)").length,
    violation: !document.getElementById("violation").hidden,
    violating: document.getElementById("action").classList.contains("violating"),
  };
}"""


def expected_dom(cx: dict, n: int) -> dict:
    state = cx["initial"] if n == 0 else cx["steps"][n - 1]["state"]
    return {
        "position": f"step {n} of {cx['length']}",
        "action": "initial state" if n == 0 else cx["steps"][n - 1]["text"],
        "blocks": [{"id": b["id"], "refcount": f"refcount {b['refcount']}", "holds": f"holds {b['holds']}",
                    "free": b["free"], "slots": ["_" if t is None else t for t in b["slots"]]} for b in state["blocks"]],
        "branches": {name: {"working": br["working"], "published": br["published"]} for name, br in state["branches"].items()},
        "queue": len(state["queue"]),
        "violation": n == cx["length"],
        "violating": n == cx["length"],
    }


def test_stepping_shows_every_state_of_the_file(browser, tmp_path):
    cx = load(RACE)
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(cx))
    with opened(browser, page_file) as page:
        assert page.evaluate(READ_DOM) == expected_dom(cx, 0)
        for n in range(1, cx["length"] + 1):
            page.click("#step")
            assert page.evaluate(READ_DOM) == expected_dom(cx, n), f"step {n}"
            if n == 8:
                screenshot(page, "stepper-step-8")
        assert page.is_disabled("#step")


def test_the_violation_is_highlighted_with_expected_read_and_decoded(browser, tmp_path):
    cx = load(RACE)
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(cx, {27: {"branch": "b", "pos": 3, "decoded": "x7", "expected": "p2"}}))
    with opened(browser, page_file) as page:
        assert page.is_hidden("#violation")
        page.click("#goto-violation")
        assert page.inner_text("#position") == "step 27 of 27"
        panel = page.locator("#violation")
        assert panel.is_visible()
        assert "faithful-output (harm) breaks at step 27" in panel.inner_text()
        assert page.inner_text("#violation .expected") == "p2"
        assert page.inner_text("#violation .read") == "a2"
        assert page.inner_text("#violation .decoded-token") == "x7"
        assert "DIFFERS" in page.inner_text("#violation .decoded")
        # position 2 is the one marked wrong, in the sequences and in block 3's slot 0
        assert page.inner_text(".sequences td.mismatch >> nth=0") == "2"
        block = page.locator('.block[data-block="3"].violating')
        assert block.locator(".slot.marked").get_attribute("data-slot") == "0"
        assert block.locator(".mark-label").inner_text() == "✗ slot 0: expected p2, read a2"
        screenshot(page, "stepper-violation")


def test_keyboard_alone(browser, tmp_path):
    cx = load(RACE)
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(cx))
    with opened(browser, page_file) as page:
        for _ in range(5):
            page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowLeft")
        assert page.inner_text("#position") == "step 4 of 27"
        page.keyboard.press("End")
        assert page.inner_text("#position") == "step 27 of 27"
        page.keyboard.press("Home")
        assert page.inner_text("#position") == "step 0 of 27"
        # Tab reaches the controls in order, and Enter presses the focused one
        focused = []
        for _ in range(5):
            page.keyboard.press("Tab")
            focused.append(page.evaluate("document.activeElement.id"))
        assert focused == ["goto-violation", "reset", "step", "play", "speed"]  # Step back is disabled at 0
        page.focus("#step")
        page.keyboard.press("Enter")
        assert page.inner_text("#position") == "step 1 of 27"
        # Space plays and pauses (focus away from any button)
        page.select_option("#speed", "10")
        page.evaluate("document.activeElement.blur()")
        page.keyboard.press("End")
        for _ in range(5):
            page.keyboard.press("ArrowLeft")
        page.keyboard.press(" ")
        assert page.get_attribute("#play", "aria-pressed") == "true"
        page.wait_for_function("() => document.getElementById('position').textContent === 'step 27 of 27'", timeout=10000)
        page.wait_for_function("() => document.getElementById('play').getAttribute('aria-pressed') === 'false'")
        page.keyboard.press(" ")   # at the end, Play starts again from the beginning
        page.keyboard.press(" ")
        assert page.get_attribute("#play", "aria-pressed") == "false"
        assert int(page.inner_text("#position").split()[1]) < 27


def test_buttons(browser, tmp_path):
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(load(RACE)))
    with opened(browser, page_file) as page:
        assert page.is_disabled("#back")
        for _ in range(3):
            page.click("#step")
        page.click("#back")
        assert page.inner_text("#position") == "step 2 of 27"
        page.click("#play")
        assert page.inner_text("#play") == "⏸ Pause"
        page.click("#play")
        assert page.inner_text("#play") == "▶ Play"
        page.click("#reset")
        assert page.inner_text("#position") == "step 0 of 27"
        page.click("#all-steps summary")
        page.click('#step-list li[data-step="13"] button')
        assert page.inner_text("#position") == "step 13 of 27"
        assert page.get_attribute('#step-list li[data-step="13"]', "aria-current") == "step"


def test_a_narrow_window(browser, tmp_path):
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(load(RACE)))
    with opened(browser, page_file, width=480) as page:
        for _ in range(8):
            page.keyboard.press("ArrowRight")
        assert fits(page, 480)
        assert page.locator("#arrows path.copy-arrow").count() == 2     # copies 1 -> 2 and 1 -> 3 drawn
        screenshot(page, "stepper-480-step-8")
        page.keyboard.press("End")
        assert fits(page, 480)
        screenshot(page, "stepper-480-violation")


def test_one_page_per_witness_shape(browser, tmp_path):
    """One committed file per invariant, and a peak trace: each opens without
    an error and shows its last step highlighted."""
    seen: dict[str, Path] = {}
    for path in sorted(CX.glob("*.json")):
        seen.setdefault(load(path).get("invariant") or "peak", path)
    for path in seen.values():
        (tmp_path / f"{path.stem}.html").write_text(stepper_html(load(path)))
    first = tmp_path / f"{next(iter(seen.values())).stem}.html"
    with opened(browser, first) as page:
        for what, path in seen.items():
            cx = load(path)
            page.goto((tmp_path / f"{path.stem}.html").as_uri())
            page.keyboard.press("End")
            assert page.inner_text("#position") == f"step {cx['length']} of {cx['length']}"
            assert page.is_visible("#violation")
            assert ("PEAK" if what == "peak" else f"{what} (") in page.inner_text("#violation"), path.name


def test_index_links_to_the_pages(browser, tmp_path):
    write_check_pages(_check_results(tmp_path), tmp_path / "site")
    with opened(browser, tmp_path / "site" / "index.html", width=480) as page:
        assert fits(page, 480)
        screenshot(page, "index-480")
        rows = page.locator("#premature-decrement tbody tr")
        assert rows.count() == 10
        assert "VIOLATED" in page.inner_text("#premature-decrement tbody tr:has-text('faithful-output')")
        with page.expect_navigation():
            page.click("text=watch its 27 steps")
        assert page.url.endswith("/premature-decrement.faithful-output.html")
        assert page.inner_text("#position") == "step 0 of 27"
        for _ in range(14):                  # a's first kernel: the pool agrees with the model
            page.keyboard.press("ArrowRight")
        assert page.inner_text("#action .decoded .tag") == "MATCH"
        page.keyboard.press("End")           # b's kernel: the executor decodes a2 where p2 belongs
        assert page.inner_text("#violation .decoded .tag") == "DIFFERS"
        assert page.inner_text("#violation .decoded-token") == "a2"
        screenshot(page, "stepper-from-index-violation")


ARROWS = """() => {
  const svg = document.getElementById("arrows").getBoundingClientRect();
  const rect = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  const paths = [...document.querySelectorAll("#arrows path.copy-arrow")].map(p => {
    const n = p.getTotalLength(), points = [];
    for (let i = 0; i <= 200; i++) {
      const q = p.getPointAtLength(n * i / 200);
      points.push([q.x + svg.left, q.y + svg.top]);
    }
    return points;
  });
  return {
    labels: [...document.querySelectorAll("#arrows .copy-label")].map(t => [t.textContent, rect(t.getBoundingClientRect())]),
    cards: [...document.querySelectorAll("#pool .block")].map(b => rect(b.getBoundingClientRect())),
    heads: [...document.querySelectorAll("#pool .block")].map(b => [b.dataset.block,
      rect(b.querySelector(".block-head").getBoundingClientRect()), rect(b.getBoundingClientRect())]),
    paths: paths,
  };
}"""


def _overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


@pytest.mark.parametrize("width", [420, 600, 1000, 1400])
def test_copy_arrows_cross_no_card_and_their_labels_do_not_overlap(browser, tmp_path, width):
    """Issue 27, item 24: at step 8 of the premature-decrement page two
    copy labels overlapped, and in a 420 px window the arcs crossed a
    block's heading. At every step: no two labels intersect, and no arc
    passes through a card (its heading included), but where it ends, at
    the destination card's top edge, and no label is crossed by another
    copy's arc."""
    cx = load(RACE)
    page_file = tmp_path / "race.html"
    page_file.write_text(stepper_html(cx))
    with opened(browser, page_file, width=width) as page:
        for n in range(cx["length"] + 1):
            seen = page.evaluate(ARROWS)
            labels = seen["labels"]
            for i, (text, box) in enumerate(labels):
                for other, other_box in labels[:i]:
                    assert not _overlap(box, other_box), (n, width, text, other)
                for block, head, _ in seen["heads"]:
                    assert not _overlap(box, head), (n, width, text, f"block {block}'s heading")
                for j, points in enumerate(seen["paths"]):       # another copy's arc does not run through it
                    crossing = [(x, y) for x, y in points if box["left"] < x < box["right"] and box["top"] < y < box["bottom"]]
                    assert j == i or not crossing, (n, width, text, f"crossed by {labels[j][0]}'s arc")
            for points in seen["paths"]:
                for x, y in points[1:-1]:
                    for block, head, card in seen["heads"]:
                        inside = card["left"] + 1 < x < card["right"] - 1 and card["top"] + 1 < y < card["bottom"] - 1
                        assert not inside, (n, width, f"an arc crosses block {block}", x, y)
            assert fits(page, width)
            if n == 8:
                assert len(seen["paths"]) == 2
                screenshot(page, f"stepper-{width}-step-8-arrows")
            page.keyboard.press("ArrowRight")


# -- transfer scenarios: the host tier beside the pool, transfers as arrows ------------
def test_a_transfer_page_has_a_host_tier_and_a_remote_engine_where_its_scenario_does():
    offload = stepper_html(load(CX / "offload-eager-store.host-key-content.json"))
    lease = stepper_html(load(CX / "pd-producer-lease.faithful-output.json"))
    plain = stepper_html(load(RACE))
    assert 'id="host-tier"' in offload and 'id="remote"' not in offload
    assert 'id="remote"' in lease and 'id="host-tier"' not in lease and 'id="connector"' in lease
    assert 'id="host-tier"' not in plain and 'id="connector"' not in plain and "transfers" not in stepper_data(load(RACE))


def _transfer_page(browser, tmp_path, name: str, step: int):
    """A transfer counterexample's page, opened at `step`."""
    page_file = tmp_path / f"{name}.html"
    page_file.write_text(stepper_html(load(CX / f"{name}.json")))
    with opened(browser, page_file) as page:
        for _ in range(step):
            page.keyboard.press("ArrowRight")
        yield page


def test_a_store_is_an_arrow_to_the_host_tier_and_its_report_is_marked(browser, tmp_path):
    for page in _transfer_page(browser, tmp_path, "offload-eager-store.host-key-content", 11):
        assert page.locator("#host-tier .block.host").count() == 2
        assert page.locator("#arrows path.transfer-store").count() == 1
        assert page.locator("#arrows text.transfer-label").text_content() == "store 0→h0"
        page.keyboard.press("ArrowRight")          # the store completes: its report is pending
        assert "Reports pending" in page.inner_text("#connector")
        page.click("#goto-violation")
        host = page.locator('#host-tier .block[data-host="0"].violating')
        assert "key (p0 p1)" in host.inner_text() and host.locator(".mark-label").inner_text() == "✗ holds _ _ ≠ key"
        screenshot(page, "stepper-host-tier")


def test_an_expired_lease_is_marked_on_its_sends(browser, tmp_path):
    for page in _transfer_page(browser, tmp_path, "pd-producer-lease.faithful-output", 29):
        assert page.locator("#arrows path.transfer-send.expired").count() == 2
        assert "LEASE EXPIRED" in page.inner_text("#connector")
        screenshot(page, "stepper-lease")
