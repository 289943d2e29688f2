"""What cowcheck writes, as files: atomic writes respect the umask
(issue 27, item 9), the API's narration is unwrapped (item 8), the
interrupt line counts what was checked whole (item 22)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import cowcheck
from cowcheck import atomic

ROOT = Path(__file__).resolve().parent.parent
RACE = ROOT / "counterexamples" / "premature-decrement.faithful-output.json"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_written_file_gets_the_mode_the_umask_gives(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        written = atomic.write_text(tmp_path / "sub" / "f.json", "{}\n")
        assert stat.S_IMODE(written.stat().st_mode) == mode
        atomic.write_text(written, "[]\n")          # rewriting keeps to the umask too
        assert stat.S_IMODE(written.stat().st_mode) == mode
    finally:
        os.umask(previous)


def test_a_check_writes_its_counterexamples_with_the_umask_mode(tmp_path):
    previous = os.umask(0o022)
    try:
        from cowcheck.cli import main
        from click.testing import CliRunner
        result = CliRunner().invoke(main, ["check", str(ROOT / "specs/scenarios/premature-decrement.toml"),
                                           "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        files = list(tmp_path.glob("*.json"))
        assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in files)
    finally:
        os.umask(previous)


def test_the_api_narration_is_not_hard_wrapped():
    """`cowcheck.explain` returns one line per sentence; the terminal wraps."""
    text = cowcheck.explain(cowcheck.load_counterexample(RACE))
    lines = text.splitlines()
    assert max(map(len, lines)) > 120            # the scenario header alone is longer
    assert lines[0].startswith("premature-decrement: protocol premature-decrement") and lines[0].endswith("2 appends)")
    assert all(line == line.rstrip() for line in lines)


def test_the_interrupt_line_counts_the_scenarios_checked_whole():
    """Item 22: the only scenario, stopped part way, was not "checked before it"."""
    from types import SimpleNamespace
    from cowcheck.cli.check import interrupted_line
    stopped, whole = SimpleNamespace(interrupted=True), SimpleNamespace(interrupted=False)
    assert interrupted_line([stopped]).startswith("0 scenario(s) checked whole before it, 1 stopped part way")
    assert interrupted_line([whole, whole, stopped]).startswith("2 scenario(s) checked whole before it, 1 stopped")
    assert interrupted_line([]) == "0 scenario(s) checked whole before it; nothing checked yet"


def test_two_allocators_that_both_export_factory_keep_their_own_counterexamples(tmp_path):
    """Item 10: an override names the allocator by file stem (or module) and
    factory, so a second allocator's run does not delete the first's files."""
    from click.testing import CliRunner
    from cowcheck.cli import main
    from cowcheck.model.harness import allocator_label
    assert allocator_label("cowcheck.specs.allocators.engine:correct") == "engine.correct"
    assert allocator_label("some/folder/mine.py:factory") == "mine.factory"
    for stem in ("first", "second"):
        (tmp_path / f"{stem}.py").write_text(
            "from cowcheck.specs.allocators.engine import double_free_after_cow\n"
            "def factory(pool, block_size):\n    return double_free_after_cow(pool, block_size)\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text('device = "stream"\nblock_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n')
    out = tmp_path / "out"
    for stem in ("first", "second"):
        result = CliRunner().invoke(main, ["check", str(scenario), "--allocator", f"{tmp_path / stem}.py:factory",
                                           "--out", str(out)])
        assert result.exit_code == 1, result.output
    names = {p.name.split("-")[0] for p in out.glob("*.json")}
    assert names == {"s~first.factory", "s~second.factory"}


def test_the_scenario_header_is_one_line_in_a_file_or_pipe(tmp_path):
    """Item 21: not wrapped at the table's width when stdout is not a terminal."""
    from click.testing import CliRunner
    from cowcheck.cli import main
    long = tmp_path / ("a-scenario-with-a-rather-long-name-" * 3 + "end.toml")
    long.write_text((ROOT / "specs/scenarios/premature-decrement.toml").read_text())
    result = CliRunner().invoke(main, ["check", str(long), "--out", str(tmp_path / "cx")])
    header = result.output.splitlines()[0]
    assert header.startswith(long.stem) and header.endswith("branches=2"), result.output[:500]


