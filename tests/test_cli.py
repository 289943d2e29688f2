"""The commands' behaviour: `cowcheck check` (table, summary, exit status,
--json, --out, the partial-run flags, --first, --invariant, --device),
`replay`, `explain` and `list`. Driven in-process through click's CliRunner.

Every scenario here is B=2, L=3, two branches x 2 appends (a few thousand
states at most), so the whole file runs in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cowcheck.cli import main
from cowcheck.engines.invariants import BY_ID, IDS, INVARIANTS

ROOT = Path(__file__).resolve().parent.parent

SMALL = """block_size = 2
prompt = 3
[[branch]]
appends = 2
[[branch]]
appends = 2
"""

JSON_KEYS = {"scenario", "protocol", "device", "reuse", "states", "transitions", "depth", "seconds", "verdicts",
             "summary", "peak_blocks", "copies", "steady_blocks", "complete"}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Run from tmp_path, so nothing (counterexamples/ by default) lands in the checkout."""
    monkeypatch.chdir(tmp_path)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def flat(text: str) -> str:
    """The output with rich's line wrapping undone (whitespace collapsed)."""
    return " ".join(text.split())


def scenario(tmp_path: Path, name: str, protocol: str = "cow", expect: str | None = None) -> Path:
    head = f'protocol = "{protocol}"\n' + (f'expect = "{expect}"\n' if expect else "")
    path = tmp_path / f"{name}.toml"
    path.write_text(head + SMALL)
    return path


def check_json(tmp_path: Path, *args, expect_exit: int = 0) -> tuple[list, object]:
    out = tmp_path / "result.json"
    result = invoke("check", *args, "--json", out, "--out", tmp_path / "cx")
    assert result.exit_code == expect_exit, result.output
    assert "Traceback" not in result.output
    return json.loads(out.read_text()), result


def verdict_rows(output: str) -> dict[str, str]:
    """Invariant id -> its row of the verdict table."""
    rows = {}
    for line in output.splitlines():
        words = line.split()
        if words and words[0] in BY_ID:
            rows[words[0]] = line
    return rows


# --------------------------------------------------------------------------
# check: table, summary, expectations

def test_check_passing_scenario(tmp_path):
    path = scenario(tmp_path, "cow-small", expect="holds")
    result = invoke("check", path, "--out", tmp_path / "cx")
    assert result.exit_code == 0, result.output
    rows = verdict_rows(result.output)
    assert set(rows) == {inv.id for inv in INVARIANTS}, "the verdict table has one row per invariant"
    for inv_id, row in rows.items():
        assert "holds" in row and "VIOLATED" not in row, row
        assert BY_ID[inv_id].kind in row
    assert "safe and disciplined" in result.output
    assert "expect met" in result.output
    assert "1 scenario(s) checked, 1 met their expect" in flat(result.output)
    # nothing broke, so the only file written is the peak trace
    assert sorted(p.name for p in (tmp_path / "cx").glob("*.json")) == ["cow-small.peak.json"]


def test_check_wrong_expect_exits_1(tmp_path):
    path = scenario(tmp_path, "cow-wrong", expect="violates faithful-output")
    result = invoke("check", path, "--out", tmp_path / "cx")
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert "expect NOT met" in text
    assert "faithful-output" in text
    assert "not met: cow-wrong" in text
    assert "safe and disciplined" in text  # the verdicts themselves are still reported


def test_check_expect_met_for_a_buggy_protocol(tmp_path):
    """`expect` makes a buggy protocol a passing regression case."""
    path = scenario(tmp_path, "spare-expected", protocol="spare-capacity", expect="violates exclusive-write")
    result = invoke("check", path, "--out", tmp_path / "cx")
    assert result.exit_code == 0, result.output
    assert "expect met" in result.output
    assert "unsafe" in result.output


# --------------------------------------------------------------------------
# --json and --out

