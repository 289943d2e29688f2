"""The cache lab (docs/semantics.md#cache-lab): the Python run behind `cowcheck
lab`, its text, and the interactive page in a headless Chromium, which must
count the same hits as the Python run."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from cowcheck import cli
from cowcheck.views.lab import LIMITS, identity, lab_html, run, served
from conftest import fits, opened, screenshot  # browser is a fixture in conftest



def invoke(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


# -- the model of the lab -------------------------------------------------------------
def test_design_numbers():
    assert run(4, 2).hits_first == 0     # 8 identities cycle through 4 slots: LRU evicts each just before its reuse
    assert run(8, 2).hits_first == 8     # the working set of 8 fits: the second cycle all hits


def test_requests_served_after_t_seconds():
    assert [served(t) for t in (0, 0.49, 0.5, 1, 10, 2040, 2040.5, 1e9)] == [16, 16, 17, 18, 36, 4096, 4096, 4096]
    assert len(run(3, 5, time=10).requests) == 36


def test_the_stream_and_lru():
    assert [identity(k, 3) for k in range(7)] == [0, 3, 6, 9, 12, 15, 2]
    lab = run(2, 1, time=0)
    assert lab.requests == list(range(16)) and not any(lab.hits)
    lab = run(1, 0)                      # always identity 0: one miss, then hits
    assert lab.hits == [False] + [True] * 15 and lab.cache == [0]
    lab = run(3, 4, time=2)              # 0 4 8 12 0 4 ...: 4 identities through 3 slots
    assert lab.total_hits == 0 and lab.cache == [12, 8, 4]
    lab = run(8, 2, time=10)
    assert (lab.n, lab.hits_first, lab.total_hits) == (36, 8, 28)


def test_command_prints_the_run():
    result = invoke("lab", "--capacity", 4, "--stride", 2)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "cache lab: LRU cache of capacity 4, stride 2, t = 0 s: N = min(4096, 16 + floor(2t)) = 16 requests"
    assert lines[2].split() == ["0-15"] + " ".join(f"{i} M" for i in list(range(0, 16, 2)) * 2).split()
    assert "hits among the first 16 requests: 0 of 16" in lines
    result = invoke("lab", "--capacity", 8, "--stride", 2, "--time", 10)
    assert "hits among the first 16 requests: 8 of 16" in result.output
    assert "hits over all N = 36 requests: 28 of 36 (77.8%)" in result.output


def test_command_refuses_bad_parameters():
    for option, value in (("--capacity", 0), ("--stride", -1), ("--time", -1), ("--capacity", "x")):
        result = invoke("lab", option, value)
        assert result.exit_code == 2 and "Traceback" not in result.output


def test_page_is_self_contained_and_says_what_it_leaves_out(tmp_path):
    out = tmp_path / "lab.html"
    assert invoke("lab", "--capacity", 5, "--stride", 3, "--html", out).exit_code == 0
    html = out.read_text()
    assert html == lab_html(5, 3)
    assert "default-src 'none'" in html and "<script src" not in html
    for missing in ("branches", "aliases", "copy-on-write", "asynchronous completion"):
        assert missing in LIMITS
    assert LIMITS.count(".") == 1 and LIMITS in html.replace("&#x27;", "'")


# -- the page in the browser ------------------------------------------------------------
def text(page, selector: str) -> str:
    return page.inner_text(selector)


@pytest.fixture
def lab_page(browser, tmp_path):  # noqa: F811  (browser is a fixture)
    path = tmp_path / "lab.html"
    path.write_text(lab_html(4, 2))
    with opened(browser, path) as page:
        yield page


def test_the_page_opens_where_the_formula_and_the_command_say(lab_page):
    """At t = 0, N = min(4096, 16 + 0) = 16 requests are served, on the
    page as in `cowcheck lab` (issue 27, item 23)."""
    page = lab_page
    lab = run(4, 2, time=0)
    assert (text(page, "#t"), text(page, "#n"), text(page, "#hits")) == ("0.0", str(lab.n), str(lab.total_hits))
    assert lab.n == 16
    page.click("#step")
    assert (text(page, "#t"), text(page, "#n")) == ("0.5", "17")
    page.click("#reset")
    assert (text(page, "#t"), text(page, "#n")) == ("0.0", "16")


def test_design_numbers_in_the_page(lab_page):
    page = lab_page
    page.fill("#capacity", "4")
    page.fill("#stride", "2")
    assert (text(page, "#n"), text(page, "#hits16"), text(page, "#t")) == ("16", "0", "0.0")
    page.fill("#capacity", "8")          # keeps t and N, replays from an empty cache
    assert (text(page, "#n"), text(page, "#hits16"), text(page, "#t")) == ("16", "8", "0.0")
    assert [int(x) for x in page.locator("#cache .slot").evaluate_all("els => els.map(e => e.dataset.id)")] == run(8, 2).cache
    screenshot(page, "lab-c8-s2")


def test_play_advances_the_clock(lab_page):
    page = lab_page
    page.select_option("#speed", "16")
    page.click("#play")
    time.sleep(0.6)
    page.click("#play")
    t, n = float(text(page, "#t")), int(text(page, "#n"))   # t is shown rounded to 0.1 s
    assert t > 2 and served(t - 0.05) <= n <= served(t + 0.05) and n > 16
    assert text(page, "#hits") == str(run(4, 2, time=(n - 16) / 2).total_hits)
    page.click("#step")                 # one more request moves t by half a second
    assert (int(text(page, "#n")), float(text(page, "#t"))) == (n + 1, (n + 1 - 16) / 2)
    page.click("#reset")
    assert (text(page, "#n"), text(page, "#t"), text(page, "#hits")) == ("16", "0.0", str(run(4, 2, time=0).total_hits))


def test_page_agrees_with_python(lab_page):
    """Forty requests (t = 12), then several C and s: the page replays them
    from an empty cache and must count what cowcheck.views.lab counts."""
    page = lab_page
    for _ in range(40 - 16):            # the page opens with sixteen served
        page.keyboard.press("ArrowRight")
    assert (text(page, "#n"), text(page, "#t")) == ("40", "12.0")
    for capacity, stride in ((1, 0), (3, 5), (5, 3), (16, 1), (7, 4), (2, 8)):
        page.fill("#capacity", str(capacity))
        page.fill("#stride", str(stride))
        lab = run(capacity, stride, time=12)
        shown = (text(page, "#hits16"), text(page, "#hits"),
                 page.locator("#cache .slot[data-id]").evaluate_all("els => els.map(e => Number(e.dataset.id))"))
        assert shown == (str(lab.hits_first), str(lab.total_hits), lab.cache), (capacity, stride)


def test_keyboard_and_bad_input(lab_page):
    page = lab_page
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert text(page, "#n") == "18"
    page.keyboard.press(" ")
    assert page.get_attribute("#play", "aria-pressed") == "true"
    page.keyboard.press(" ")
    assert page.get_attribute("#play", "aria-pressed") == "false"
    page.keyboard.press("Home")
    assert text(page, "#n") == "16"
    page.fill("#capacity", "0")
    assert page.is_visible("#error") and "C must be a whole number" in text(page, "#error")
    page.fill("#capacity", "8")
    assert page.is_hidden("#error")


def test_narrow_window(browser, tmp_path):  # noqa: F811  (browser is a fixture)
    path = tmp_path / "lab.html"
    path.write_text(lab_html(8, 2))
    with opened(browser, path, width=480) as page:
        for _ in range(24):
            page.click("#step")
        assert fits(page, 480)
        screenshot(page, "lab-480")
