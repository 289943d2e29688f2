"""The pytest plugin (docs/how-to/ci.md): `pytest --cowcheck PATH` collects
scenario files with an `expect` as test items, one per scenario, in an
engine team's own folder with its own protocol and allocator files; without
--cowcheck it collects nothing. Run through pytest's own `pytester`."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

ALLOCATOR = "from cowcheck.specs.allocators.engine import correct, double_free_after_cow  # the team's own code\n"
SCENARIOS = {
    # a protocol file of the team's own, next to its scenarios
    "specs/premature.toml": 'expect = ["violates exclusive-write"]\nprotocol = "protocols/mine.toml"\n'
                            'block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n',
    # the team's allocator code, through the engine harness
    "specs/alloc-ok.toml": 'expect = "safe"\nallocator = "../alloc.py:correct"\ndevice = "stream"\n'
                           'block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n',
    # an expect that does not hold: fails with the narrated counterexample
    "specs/alloc-bug.toml": 'expect = "safe"\nallocator = "../alloc.py:double_free_after_cow"\ndevice = "stream"\n'
                            'block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n',
    # no expect: not a test
    "specs/no-expect.toml": 'block_size = 2\nprompt = 1\n[[branch]]\nappends = 1\n',
}


@pytest.fixture
def team(pytester: pytest.Pytester) -> pytest.Pytester:
    """An engine team's repository: its scenarios, a protocol file and an allocator module."""
    protocol = (ROOT / "specs" / "protocols" / "premature-decrement.toml").read_text()
    (pytester.path / "specs" / "protocols").mkdir(parents=True)
    (pytester.path / "specs" / "protocols" / "mine.toml").write_text(protocol)
    (pytester.path / "alloc.py").write_text(ALLOCATOR)
    for name, text in SCENARIOS.items():
        (pytester.path / name).write_text(text)
    (pytester.path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    return pytester


def test_scenarios_are_items_that_pass_or_fail_with_the_counterexample(team):
    run = team.runpytest("--cowcheck", "specs/", "-p", "no:cacheprovider")
    run.assert_outcomes(passed=2, failed=1)
    out = run.stdout.str()
    assert "alloc-bug.toml::alloc-bug FAILED" in out or "FAILED specs/alloc-bug.toml::alloc-bug" in out
    assert "expect not met" in out and "shortest counterexample of" in out
    assert "step 1 " in out                     # narrated step by step
    assert "no-expect" not in out and "Traceback" not in out


def test_one_item_per_scenario_named_by_it(team):
    run = team.runpytest("--cowcheck", "specs/", "--collect-only", "-q")
    items = sorted(line for line in run.stdout.lines if "::" in line)
    assert items == ["specs/alloc-bug.toml::alloc-bug", "specs/alloc-ok.toml::alloc-ok", "specs/premature.toml::premature"]


def test_off_unless_asked_for(team):
    run = team.runpytest("--collect-only", "-q")
    assert [line for line in run.stdout.lines if "::" in line] == ["test_plain.py::test_plain"]
    run = team.runpytest("specs/", "--collect-only", "-q")
    assert not [line for line in run.stdout.lines if "::" in line]


def test_a_bad_scenario_file_is_a_collection_error_naming_the_key(team):
    (team.path / "specs" / "bad.toml").write_text('expect = "safe"\nblock_size = "two"\nprompt = 1\n[[branch]]\nappends = 1\n')
    run = team.runpytest("--cowcheck", "specs/bad.toml")
    assert run.ret == pytest.ExitCode.INTERRUPTED
    assert "cowcheck: error: " in run.stdout.str() and "key 'block_size': must be an integer" in run.stdout.str()
    assert "scenario.py" not in run.stdout.str()          # one line, not the loader's traceback