def test_json_shape(tmp_path):
    a = scenario(tmp_path, "first", expect="holds")
    b = scenario(tmp_path, "second", protocol="spare-capacity")
    data, _ = check_json(tmp_path, a, b)
    assert isinstance(data, list) and len(data) == 2
    assert [d["scenario"] for d in data] == ["first", "second"]
    for entry in data:
        missing = JSON_KEYS - set(entry)
        assert not missing, f"missing keys {missing}"
        assert set(entry["verdicts"]) == {inv.id for inv in INVARIANTS}
        for verdict in entry["verdicts"].values():
            assert {"holds", "length", "counterexample"} <= set(verdict)
        assert entry["complete"] is True
        assert entry["states"] > 1 and entry["transitions"] >= entry["states"] - 1
        assert entry["depth"] > 0 and entry["seconds"] >= 0
    first, second = data
    assert (first["protocol"], first["device"], first["reuse"]) == ("cow", "async", "lifo")
    assert first["summary"] == "safe and disciplined"
    assert all(v["holds"] is True and v["length"] is None and v["counterexample"] is None
               for v in first["verdicts"].values())
    # docs/semantics.md#reference-numbers: cow, B=2, L=3, 2 x 2: peak, steady state and copies
    assert first["peak_blocks"] >= first["steady_blocks"] >= 3
    lo, hi = first["copies"]
    assert 0 <= lo <= hi
    assert second["protocol"] == "spare-capacity"
    assert second["summary"] == "unsafe"


def test_json_to_stdout(tmp_path):
    path = scenario(tmp_path, "to-stdout")
    result = invoke("check", path, "--json", "-", "--out", tmp_path / "cx")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["scenario"] for d in data] == ["to-stdout"]


def test_spare_capacity_reference_row(tmp_path):
    """The reference row (docs/semantics.md#reference-numbers): spare-capacity, B=2, L=3, 2 branches x 2
    appends: exclusive-write (3), refcount-write (3), faithful-output (13),
    peak 4, copies 0-0; each counterexample file exists and replays."""
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, result = check_json(tmp_path, path)
    (entry,) = data
    broken = {k: v["length"] for k, v in entry["verdicts"].items() if v["holds"] is False}
    assert broken == {"exclusive-write": 3, "refcount-write": 3, "faithful-output": 13}
    assert all(v["holds"] is True for k, v in entry["verdicts"].items() if k not in broken)
    assert entry["summary"] == "unsafe"
    assert entry["peak_blocks"] == 4
    assert entry["copies"] == [0, 0]
    assert "unsafe" in result.output
    rows = verdict_rows(result.output)
    for inv_id, length in broken.items():
        assert "VIOLATED" in rows[inv_id] and str(length) in rows[inv_id].split("│")[3]
    for inv_id in broken:
        cx = Path(entry["verdicts"][inv_id]["counterexample"])
        assert cx.is_file(), cx
        assert cx.parent == tmp_path / "cx"
        recorded = json.loads(cx.read_text())
        assert recorded["invariant"] == inv_id and recorded["length"] == broken[inv_id]
        assert len(recorded["steps"]) == broken[inv_id]
        replay = invoke("replay", cx)
        assert replay.exit_code == 0, replay.output
        assert "replays" in replay.output
        assert f"breaks at step {broken[inv_id]}" in flat(replay.output)


def test_edited_counterexample_does_not_replay(tmp_path):
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, _ = check_json(tmp_path, path)
    cx = Path(data[0]["verdicts"]["faithful-output"]["counterexample"])
    recorded = json.loads(cx.read_text())
    last = recorded["steps"][-1]
    n = last["n"]
    assert n == len(recorded["steps"]) == 13
    binds = last["action"]["binds"]
    key = "block" if "block" in binds else next(k for k, v in binds.items() if isinstance(v, int))
    binds[key] = binds[key] + 1  # another, wrong, block id
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(recorded))
    result = invoke("replay", edited)
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert "DOES NOT REPLAY" in text
    assert f"step {n}" in text
    assert "Traceback" not in result.output
    # the untouched original still replays
    assert invoke("replay", cx).exit_code == 0


