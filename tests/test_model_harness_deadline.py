"""A call of allocator code that does not return within its deadline keeps
its trace (issue 34, item 7): the check writes the run to the state it was
called from as `<scenario>.call-deadline.json`, which loads, validates
against the counterexample schema, and which `explain`, `html`, `graph` and
`replay` read (replay re-drives the call: again it does not return, or now
it does); the report says "partial: a call did not return", and so does
`--json`.

The adapter is this file's own `sleeps`: its append of a2 sleeps
$COWCHECK_TEST_SLEEP seconds (30 by default), far past the scenarios'
deadline of DEADLINE seconds; 0 makes the same code return."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

import cowcheck
from cowcheck.cli import main
from cowcheck.engines.counterexample import CALL_DEADLINE, Counterexample
from cowcheck.engines.results import CALL_DID_NOT_RETURN
from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import make_scenario
from cowcheck.schemas import load
from toy_allocators import Manager

#: the environment variable that says how long the append of a2 sleeps
SLEEP = "COWCHECK_TEST_SLEEP"
DEADLINE = 0.3
THIS = Path(__file__).resolve()
CALL = "append('a', 'a2')"
TWO = "block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n"


class Sleeps(Manager):
    """A correct manager whose append of a2 sleeps $COWCHECK_TEST_SLEEP seconds."""

    def append(self, branch, token):
        if token == "a2":
            time.sleep(float(os.environ.get(SLEEP, "30")))
        return super().append(branch, token)


def sleeps(pool, block_size): return Sleeps(pool, block_size)


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def words(result) -> str:
    """The output with every run of white space one space (tables wrap)."""
    return " ".join(result.output.split())


def scenario_file(folder: Path, name: str = "sleepy", factory: str = "sleeps") -> Path:
    path = folder / f"{name}.toml"
    path.write_text(f'allocator = "{THIS}:{factory}"\ndevice = "stream"\ncall_deadline = {DEADLINE}\n' + TWO)
    return path


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[object, Path, dict]:
    """One check of the sleepy scenario beside a correct one: what it
    printed, the call-deadline file and the JSON results."""
    folder = tmp_path_factory.mktemp("checked")
    scenario_file(folder)
    (folder / "steady.toml").write_text(f'allocator = "{Path(__file__).parent / "toy_allocators.py"}:manager"\n'
                                        'device = "stream"\n' + TWO)
    started = time.perf_counter()
    result = invoke("check", folder, "--out", folder / "cx", "--json", folder / "results.json")
    assert time.perf_counter() - started < 30
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    results = {r["scenario"]: r for r in json.loads((folder / "results.json").read_text())}
    return result, folder / "cx" / f"sleepy.{CALL_DEADLINE}.json", results


def test_the_check_writes_the_run_to_the_call_and_it_loads(checked):
    result, path, _ = checked
    assert result.exit_code == 3, result.output        # partial, nothing failed
    assert path.is_file(), result.output
    cx = Counterexample.load(path)
    assert (cx.kind, cx.call, cx.deadline, cx.invariant, cx.peak) == (CALL_DEADLINE, CALL, DEADLINE, None, None)
    assert cx.length == len(cx.actions) == 3 and cx.scenario.allocator == f"{THIS}:sleeps"
    data = json.loads(path.read_text())
    assert (data["kind"], data["call"], data["deadline"]) == (CALL_DEADLINE, CALL, DEADLINE)
    assert json.loads(json.dumps(cx.to_json())) == data      # it reads back as written


def test_the_file_validates_against_the_counterexample_schema(checked):
    _, path, _ = checked
    validator = Draft202012Validator(load("counterexample"))
    data = json.loads(path.read_text())
    assert not list(validator.iter_errors(data))
    for broken in ({**data, "call": ""}, {k: v for k, v in data.items() if k != "deadline"},
                   {**data, "peak_blocks": 3}, {**data, "deadline": 0}):
        assert list(validator.iter_errors(broken)), broken


@pytest.mark.parametrize("change, key", [({"call": ""}, "call"), ({"deadline": 0}, "deadline"),
                                         ({"deadline": "soon"}, "deadline")])
def test_a_malformed_call_deadline_file_is_one_line(checked, tmp_path, change, key):
    _, path, _ = checked
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(SpecError) as raised:
        Counterexample.load(bad)
    assert raised.value.key == key


def test_the_report_says_a_call_did_not_return(checked):
    result, path, _ = checked
    said = words(result)
    assert f"{CALL_DID_NOT_RETURN} (call deadline: {THIS}:sleeps {CALL} did not return within {DEADLINE:g} s)" in said, said
    assert "safe and disciplined so far" not in said
    assert f"the run to that call: {path} (3 actions;" in said
    table = result.output[result.output.index("scenarios"):]      # the closing table: one row per scenario
    row = next(line for line in table.splitlines() if line.startswith("sleepy"))
    assert CALL_DID_NOT_RETURN in row and "safe and disciplined" not in row, row


def test_the_json_says_so(checked):
    _, path, results = checked
    sleepy = results["sleepy"]
    assert not sleepy["complete"] and sleepy["category"] == "partial"
    assert sleepy["call_deadline"] == {"call": CALL, "deadline": DEADLINE, "length": 3, "counterexample": str(path)}
    assert "call_deadline" not in results["steady"]
    validator = Draft202012Validator(load("result"))
    for r in results.values():
        assert not list(validator.iter_errors(r)), r["scenario"]


def test_explain_narrates_the_run_and_names_the_call(checked):
    _, path, _ = checked
    result = invoke("explain", path)
    assert result.exit_code == 0, result.output
    said = words(result)
    assert f"reaches a call of the allocator that did not return within {DEADLINE:g} s, {CALL}, in 3 actions" in said, said
    assert f"after step 3, {CALL} did not return within {DEADLINE:g} s." in said
    assert f"re-driven now: the call {CALL} again did not return within {DEADLINE:g} s after step 3, as recorded" in said


def test_html_writes_a_page_of_the_run(checked, tmp_path):
    _, path, _ = checked
    page = tmp_path / "page.html"
    result = invoke("html", path, "-o", page, "--pool", "none")
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert '<span class="sub">call-deadline</span>' in text and "DID NOT RETURN" in text
    assert f"After step 3, the call {CALL} did not return within {DEADLINE:g} s." in text.replace("&#x27;", "'")


def test_check_html_links_the_page_from_its_index(tmp_path):
    scenario = scenario_file(tmp_path)
    result = invoke("check", scenario, "--out", tmp_path / "cx", "--html", tmp_path / "site")
    assert result.exit_code == 3, result.output
    index = (tmp_path / "site" / "index.html").read_text()
    assert (tmp_path / "site" / f"sleepy.{CALL_DEADLINE}.html").is_file()
    assert CALL_DID_NOT_RETURN in index and f'href="sleepy.{CALL_DEADLINE}.html">watch its 3 steps' in index


def test_graph_draws_the_last_state(checked, tmp_path):
    _, path, _ = checked
    result = invoke("graph", path, "-o", tmp_path / "g.svg")
    assert result.exit_code == 0, result.output
    assert "sleepy (call-deadline), step 3 of 3" in (tmp_path / "g.svg").read_text()


def test_replay_re_drives_the_call_and_it_again_does_not_return(checked):
    _, path, _ = checked
    started = time.perf_counter()
    result = invoke("replay", path, "--pool", "none")
    assert result.exit_code == 0, result.output
    assert f"replays in the model: {path}: the call {CALL} again did not return within {DEADLINE:g} s after step 3, " \
           "as recorded" in words(result)
    assert time.perf_counter() - started < 10
    as_json = invoke("replay", path, "--json")
    data = json.loads(as_json.output)
    assert as_json.exit_code == 0 and data["ok"] and data["step"] == 3 and data["invariant"] is None
    assert not list(Draft202012Validator(load("replay")).iter_errors(data))


def test_replay_says_when_the_call_now_returns(checked, monkeypatch):
    _, path, _ = checked
    monkeypatch.setenv(SLEEP, "0")
    result = invoke("replay", path, "--pool", "none")
    assert result.exit_code == 1, result.output
    assert (f"DOES NOT REPLAY in the model: {path}: the call {CALL} now returns within {DEADLINE:g} s after step 3; "
            "the file records that it did not") in words(result)


def test_a_complete_run_removes_the_call_deadline_file(tmp_path, monkeypatch):
    """As for an invariant that now holds: no stale trace lingers."""
    scenario = scenario_file(tmp_path)
    out = tmp_path / "cx"
    assert invoke("check", scenario, "--out", out).exit_code == 3
    assert (out / f"sleepy.{CALL_DEADLINE}.json").is_file()
    monkeypatch.setenv(SLEEP, "0")
    result = invoke("check", scenario, "--out", out)
    assert result.exit_code == 0, result.output
    assert not (out / f"sleepy.{CALL_DEADLINE}.json").exists() and CALL_DID_NOT_RETURN not in result.output


def test_the_api_result_carries_the_trace():
    result = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=sleeps, call_deadline=DEADLINE)
    assert result.hung and not result.complete and result.headline == CALL_DID_NOT_RETURN
    assert result.summary_line.startswith(f"{CALL_DID_NOT_RETURN} (call deadline: ")
    trace = result.deadline_trace
    assert trace is not None and trace.kind == CALL_DEADLINE and (trace.call, trace.deadline, trace.length) == (CALL, DEADLINE, 3)
    assert result.to_json()["call_deadline"]["counterexample"] is None      # not written yet
