"""The public API, used as an engine team would: importing only `cowcheck`.
The manual's Python API example (docs/reference/api.md) is run as it is written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cowcheck
from cowcheck import CheckFailed, Invariant, Kind, Outcome, Summary

ROOT = Path(__file__).resolve().parent.parent


def manual_example() -> str:
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    section = text[text.index("## Example"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_manual_example_runs(monkeypatch, tmp_path):
    """With nothing given to it, from a folder outside the repository: the
    example imports and defines all it uses (issue 27, item 7)."""
    monkeypatch.chdir(tmp_path)
    exec(compile(manual_example(), "docs/reference/api.md (Example)", "exec"), {})


def test_check_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cowcheck.check(ROOT / "specs" / "scenarios" / "premature-decrement.toml")
    assert result.violated() and not list(tmp_path.iterdir())


def test_a_failed_assertion_explains_the_shortest_counterexample():
    racy = cowcheck.make_scenario(2, 3, [2, 2], "premature-decrement")
    with pytest.raises(CheckFailed) as failure:
        cowcheck.assert_holds(racy)
    message = str(failure.value)
    assert "exclusive-write (7 actions)" in message
    assert "exclusive-write breaks at step 7." in message       # the narration of the shortest one
    assert "step 7 device: kernel-complete" in message


def test_assert_safe_passes_where_only_discipline_breaks():
    # vLLM's block manager v1 on one stream: undisciplined but safe
    result = cowcheck.assert_safe(ROOT / "specs" / "scenarios" / "vllm-bmv1-stream.toml")
    assert result.summary is Summary.UNDISCIPLINED
    with pytest.raises(CheckFailed, match="no harm invariant"):
        cowcheck.assert_safe(ROOT / "specs" / "scenarios" / "premature-decrement.toml")


def test_assert_violates_checks_the_length():
    racy = cowcheck.make_scenario(2, 3, [2, 2], "premature-decrement")
    assert cowcheck.assert_violates(racy, "faithful-output").length == 27
    with pytest.raises(CheckFailed, match="of 26 actions, found 27"):
        cowcheck.assert_violates(racy, "faithful-output", length=26)
    with pytest.raises(CheckFailed, match="refcount-write to break"):
        cowcheck.assert_violates(racy, "refcount-write")


def test_a_partial_run_confirms_nothing():
    with pytest.raises(CheckFailed, match="partial run"):
        cowcheck.assert_holds(cowcheck.make_scenario(2, 3, [2, 2], "cow"), max_states=50)


HEADROOM = Invariant("headroom", Kind.DISCIPLINE, "every state", "at least one block is free",
                     on_state=lambda model, state, final, stuck: None if state.free else {"message": "no free block"})
TIGHT = dict(block_size=2, prompt=3, branches=[2, 2], protocol="cow", pool=5, name="tight")


def test_a_custom_invariant_goes_through_file_replay_explain_and_page(tmp_path):
    scenario = cowcheck.make_scenario(**TIGHT)
    result = cowcheck.check(scenario, invariants=(HEADROOM,))
    verdict = result.verdicts["headroom"]
    assert verdict.outcome is Outcome.VIOLATED and verdict.kind is Kind.DISCIPLINE
    cowcheck.write_result(result, tmp_path)
    path = tmp_path / "tight.headroom.json"
    assert verdict.path == str(path)
    loaded = cowcheck.Counterexample.load(path)
    assert loaded.invariant == "headroom" and loaded.invariant_kind == "discipline"
    assert loaded.length == verdict.length
    # without its definition a file naming a custom invariant is refused in one line
    with pytest.raises(cowcheck.SpecError, match="unknown invariant 'headroom'"):
        cowcheck.replay(loaded)
    assert cowcheck.replay(loaded, invariants=(HEADROOM,)).ok
    text = cowcheck.explain(loaded, invariants=(HEADROOM,))
    assert f"headroom breaks at step {verdict.length}." in text and "at least one block is free" in text
    assert "no free block" in text
    page = cowcheck.page(loaded, invariants=(HEADROOM,))
    assert page.startswith("<!DOCTYPE html>") and "headroom" in page


def test_a_custom_invariant_is_unsupported_by_bmc_not_a_crash():
    pytest.importorskip("z3")
    scenario = cowcheck.make_scenario(**TIGHT)
    result = cowcheck.check(scenario, engine="bmc", depth=4, invariants=(HEADROOM, *cowcheck.INVARIANTS[:1]))
    assert result.verdicts["headroom"].outcome is Outcome.UNSUPPORTED
    assert result.verdicts["headroom"].note
    assert result.verdicts["faithful-output"].outcome in (Outcome.NOT_SEEN, Outcome.HOLDS)
    assert "states" not in result.to_json()          # BMC has no state count: absent, not 0


def test_the_protocol_model_is_a_transition_system():
    model: cowcheck.TransitionSystem = cowcheck.ProtocolModel(cowcheck.make_scenario(2, 3, [1]))
    state = model.init_state()
    seen = 0
    while not model.is_final(state):
        state = model.successors(state)[0].state
        seen += 1
    assert seen > 0 and model.is_final(state)


def test_a_users_own_model_and_specs_do_not_shadow_cowcheck(tmp_path):
    """cowcheck installs one import package; a user's `model.py`, `checker.py`
    and `specs/` package in the working folder change nothing."""
    import subprocess
    import sys
    (tmp_path / "model.py").write_text("raise ImportError('the user model')\n")
    (tmp_path / "checker.py").write_text("raise ImportError('the user checker')\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "__init__.py").write_text("")
    (tmp_path / "specs" / "protocols").mkdir()
    (tmp_path / "specs" / "protocols" / "__init__.py").write_text("")
    scenario = ROOT / "specs" / "scenarios" / "premature-decrement.toml"
    done = subprocess.run([sys.executable, "-m", "cowcheck", "check", str(scenario), "--out", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "1 met their expect" in done.stdout
    listed = subprocess.run([sys.executable, "-m", "cowcheck", "list"], cwd=tmp_path, capture_output=True, text=True)
    assert listed.returncode == 0 and "premature-decrement" in listed.stdout


def test_no_module_shadows_a_public_name():
    """A submodule imported later must not replace a public function of the
    same name (Python sets package attributes on import)."""
    import importlib
    import pkgutil
    for info in pkgutil.walk_packages(cowcheck.__path__, "cowcheck."):
        if not info.name.startswith(("cowcheck.symbolic", "cowcheck.specs")):
            importlib.import_module(info.name)
    for name in cowcheck.__all__:
        value = getattr(cowcheck, name)
        assert not hasattr(value, "__path__") and type(value).__name__ != "module", name


def test_a_protocol_built_in_code_is_checked_like_a_file():
    spare = cowcheck.make_protocol({
        "append": {"rules": [{"when": "boundary", "path": "fresh"}, {"when": "true", "path": "in-place"}],
                   "paths": {"fresh": ["alloc new", "append new", "publish", "write", "wait-kernel"],
                             "in-place": ["write", "wait-kernel"]}},
    }, name="spare")
    scenario = cowcheck.make_scenario(2, 3, [2, 2], spare)
    assert cowcheck.assert_violates(scenario, "exclusive-write", length=3).scenario.protocol.name == "spare"
    with pytest.raises(cowcheck.SpecError, match="unknown step 'teleport'"):
        cowcheck.make_protocol({"append": {"rules": [{"when": "true", "path": "p"}], "paths": {"p": ["teleport", "write"]}}})
