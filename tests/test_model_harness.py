"""The engine harness (docs/semantics.md#engine-harness): allocator code
driven through every interleaving as a second transition system. Here: the
adapter contract (every bad adapter is one line, exit 2), allocator-error,
observers that are missing, replays that re-run the code, the Python API.
The shipped allocators and their agreement with the protocol files that
describe them are in tests/test_model_harness_agreement.py."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import cowcheck
from cowcheck.cli import main
from cowcheck.adapters import Adapter
from cowcheck.model.harness import HarnessModel
from cowcheck.model.scenario import make_scenario
from cowcheck.engines.results import Outcome
from toy_allocators import TOY, Flaky, Manager, blind, double_free, flaky, hangs, interrupted, manager


TWO = "block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n"


def scenario_file(tmp_path: Path, allocator: str, device: str = "stream", body: str = TWO) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f'allocator = "{allocator}"\ndevice = "{device}"\n' + body)
    return path


def error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


ADAPTERS = TOY


@pytest.mark.parametrize("ref, words", [
    ("no_such_module_xyz:make", ["'allocator'", "no_such_module_xyz", "cannot be imported"]),
    (f"{ADAPTERS}:nothing_here", ["'allocator'", "no callable 'nothing_here'"]),
    ("missing.py:make", ["'allocator'", "missing.py", "not found", "relative to the scenario's folder"]),
    ("just-a-name", ["'allocator'", "module:factory"]),
    (f"{ADAPTERS}:takes_nothing", ["factory", "must accept (pool, block_size)"]),
    (f"{ADAPTERS}:no_fork", ["'fork'", "has no fork()", "start, append, fork, rollback, free, table"]),
    (f"{ADAPTERS}:odd_copies", ["'append'", "(src, dst) block-id pairs", "[(1,)]"]),
    (f"{ADAPTERS}:outside_the_pool", ["'table'", "block id", "from 0 to", "99"]),
    (f"{ADAPTERS}:wordy_refcount", ["'refcount'", "must return an integer", "'one'"]),
    (f"{ADAPTERS}:locked", ["cannot be pickled", "lock"]),
])
def test_a_bad_adapter_is_one_line_naming_the_adapter_and_the_method(tmp_path, ref, words):
    result = CliRunner().invoke(main, ["check", str(scenario_file(tmp_path, ref)), "--out", str(tmp_path / "cx")])
    line = error_line(result)
    for word in words:
        assert word in line, line


def test_an_exception_the_allocator_raises_is_allocator_error_with_its_shortest_trace():
    result = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=double_free)
    verdict = result.verdicts["allocator-error"]
    assert verdict.outcome is Outcome.VIOLATED and verdict.kind is cowcheck.Kind.HARM
    # the copy-on-write append drops the shared tail to 0 (freeing it); the
    # other branch's free then fires the engine's assertion
    assert "Double free!" in verdict.witness["error"] and verdict.witness["call"] == "free('b')"
    assert verdict.length == len(verdict.counterexample.actions)
    assert cowcheck.replay(verdict.counterexample, pool="none").ok


def test_a_correct_allocator_holds_on_one_stream_and_its_copies_race_on_an_async_device():
    scenario = make_scenario(2, 3, [2, 2], device="stream")
    held = cowcheck.check(scenario, allocator=manager)
    assert held.summary is cowcheck.Summary.DISCIPLINED and "allocator-error" in held.verdicts
    assert held.exploration.reductions == ()              # opaque states: no symmetry, no partial order
    raced = cowcheck.check(make_scenario(2, 3, [2, 2], device="async"), allocator=manager)
    assert raced.verdicts["copy-before-use"].outcome is Outcome.VIOLATED   # a kernel may beat the copy it follows


def test_without_observers_some_invariants_are_not_checked():
    result = cowcheck.check(make_scenario(2, 3, [1, 1], device="stream"), allocator=blind)
    unchecked = {k for k, v in result.verdicts.items() if v.outcome is Outcome.UNSUPPORTED}
    assert unchecked == {"refcount-write", "refcount-exact", "no-leak", "no-use-after-free", "no-underflow"}
    assert all("not checked" in result.verdicts[k].note for k in unchecked)


def test_no_underflow_is_not_checked_through_the_harness_and_allocator_error_stands_in(tmp_path):
    """Item 14: the harness never sees a decrement, so no-underflow is not
    reported as holding; a "holds" or "safe" expect is still met through
    allocator-error, and one without allocator-error cannot be confirmed."""
    result = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=manager)
    verdict = result.verdicts["no-underflow"]
    assert verdict.outcome is Outcome.UNSUPPORTED and "allocator-error stands in" in verdict.note
    assert result.verdicts["allocator-error"].outcome is Outcome.HOLDS
    path = scenario_file(tmp_path, f"{ADAPTERS}:manager")
    path.write_text('expect = "holds"\n' + path.read_text())
    row = CliRunner().invoke(main, ["check", str(path), "--out", str(tmp_path / "cx")])
    assert row.exit_code == 0 and "expect met: holds" in row.output, row.output
    assert [line for line in row.output.splitlines() if line.startswith("no-underflow")][0].split("│")[2].strip() == "unsupported"
    alone = cowcheck.check(cowcheck.load_scenario(path), invariants=(cowcheck.INVARIANTS[1],))
    assert not alone.expect_met and "cannot check no-underflow" in alone.expectation_failures[0]


def test_programs_forks_and_speculation_run_through_the_harness():
    scenario = make_scenario(2, 3, [{"program": ["append", "fork c", "speculate 2", "append"], "may_cancel": True},
                                    {"appends": 1}, {"appends": 1, "parent": "a"}], device="stream")
    result = cowcheck.check(scenario, allocator=manager)
    harm = [k for k, v in result.verdicts.items() if v.outcome is Outcome.VIOLATED and v.kind is cowcheck.Kind.HARM]
    assert harm == [] and result.complete
    model = HarnessModel(result.scenario, manager)
    steps = {t.action.step for s in [model.init_state()] for t in model.successors(s)}
    assert steps == {"append", "free"}                    # a's append and a's prune; b appends


def test_a_replay_re_runs_the_code_and_says_when_it_is_not_deterministic(tmp_path):
    scenario = make_scenario(2, 3, [2, 2], device="async")
    cx = cowcheck.check(scenario, allocator=manager).verdicts["copy-before-use"].counterexample
    assert cowcheck.replay(cx, pool="none").ok
    path = cx.write(tmp_path / "cx.json")
    assert cowcheck.replay(cowcheck.Counterexample.load(path), pool="none").ok
    cx = cowcheck.check(scenario, allocator=flaky).verdicts["copy-before-use"].counterexample
    Flaky.armed[0] = True
    try:
        replayed = cowcheck.replay(cx, pool="none")
    finally:
        Flaky.armed[0] = False
    assert not replayed.ok and "not deterministic" in replayed.model.message


def test_the_command_line_takes_allocator_from_the_scenario_and_as_an_override(tmp_path):
    path = scenario_file(tmp_path, f"{ADAPTERS}:manager")
    result = CliRunner().invoke(main, ["check", str(path), "--out", str(tmp_path / "cx"), "--json", "-"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)[0]
    assert data["allocator"] == f"{ADAPTERS}:manager" and data["summary"] == "safe and disciplined"
    plain = tmp_path / "plain.toml"
    plain.write_text('device = "async"\n' + TWO)
    override = CliRunner().invoke(main, ["check", str(plain), "--allocator", f"{ADAPTERS}:manager", "--out", str(tmp_path / "o")])
    assert override.exit_code == 1 and "allocator" in override.output
    assert any(p.name.startswith("plain~toy_allocators.manager-async.") for p in (tmp_path / "o").iterdir())


@pytest.mark.parametrize("override", [["--allocator", f"{ADAPTERS}:manager"], []])
def test_reuse_is_refused_for_allocator_code_in_one_line(tmp_path, override):
    """Item 15: allocator code takes free blocks in its own order, so --reuse
    (given with --allocator, or for a scenario of allocator code) is refused."""
    path = scenario_file(tmp_path, f"{ADAPTERS}:manager")
    result = CliRunner().invoke(main, ["check", str(path), "--reuse", "fifo", "--out", str(tmp_path / "cx")] + override)
    line = error_line(result)
    assert line.startswith("cowcheck: error: --reuse: ") and "its own order" in line and "protocol files only" in line
    assert not (tmp_path / "cx").exists()


def test_headers_and_pages_say_the_allocator_reuses_blocks_in_its_own_order(tmp_path):
    """Item 15: no "reuse lifo" where the allocator decides; no reuse in an override's file names."""
    plain = tmp_path / "plain.toml"
    plain.write_text('device = "async"\n' + TWO)
    result = CliRunner().invoke(main, ["check", str(plain), "--allocator", f"{ADAPTERS}:manager", "--out",
                                       str(tmp_path / "cx"), "--html", str(tmp_path / "site")])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith(f"plain~toy_allocators.manager-async  allocator {ADAPTERS}:manager  "
                                                    "device async  reuse the allocator's  B=")
    race = next((tmp_path / "cx").glob("*.copy-before-use.json"))
    assert race.name == "plain~toy_allocators.manager-async.copy-before-use.json"
    assert "reuse the allocator's" in cowcheck.explain(cowcheck.load_counterexample(race)).splitlines()[0]
    for page in ("index.html", race.stem + ".html"):
        text = (tmp_path / "site" / page).read_text()
        assert "reuse the allocator&#x27;s" in text and "reuse lifo" not in text


