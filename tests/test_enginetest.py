"""The engine-test mode (cowcheck.enginetest): the shipped engine scenarios
run in transformers' continuous batching on the CPU. Skips without torch
and transformers (pip install "cowcheck[engine]")."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cowcheck.cli import main
from cowcheck.enginetest import INSTALL, missing
from cowcheck.enginetest.scenario import load

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs" / "engine"
#: the committed engine counterexamples (cowcheck engine-test specs/engine/*.toml)
COMMITTED = sorted((ROOT / "counterexamples" / "engine").glob("*.json"))
#: hides torch from a child process, then runs the command line on sys.argv[1:]
WITHOUT_TORCH = ("import sys, importlib.util as u; real = u.find_spec; "
                 "u.find_spec = lambda n, *a: None if n == 'torch' else real(n, *a); "
                 "from cowcheck.cli import run; sys.argv = ['cowcheck', *sys.argv[1:]]; run()")


def test_scenarios_parse() -> None:
    """The cases of the founding material, one file each, each with its expect."""
    loaded = [load(p) for p in SPECS.glob("*.toml")]
    assert {sc.name for sc in loaded} >= {"full-prompt", "one-slot-tail", "fork-cancel-in-flight", "tiny-pool-eviction",
                                          "three-writers-one-tail", "one-token-prompt", "one-token-prompt-fork",
                                          "one-past-page-live"}
    assert all(sc.expect is not None for sc in loaded)


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


_explored: dict[str, Any] = {}


def explored(harness, name: str) -> Any:
    """The shipped scenario's exploration, once per module, its source
    recorded relative to the checkout as the committed files have it."""
    from cowcheck.enginetest.explore import explore
    if name not in _explored:
        sc = dataclasses.replace(load(SPECS / f"{name}.toml"), source=f"specs/engine/{name}.toml")
        _explored[name] = explore(sc, harness)
    return _explored[name]


@pytest.mark.parametrize("name", sorted(p.stem for p in SPECS.glob("*.toml")))
def test_shipped_scenario_meets_expect(harness, name: str) -> None:
    result = explored(harness, name)
    sc = result.scenario
    assert result.violated() == set(sc.expect or ()), result.to_json()
    assert not result.bounded      # the whole schedule space, within the default bound
    assert result.schedules >= 1 and 1 <= result.distinct <= result.schedules


def test_in_flight_cancel_counterexample_has_the_engine_frames(harness) -> None:
    """The real bug's shortest schedule, with the engine's traceback and its
    tables per step."""
    cx = explored(harness, "fork-cancel-in-flight").counterexample("allocator-error")
    assert "in-flight" in " ".join(cx["schedule"]["events"])
    assert any("mark_complete_blocks" in frame for frame in cx["witness"]["traceback"])
    assert cx["steps"] and "tables" in cx["steps"][0] and cx["engine"]["transformers"]


@pytest.mark.parametrize("name", sorted(p.stem for p in SPECS.glob("*.toml")))
def test_the_committed_counterexamples_are_rewritten_byte_for_byte(harness, name: str, tmp_path: Path) -> None:
    """`cowcheck engine-test specs/engine/*.toml` writes exactly the
    committed files of counterexamples/engine/ (on the release they were
    written with: another release's frames and version differ)."""
    from cowcheck.enginetest.explore import write_counterexamples
    result = explored(harness, name)
    written = write_counterexamples(result, tmp_path)
    committed = {p.name: p.read_text() for p in (ROOT / "counterexamples" / "engine").glob(f"{name}.*.json")}
    assert sorted(committed) == sorted(Path(p).name for p in written.values())
    for path in map(Path, written.values()):
        if json.loads(committed[path.name])["engine"]["transformers"] == result.release.transformers:
            assert path.read_text() == committed[path.name], "regenerate with cowcheck engine-test specs/engine/*.toml"


def test_results_in_check_json_shape(harness) -> None:
    """engine-test --json: a list of results that check.schema.json accepts."""
    from jsonschema import Draft202012Validator
    from cowcheck.enginetest.explore import explore
    from cowcheck.schemas import load as schema
    rows = [explore(load(SPECS / "fork-cancel-in-flight.toml"), harness, max_schedules=3).to_json({"allocator-error": "x.json"})]
    errors = [e.message for e in Draft202012Validator(schema("check")).iter_errors(rows)]
    assert not errors, errors
    assert rows[0]["engine"] == "engine-test" and rows[0]["stopped"] == "--max-schedules 3" and not rows[0]["complete"]


#: the fork scenarios whose runs end (not those that expect the engine to raise)
FORKS = sorted(p.stem for p in SPECS.glob("*.toml")
               if load(p).num_return_sequences > 1 and "allocator-error" not in (load(p).expect or ()))


@pytest.mark.parametrize("name", FORKS)
def test_forked_siblings_diverge(harness, name: str) -> None:
    """Seeded sampling: a fork's siblings differ from their first token, so a
    missing copy could not hide behind an identical sibling; and the same
    schedule gives the same tokens again."""
    from cowcheck.enginetest.run import Schedule, run
    sc = load(SPECS / f"{name}.toml")
    plain = Schedule(tuple((r.name, 0) for r in sc.requests), ())
    outputs = run(harness, sc, plain).outputs
    for r in sc.requests:
        firsts = [outputs[rid][0] for rid in outputs if rid.split("__child#")[0] == r.name]
        assert len(firsts) == sc.num_return_sequences and len(set(firsts)) == len(firsts), outputs
    assert run(harness, sc, plain).outputs == outputs


def test_a_missing_fork_copy_shows_in_the_output(harness, monkeypatch) -> None:
    """Planted: the fork's tail copy skipped (the engine's copy a no-op, the
    shadow told it happened). The child's log-probabilities then disagree
    with the reference forward without a cache: faithful-output."""
    from cowcheck.enginetest.run import Schedule, run
    cache = sys.modules["transformers.generation.continuous_batching.cache"].PagedAttentionCache
    monkeypatch.setattr(cache, "perform_cache_copy", lambda self, pairs: None)
    sc = load(SPECS / "fork-cancel-in-flight.toml")
    found = {v.invariant: v for v in run(harness, sc, Schedule((("a", 0),), ())).violations}
    assert set(found) == {"faithful-output"}
    facts = found["faithful-output"].facts
    assert facts["request"] == "a__child#0" and abs(facts["logprob"] - facts["reference_logprob"]) > 1e-3


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_committed_counterexample_replays_in_the_engine(harness, path: Path) -> None:
    from cowcheck.enginetest.trace import load as load_trace, replay
    done = replay(load_trace(path), harness)
    assert done.ok, done.message


def test_an_edited_schedule_does_not_replay(harness, tmp_path: Path) -> None:
    """The in-flight cancel moved after the update: the engine runs on, and
    replay says the invariant holds there (exit 1 from the command)."""
    from cowcheck.enginetest.trace import load as load_trace, replay
    data = json.loads((ROOT / "counterexamples" / "engine" / "fork-cancel-in-flight.allocator-error.json").read_text())
    data["schedule"]["cancels"] = [["a__child#0", 1, "after-update"]]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    done = replay(load_trace(edited), harness)
    assert not done.ok and "holds on this schedule" in done.message


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_explain_and_html_read_engine_counterexamples_without_torch(path: Path, tmp_path: Path) -> None:
    """No torch needed to read one: explain narrates the engine's steps and
    tables, html draws them."""
    told = CliRunner().invoke(main, ["explain", str(path)])
    data = json.loads(path.read_text())
    assert told.exit_code == 0, told.output
    assert data["witness"]["message"] in told.output and "tables" in told.output
    page = tmp_path / "p.html"
    drawn = CliRunner().invoke(main, ["html", str(path), "-o", str(page)])
    assert drawn.exit_code == 0, drawn.output
    text = page.read_text()
    assert "cowcheck-data" in text and f"transformers {data['engine']['transformers']}" in text
    assert '"tables":' in text and "engine step" in text


def test_replay_without_the_extra_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "replay", str(COMMITTED[0])], capture_output=True, text=True)
    assert done.returncode == 2 and INSTALL in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_check_reader_names_the_engine_file() -> None:
    """graph (a check's trace reader) refuses an engine file in one line."""
    done = CliRunner().invoke(main, ["graph", str(COMMITTED[0]), "-o", "x.svg"])
    assert done.exit_code == 2 and "engine-test counterexample" in done.output