def test_replay_json_flag(tmp_path):
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, _ = check_json(tmp_path, path)
    cx = data[0]["verdicts"]["exclusive-write"]["counterexample"]
    result = invoke("replay", cx, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is True and payload["step"] == 3 and payload["invariant"] == "exclusive-write"


# --------------------------------------------------------------------------
# partial runs, --first, --invariant, --device

def test_max_states_gives_a_partial_result(tmp_path):
    path = scenario(tmp_path, "cow-capped")
    data, result = check_json(tmp_path, path, "--max-states", "10", expect_exit=3)
    (entry,) = data
    assert entry["complete"] is False
    assert entry["states"] <= 10
    assert entry["summary"] == "safe and disciplined"   # a fixed vocabulary; partiality has its own fields
    assert entry["category"] == "partial"               # what the closing line counts it as: never safe
    assert "--max-states 10" in entry["stopped"]
    assert all(v["holds"] is None for v in entry["verdicts"].values()), "nothing is confirmed to hold in a partial run"
    assert "partial" in result.output


def test_max_depth_gives_a_partial_result(tmp_path):
    path = scenario(tmp_path, "cow-shallow")
    data, result = check_json(tmp_path, path, "--max-depth", "2", expect_exit=3)
    (entry,) = data
    assert entry["complete"] is False
    assert entry["depth"] <= 2
    assert entry["summary"] == "safe and disciplined"   # a fixed vocabulary; partiality has its own fields
    assert "--max-depth 2" in entry["stopped"]
    assert all(v["holds"] is None for v in entry["verdicts"].values())
    assert "partial" in result.output


@pytest.mark.parametrize("bound", [["--max-states", "10"], ["--max-depth", "2"], ["--max-memory", "1"]])
@pytest.mark.parametrize("override", [[], ["--device", "stream"]])
def test_a_partial_run_without_expect_is_never_counted_safe(tmp_path, bound, override):
    """Item 13: with no `expect` (none given, or dropped by an override), a
    partial run neither meets its expect nor counts as safe: it has its own
    category in the closing line and exit status 3, not 0."""
    path = scenario(tmp_path, "cow-unjudged")
    _, result = check_json(tmp_path, path, *bound, *override, expect_exit=3)
    closing = flat(result.output.split("scenario(s) checked")[-1])
    assert "partial, so not judged: cow-unjudged" in closing
    assert "0 safe and disciplined" in closing and "1 partial" in closing
    if not override:
        assert "0 met their expect" in closing


def test_a_partial_run_that_finds_its_expected_violation_meets_it(tmp_path):
    """A "violates" expect is met by finding the violation, partial run or not."""
    path = scenario(tmp_path, "spare-first", protocol="spare-capacity", expect="violates faithful-output")
    data, result = check_json(tmp_path, path, "--first", "--invariant", "faithful-output", expect_exit=0)
    assert data[0]["complete"] is False and "1 met their expect" in flat(result.output)


def test_partial_run_cannot_meet_holds(tmp_path):
    path = scenario(tmp_path, "cow-capped-holds", expect="holds")
    _, result = check_json(tmp_path, path, "--max-states", "10", expect_exit=1)
    assert "expect NOT met" in result.output


def test_first_stops_at_the_first_violation(tmp_path):
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, _ = check_json(tmp_path, path, "--first", expect_exit=3)     # a discipline break: safety not settled
    (entry,) = data
    broken = [k for k, v in entry["verdicts"].items() if v["holds"] is False]
    assert len(broken) == 1, broken
    assert entry["verdicts"][broken[0]]["length"] == 3
    assert entry["complete"] is False
    assert Path(entry["verdicts"][broken[0]]["counterexample"]).is_file()
    # without --first the same scenario breaks three invariants (above)
    assert entry["states"] < 578


def test_invariant_flag_checks_only_that_invariant(tmp_path):
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, result = check_json(tmp_path, path, "--invariant", "exclusive-write")
    (entry,) = data
    assert list(entry["verdicts"]) == ["exclusive-write"]
    assert entry["verdicts"]["exclusive-write"]["holds"] is False
    assert entry["verdicts"]["exclusive-write"]["length"] == 3
    assert set(verdict_rows(result.output)) == {"exclusive-write"}
    written = sorted(p.name for p in (tmp_path / "cx").glob("*.json"))
    assert "spare.exclusive-write.json" in written
    assert "spare.faithful-output.json" not in written


def test_invariant_flag_repeats(tmp_path):
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    data, _ = check_json(tmp_path, path, "--invariant", "no-leak", "--invariant", "faithful-output")
    assert set(data[0]["verdicts"]) == {"no-leak", "faithful-output"}
    assert data[0]["verdicts"]["faithful-output"]["length"] == 13
    assert data[0]["verdicts"]["no-leak"]["holds"] is True


def test_premature_decrement_reference_row(tmp_path):
    """The reference row (docs/semantics.md#reference-numbers): premature-decrement, async: exclusive-write (7),
    no-use-after-free (8), faithful-output (27), peak 5, copies 1-2."""
    path = scenario(tmp_path, "premature", protocol="premature-decrement")
    data, _ = check_json(tmp_path, path)
    (entry,) = data
    broken = {k: v["length"] for k, v in entry["verdicts"].items() if v["holds"] is False}
    assert broken == {"exclusive-write": 7, "no-use-after-free": 8, "faithful-output": 27}
    assert entry["summary"] == "unsafe"
    assert entry["peak_blocks"] == 5
    assert entry["copies"] == [1, 2]


def test_device_stream_makes_premature_decrement_safe_but_undisciplined(tmp_path):
    path = scenario(tmp_path, "premature", protocol="premature-decrement")
    data, result = check_json(tmp_path, path, "--device", "stream")
    (entry,) = data
    assert entry["device"] == "stream"
    assert entry["summary"] == "safe but undisciplined"
    assert "safe but undisciplined" in result.output
    verdicts = entry["verdicts"]
    assert all(v["holds"] is True for k, v in verdicts.items() if BY_ID[k].kind == "harm")
    assert any(v["holds"] is False for k, v in verdicts.items() if BY_ID[k].kind == "discipline")
    # an override writes its counterexamples under its own name, not the file's
    for v in verdicts.values():
        if v["counterexample"]:
            assert Path(v["counterexample"]).name.startswith("premature~")


def test_explain_premature_decrement_faithful_output(tmp_path):
    path = scenario(tmp_path, "premature", protocol="premature-decrement")
    data, _ = check_json(tmp_path, path)
    cx = data[0]["verdicts"]["faithful-output"]["counterexample"]
    result = invoke("explain", cx)
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "step 27" in text
    assert "step 28" not in text
    assert "expected p2" in text
    assert "read a2" in text
    assert "faithful-output breaks at step 27" in text


# --------------------------------------------------------------------------
# list

def test_list_names_every_protocol_and_invariant():
    result = invoke("list")
    assert result.exit_code == 0, result.output
    first_words = {line.split()[0] for line in result.output.splitlines() if line.split()}
    protocols = sorted(p.stem for p in (ROOT / "specs" / "protocols").glob("*.toml"))
    assert protocols, "specs/protocols is empty"
    for name in protocols:
        assert name in first_words, f"protocol {name} not listed"
    for inv_id in IDS:
        assert inv_id in first_words, f"invariant {inv_id} not listed"


def test_a_stale_counterexample_is_removed_when_the_invariant_now_holds(tmp_path):
    """A file an earlier run wrote for this scenario, for an invariant that
    holds now, would be mistaken for a current counterexample."""
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    scenario = tmp_path / "s.toml"
    body = 'block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n'
    scenario.write_text('protocol = "premature-decrement"\n' + body)
    out = tmp_path / "cx"
    Runner().invoke(cli_main, ["check", str(scenario), "--out", str(out)])
    stale = out / "s.faithful-output.json"
    assert stale.exists()
    scenario.write_text('protocol = "cow"\n' + body)          # the fix
    result = Runner().invoke(cli_main, ["check", str(scenario), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    assert (out / "s.peak.json").exists()


def test_a_file_another_scenario_wrote_is_never_deleted(tmp_path):
    """Only files written for the same scenario are removed: a scenario of the
    same name in another folder (and a file cowcheck cannot read) stays."""
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    body = 'block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n'
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "s.toml").write_text('protocol = "premature-decrement"\n' + body)
    (tmp_path / "two" / "s.toml").write_text('protocol = "cow"\n' + body)
    out = tmp_path / "cx"
    Runner().invoke(cli_main, ["check", str(tmp_path / "one" / "s.toml"), "--out", str(out)])
    theirs = sorted(p.name for p in out.iterdir())
    (out / "s.no-leak.json").write_text("{}")
    result = Runner().invoke(cli_main, ["check", str(tmp_path / "two" / "s.toml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert set(theirs) | {"s.no-leak.json"} <= {p.name for p in out.iterdir()}


def test_two_scenarios_that_would_share_files_are_refused_before_anything_is_written(tmp_path):
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    body = 'block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n'
    (tmp_path / "specs" / "sub").mkdir(parents=True)
    (tmp_path / "specs" / "s.toml").write_text(body)
    (tmp_path / "specs" / "sub" / "s.toml").write_text(body)
    out = tmp_path / "cx"
    result = Runner().invoke(cli_main, ["check", str(tmp_path / "specs"), "--out", str(out)])
    assert result.exit_code == 2
    assert "would write the same counterexample files" in result.output and "sub/s.toml" in result.output
    assert not out.exists()


@pytest.mark.parametrize("name", ["../../../escaped", "a/b", "line\nbreak", ".hidden"])
def test_a_protocol_name_never_reaches_outside_the_output_folder(tmp_path, name):
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    protocol = (ROOT / "specs" / "protocols" / "premature-decrement.toml").read_text()
    protocol = "\n".join(line for line in protocol.splitlines() if not line.startswith("name"))
    (tmp_path / "p.toml").write_text(f"name = {json.dumps(name)}\n" + protocol)
    scenario = ROOT / "specs" / "scenarios" / "premature-decrement.toml"
    work = tmp_path / "deep" / "er"
    out = work / "cx"
    result = Runner().invoke(cli_main, ["check", str(scenario), "--protocol", str(tmp_path / "p.toml"), "--out", str(out)])
    assert result.exit_code == 1, result.output       # unsafe under the override
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".json"]
    assert written and all(p.parent == out for p in written)
    assert all("\n" not in p.name and not p.name.startswith(".") for p in written)


def test_an_output_folder_that_refuses_files_still_gets_the_results_printed(tmp_path):
    """Writability is checked before exploring; if a file is still refused
    at the end, the verdict table comes first, then one error line."""
    import os
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    if os.geteuid() == 0:
        out = tmp_path / "cx"
        out.mkdir()
        (out / "premature-decrement.faithful-output.json").mkdir()   # a folder where a file must go
    else:
        pytest.skip("needs a path the OS refuses even to root")
    scenario = ROOT / "specs" / "scenarios" / "premature-decrement.toml"
    result = Runner().invoke(cli_main, ["check", str(scenario), "--out", str(out)])
    assert result.exit_code == 2
    assert "faithful-output" in result.output and "VIOLATED" in result.output
    assert result.output.strip().splitlines()[-1].startswith("cowcheck: error:")


def test_an_unwritable_json_path_is_refused_before_exploring(tmp_path):
    from cowcheck.cli import main as cli_main
    from click.testing import CliRunner as Runner
    (tmp_path / "a-folder").mkdir()
    scenario = ROOT / "specs" / "scenarios" / "premature-decrement.toml"
    result = Runner().invoke(cli_main, ["check", str(scenario), "--json", str(tmp_path / "a-folder"), "--out", str(tmp_path / "cx")])
    assert result.exit_code == 2 and "a-folder" in result.output
    assert "VIOLATED" not in result.output and not (tmp_path / "cx").exists()


def test_unicode_names_on_an_ascii_terminal_are_escaped_not_a_crash(tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    scenario = tmp_path / "präfix-wärme.toml"
    scenario.write_text((ROOT / "specs" / "scenarios" / "premature-decrement.toml").read_text())
    exe = shutil.which("cowcheck", path=str(Path(sys.executable).parent)) or "cowcheck"
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    done = subprocess.run([exe, "check", str(scenario), "--out", str(tmp_path / "cx")], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("ascii", "replace")
    assert b"Traceback" not in done.stderr
    assert b"pr\\xe4fix-w\\xe4rme" in done.stdout


@pytest.mark.slow
def test_the_readme_override_examples_behave_as_it_says(tmp_path):
    """Under an override the files' expect is not judged: premature-decrement
    on one stream is safe but undisciplined (exit 0), and an unchanged copy of
    cow over every shipped scenario is unsafe exactly where a scenario's pool
    deadlocks (the tight pool's, and the pressure scenarios' whose harness
    never preempts) and where a P/D consumer's recv is in flight when it is
    cancelled (cow's own [cancel] waits for no transfer: free-at-abort's
    bug; after a failed recv only a discipline breaks), so exit 1 and a
    count across scenarios; the files go to counterexamples/overrides/."""
    import shutil
    import subprocess
    import sys
    from cowcheck.model.scenario import load_scenario
    exe = shutil.which("cowcheck", path=str(Path(sys.executable).parent)) or "cowcheck"
    one = subprocess.run([exe, "check", str(ROOT / "specs" / "scenarios" / "premature-decrement.toml"), "--device", "stream"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "safe but undisciplined" in one.stdout and "expect NOT met" not in one.stdout
    shutil.copy(ROOT / "specs" / "protocols" / "cow.toml", tmp_path / "my-change.toml")
    every = subprocess.run([exe, "check", str(ROOT / "specs" / "scenarios"), "--protocol", "my-change.toml", "--device", "stream"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert every.returncode == 1, every.stdout + every.stderr
    scenarios = sorted((ROOT / "specs" / "scenarios").glob("*.toml"))
    deadlocks = sum("violates no-deadlock" in load_scenario(p).expect for p in scenarios)
    assert deadlocks >= 1
    aborts = sum(p.stem.endswith("pd-consumer-abort") for p in scenarios)     # its scheduler-code twin too, as a protocol file here
    faults = sum(p.stem.endswith(("failed-recv", "pd-consumer-fault")) for p in scenarios)     # a failed recv, in a protocol file and under the scheduler
    unsafe, undisciplined = deadlocks + aborts, faults
    assert (f"{unsafe} unsafe, {undisciplined} safe but undisciplined, {len(scenarios) - unsafe - undisciplined} safe and "
            "disciplined" in " ".join(every.stdout.split()))
    assert "pd-consumer-abort~cow-stream-lifo-nic " in every.stdout     # a transfer scenario names its model
    written = {p.parent for p in tmp_path.rglob("*.json")}
    assert written == {tmp_path / "counterexamples" / "overrides"}


def test_a_z3_engine_never_writes_where_the_committed_counterexamples_are(tmp_path):
    """Item 11: only the explorer's run writes counterexamples/ by default; BMC
    (another trace of the same length) writes where an override does."""
    path = scenario(tmp_path, "spare-bmc", protocol="spare-capacity")
    result = invoke("check", path, "--engine", "bmc", "--depth", "3", "--invariant", "exclusive-write")
    assert "VIOLATED" in result.output, result.output
    assert [p.name for p in (tmp_path / "counterexamples").iterdir()] == ["overrides"]
    assert (tmp_path / "counterexamples" / "overrides" / "spare-bmc.exclusive-write.json").is_file()


@pytest.mark.parametrize("options", [["--first"], ["--max-depth", "3"], ["--max-states", "10"], ["--no-symmetry"],
                                     ["--por"], ["--no-por"], ["--compact"], ["--fingerprints"],
                                     ["--invariant", "faithful-output"]])
def test_only_the_explorers_default_run_writes_the_committed_folder(tmp_path, options):
    """Item 11: a run with a bound, --first, another reduction or fewer
    invariants may find another trace or a partial peak: it writes where an
    override does, never over the default run's files."""
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    assert invoke("check", path).exit_code == 0
    committed = {p.name: p.read_bytes() for p in (tmp_path / "counterexamples").glob("*.json")}
    assert "spare.peak.json" in committed
    result = invoke("check", path, *options)
    assert result.exit_code in (0, 3), result.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "counterexamples").glob("*.json")} == committed
    assert list((tmp_path / "counterexamples" / "overrides").glob("spare.*.json"))


def test_a_partial_default_run_leaves_the_committed_peak_alone(tmp_path, monkeypatch):
    """A default run stopped part way (here by the memory bound it sets
    itself) writes what it found, but not its peak over the committed one:
    that is only the peak of what it explored."""
    path = scenario(tmp_path, "spare", protocol="spare-capacity")
    assert invoke("check", path).exit_code == 0
    peak = (tmp_path / "counterexamples" / "spare.peak.json").read_bytes()
    import cowcheck.cli.check as check_cli
    import cowcheck.engines.options as options
    real = options.SearchOptions

    def bounded(**kw):
        return real(**{**kw, "max_states": 5})
    monkeypatch.setattr("cowcheck.cli.check.SearchOptions", bounded)     # as the memory bound would stop it
    monkeypatch.setattr("cowcheck.cli.check.default_out", lambda *args: check_cli.DEFAULT_OUT)
    result = invoke("check", path)
    assert "partial" in result.output, result.output
    assert (tmp_path / "counterexamples" / "spare.peak.json").read_bytes() == peak


def test_junit_xml_has_a_case_per_scenario_and_per_invariant(tmp_path):
    """Item 28: CI systems read JUnit XML: a failure per broken invariant,
    its message naming the counterexample file, its text the explanation."""
    import xml.etree.ElementTree as ET
    racy = scenario(tmp_path, "spare", protocol="spare-capacity")
    expected = scenario(tmp_path, "spare-expected", protocol="spare-capacity", expect="violates faithful-output")
    wrong = scenario(tmp_path, "spare-wrong", protocol="spare-capacity", expect="holds")
    result = invoke("check", racy, expected, wrong, "--out", tmp_path / "cx", "--junit-xml", tmp_path / "ci" / "junit.xml")
    assert result.exit_code == 1, result.output          # spare-wrong's expect is not met
    root = ET.parse(tmp_path / "ci" / "junit.xml").getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"spare", "spare-expected", "spare-wrong"}
    spare = {c.get("name"): c for c in suites["spare"].findall("testcase")}
    assert set(spare) == {"expect", *(inv.id for inv in INVARIANTS)} and spare["expect"].find("failure") is None
    told = spare["faithful-output"].find("system-out")      # no expect: the break does not fail the run (issue 34)
    path = str(tmp_path / "cx" / "spare.faithful-output.json")
    assert spare["faithful-output"].find("failure") is None and path in told.text and "broke in" in told.text
    assert "faithful-output breaks at step" in told.text
    assert spare["no-leak"].find("failure") is None and spare["no-leak"].find("skipped") is None
    assert int(suites["spare"].get("failures")) == 0
    mine = {c.get("name"): c for c in suites["spare-expected"].findall("testcase")}
    assert mine["faithful-output"].find("failure") is None           # it broke, as expect says
    assert "as the scenario's expect says" in mine["faithful-output"].find("system-out").text
    assert mine["expect"].find("failure") is None
    unmet = suites["spare-wrong"].find("testcase[@name='expect']/failure")
    assert unmet is not None and "expected \"holds\"" in unmet.get("message")
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites.values())


def test_junit_xml_path_is_checked_before_exploring(tmp_path):
    (tmp_path / "blocker").write_text("a file")
    result = invoke("check", scenario(tmp_path, "s"), "--junit-xml", tmp_path / "blocker" / "j.xml", "--out", tmp_path / "cx")
    assert result.exit_code == 2 and "--junit-xml" in result.output and not (tmp_path / "cx").exists()


# --------------------------------------------------------------------------
# partial-order reduction: chosen by default, --por / --no-por

def test_the_report_says_which_searches_ran_and_why(tmp_path):
    """By default the check chooses: a protocol that holds is answered by
    the search with partial-order reduction (and the peak's trace by one
    without it), a buggy one by the search without it (here it breaks in
    the first states that search stores, before the reduced one starts);
    --no-por and --por are the explicit choices."""
    holds = scenario(tmp_path, "holds")
    racy = scenario(tmp_path, "racy", protocol="premature-decrement")
    data, result = check_json(tmp_path, holds, racy)
    text = flat(result.output)
    by_name = {entry["scenario"]: entry for entry in data}
    held, broke = by_name["holds"], by_name["racy"]
    assert held["partial_order"] == broke["partial_order"] == "auto"
    assert [s["purpose"] for s in held["searches"]] == ["first violation", "peak trace"]
    assert "no violation" in held["choice"] and any("settled completions" in r for r in held["reductions"])
    assert held["states"] == held["searches"][0]["states"]
    assert [s["purpose"] for s in broke["searches"]] == ["verdicts"]
    assert broke["searches"][0]["violations"] and "a violation" in broke["choice"]
    assert not any("partial-order" in r for r in broke["reductions"])
    assert broke["states"] == broke["searches"][0]["states"]
    assert f"chosen {held['choice']}" in text and f"chosen {broke['choice']}" in text
    assert "searches first violation (with partial-order)" in text
    off, result = check_json(tmp_path, holds, racy, "--no-por")
    assert [e["partial_order"] for e in off] == ["off", "off"]
    assert all([s["purpose"] for s in e["searches"]] == ["verdicts"] and e["choice"] == "--no-por" for e in off)
    on, _ = check_json(tmp_path, holds, racy, "--por")
    assert [e["partial_order"] for e in on] == ["on", "on"]
    assert [s["purpose"] for s in on[1]["searches"]] == ["first violation", "verdicts", "shortest lengths"]
    for auto, explicit in zip(data, off):        # the default reports what --no-por does
        assert auto["verdicts"] == explicit["verdicts"]
        assert (auto["peak_blocks"], auto["copies"], auto["steady_blocks"]) == \
            (explicit["peak_blocks"], explicit["copies"], explicit["steady_blocks"])
