"""Issue 34's low items on how results read: a divergence that decodes the
same token says so (replay and the stepper page); a cache trace's page
names the host calls a cache scenario has; the closing table of `cowcheck
check` breaks no name mid-word in a narrow console; the pytest plugin's
failure leads with harm and says where its counterexample files are."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from cowcheck import check, cli
from cowcheck.engines import counterexample as trace
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import Outcome
from cowcheck.model.scenario import load_scenario
from cowcheck.views.html import stepper_data
from cowcheck.views.pages import decoded_on_pool
from cowcheck.views.report import overview, show

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
CX = ROOT / "counterexamples"
SCENARIOS = ROOT / "specs" / "scenarios"
#: a kernel that reads a stale p0 where p1's key belongs: it still decodes p1, its output moved by 0.211
SAME_TOKEN = CX / "no-evict.faithful-output.json"


# -- 10: a divergence that decodes the same token --------------------------------
def test_against_reference_says_same_token_or_the_reference_token():
    from cowcheck.views.words import against_reference
    assert against_reference("p1", "p1", 0.2108) == ", the same token as the reference, off by 0.211 (max |diff|)"
    assert against_reference("a2", "p2", 2.48) == " where the reference decodes p2 (max |diff| 2.480)"
    assert against_reference("p1", "p1", 0.0) == ", the same token as the reference"     # a match
    assert against_reference("x", None, None, "check-output") == " where the reference has _"


def test_replay_says_the_same_token_off_by_its_difference():
    text = CliRunner().invoke(cli.main, ["replay", str(SAME_TOKEN)]).stdout
    line = " ".join(text[text.index("first divergence at step"):].split())
    assert "decodes p1, the same token as the reference, off by 0.211" in line, line
    assert "where the reference decodes p1" not in line


def test_the_stepper_says_the_same_token_off_by_its_difference():
    decoded = decoded_on_pool(trace.load(SAME_TOKEN))
    first = min(step for step, d in decoded.items() if d["diverged"])
    data = stepper_data(json.loads(SAME_TOKEN.read_text()), decoded)
    assert data["decoded"][str(first)]["against"] == ", the same token as the reference, off by 0.211 (max |diff|)"


# -- 11: the host calls of a cache trace -----------------------------------------------
def test_a_cache_trace_page_names_admit_and_no_fork():
    cache = stepper_data(json.loads((CX / "prefix-code-no-evict.faithful-output.json").read_text()))
    assert cache["harness"] and cache["cache"]
    assert "each host call (admit, append, rollback, free)" in cache["protocol"]["description"]
    assert "fork" not in cache["protocol"]["description"]
    plain = stepper_data(json.loads((CX / "engine-code-double-free-after-cow.faithful-output.json").read_text()))
    assert "each host call (append, fork, rollback, free)" in plain["protocol"]["description"]


# -- 14: the closing table in a narrow console ----------------------------------
LONG_NAMES = ("engine-code-double-free-after-cow", "engine-code-fork-no-tail-incref", "prefix-cache-cancel-in-flight")


@pytest.fixture(scope="module")
def results():
    return [check(load_scenario(SCENARIOS / f"{name}.toml")) for name in LONG_NAMES]


def printed(width: int, draw) -> str:
    buffer = io.StringIO()
    draw(Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue()


@pytest.mark.parametrize("width", [140, 100, 80, 60])
def test_the_closing_table_breaks_no_word(results, width):
    text = printed(width, lambda console: overview(results, console))
    for name in LONG_NAMES:
        assert any(line.startswith(name + " ") for line in text.splitlines()), (name, text)
    whole = set(printed(400, lambda console: overview(results, console)).split())     # every word, as nothing narrows it
    body = text.splitlines()[text.splitlines().index(next(line for line in text.splitlines() if "━" in line)) + 1:]
    for line in body:
        for cell in line.split("│")[1:5]:
            for word in cell.split():
                assert word in whole or word.endswith("…") and any(w.startswith(word[:-1]) for w in whole), (word, text)


#: the closing table's columns, in its order
COLUMNS = ("scenario", "protocol / allocator", "device", "verdict", "broken (shortest)", "peak", "steady", "copies", "hits")


@pytest.mark.parametrize("width", [140, 100, 80, 60])
def test_a_narrow_closing_table_shows_every_cell_whole_and_names_the_columns_it_leaves_out(results, width):
    """Not every column cut to `un…`: the lesser columns are left out, and a
    line under the table names them."""
    text = printed(width, lambda console: overview(results, console))
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), text
    assert "…" not in text, text
    whole = set(printed(400, lambda console: overview(results, console)).split())
    rule = next(i for i, line in enumerate(lines) if "━" in line)
    table = [line for line in lines[1:] if "│" in line or "┃" in line]
    for line in table:
        for word in line.replace("┃", " ").replace("│", " ").split():
            assert word in whole, (word, text)
    header = " ".join(" ".join(line.replace("┃", " ").split()) for line in lines[1:rule])
    shown = [col for col in COLUMNS if " ".join(col.split()) in header or col == "protocol / allocator" and "allocator" in header]
    assert "scenario" in shown and "verdict" in shown, text       # the name and the verdict, always
    after = " ".join(" ".join(lines[rule + 1:]).split())
    left_out = [col for col in COLUMNS if col not in shown]
    if left_out:
        assert f"left out to fit {width} columns: {', '.join(left_out)} (each scenario's section above has them)" in after, text
    assert "left out" not in printed(400, lambda console: overview(results, console))
    if width >= 80:
        assert "broken (shortest)" in shown, text


def test_the_chosen_line_is_one_line(results):
    text = printed(60, lambda console: show(results[0], console))
    assert f"chosen {results[0].choice}" in text.splitlines()


# -- 16: the pytest plugin leads with harm and says where its files are ----------------

#: premature-decrement under `expect = "holds"`: exclusive-write (discipline) breaks in 7 actions,
#: faithful-output (harm) only in 27: the failure must lead with the harm, not the shorter break
PREMATURE = ('expect = "holds"\nprotocol = "protocols/mine.toml"\n'
             'block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n')


@pytest.fixture
def team(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "specs" / "protocols").mkdir(parents=True)
    (pytester.path / "specs" / "protocols" / "mine.toml").write_text(
        (ROOT / "specs" / "protocols" / "premature-decrement.toml").read_text())
    (pytester.path / "specs" / "racy.toml").write_text(PREMATURE)
    return pytester


def test_the_failure_leads_with_harm_and_names_its_files_under_basetemp(team):
    run = team.runpytest("--cowcheck", "specs/", "-p", "no:cacheprovider", "--basetemp", str(team.path / "tmp"))
    run.assert_outcomes(failed=1)
    out = run.stdout.str()
    harm = out.index("shortest counterexample of faithful-output (harm, 27 actions)")
    discipline = out.index("exclusive-write (discipline, 7 actions)")
    assert harm < out.index("step 1 ") < discipline        # the harm narrated first, the discipline break after
    folder = team.path / "tmp" / "cowcheck"
    assert f"counterexample files in {folder}" in out
    assert (folder / "racy.faithful-output.json").is_file() and f"{folder / 'racy.faithful-output.json'}" in out
    assert (folder / "racy.exclusive-write.json").is_file()


def test_cowcheck_out_names_the_artifact_folder(team):
    run = team.runpytest("--cowcheck", "specs/", "-p", "no:cacheprovider", "--cowcheck-out", "artifacts")
    run.assert_outcomes(failed=1)
    written = sorted(p.name for p in (team.path / "artifacts").iterdir())
    assert "racy.faithful-output.json" in written and "racy.peak.json" not in written
    assert f"counterexample files in {team.path / 'artifacts'}" in run.stdout.str()
