"""Hypothesis feeds `cowcheck check` mutated scenario and protocol files:
whatever it gets, it answers with a verdict (exit 0 or 1) or one error line
naming the file (exit 2), never a traceback.

The hand-written cases in test_cli_bad_input.py pin the wording of each known
mistake; these find the mistakes nobody listed: a value of the wrong type
under any key, a step or rule expression made of plausible words in an
implausible order, a file cut or spliced anywhere."""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cowcheck.cli import main
from conftest import ROOT

COW_RULES = [("boundary", "fresh"), ("refcount(tail) == 1 and holds(tail) == 0", "in-place"), ("true", "copy")]
COW_PATHS = {
    "fresh": ["alloc new", "append new", "publish", "write", "wait-kernel"],
    "in-place": ["write", "wait-kernel"],
    "copy": ["alloc new", "copy tail new", "wait-copy new", "replace tail new", "publish", "decref tail", "write", "wait-kernel"],
}
STEP_WORDS = ["alloc", "new", "tail", "copy", "copy-block", "wait-copy", "wait-kernel", "replace", "append", "publish",
              "decref", "decref-all", "incref", "hold", "release", "write", "check-output", "lock", "unlock", "x", "",
              "new new", "tail tail", "-1", "0"]
RULE_WORDS = ["refcount(", "holds(", "tail", "new", ")", "==", "!=", "<", ">=", "1", "0", "-1", "and", "or", "not",
              "true", "false", "boundary", "pos", "%", "+", "(", "free", "2", "1and", "0x", "1_0"]

