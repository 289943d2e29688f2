"""Issue 34: what an engine engineer met (each test fails without its fix)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"


# -- 1. Ctrl-C while z3's main context is being built ------------------------------------

#: run the command with a Ctrl-C landing at the first line of z3.Context.__init__
#: (where a real one landed about 0.9 s into a bmc run), or just after it
INTERRUPTED_INIT = textwrap.dedent("""
    import signal, sys
    import z3
    real = z3.Context.__init__
    moment = sys.argv[1]
    def init(self, *args, **kws):
        if moment == "before":
            signal.raise_signal(signal.SIGINT)
        real(self, *args, **kws)
        if moment == "after":
            signal.raise_signal(signal.SIGINT)
    z3.Context.__init__ = init
    sys.argv = ["cowcheck"] + sys.argv[2:]
    from cowcheck.__main__ import run
    run()
""")


@pytest.mark.parametrize("engine", ["bmc", "kind"])
@pytest.mark.parametrize("moment", ["before", "after"])
def test_ctrl_c_while_z3_builds_its_context_leaves_no_half_built_context(tmp_path, engine, moment):
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_INIT, moment, "check",
                           str(SCENARIOS / "premature-decrement.toml"), "--engine", engine, "--depth", "3",
                           "--out", str(tmp_path / "cx")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


# -- 2. shrinking allocator code: a file cowcheck loads, and re-checks to the same violation ------

CX = ROOT / "counterexamples"
ENGINE = ROOT / "specs" / "allocators" / "engine.py"


def cowcheck_command(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cowcheck", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def assert_shrunk_files_recheck(folder: Path, cwd: Path, env: dict | None = None) -> list[Path]:
    """Every shrunk scenario in `folder` loads, meets its expect (the violation
    it was shrunk for), and its check writes the very counterexample shrink did."""
    from cowcheck.model.scenario import load_scenario
    tomls = sorted(folder.glob("*.toml"))
    assert tomls, "nothing written"
    for toml in tomls:
        scenario = load_scenario(toml)
        assert scenario.expect and scenario.expect[0].startswith("violates ")
    again = cowcheck_command(["check", folder, "--out", cwd / "again"], cwd, env)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    for written in folder.glob("*.json"):
        assert written.read_text() == (cwd / "again" / written.name).read_text(), written.name
    return tomls


def shrink_and_recheck(counterexample: Path, cwd: Path, env: dict | None = None) -> Path:
    done = cowcheck_command(["shrink", counterexample, "--workers", "0", "--out", cwd / "shrunk"], cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    (toml,) = assert_shrunk_files_recheck(cwd / "shrunk", cwd, env)
    return toml


@pytest.mark.parametrize("counterexample", ["premature-decrement.exclusive-write.json", "engine-code-async.exclusive-write.json",
                                            "prefix-code-async.faithful-output.json"])
def test_the_shrink_command_writes_a_scenario_that_rechecks(tmp_path, counterexample):
    """A protocol's counterexample, and allocator code's (specs/allocators/
    engine.py, prefix.py): the shrunk file gives `reuse` only for a protocol."""
    toml = shrink_and_recheck(CX / counterexample, tmp_path)
    allocator = "allocator =" in toml.read_text()
    assert allocator == counterexample.startswith(("engine", "prefix"))
    assert ("reuse =" in toml.read_text()) == (not allocator)


def test_allocator_code_by_path_is_found_from_where_the_shrunk_file_is(tmp_path):
    """A `path/file.py:factory` reference is relative to the scenario's folder:
    the shrunk file, written elsewhere, names the same file from its own."""
    import os
    (tmp_path / "specs").mkdir()
    scenario = tmp_path / "specs" / "by-path.toml"
    scenario.write_text(f'allocator = "{os.path.relpath(ENGINE, scenario.parent)}:copy_dst_released"\n'
                        'block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n')
    found = cowcheck_command(["check", scenario, "--out", tmp_path / "cx"], tmp_path)
    assert found.returncode == 0, found.stderr
    toml = shrink_and_recheck(tmp_path / "cx" / "by-path.exclusive-write.json", tmp_path)
    assert f'allocator = "{os.path.relpath(ENGINE, toml.parent)}:copy_dst_released"' in toml.read_text()


def _cached_vllm() -> Path | None:
    from cowcheck.adapters import vllm_v1
    for version in vllm_v1.TESTED:
        folder = ROOT / "build" / "engines" / f"vllm-{version}"
        if (folder / ".complete").is_file():
            return folder
    return None


@pytest.mark.skipif(_cached_vllm() is None, reason="no vLLM release in build/engines")
def test_a_counterexample_of_vllm_itself_shrinks_to_a_scenario_that_rechecks(tmp_path):
    import os
    from cowcheck.adapters import vllm_v1
    env = {**os.environ, vllm_v1.ENV: str(_cached_vllm())}
    found = cowcheck_command(["check", ROOT / "specs" / "scenarios" / "prefix-code-async.toml", "--allocator", vllm_v1.REF,
                              "--out", tmp_path / "cx"], tmp_path, env)
    assert found.returncode == 1, found.stderr      # unsafe, under an override: no expect applies
    (counterexample,) = (tmp_path / "cx").glob("*.faithful-output.json")
    toml = shrink_and_recheck(counterexample, tmp_path, env)
    assert f'allocator = "{vllm_v1.REF}"' in toml.read_text() and "reuse" not in toml.read_text()


@pytest.mark.slow
def test_sweep_shrink_of_the_engine_code_grid_writes_scenarios_that_recheck(tmp_path):
    done = cowcheck_command(["sweep", ROOT / "specs" / "grids" / "engine-code.toml", "--shrink", "--workers", "0",
                             "--shrink-out", tmp_path / "shrunk"], tmp_path)
    assert done.returncode == 1, done.stderr        # unsafe cells: the buggy allocators
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    assert len(assert_shrunk_files_recheck(tmp_path / "shrunk", tmp_path)) > 10


def test_a_shrunk_file_cowcheck_cannot_load_is_not_left_behind(tmp_path, monkeypatch):
    from cowcheck.model.errors import SpecError
    from cowcheck.sweeps import shrink as shrinking
    result = shrinking.shrink(CX / "engine-code-async.exclusive-write.json", workers=0)
    monkeypatch.setattr(shrinking, "scenario_toml", lambda *args: 'allocator = "x:y"\nreuse = "lifo"\n')
    with pytest.raises(SpecError):
        shrinking.write_shrunk(result, tmp_path)
    assert not list(tmp_path.iterdir())


# -- 3. --junit-xml says what the exit status says --------------------------------------

def _junit(tmp_path: Path, *args) -> tuple[subprocess.CompletedProcess, "ET.Element"]:
    import xml.etree.ElementTree as ET
    done = cowcheck_command(["check", *args, "--out", tmp_path / "cx", "--junit-xml", tmp_path / "r.xml"], tmp_path)
    return done, ET.parse(tmp_path / "r.xml").getroot()


def test_junit_fails_exactly_the_scenarios_that_fail_the_run(tmp_path):
    from cowcheck.model.scenario import load_scenario
    """Every shipped scenario meets its expect: exit 0 and no failure in the
    XML, though scenarios break more invariants than their expect names;
    those breaks are told in the output, not failed."""
    done, root = _junit(tmp_path, ROOT / "specs" / "scenarios" / "fork-no-incref.toml",
                        ROOT / "specs" / "scenarios" / "engine-code-async.toml")
    assert done.returncode == 0, done.stderr
    assert root.get("failures") == "0" and not root.findall(".//failure")
    suite = root.find("testsuite[@name='fork-no-incref']")
    named = {item.split()[1] for item in load_scenario(ROOT / "specs" / "scenarios" / "fork-no-incref.toml").expect
             if item.startswith("violates ")}
    broke = {c.get("name") for c in suite.findall("testcase") if c.find("system-out") is not None} - {"expect"}
    assert named < broke        # refcount-write breaks too, unnamed
    also = suite.find("testcase[@name='expect']/system-out").text
    assert all(inv in also for inv in broke - named) and not any(f"\n{inv} " in also for inv in named)
    unnamed = suite.find(f"testcase[@name='{sorted(broke - named)[0]}']/system-out").text
    assert "which the scenario's expect case judges" in unnamed and "breaks at step" in unnamed


def test_junit_fails_an_unmet_expect_with_the_breaks_explained(tmp_path):
    wrong = tmp_path / "wrong.toml"
    wrong.write_text((ROOT / "specs" / "scenarios" / "premature-decrement.toml").read_text()
                     .replace('expect = ["violates faithful-output", "violates exclusive-write", "violates no-use-after-free"]',
                              'expect = "violates faithful-output"'))
    holds = tmp_path / "holds.toml"
    holds.write_text('expect = "holds"\nblock_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n')
    done, root = _junit(tmp_path, wrong, holds)
    assert done.returncode == 0, done.stderr       # "violates X" is met when X breaks; the others do not fail it
    assert root.get("failures") == "0"
    wrong.write_text(wrong.read_text().replace('expect = "violates faithful-output"', 'expect = "holds"'))
    done, root = _junit(tmp_path, wrong, holds)
    assert done.returncode == 1
    (failure,) = root.findall(".//failure")
    assert root.get("failures") == "1" and failure.get("type") == "expect" and 'expected "holds"' in failure.get("message")
    assert "faithful-output (harm) broke in" in failure.text and "breaks at step" in failure.text
    assert root.find("testsuite[@name='holds']").get("failures") == "0"


def test_junit_under_an_override_fails_the_unsafe_scenarios(tmp_path):
    done, root = _junit(tmp_path, ROOT / "specs" / "scenarios" / "cow-two-writers.toml", "--protocol", "cow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert root.get("failures") == "0"
    done, root = _junit(tmp_path, ROOT / "specs" / "scenarios" / "cow-two-writers.toml", "--protocol", "premature-decrement")
    assert done.returncode == 1
    (failure,) = root.findall(".//failure")
    assert failure.get("type") == "unsafe" and "breaks at step" in failure.text


# -- 4. the JSON Schema of the file check --json writes (a list) -----------------------------

def test_the_check_json_file_validates_against_the_shipped_schema_of_the_file(tmp_path):
    import json
    from jsonschema import Draft202012Validator
    from cowcheck.schemas import load
    done = cowcheck_command(["check", ROOT / "specs" / "scenarios" / "premature-decrement.toml",
                             ROOT / "specs" / "scenarios" / "engine-code-async.toml", "--out", tmp_path / "cx",
                             "--json", tmp_path / "r.json"], tmp_path)
    assert done.returncode == 0, done.stderr
    schema = load("check")
    Draft202012Validator.check_schema(schema)
    written = json.loads((tmp_path / "r.json").read_text())
    assert isinstance(written, list) and len(written) == 2
    assert not list(Draft202012Validator(schema).iter_errors(written))
    assert list(Draft202012Validator(schema).iter_errors(written[0]))       # one result alone is not the file
    assert list(Draft202012Validator(schema).iter_errors([{**written[0], "verdicts": 1}]))   # elements are results


# -- 5. --json says of an allocator's reuse what the text says ----------------------------

def test_json_of_allocator_code_gives_no_reuse_order(tmp_path):
    import json
    done = cowcheck_command(["check", ROOT / "specs" / "scenarios" / "engine-code-async.toml",
                             ROOT / "specs" / "scenarios" / "premature-decrement.toml", "--out", tmp_path / "cx",
                             "--json", tmp_path / "r.json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reuse the allocator's" in done.stdout and "reuse lifo" in done.stdout
    code, protocol = json.loads((tmp_path / "r.json").read_text())
    assert code["allocator"] and code["reuse"] is None
    assert protocol["reuse"] == "lifo"
    # the counterexample files say the same, at the top and in the scenario
    for verdict in code["verdicts"].values():
        if verdict["counterexample"]:
            written = json.loads(Path(verdict["counterexample"]).read_text())
            assert written["reuse"] is None and written["scenario"]["reuse"] is None, verdict["counterexample"]
    for verdict in protocol["verdicts"].values():
        if verdict["counterexample"]:
            written = json.loads(Path(verdict["counterexample"]).read_text())
            assert written["reuse"] == written["scenario"]["reuse"] == "lifo"


def test_an_allocator_file_that_says_lifo_still_loads_and_replays(tmp_path):
    """Files written before said "lifo" for allocator code: they load as
    they did, and replay and explain as the new ones."""
    import json
    import cowcheck
    new = CX / "engine-code-async.faithful-output.json"
    data = json.loads(new.read_text())
    assert data["reuse"] is None and data["scenario"]["reuse"] is None
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**data, "reuse": "lifo", "scenario": {**data["scenario"], "reuse": "lifo"}}))
    then, now = cowcheck.load_counterexample(old), cowcheck.load_counterexample(new)
    assert json.loads(json.dumps(then.to_json())) == json.loads(json.dumps(now.to_json())) == data
    done = cowcheck_command(["replay", old, "--pool", "none"], tmp_path)
    assert done.returncode == 0 and "replays" in done.stdout, done.stdout + done.stderr


# -- 14. the sweep's tables in a pipe: a cell's name never breaks ---------------------------------

@pytest.mark.parametrize("columns", [None, "100", "80"])
def test_the_sweep_tables_never_break_a_cell_name(tmp_path, columns):
    """In a pipe (140 columns) or a CI log that sets COLUMNS, every cell's
    name is whole on one line, of the per-cell table and of the
    per-invariant one; what does not fit is left out and named."""
    import json
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = columns
    done = cowcheck_command(["sweep", ROOT / "specs" / "grids" / "engine-code.toml", "--workers", "0",
                             "--json", tmp_path / "s.json"], tmp_path, env)
    assert done.returncode == 1, done.stderr        # the grid's buggy allocators are unsafe
    width = int(columns or 140)
    lines = done.stdout.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), done.stdout
    assert "…" not in done.stdout.split("per cell")[0]          # the per-invariant table: every cell whole
    cells = [c["scenario"] for c in json.loads((tmp_path / "s.json").read_text())["cells"]]
    per_cell = done.stdout[done.stdout.index("per cell"):].splitlines()
    for name in cells:
        assert sum(name in line.split() for line in per_cell) == 1, (name, done.stdout)    # whole, once
    smallest = [line for line in done.stdout.split("per cell")[0].splitlines() if "engine-code~" in line]
    assert smallest and all(any(word in cells for word in line.split()) for line in smallest), done.stdout
    if width < 140:
        assert f"left out to fit {width} columns:" in " ".join(done.stdout.split())


# -- 7. check --quiet: the closing lines, and a line per scenario that fails the run ------------

def _wide() -> dict:
    import os
    return {**os.environ, "COLUMNS": "1000"}       # one line stays one line


def test_quiet_prints_the_closing_lines_and_one_line_per_failing_scenario(tmp_path):
    import json
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('expect = "holds"\nprotocol = "premature-decrement"\nblock_size = 2\nprompt = 3\n'
                     "[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n")
    scenarios = [ROOT / "specs" / "scenarios" / "cow-two-writers.toml", ROOT / "specs" / "scenarios" / "premature-decrement.toml"]
    loud = cowcheck_command(["check", *scenarios, wrong, "--out", tmp_path / "loud", "--json", tmp_path / "loud.json"],
                            tmp_path, _wide())
    quiet = cowcheck_command(["check", *scenarios, wrong, "--quiet", "--out", tmp_path / "quiet",
                              "--json", tmp_path / "quiet.json"], tmp_path, _wide())
    assert quiet.returncode == loud.returncode == 1, quiet.stderr
    lines = quiet.stdout.splitlines()
    assert len(lines) == 2 and "┃" not in quiet.stdout
    assert lines[0].startswith('wrong: expect NOT met: expected "holds", but ') and "broke" in lines[0]
    assert lines[1].startswith("3 scenario(s) checked, 2 met their expect; not met: wrong (")
    assert lines[1] in loud.stdout.splitlines()           # the same closing line
    assert sorted(p.name for p in (tmp_path / "quiet").iterdir()) == sorted(p.name for p in (tmp_path / "loud").iterdir())
    def verdicts(path: Path) -> list:
        return [(r["scenario"], r["summary"], r["expect_met"], {i: v["outcome"] for i, v in r["verdicts"].items()})
                for r in json.loads(path.read_text())]
    assert verdicts(tmp_path / "quiet.json") == verdicts(tmp_path / "loud.json")


def test_quiet_under_an_override_names_the_unsafe_scenarios(tmp_path):
    done = cowcheck_command(["check", ROOT / "specs" / "scenarios" / "cow-two-writers.toml", "-q", "--protocol",
                             "premature-decrement", "--out", tmp_path / "cx"], tmp_path, _wide())
    assert done.returncode == 1
    first, closing = done.stdout.splitlines()
    assert first == "cow-two-writers~premature-decrement-async-lifo: unsafe: faithful-output broke"
    assert closing.startswith("1 scenario(s) checked under the override: 1 unsafe")


def test_quiet_when_everything_meets_its_expect_is_the_closing_line(tmp_path):
    done = cowcheck_command(["check", ROOT / "specs" / "scenarios" / "cow-two-writers.toml",
                             ROOT / "specs" / "scenarios" / "premature-decrement.toml", "-q", "--out", tmp_path / "cx"],
                            tmp_path, _wide())
    assert done.returncode == 0 and done.stdout.splitlines() == [
        "2 scenario(s) checked, 2 met their expect (1 unsafe, 0 safe but undisciplined, 1 safe and disciplined, 0 partial)"]


# -- 8. explain: one sentence per block left free, and no dangling "Type: " ----------------------

def _explained(tmp_path: Path, scenario_text: str, allocator_file: str | None = None) -> dict[str, str]:
    """Every counterexample of the scenario, explained as text."""
    import cowcheck
    from cowcheck.model.scenario import load_scenario
    from cowcheck.views.explain import explain_text
    if allocator_file is not None:
        (tmp_path / "alloc.py").write_text(allocator_file)
    (tmp_path / "s.toml").write_text(scenario_text)
    result = cowcheck.check(load_scenario(tmp_path / "s.toml"))
    return {inv: explain_text(v.counterexample) for inv, v in result.verdicts.items() if v.counterexample is not None}


def test_a_block_a_fork_keeps_free_is_told_once(tmp_path):
    """copy_dst_released frees the copy's destination, still in a's table;
    a fork then increfs it: one sentence says it stays free, not two."""
    import re
    texts = _explained(tmp_path, 'allocator = "cowcheck.specs.allocators.engine:copy_dst_released"\ndevice = "stream"\n'
                                 'block_size = 2\nprompt = 3\n[[branch]]\nprogram = ["append", "fork c", "append"]\n'
                                 '[[branch]]\nappends = 1\n[[branch]]\nparent = "a"\nappends = 1\n')
    fork = next(line for line in texts["faithful-output"].splitlines() if "calls fork('a', 'c')" in line)
    told = re.findall(r"Block (\d+) stays FREE", fork)
    assert told and len(told) == len(set(told)), fork
    assert "in c's table" in fork and "from 0 to 1" in fork      # what the dropped sentence said is still there
    # a free block whose refcount rose, that the call's own words do not mention, is still told
    from cowcheck.views.words import _consequences
    before = {"free": [3], "blocks": {3: {"refcount": 0}}, "branches": {}}
    after = {"free": [3], "blocks": {3: {"refcount": 1}}, "branches": {}}
    assert "Block 3 stays FREE: its refcount rose" in _consequences(before, after, True)
    assert _consequences(before, after, True, frozenset({3})) == ""


def test_an_exception_without_a_message_leaves_no_double_space(tmp_path):
    engine = ENGINE.read_text().replace('raise AssertionError(f"Double free! block {block} is already freed")',
                                        "raise RuntimeError()")
    assert "raise RuntimeError()" in engine
    texts = _explained(tmp_path, 'allocator = "alloc.py:copy_dst_released"\ndevice = "stream"\nblock_size = 2\nprompt = 3\n'
                                 "[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n", engine)
    text = texts["allocator-error"]
    assert "raises RuntimeError — allocator-error" in text and "raised RuntimeError at" in text
    assert not [line for line in text.splitlines() if "  " in line.strip()], text
    assert "RuntimeError: " not in text


# -- explain, html and replay of an engine's counterexample load the folder it records ---------

VLLM_0_33 = ROOT / "build" / "engines" / "vllm-0.33.0"


@pytest.fixture(scope="module")
def vllm_trace(tmp_path_factory) -> Path:
    """A trace of vLLM 0.33.0's own code, checked from build/engines."""
    import os
    if not (VLLM_0_33 / ".complete").is_file():
        pytest.skip("vLLM 0.33.0's sources are not in build/engines")
    folder = tmp_path_factory.mktemp("vllm")
    done = cowcheck_command(["check", SCENARIOS / "prefix-code-tight-pool.toml", "--allocator", "cowcheck.adapters.vllm_v1:make",
                             "--out", folder / "cx"], folder, {**os.environ, "COWCHECK_VLLM_SOURCE": str(VLLM_0_33)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return next((folder / "cx").glob("*.json"))


def _unset() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k != "COWCHECK_VLLM_SOURCE"}


@pytest.mark.parametrize("command", [["explain"], ["replay", "--pool", "none"], ["html", "-o", "page.html"]])
def test_an_engine_trace_is_replayed_on_the_folder_it_records(tmp_path, vllm_trace, command):
    done = cowcheck_command([command[0], vllm_trace, *command[1:]], tmp_path, _unset())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"COWCHECK_VLLM_SOURCE is unset: vLLM 0.33.0 is loaded from the folder the file "
                                        f"records, {VLLM_0_33.resolve()}"], done.stderr
    assert "other code" not in done.stdout


def test_an_engine_trace_whose_folder_is_gone_names_it_and_the_variable(tmp_path, vllm_trace):
    import json
    data = json.loads(vllm_trace.read_text())
    gone = tmp_path / "moved" / "vllm-0.33.0"
    data["allocator_code"]["source"] = str(gone)
    moved = tmp_path / vllm_trace.name
    moved.write_text(json.dumps(data))
    for command in (["explain"], ["replay", "--pool", "none"], ["html", "-o", "page.html"]):
        done = cowcheck_command([command[0], moved, *command[1:]], tmp_path, _unset())
        assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
        assert len(done.stderr.splitlines()) == 1 and str(gone) in done.stderr, done.stderr
        assert "set COWCHECK_VLLM_SOURCE to a folder of vLLM 0.33.0's Python sources" in done.stderr
    # the variable still wins: set, the file's folder is not needed
    done = cowcheck_command(["replay", moved, "--pool", "none"], tmp_path,
                            {**_unset(), "COWCHECK_VLLM_SOURCE": str(VLLM_0_33)})
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
