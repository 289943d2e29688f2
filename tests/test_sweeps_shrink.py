"""Shrinking (docs/how-to/shrinking.md): the candidates, the search for the
smallest scenario that still breaks the invariant (checked against brute
force), the files it writes (a scenario `cowcheck check` regenerates the
counterexample from), the command, and the committed shrunk files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cowcheck
from cowcheck.model.scenario import load_scenario
from cowcheck.sweeps.shrink import candidates, shrink, simpler_modes, write_shrunk
from cowcheck.sweeps.cells import size_key
from cowcheck.engines.counterexample import Counterexample

ROOT = Path(__file__).resolve().parent.parent
CX = ROOT / "counterexamples"
SHRUNK = sorted((CX / "shrunk").glob("*.toml"))


def test_candidates_are_dominated_ordered_and_include_the_original():
    original = load_scenario(ROOT / "specs" / "scenarios" / "spare-capacity.toml")
    pool = candidates(original)
    keys = [size_key(s) for s in pool]
    assert keys == sorted(keys) and size_key(original) in keys
    for s in pool:
        assert s.block_size <= original.block_size and s.prompt <= original.prompt and s.pool <= original.pool
        assert len(s.branches) <= len(original.branches) and (s.device, s.reuse) == (original.device, original.reuse)
        assert s.pool <= -(-s.prompt // s.block_size) + sum(b.appends for b in s.branches) * s.protocol.max_allocs
    assert [(s.device, s.reuse) for s in simpler_modes(original)] == [
        ("stream", "lifo"), ("streams", "lifo")]


def test_the_smallest_is_found_and_nothing_before_it_breaks(tmp_path):
    cx = Counterexample.load(CX / "spare-capacity.faithful-output.json")
    result = shrink(cx, workers=0)
    assert result.smaller and result.counterexample is not None and not result.undecided
    assert size_key(result.scenario)[:6] < size_key(cx.scenario)[:6]
    # brute force: no candidate before it (device and reuse held) breaks the invariant
    held = cowcheck.with_overrides(result.scenario, device=cx.scenario.device, reuse=cx.scenario.reuse)
    found_key = size_key(held)
    for s in candidates(cx.scenario):
        if size_key(s) >= found_key:
            break
        assert cowcheck.check(s, invariants=cowcheck.select if False else tuple(
            i for i in cowcheck.INVARIANTS if i.id == "faithful-output"), first=True).verdicts["faithful-output"].holds
    # the files: a scenario whose check regenerates the counterexample
    toml, written = write_shrunk(result, tmp_path)
    again = cowcheck.check(load_scenario(toml))
    assert again.expect_met
    regenerated = again.verdicts["faithful-output"].counterexample
    assert regenerated.to_json() == Counterexample.load(written).to_json()
    assert cowcheck.replay(Counterexample.load(written)).ok


def test_the_command_and_its_bad_input(tmp_path):
    run = subprocess.run([sys.executable, "-m", "cowcheck", "shrink", str(CX / "publish-before-copy.faithful-output.json"),
                          "--workers", "0", "--out", "shrunk"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "publish-before-copy faithful-output" in run.stdout
    assert len(list((tmp_path / "shrunk").glob("*.toml"))) == 1
    peak = subprocess.run([sys.executable, "-m", "cowcheck", "shrink", str(CX / "publish-before-copy.peak.json"),
                           "--workers", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert peak.returncode == 2 and peak.stderr.count("\n") == 1 and "peak trace" in peak.stderr


def test_on_a_local_cluster_it_finds_the_same(tmp_path):
    cx = Counterexample.load(CX / "premature-decrement.exclusive-write.json")
    serial = shrink(cx, workers=0)
    parallel = shrink(cx, workers=2)
    assert serial.scenario == parallel.scenario
    assert serial.counterexample.to_json() == parallel.counterexample.to_json()


@pytest.mark.parametrize("path", SHRUNK, ids=lambda p: p.stem)
def test_committed_shrunk_scenarios_regenerate_their_counterexamples(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    scenario = load_scenario(path.relative_to(ROOT))
    invariant = scenario.expect[0].split()[1]
    result = cowcheck.check(scenario)
    assert result.expect_met
    committed = Counterexample.load(path.with_suffix(f".{invariant}.json"))
    assert result.verdicts[invariant].counterexample.to_json() == committed.to_json()


def test_a_scenario_with_branch_programs_shrinks_to_a_shorter_program(tmp_path):
    """Operations dropped (a fork with its child), drafts lowered, roots
    dropped: fork-share-first's wrong output needs only a fork of a child
    that does nothing, then one append of the parent."""
    original = load_scenario(ROOT / "specs" / "scenarios" / "fork-share-first.toml")
    result = shrink(original, "faithful-output", workers=0)
    assert result.smaller
    assert [(b.program, b.parent) for b in result.scenario.branches] == [(("fork b", "append"), None), ((), 0)]
    toml, _ = write_shrunk(result, tmp_path)
    again = load_scenario(toml)
    assert again.branches == result.scenario.branches
    assert cowcheck.check(again).expect_met