def test_command_without_the_extra_is_one_line(tmp_path: Path) -> None:
    """With torch hidden, the command says what to install, exit 2."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "engine-test", str(SPECS / "full-prompt.toml")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and INSTALL in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bench_rows_skip_in_one_line_without_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "bench", "--engine-test", "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == [] and INSTALL in report["skipped"]


def test_bench_rows_say_where_the_time_goes(harness) -> None:
    """One row (the measuring, not its speed): every schedule of the
    scenario, the shares of a run's time add up to one."""
    from cowcheck.bench.enginetest import ROWS, measure
    row = measure(*ROWS[1])
    assert row["schedules"] >= 1 and row["schedules_per_second"] > 0
    assert set(row["share"]) >= {"model forward", "monitor", "reference"}
    assert abs(sum(row["share"].values()) - 1) < 0.01


#: the oldest release the mode runs (the first with cache_allocators/), as CI fetches it
OLDEST = ROOT / "build" / "engines" / "transformers-5.18.0"


@pytest.mark.slow
def test_a_source_tree_runs_and_is_recorded(tmp_path: Path) -> None:
    """COWCHECK_TRANSFORMERS_SOURCE: the oldest release's tree is what runs
    (in a fresh process: torch stays, transformers comes from the tree);
    every shipped scenario meets its expect there, each result and
    counterexample records the tree, and the counterexamples are the
    committed ones of that release (the tree's path apart)."""
    pytest.importorskip("torch", reason=f"the engine-test mode needs torch: {INSTALL}")
    if not (OLDEST / "transformers").is_dir():
        pytest.skip(f"no {OLDEST.relative_to(ROOT)} (CI fetches the transformers trees)")
    env = {**os.environ, "COWCHECK_TRANSFORMERS_SOURCE": str(OLDEST)}
    names = [f"specs/engine/{p.name}" for p in sorted(SPECS.glob("*.toml"))]
    done = subprocess.run([sys.executable, "-m", "cowcheck", "engine-test", *names, "--json", str(tmp_path / "r.json"),
                           "--out", str(tmp_path / "cx")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    tree = str(OLDEST.resolve())
    assert f"transformers 5.18.0 from {tree}" in done.stdout
    for row in json.loads((tmp_path / "r.json").read_text()):
        assert row["release"]["source"] == tree and row["release"]["transformers"] == "5.18.0" and row["expect_met"]
    committed = ROOT / "counterexamples" / "engine" / "transformers-5.18.0"
    written = sorted((tmp_path / "cx").glob("*.json"))
    assert [p.name for p in written] == sorted(p.name for p in committed.glob("*.json"))
    for path in written:
        data = json.loads(path.read_text())
        assert data["engine"]["source"] == tree
        data["engine"]["source"] = None
        assert data == json.loads((committed / path.name).read_text()), path.name