def test_a_scenario_file_of_allocator_code_cannot_give_reuse(tmp_path):
    """Item 15, in files: a scenario of allocator code that gives `reuse`
    names an order the allocator does not follow; one line, exit 2."""
    path = tmp_path / "s.toml"
    path.write_text(f'allocator = "{ADAPTERS}:manager"\nreuse = "fifo"\n' + TWO)
    line = error_line(CliRunner().invoke(main, ["check", str(path), "--out", str(tmp_path / "cx")]))
    assert "s.toml" in line and "'reuse'" in line and "its own order" in line


def test_the_z3_engines_refuse_allocator_code_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["check", str(scenario_file(tmp_path, f"{ADAPTERS}:manager")), "--engine", "bmc"])
    assert "allocator code is checked by the explorer" in error_line(result)


def test_states_are_snapshots_and_equal_snapshots_are_one_state():
    model = HarnessModel(make_scenario(2, 3, [1, 1], device="stream", name="h"), manager)
    init = model.init_state()
    assert init == model.init_state() and hash(init) == hash(model.init_state())
    after = [t.state for t in model.successors(init)]
    assert len(set(after)) == len(after)
    assert isinstance(Manager(4, 2), Adapter)


def test_the_manual_adapter_runs_as_written(tmp_path, monkeypatch):
    """docs/how-to/allocator-code.md ("Check your allocator's code"): its
    adapter, its command and its pytest examples, exactly as printed."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "how-to" / "allocator-code.md").read_text()
    adapter, pytest_use, fenced, cache_adapter = re.findall(r"```python\n(.*?)```", section, re.S)
    assert fenced in (root / "specs" / "allocators" / "fenced.py").read_text()     # the shipped adapter, as printed
    (tmp_path / "my_allocator.py").write_text(adapter)
    (tmp_path / "test_engine.py").write_text(pytest_use)
    command = re.search(r"```sh\n(cowcheck check .*?)\n```", section).group(1).split()
    assert command[:2] == ["cowcheck", "check"] and command[3:] == ["--allocator", "my_allocator.py:factory"]
    exe = str(Path(sys.executable).parent / "cowcheck")
    # the command as printed, run where my_allocator.py is, with the scenario found in this checkout
    local = subprocess.run([exe, "check", str(root / command[2]), *command[3:], "--out", str(tmp_path / "cx")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "allocator my_allocator.py:factory" in local.stdout and "safe and disciplined" in local.stdout
    # the output printed under the command is this run's, but for its timings
    printed = re.search(r"```\n(cow-stream~my_allocator.*?)```", section, re.S).group(1)
    timings = re.compile(r"time \S+  states/s \S+")
    assert [timings.sub("", line).rstrip() for line in printed.splitlines()] == \
        [timings.sub("", line).rstrip() for line in local.stdout.splitlines()]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_engine.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout + tests.stderr
    # "An allocator with a prefix cache": its adapter and its command, as printed
    (tmp_path / "my_cache_allocator.py").write_text(cache_adapter)
    command = re.findall(r"```sh\n(cowcheck check .*?)\n```", section)[-1].split()
    assert command[3:] == ["--allocator", "my_cache_allocator.py:factory"]
    cache = subprocess.run([exe, "check", str(root / command[2]), *command[3:], "--out", str(tmp_path / "cx")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "safe but undisciplined" in cache.stdout and "exclusive-write" in cache.stdout, cache.stdout + cache.stderr


def test_the_non_determinism_error_names_the_step_the_call_and_what_differs(monkeypatch):
    """Item 19: code that turns non-deterministic between the search and the
    rebuilding of its shortest trace is one line naming where and how."""
    from cowcheck.engines.explorer import Explorer
    from toy_allocators import Flaky
    search = Explorer.run

    def then_arm(self):
        search(self)
        Flaky.armed[0] = True           # state outside the pickle changes after the search
    monkeypatch.setattr(Explorer, "run", then_arm)
    try:
        with pytest.raises(cowcheck.SpecError) as raised:
            cowcheck.check(make_scenario(2, 3, [2, 2], device="async"), allocator=flaky)
    finally:
        Flaky.armed[0] = False
    message = str(raised.value)
    assert "not deterministic" in message and "rebuilding a trace, at step" in message
    assert "by branch " in message and "append" in message and "now gives another" in message
    assert "allocator state (its pickle)" in message


def test_a_call_that_never_returns_stops_the_check_naming_the_adapter_the_call_and_the_partial_result(tmp_path):
    path = scenario_file(tmp_path, f"{ADAPTERS}:hangs", body="call_deadline = 0.5\n" + TWO)
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["check", str(path), "--out", str(tmp_path / "cx")])
    assert time.perf_counter() - started < 30 and "Traceback" not in result.output
    assert result.exit_code == 3, result.output        # partial, nothing failed
    words = " ".join(result.output.split())
    assert f"partial: a call did not return (call deadline: {ADAPTERS}:hangs append('a', 'a2') did not return within 0.5 s)" in words, words
    assert "not seen (partial)" in words and "states 12 " in words
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    # the command line's flag wins over the scenario's key; 0 is no deadline (not tried: it would hang)
    flag = CliRunner().invoke(main, ["check", str(path), "--call-deadline", "0.2", "--out", str(tmp_path / "cx")])
    assert "did not return within 0.2 s" in flag.output
    api = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=hangs, call_deadline=0.3)
    assert not api.complete and "append('a', 'a2')" in api.stopped and api.exploration.states > 1


def test_an_earlier_timer_outlives_the_deadline_of_each_call():
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=manager, call_deadline=5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 20 < left <= 30 and signal.getsignal(signal.SIGALRM) is not previous and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_deadline_stops_a_call_off_the_main_thread_too():
    out = []
    thread = threading.Thread(target=lambda: out.append(
        cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=hangs, call_deadline=0.3)))
    thread.start()
    thread.join(30)
    assert out and "did not return within 0.3 s" in out[0].stopped


def test_a_ctrl_c_inside_a_call_names_the_call(tmp_path):
    result = cowcheck.check(make_scenario(2, 3, [2, 2], device="stream"), allocator=interrupted)
    assert result.interrupted and result.stopped.startswith("interrupted (Ctrl-C) in ")
    assert "interrupted append('a', 'a1')" in result.stopped, result.stopped


@pytest.mark.parametrize("value", ["-1", '"soon"', "100000"])
def test_a_bad_call_deadline_is_one_line(tmp_path, value):
    path = scenario_file(tmp_path, f"{ADAPTERS}:manager", body=f"call_deadline = {value}\n" + TWO)
    line = error_line(CliRunner().invoke(main, ["check", str(path), "--out", str(tmp_path / "cx")]))
    assert "'call_deadline'" in line and "number of seconds from 0" in line and str(path) in line, line


def test_the_progress_line_names_the_call_running():
    from cowcheck.adapters.deadline import Deadline
    from cowcheck.cli.check import Progress
    progress = Progress("s")
    try:
        with Deadline(0, "toy:manager")("append('a', 'a2')"):
            line = progress.line()
        assert "calling toy:manager append('a', 'a2') (0.0 s)" in line, line
        assert "calling" not in progress.line()
    finally:
        progress.close()


def test_a_counterexample_records_the_engine_code_it_was_found_with(tmp_path, monkeypatch):
    """An adapter's version() ("vLLM 0.33.0") goes into its counterexamples;
    replaying one on other code says so before the answer, and explain names
    it; a version() that is not a non-empty string is one line."""
    path = scenario_file(tmp_path, f"{ADAPTERS}:versioned")
    monkeypatch.setenv("TOY_VERSION", "toy 1.0")
    result = CliRunner().invoke(main, ["check", str(path), "--device", "async", "--out", str(tmp_path / "cx")])
    written = next((tmp_path / "cx").glob("*.copy-before-use.json"))
    data = json.loads(written.read_text())
    assert data["allocator_version"] == "toy 1.0", result.output
    cx = cowcheck.load_counterexample(written)
    assert cx.allocator_version == "toy 1.0" and "toy 1.0" in cowcheck.explain(cx).splitlines()[0]
    same = cowcheck.replay(cx, pool="none")
    assert same.ok and "recorded with" not in same.model.message
    monkeypatch.setenv("TOY_VERSION", "toy 2.0")
    again = CliRunner().invoke(main, ["replay", str(written), "--pool", "none"])
    assert (".json: other code than found this trace: recorded with toy 1.0; replayed with toy 2.0; copy-before-use breaks"
            in " ".join(again.output.split())), again.output
    bad = scenario_file(tmp_path, f"{ADAPTERS}:unversioned")
    line = error_line(CliRunner().invoke(main, ["check", str(bad), "--out", str(tmp_path / "cx2")]))
    assert "'version'" in line and "non-empty string" in line and "3" in line
