"""`cowcheck diff BEFORE AFTER` (docs/reference/commands.md#cowcheck-diff):
two runs of `cowcheck check`, each its --json file or its folder of
counterexamples, compared per scenario. Exit 1 exactly when something got
worse (an invariant that did not break now breaks, or breaks sooner; a
scenario missing from the later run), 0 otherwise, 2 on bad input with one
line naming the file.

Real runs are of two small scenarios (about a second each); the finer
cases are written as result files by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from cowcheck.cli import main
from cowcheck.schemas import load as load_schema
from cowcheck.traces.comparison import (NO_FILE, NOT_CHECKED, Answer, Change, Record, Run, compare, pair,
                                        verdict_change)

FORK = "block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n"
CACHE = 'cache = "prefix"\nblock_size = 2\n[[branch]]\nprompt = 3\n[[branch]]\nprompt = 3\n'


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run from tmp_path, so nothing lands in the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """`before`: a fork and a cache scenario as written (safe); `after`: the
    fork scenario under premature-decrement (two invariants break), the
    cache scenario unchanged. Each as a --json file and a folder."""
    tmp = tmp_path_factory.mktemp("runs")
    (tmp / "fork.toml").write_text(FORK)
    (tmp / "cache.toml").write_text(CACHE)
    first = invoke("check", tmp / "fork.toml", tmp / "cache.toml", "--json", tmp / "before.json", "--out", tmp / "before")
    assert first.exit_code == 0, first.output
    second = invoke("check", tmp / "fork.toml", "--protocol", "premature-decrement",
                    "--json", tmp / "fork-after.json", "--out", tmp / "after")
    assert second.exit_code == 0, second.output      # safe but undisciplined
    third = invoke("check", tmp / "cache.toml", "--json", tmp / "cache-after.json", "--out", tmp / "after")
    assert third.exit_code == 0, third.output
    merged = json.loads((tmp / "fork-after.json").read_text()) + json.loads((tmp / "cache-after.json").read_text())
    (tmp / "after.json").write_text(json.dumps(merged))
    return {name: tmp / name for name in ("before.json", "before", "after.json", "after")}


def diff_json(*args: Any) -> tuple[Any, dict]:
    """`cowcheck diff ARGS --json -`: the result and the JSON, validated
    against its schema."""
    result = invoke("diff", *args, "--json", "-")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    data = json.loads(result.stdout)
    errors = [e.message for e in Draft202012Validator(load_schema("diff")).iter_errors(data)]
    assert not errors, errors
    return result, data


# -- real runs ----------------------------------------------------------------------
@pytest.mark.parametrize("before", ["before.json", "before"])
@pytest.mark.parametrize("after", ["after.json", "after"])
def test_a_change_that_breaks_an_invariant_is_worse(runs, before, after):
    result, data = diff_json(runs[before], runs[after])
    assert result.exit_code == 1, result.output
    broke = {d["item"]: d for d in data["differences"] if d["change"] == "now breaks"}
    assert set(broke) == {"exclusive-write", "no-use-after-free"}
    for d in broke.values():
        # paired across the override's name: the scenario as written with its override
        assert (d["baseline"], d["scenario"]) == ("fork", "fork~premature-decrement-async-lifo")
        assert d["after"]["outcome"] == "violated" and d["after"]["length"] > 0 and d["worse"]
    assert (data["compared"], data["missing"], data["new"], data["worse"]) == (2, 0, 0, 2)
    assert len(data["differences"]) == 2          # the cache scenario and every peak are unchanged
    assert "now breaks" in result.stderr and "2 scenario(s) compared: 2 change(s), 2 worse" in result.stderr


def test_the_reverse_no_longer_breaks_and_is_not_worse(runs):
    result = invoke("diff", runs["after"], runs["before.json"])
    assert result.exit_code == 0, result.output
    assert result.output.count("no longer breaks") == 2
    assert "none worse" in result.output


def test_a_run_against_itself_changes_nothing(runs):
    for name in ("before.json", "before", "after"):
        result = invoke("diff", runs[name], runs[name])
        assert result.exit_code == 0, result.output
        assert "2 scenario(s) compared: no verdict, shortest length or peak changed" in result.output
    # a folder and the --json of the same run agree: no counterexample is not a verdict of its own
    assert invoke("diff", runs["before.json"], runs["before"]).exit_code == 0


def test_a_scenario_missing_from_the_later_run_is_worse(runs, tmp_path):
    only_fork = tmp_path / "only-fork.json"
    only_fork.write_text(json.dumps(json.loads(runs["before.json"].read_text())[:1]))
    result, data = diff_json(runs["before.json"], only_fork)
    assert result.exit_code == 1, result.output
    assert data["differences"] == [{"scenario": "cache", "baseline": "cache", "item": "scenario",
                                    "before": {"scenario": "cache"}, "after": None, "change": "missing", "worse": True}]
    assert "(1 missing)" in result.stderr
    # the reverse: a new scenario is shown, and is not worse
    result, data = diff_json(only_fork, runs["before.json"])
    assert result.exit_code == 0, result.output
    assert [d["change"] for d in data["differences"]] == ["new"] and data["new"] == 1


def test_json_to_a_file_and_the_table_to_stdout(runs, tmp_path):
    out = tmp_path / "deep" / "diff.json"
    result = invoke("diff", runs["before"], runs["after"], "--json", out)
    assert result.exit_code == 1
    assert "fork~premature-decrement-async-lifo" in result.stdout
    assert json.loads(out.read_text())["worse"] == 2


def test_a_folder_passes_over_json_that_is_not_a_counterexample(runs, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for f in runs["before"].glob("*.json"):
        (folder / f.name).write_text(f.read_text())
    (folder / "results.json").write_text(runs["before.json"].read_text())     # --json written into --out
    (folder / "sub").mkdir()
    (folder / "sub" / "x.json").write_text("not json")                       # subfolders are not read
    assert invoke("diff", runs["before"], folder).exit_code == 0


# -- the comparison, by hand ------------------------------------------------------------
def result(name: str, peak: Optional[int] = 5, **verdicts: Any) -> dict:
    """A check result with only the keys diff reads; a verdict is an outcome,
    or a length (violated)."""
    def verdict(v: Any) -> dict:
        return {"outcome": "violated", "length": v} if isinstance(v, int) else {"outcome": v, "length": None}
    return {"format": 1, "scenario": name, "peak_blocks": peak,
            "verdicts": {k.replace("_", "-"): verdict(v) for k, v in verdicts.items()}}


def write_results(path: Path, *results: dict) -> Path:
    path.write_text(json.dumps(list(results)))
    return path


@pytest.mark.parametrize("before, after, change, status", [
    (7, 5, "breaks sooner", 1),
    (5, 7, "breaks later", 0),
    ("holds", 5, "now breaks", 1),
    ("not seen", 5, "now breaks", 1),
    (5, "holds", "no longer breaks", 0),
    (5, "not seen", "verdict changed", 0),
    ("holds", "unsupported", "verdict changed", 0),
])
def test_each_change_and_whether_it_is_worse(tmp_path, before, after, change, status):
    a = write_results(tmp_path / "a.json", result("s", faithful_output=before, no_leak="holds"))
    b = write_results(tmp_path / "b.json", result("s", faithful_output=after, no_leak="holds"))
    got, data = diff_json(a, b)
    assert got.exit_code == status, got.output
    assert [(d["item"], d["change"], d["worse"]) for d in data["differences"]] == [("faithful-output", change, bool(status))]


def test_a_peak_that_moves_is_shown_and_not_worse(tmp_path):
    a = write_results(tmp_path / "a.json", result("s", peak=4, no_leak="holds"))
    b = write_results(tmp_path / "b.json", result("s", peak=6, no_leak="holds"))
    got, data = diff_json(a, b)
    assert got.exit_code == 0
    assert data["differences"][0] | {} == {"scenario": "s", "baseline": "s", "item": "peak", "before": {"peak_blocks": 4},
                                           "after": {"peak_blocks": 6}, "change": "peak up", "worse": False}
    assert "4 blocks" in got.stderr and "6 blocks" in got.stderr
    # a run without a peak (a z3 engine) compares no peak
    c = write_results(tmp_path / "c.json", result("s", peak=None, no_leak="holds"))
    assert diff_json(a, c)[1]["differences"] == []


def test_verdict_change_rules():
    broken = Answer("violated", 3)
    assert verdict_change(Answer(NO_FILE), broken) is Change.NOW_BREAKS
    assert verdict_change(broken, Answer(NO_FILE)) is Change.NO_LONGER
    assert verdict_change(broken, Answer(NOT_CHECKED)) is Change.VERDICT
    assert verdict_change(broken, Answer("violated", 3)) is None
    # absent is no verdict: compared only as "not broken"
    assert verdict_change(Answer("holds"), Answer(NO_FILE)) is None
    assert verdict_change(Answer(NOT_CHECKED), Answer("not seen")) is None


def record(name: str) -> Record:
    return Record(name, {}, None, Answer(NO_FILE))


def test_pairing_sets_an_override_aside_only_when_that_is_unambiguous():
    names = lambda pairs: [(o and o.name, n and n.name) for o, n in pairs]   # noqa: E731
    before = {n: record(n) for n in ("a", "b", "c~x-async-lifo")}
    after = {n: record(n) for n in ("a", "b~mine-async-lifo", "c~y-async-lifo")}
    assert names(pair(before, after)) == [("a", "a"), ("b", "b~mine-async-lifo"), ("c~x-async-lifo", "c~y-async-lifo")]
    two = {n: record(n) for n in ("b~x-async-lifo", "b~y-async-lifo")}
    assert names(pair({"b": record("b")}, two)) == [("b", None), (None, "b~x-async-lifo"), (None, "b~y-async-lifo")]
    comparison = compare(Run("one", {"b": record("b")}), Run("two", two))
    assert [d.change for d in comparison.differences] == [Change.MISSING, Change.NEW, Change.NEW]
    assert comparison.compared == 0 and len(comparison.worse) == 1


# -- bad input: one line naming the file, exit 2 --------------------------------------
def error_line(got: Any) -> str:
    assert got.exit_code == 2, got.output
    assert isinstance(got.exception, SystemExit), repr(got.exception)
    assert "Traceback" not in got.output and got.stdout.strip() == ""
    lines = [line for line in got.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, got.stderr
    return lines[0]


def cx_file(folder: Path, name: str, **changes: Any) -> None:
    data = {"cowcheck": 1, "kind": "counterexample", "scenario": {"name": "s"}, "invariant": "no-leak", "length": 3}
    data.update(changes)
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps(data))


BAD = {
    "no such path": (lambda d: d / "nowhere", ["nowhere", "no such file or folder"]),
    "invalid JSON": (lambda d: (d / "r.json").write_text("[{") and d / "r.json", ["r.json", "invalid JSON"]),
    "not a list": (lambda d: (d / "r.json").write_text('{"format": 1}') and d / "r.json", ["r.json", "not a list of results"]),
    "not a result": (lambda d: write_results(d / "r.json", {"scenario": "s"}), ["r.json", "[0]", "format 1"]),
    "no name": (lambda d: write_results(d / "r.json", result("")), ["[0].scenario", "non-empty"]),
    "twice": (lambda d: write_results(d / "r.json", result("s"), result("s")), ["[1].scenario", "appears twice"]),
    "unknown outcome": (lambda d: write_results(d / "r.json", result("s", no_leak="maybe")),
                        ["[0].verdicts.no-leak.outcome", "holds, violated"]),
    "violated without a length": (lambda d: write_results(d / "r.json", {**result("s"), "verdicts": {"no-leak": {"outcome": "violated"}}}),
                                  ["[0].verdicts.no-leak.length"]),
    "negative peak": (lambda d: write_results(d / "r.json", result("s", peak=-1)), ["peak_blocks"]),
    "empty folder": (lambda d: (d / "cx").mkdir() or d / "cx", ["cx", "no counterexample files"]),
    "a file of another format": (lambda d: cx_file(d / "cx", "s.no-leak.json", cowcheck=2) or d / "cx", ["s.no-leak.json", "format 1"]),
    "a file without a length": (lambda d: cx_file(d / "cx", "s.no-leak.json", length="3") or d / "cx", ["s.no-leak.json", "length"]),
    "a file of no kind": (lambda d: cx_file(d / "cx", "s.no-leak.json", kind="trace") or d / "cx", ["s.no-leak.json", "kind"]),
    "a peak without blocks": (lambda d: cx_file(d / "cx", "s.peak.json", kind="peak") or d / "cx", ["s.peak.json", "peak_blocks"]),
    "a broken file in the folder": (lambda d: cx_file(d / "cx", "a.json") or (d / "cx" / "b.json").write_text("{") and d / "cx",
                                    ["b.json", "invalid JSON"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_naming_the_file(tmp_path, case):
    make, needles = BAD[case]
    bad = make(tmp_path)
    good = write_results(tmp_path / "good.json", result("s", no_leak="holds"))
    for args in ((bad, good), (good, bad)):
        line = error_line(invoke("diff", *args))
        assert line.startswith("cowcheck: error: "), line
        for needle in needles:
            assert needle in line, (needle, line)


def test_an_unwritable_json_output_is_refused_before_reading(tmp_path):
    good = write_results(tmp_path / "good.json", result("s", no_leak="holds"))
    line = error_line(invoke("diff", good, good, "--json", good / "diff.json"))     # a file in the way
    assert "--json" in line and "good.json is not a folder" in line