toml_scalar = st.one_of(st.integers(-3, 70), st.integers(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from(["", "cow", "async", "streams", "lifo", "any", "holds", "violates peak", "x"]),
                        st.text(max_size=8))
toml_value = st.one_of(toml_scalar, st.lists(toml_scalar, max_size=3), st.dictionaries(st.sampled_from(["a", "appends", "when"]), toml_scalar, max_size=2))


def literal(value) -> str:
    """A TOML literal (json's strings and numbers are valid TOML ones)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {literal(v)}' for k, v in value.items()) + "}"
    return json.dumps(value)


def scenario_text(top: dict, branches: list[dict]) -> str:
    lines = [f'"{k}" = {literal(v)}' for k, v in top.items()]
    for b in branches:
        lines.append("[[branch]]")
        lines += [f'"{k}" = {literal(v)}' for k, v in b.items()]
    return "\n".join(lines) + "\n"


def protocol_text(rules, paths, cancel, extra: dict) -> str:
    lines = ['name = "fuzzed"'] + [f'"{k}" = {literal(v)}' for k, v in extra.items()]
    lines += ["[append]", "rules = [" + ", ".join(f"{{ when = {literal(w)}, path = {literal(p)} }}" for w, p in rules) + "]"]
    lines += [f'paths.{literal(name)} = {literal(steps)}' for name, steps in paths.items()]
    if cancel is not None:
        lines += ["[cancel]", f"steps = {literal(cancel)}"]
    return "\n".join(lines) + "\n"


@st.composite
def scenarios(draw) -> str:
    top = {"block_size": 2, "prompt": 3}
    branches = [{"appends": 1}, {"appends": 1}]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "branch"]))
        keys = (["block_size", "prompt", "pool", "device", "reuse", "protocol", "expect", "description", "colour"]
                if where == "top" else ["appends", "may_cancel", "speed"])
        key, value = draw(st.sampled_from(keys)), draw(toml_value)
        target = top if where == "top" else branches[draw(st.integers(0, 1))]
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = value
    return scenario_text(top, branches[:draw(st.integers(0, 2))])


@st.composite
def protocols(draw) -> str:
    rules = list(COW_RULES)
    paths = {name: list(steps) for name, steps in COW_PATHS.items()}
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["step", "rule", "path-name", "drop-step", "cancel", "extra"]))
        if what == "step":
            name = draw(st.sampled_from(sorted(paths)))
            i = draw(st.integers(0, len(paths[name])))
            step = " ".join(draw(st.lists(st.sampled_from(STEP_WORDS), min_size=1, max_size=3)))
            paths[name][i:i + draw(st.integers(0, 1))] = [step]
        elif what == "rule":
            i = draw(st.integers(0, len(rules) - 1))
            rules[i] = (" ".join(draw(st.lists(st.sampled_from(RULE_WORDS), min_size=1, max_size=7))), rules[i][1])
        elif what == "path-name":
            i = draw(st.integers(0, len(rules) - 1))
            rules[i] = (rules[i][0], draw(st.sampled_from(["fresh", "copy", "in-place", "nowhere", ""])))
        elif what == "drop-step":
            name = draw(st.sampled_from(sorted(paths)))
            if paths[name]:
                del paths[name][draw(st.integers(0, len(paths[name]) - 1))]
    cancel = draw(st.one_of(st.none(), st.lists(st.sampled_from(STEP_WORDS), max_size=3)))
    extra = draw(st.dictionaries(st.sampled_from(["description", "colour", "append"]), toml_scalar, max_size=1))
    return protocol_text(rules, paths, cancel, extra)


@st.composite
def spliced(draw, base: str) -> str:
    """A valid file cut, with junk spliced in somewhere."""
    i = draw(st.integers(0, len(base)))
    j = draw(st.integers(i, min(len(base), i + 12)))
    junk = draw(st.text(alphabet='[]{}="#\n ,.abc0123-', max_size=6))
    return base[:i] + junk + base[j:]


GOOD_SCENARIO = scenario_text({"block_size": 2, "prompt": 3}, [{"appends": 1}, {"appends": 1}])
GOOD_PROTOCOL = protocol_text(COW_RULES, COW_PATHS, ["wait-kernel", "decref-all"], {})


def judged(result, name: str) -> None:
    """A verdict (3: a partial one), or the one-line bad-input contract."""
    assert result.exit_code in (0, 1, 2, 3), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        assert name in lines[0], lines[0]


FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def invoke(args: list[str]):
    """The CLI in-process; a warning fails the test, since it would reach the
    user's terminal as one more line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, args)
    assert not caught, [str(w.message) for w in caught]
    return result


def check_files(tmp_path, scenario: str, protocol: str | None = None):
    (tmp_path / "s.toml").write_text(scenario)
    args = ["check", str(tmp_path / "s.toml"), "--max-states", "300", "--out", str(tmp_path / "cx")]
    if protocol is not None:
        (tmp_path / "p.toml").write_text(protocol)
        args += ["--protocol", str(tmp_path / "p.toml")]
    return invoke(args)


@FUZZ
@given(text=st.one_of(scenarios(), spliced(GOOD_SCENARIO)))
def test_any_scenario_file_gets_a_verdict_or_one_line(tmp_path, text):
    judged(check_files(tmp_path, text), "s.toml")


@FUZZ
@given(text=st.one_of(protocols(), spliced(GOOD_PROTOCOL)))
def test_any_protocol_file_gets_a_verdict_or_one_line(tmp_path, text):
    result = check_files(tmp_path, GOOD_SCENARIO, text)
    judged(result, "p.toml")


@pytest.mark.parametrize("text", [GOOD_SCENARIO])
def test_the_unmutated_files_are_accepted(tmp_path, text):
    assert check_files(tmp_path, text, GOOD_PROTOCOL).exit_code in (0, 1)


# -- counterexample files: every command that reads one ----------------------

CX = ROOT / "counterexamples" / "premature-decrement.exclusive-write.json"
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 12), st.text(max_size=6),
                      st.lists(st.integers(-1, 7), max_size=3), st.just({}))


def _paths(data, prefix=()):
    """Every path to a value in a JSON document."""
    yield prefix
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


@st.composite
def counterexamples(draw) -> str:
    data = json.loads(CX.read_text())
    paths = [p for p in _paths(data) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = data
        try:
            for k in path[:-1]:
                parent = parent[k]
            if draw(st.integers(0, 3)) == 0 and isinstance(parent, (dict, list)):
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(json_leaf)
        except (KeyError, IndexError, TypeError):
            pass                # an earlier mutation removed or replaced the path
    return json.dumps(data)


COMMANDS = [["replay", "{f}"], ["replay", "{f}", "--pool", "none"], ["explain", "{f}"],
            ["html", "{f}", "-o", "{d}/page.html", "--pool", "none"], ["graph", "{f}", "-o", "{d}/g.svg"],
            ["graph", "{f}", "--step", "3", "-o", "{d}/g.dot"]]


@FUZZ
@given(text=counterexamples(), command=st.sampled_from(COMMANDS))
def test_any_counterexample_file_gets_an_answer_or_one_line(tmp_path, text, command):
    (tmp_path / "cx.json").write_text(text)
    judged(invoke([a.format(f=tmp_path / "cx.json", d=tmp_path) for a in command]), "cx.json")
