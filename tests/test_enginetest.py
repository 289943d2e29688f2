"""The engine-test mode (cowcheck.enginetest): the shipped engine scenarios
run in transformers' continuous batching on the CPU. Skips without torch
and transformers (pip install "cowcheck[engine]")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cowcheck.enginetest import INSTALL, missing
from cowcheck.enginetest.scenario import load

SPECS = Path(__file__).resolve().parent.parent / "specs" / "engine"


def test_scenarios_parse() -> None:
    assert {load(p).name for p in SPECS.glob("*.toml")} >= {"full-prompt", "one-slot-tail", "fork-cancel-in-flight",
                                                              "tiny-pool-eviction"}


def test_check_skips_engine_scenarios() -> None:
    from cowcheck.cli.common import scenario_files
    assert not [p for p in scenario_files(("specs",)) if p.parent.name == "engine"]


def test_missing_names_the_extra() -> None:
    assert missing() is None or INSTALL in (missing() or "")


@pytest.fixture(scope="module")
def harness():
    pytest.importorskip("torch", reason=f"the engine-test mode needs torch: {INSTALL}")
    pytest.importorskip("transformers", reason=f"the engine-test mode needs transformers: {INSTALL}")
    from cowcheck.enginetest.explore import harness as make
    return make()


@pytest.mark.parametrize("name", sorted(p.stem for p in SPECS.glob("*.toml")))
def test_shipped_scenario_meets_expect(harness, name: str) -> None:
    from cowcheck.enginetest.explore import explore
    sc = load(SPECS / f"{name}.toml")
    result = explore(sc, harness)
    assert result.violated() == set(sc.expect or ()), result.to_json()
    assert result.schedules >= 1 and 1 <= result.distinct <= result.schedules


def test_in_flight_cancel_counterexample_has_the_traceback(harness) -> None:
    from cowcheck.enginetest.explore import explore
    result = explore(load(SPECS / "fork-cancel-in-flight.toml"), harness)
    cx = result.counterexample("allocator-error")
    assert "in-flight" in " ".join(cx["schedule"]) and "mark_complete_blocks" in cx["traceback"]
    assert cx["steps"] and "tables" in cx["steps"][0]


def test_command_without_the_extra_is_one_line(tmp_path: Path) -> None:
    """With torch hidden, the command says what to install, exit 2."""
    code = ("import sys, importlib.util as u; real = u.find_spec; "
            "u.find_spec = lambda n, *a: None if n == 'torch' else real(n, *a); "
            "from cowcheck.cli import run; sys.argv = ['cowcheck', 'engine-test', sys.argv[1]]; run()")
    done = subprocess.run([sys.executable, "-c", code, str(SPECS / "full-prompt.toml")], capture_output=True, text=True)
    assert done.returncode == 2 and INSTALL in done.stderr and len(done.stderr.strip().splitlines()) == 1
