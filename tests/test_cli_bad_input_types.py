"""Issue 34 item 6: a value of the wrong type is refused as that, naming the
type expected, never reported as missing; a list `prompt` outside a cache
scenario points at `cache = "prefix"`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import protocol_from_dict
from cowcheck.model.scenario import load_scenario
from cowcheck.sweeps.grid import load_grid

HEAD = "block_size = 2\nprompt = 3\n"
ONE = "[[branch]]\nappends = 1\n"


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_scenario(path)
    return str(caught.value)


@pytest.mark.parametrize("value, said", [("5", "got 5"), ('"a"', "got 'a'"), ("[5]", "must be a table"),
                                         ("{ appends = 1 }", "write [[branch]], not [branch]"), ("[]", "got []")])
def test_a_branch_of_the_wrong_type_is_not_missing(tmp_path, value, said):
    message = refusal(tmp_path, HEAD + f"branch = {value}\n")
    assert "missing" not in message and said in message and "branch" in message


def test_no_branch_at_all_is_missing(tmp_path):
    assert "key 'branch': missing" in refusal(tmp_path, HEAD)


def test_a_list_prompt_outside_a_cache_scenario_points_at_cache_prefix(tmp_path):
    message = refusal(tmp_path, 'block_size = 2\nprompt = ["a", "b"]\n' + ONE)
    assert "key 'prompt'" in message and "got a list" in message and 'cache = "prefix"' in message


def test_a_list_prompt_in_a_request_outside_a_cache_scenario_points_at_cache_prefix(tmp_path):
    message = refusal(tmp_path, HEAD + ONE + 'prompt = ["a"]\n')
    assert 'cache = "prefix"' in message


@pytest.mark.parametrize("value, said", [('"2"', "got '2'"), ("2.0", "got 2.0"), ("true", "got True")])
def test_a_number_of_the_wrong_type_says_an_integer(tmp_path, value, said):
    message = refusal(tmp_path, f"block_size = {value}\nprompt = 3\n" + ONE)
    assert "must be an integer" in message and said in message and "missing" not in message


def test_protocol_rules_and_conditions_of_the_wrong_type(tmp_path):
    append = {"paths": {"in-place": ["write", "wait-kernel"]}}
    with pytest.raises(SpecError, match=r"append.rules': must be a list, got 5"):
        protocol_from_dict({"append": {**append, "rules": 5}}, "p.toml")
    with pytest.raises(SpecError, match=r"append.rules': missing or empty"):
        protocol_from_dict({"append": append}, "p.toml")
    with pytest.raises(SpecError, match=r"when': must be a condition string, got 5"):
        protocol_from_dict({"append": {**append, "rules": [{"when": 5, "path": "in-place"}]}}, "p.toml")
    with pytest.raises(SpecError, match=r"when': missing"):
        protocol_from_dict({"append": {**append, "rules": [{"path": "in-place"}]}}, "p.toml")


def test_a_grid_table_of_the_wrong_type(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text("grid = 5\n")
    with pytest.raises(SpecError, match=r"key 'grid': must be a table \(\[grid\]\), got 5"):
        load_grid(path)
    path.write_text("[budget]\nseconds = 1\n")
    with pytest.raises(SpecError, match=r"key 'grid': missing"):
        load_grid(path)


def test_the_command_says_it_in_one_line(tmp_path):
    (tmp_path / "bad.toml").write_text(HEAD + "branch = 5\n")
    done = subprocess.run([sys.executable, "-m", "cowcheck", "check", "bad.toml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "must be a list of one or more [[branch]] tables, got 5" in done.stderr
