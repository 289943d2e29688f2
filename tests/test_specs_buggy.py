"""Every built-in buggy protocol: its violations are found, each shortest
trace is minimal (no trace one action shorter breaks the invariant), and each
counterexample replays in the model at the same step. Also: the whole specs/
folder meets its expectations and regenerates the committed counterexamples
byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, SPECS, check_into
from cowcheck.engines import counterexample as trace
from cowcheck import check
from cowcheck.engines.invariants import BY_ID, select
from cowcheck.traces.replay import replay
from cowcheck.model.protocol import builtin_names
from cowcheck.model.scenario import load_scenario

SCENARIOS = sorted((SPECS / "scenarios").glob("*.toml"))
BUGGY = [p for p in SCENARIOS if any(e.startswith("violates") for e in load_scenario(p).expect)]


def test_every_buggy_builtin_protocol_has_a_failing_scenario():
    correct = {"cow", "holds", "prefix-cache", "kv-connector", "kv-connector-lazy"}
    covered = {load_scenario(p).protocol.name for p in BUGGY}
    assert set(builtin_names()) - correct <= covered


#: the buggy scenarios whose minimality search takes over ten seconds: slow
HEAVY: tuple[str, ...] = ()


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.stem in HEAVY else [], id=p.stem) for p in BUGGY])
def test_violations_found_minimal_and_replayable(path, shipped):
    """From the session's one check of specs/ (conftest.shipped): each
    expected violation's file replays to its length, and no trace one
    action shorter breaks the invariant."""
    scenario = load_scenario(path)
    (result,) = [r for r in shipped.results if r["scenario"] == scenario.name]
    assert result["expect_met"], result
    expected = {e.split()[1] for e in scenario.expect if e.startswith("violates")}
    for inv_id in expected:
        verdict = result["verdicts"][inv_id]
        assert verdict["holds"] is False
        cx = trace.load(Path(verdict["counterexample"]))
        assert cx.length == verdict["length"] == len(cx.actions)
        replayed = replay(cx)
        assert replayed.ok, replayed.message
        assert replayed.step == verdict["length"]
        # minimal: exploring every trace one action shorter never breaks it
        shorter = check(scenario, invariants=select([inv_id]), max_depth=verdict["length"] - 1)
        assert shorter.verdicts[inv_id].holds is not False, f"{inv_id} broke in fewer than {verdict['length']} actions"


def test_faithful_output_counterexample_records_expected_and_read(tmp_path):
    result = check_into(load_scenario(SPECS / "scenarios" / "premature-decrement.toml"), tmp_path)
    data = json.loads(Path(result.verdicts["faithful-output"].path).read_text())
    witness = data["witness"]
    assert data["length"] == 27 and len(data["steps"]) == 27
    assert witness["expected"] != witness["read"]
    assert witness["expected_sequence"][witness["position"]] == witness["expected"]
    # every step records its action and the state after it
    assert all(step["state"] is not None and step["action"]["actor"] for step in data["steps"])


def test_tampered_trace_does_not_replay(tmp_path):
    result = check_into(load_scenario(SPECS / "scenarios" / "spare-capacity.toml"), tmp_path)
    path = Path(result.verdicts["faithful-output"].path)
    cx = trace.load(path)
    # drop the kernel-complete that makes the other branch overwrite the tail
    cx.actions = cx.actions[:-1]
    cx.states = cx.states[:-1]
    replayed = replay(cx)
    assert not replayed.ok


def test_specs_meet_their_expectations_and_regenerate_the_committed_counterexamples(shipped):
    """The README's first command, `cowcheck check specs/`, run once for the
    session (conftest.shipped): every expect met, and the files it writes
    are the committed ones, byte for byte."""
    assert shipped.exit_code == 0, shipped.output[-3000:]
    assert len(shipped.results) == len(SCENARIOS) and all(r["expect_met"] for r in shipped.results)
    produced = {p.name: p.read_text() for p in shipped.out.glob("*.json")}
    committed = {p.name: p.read_text() for p in (ROOT / "counterexamples").glob("*.json")}
    assert produced.keys() == committed.keys()
    stale = [name for name in produced if produced[name] != committed[name]]
    assert not stale, f"regenerate with `cowcheck check specs/`: {stale}"


@pytest.mark.parametrize("path", sorted((ROOT / "counterexamples").glob("*.json")), ids=lambda p: p.stem)
def test_committed_counterexample_replays(path):
    cx = trace.load(path)
    replayed = replay(cx)
    assert replayed.ok, replayed.message
    if cx.invariant:
        assert cx.invariant in BY_ID
