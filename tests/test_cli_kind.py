"""Selecting scenarios by kind (docs/reference/commands.md#cowcheck-check):
an override made for one kind of scenario (a prefix-cache protocol, an
adapter that answers `admit`; a fork adapter) skips a folder's scenarios of
the other kind and says how many in the closing lines; `--kind fork|cache`
selects explicitly; a file named on the command line that the override does
not fit stays bad input (exit 2), and so does a check left with nothing.

The scenarios are two small ones, a fork and a cache scenario (under a
second each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cowcheck.cli import main

FORK = "block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nappends = 1\n"
CACHE = 'cache = "prefix"\nblock_size = 2\n[[branch]]\nprompt = 3\n[[branch]]\nprompt = 3\n'

PREFIX_ADAPTER = "cowcheck.specs.allocators.prefix:correct"     # answers admit: cache scenarios only
FORK_ADAPTER = "cowcheck.specs.allocators.engine:correct"       # answers start and fork: fork scenarios only


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def folder(tmp_path, monkeypatch) -> Path:
    """specs/ with one fork scenario and one cache scenario, in a
    subfolder; run from tmp_path so nothing lands in the checkout."""
    monkeypatch.chdir(tmp_path)
    specs = tmp_path / "specs"
    (specs / "sub").mkdir(parents=True)
    (specs / "fork.toml").write_text(FORK)
    (specs / "sub" / "cache.toml").write_text(CACHE)
    return specs


def checked(tmp_path: Path, *args: Any) -> tuple[Any, list[str]]:
    """`cowcheck check ARGS --json FILE`: the result and the scenarios checked."""
    out = tmp_path / "r.json"
    result = invoke("check", *args, "--json", out, "--out", tmp_path / "cx")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    names = [r["scenario"] for r in json.loads(out.read_text())] if out.exists() else []
    return result, names


def bad_input(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("override, skipped, why", [
    (("--protocol", "prefix-cache"), "fork", "protocol 'prefix-cache' is a prefix-cache protocol"),
    (("--protocol", "vllm-v1"), "fork", "protocol 'vllm-v1' is a prefix-cache protocol"),
    (("--allocator", PREFIX_ADAPTER), "fork", "the adapter answers admit, not start and fork: a prefix-cache adapter"),
    (("--allocator", FORK_ADAPTER), "cache", "the adapter answers start and fork, not admit: a fork adapter"),
])
def test_an_override_skips_the_folders_scenarios_of_the_other_kind(folder, tmp_path, override, skipped, why):
    result, names = checked(tmp_path, folder, *override)
    assert result.exit_code in (0, 1), result.output
    kept = "cache" if skipped == "fork" else "fork"
    assert [n.split("~")[0] for n in names] == [kept]
    assert f"skipped 1 {skipped} scenario(s): {why}" in result.stdout
    assert "1 scenario(s) checked" in result.stdout


def test_a_fork_protocol_fits_both_kinds_and_skips_nothing(folder, tmp_path):
    # a cache scenario takes the tables a protocol leaves out from prefix-cache
    result, names = checked(tmp_path, folder, "--protocol", "cow")
    assert result.exit_code == 0, result.output
    assert sorted(n.split("~")[0] for n in names) == ["cache", "fork"]
    assert "skipped" not in result.output


@pytest.mark.parametrize("kind, kept, other", [("fork", "fork", "cache"), ("cache", "cache", "fork")])
def test_kind_selects_explicitly_among_folders_and_files(folder, tmp_path, kind, kept, other):
    for paths in ((folder,), (folder / "fork.toml", folder / "sub" / "cache.toml")):
        result, names = checked(tmp_path, *paths, "--kind", kind)
        assert result.exit_code == 0, result.output
        assert names == [kept]
        assert f"skipped 1 {other} scenario(s): --kind {kind}" in result.stdout
        # not an override: the files' expect is still judged, and the committed folder is the default
        assert "met their expect" in result.stdout


def test_kind_and_an_override_together(folder, tmp_path):
    result, names = checked(tmp_path, folder, "--kind", "cache", "--protocol", "prefix-cache")
    assert result.exit_code == 0, result.output
    assert names == ["cache~prefix-cache-async-lifo"]
    assert "skipped 1 fork scenario(s): --kind cache" in result.stdout


@pytest.mark.parametrize("override, needle", [
    (("--protocol", "prefix-cache"), "uses the cache step"),
    (("--allocator", PREFIX_ADAPTER), "the adapter has no start()"),
])
def test_a_file_named_on_the_command_line_that_does_not_fit_is_bad_input(folder, tmp_path, override, needle):
    line = bad_input(invoke("check", folder / "fork.toml", *override, "--out", tmp_path / "cx"))
    assert needle in line
    # even beside a folder that the override fits
    line = bad_input(invoke("check", folder / "sub", folder / "fork.toml", *override, "--out", tmp_path / "cx"))
    assert needle in line


def test_a_file_named_on_the_command_line_for_the_other_adapter_is_bad_input(folder, tmp_path):
    line = bad_input(invoke("check", folder / "sub" / "cache.toml", "--allocator", FORK_ADAPTER, "--out", tmp_path / "cx"))
    assert "the adapter has no admit()" in line


@pytest.mark.parametrize("args, needle", [
    (("--kind", "cache"), "no scenario to check: skipped 1 fork scenario(s): --kind cache"),
    (("--protocol", "vllm-v1"), "no scenario to check: skipped 1 fork scenario(s): protocol 'vllm-v1' is a prefix-cache protocol"),
])
def test_nothing_left_to_check_is_bad_input(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    only_forks = tmp_path / "forks"
    only_forks.mkdir()
    (only_forks / "fork.toml").write_text(FORK)
    assert needle in bad_input(invoke("check", only_forks, *args))


def test_an_adapter_of_neither_kind_is_still_bad_input_in_a_folder(folder, tmp_path):
    (tmp_path / "half.py").write_text("class A:\n    def append(self, *a): return []\n\n"
                                      "def factory(pool, block_size):\n    return A()\n")
    line = bad_input(invoke("check", folder, "--allocator", "half.py:factory", "--out", tmp_path / "cx"))
    assert "half.py:factory" in line and "the adapter has no" in line


def test_kind_is_refused_when_unknown(folder):
    result = invoke("check", folder, "--kind", "beam")     # click's usage error: one line through `cowcheck` (run())
    assert result.exit_code == 2 and "'beam' is not one of 'fork', 'cache'" in result.stderr