def _my_allocator(folder: Path, body: str = "from cowcheck.specs.allocators.engine import correct as factory\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_alloc.py").write_text(body)
    return folder / "my_alloc.py"


def test_a_counterexample_of_allocator_code_from_a_file_reopens_from_anywhere(tmp_path, monkeypatch):
    """Items 1 and 2: `check --allocator FILE.py:factory` (the README's form,
    relative to the working folder) writes counterexamples that explain,
    replay, html and graph read from any folder, and its --html pages are
    written, not a traceback; once the file is gone, one line says so."""
    from click.testing import CliRunner
    from cowcheck.cli import main
    work = tmp_path / "work"
    allocator = _my_allocator(work)
    monkeypatch.chdir(work)
    run = CliRunner().invoke(main, ["check", str(ROOT / "specs/scenarios/cow-two-writers.toml"), "--allocator",
                                    "my_alloc.py:factory", "--out", "cx", "--html", "pages"])
    assert run.exit_code == 1 and isinstance(run.exception, SystemExit), run.output    # no traceback
    race = next((work / "cx").glob("*.faithful-output.json"))
    assert (work / "pages" / (race.stem + ".html")).is_file() and (work / "pages" / "index.html").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for args in (["explain", str(race)], ["replay", str(race), "--pool", "none"], ["html", str(race), "-o", "p.html"],
                 ["graph", str(race), "-o", "g.svg"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    allocator.unlink()
    gone = CliRunner().invoke(main, ["explain", str(race)])
    assert gone.exit_code == 2 and "no longer there" in gone.output and str(allocator) in gone.output, gone.output
    assert len(gone.output.strip().splitlines()) == 1


def test_the_check_pages_skip_a_counterexample_that_cannot_be_drawn(tmp_path):
    """Item 2: the page writer catches a load error; the other pages and the index are still written."""
    import cowcheck
    from cowcheck.traces.output import write_result
    from cowcheck.views.pages import write_check_pages
    allocator = _my_allocator(tmp_path / "code")
    scenario = cowcheck.load_scenario(ROOT / "specs/scenarios/cow-two-writers.toml")
    result = cowcheck.check(scenario, allocator=f"{allocator}:factory", invariants=(cowcheck.INVARIANTS[0],))
    write_result(result, tmp_path / "cx")
    allocator.unlink()
    skipped: list = []
    pages = write_check_pages([result], tmp_path / "site", skipped)
    assert [p.name for p in pages] == ["index.html"]
    assert skipped and "no longer there" in str(skipped[0])


def test_a_refused_atomic_write_names_the_target_not_the_temporary_file(tmp_path):
    """Item 16: the error of a write that fails names the user's path."""
    target = tmp_path / "taken"
    (target / "inside").mkdir(parents=True)       # a non-empty folder where the file must go
    with pytest.raises(OSError) as raised:
        atomic.write_text(target, "{}\n")
    assert raised.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]       # no temporary file left


@pytest.mark.parametrize("columns, widest", [("90", 90), ("200", 200), ("", 140)])  # the long note needs > 140
def test_a_pipe_is_laid_out_for_columns_where_ci_sets_it(tmp_path, columns, widest):
    """Item 21: in a file or a pipe the tables take $COLUMNS where a CI job
    sets it, else 140 columns (wide enough for the verdict table)."""
    import subprocess
    import sys
    env = {**os.environ, "COLUMNS": columns}
    run = subprocess.run([sys.executable, "-m", "cowcheck", "check", str(ROOT / "specs/scenarios/prefix-code-async.toml"),
                          "--out", str(tmp_path / "cx")], capture_output=True, text=True, env=env, timeout=120)
    table = [line for line in run.stdout.splitlines() if "│" in line or "━" in line]
    width = max(len(line) for line in table)
    assert width <= widest and width > (140 if widest > 140 else widest - 1)
