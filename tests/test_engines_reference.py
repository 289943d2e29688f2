"""docs/semantics.md's reference numbers, reproduced exactly, and cases a person can
check by hand."""

from __future__ import annotations

import pytest

from conftest import broken, run, check_into

# protocol, B, L, branches, violated {invariant: shortest length}, peak, copies
REFERENCE = [
    ("cow", 4, 6, [3, 3], {}, 5, (1, 2)),
    ("cow", 4, 8, [2, 2, 2], {}, 5, (0, 0)),
    ("cow", 4, 6, [2, 2, 2], {}, 5, (2, 3)),
    ("premature-decrement", 2, 3, [2, 2], {"exclusive-write": 7, "no-use-after-free": 8, "faithful-output": 27}, 5, (1, 2)),
    ("spare-capacity", 2, 3, [2, 2], {"exclusive-write": 3, "refcount-write": 3, "faithful-output": 13}, 4, (0, 0)),
]


@pytest.mark.parametrize("protocol,B,L,branches,violations,peak,copies", REFERENCE,
                         ids=[f"{r[0]}-B{r[1]}-L{r[2]}-{len(r[3])}x{r[3][0]}" for r in REFERENCE])
def test_reference_row(protocol, B, L, branches, violations, peak, copies):
    result = run(protocol, B, L, branches)
    x = result.exploration
    assert x.complete
    assert broken(result) == violations
    assert x.peak == peak
    assert x.cost_range == copies


def test_one_branch_never_copies():
    for B, L in [(2, 3), (4, 6), (4, 5), (1, 2)]:
        result = run("cow", B, L, [3])
        assert broken(result) == {}
        assert result.exploration.cost_range == (0, 0)


def test_exactly_full_prompt_needs_no_copy():
    for B, L, n in [(2, 4, 2), (4, 8, 3), (1, 3, 2)]:
        result = run("cow", B, L, [2] * n)
        assert result.exploration.cost_range == (0, 0)
        assert broken(result) == {}


def test_two_branches_on_a_partial_tail_copy_once_or_twice():
    # one copy when the second writer finds itself the last owner, two when
    # both decide to copy before either drops the original
    result = run("cow", 2, 3, [1, 1])
    assert result.exploration.cost_range == (1, 2)
    assert broken(result) == {}


def test_steady_state_counts_the_final_block_graph_not_the_transient():
    # three writers on one tail: 1 full block + 3 private tails once settled,
    # but 5 at the peak while the original is still held during the copies
    result = run("cow", 4, 6, [2, 2, 2])
    assert result.exploration.steady == 4
    assert result.exploration.peak == 5


def test_peak_trace_reaches_the_peak(tmp_path):
    from cowcheck.engines import counterexample as trace
    from cowcheck.traces.replay import replay
    from cowcheck.model.scenario import make_scenario
    from cowcheck import check

    result = check_into(make_scenario(4, 6, [2, 2, 2], "cow"), tmp_path)
    cx = trace.load(result.peak_path)
    replayed = replay(cx)
    assert replayed.ok, replayed.message
    assert cx.peak == 5
    # breadth-first: no shorter trace reaches the peak
    shorter = check(make_scenario(4, 6, [2, 2, 2], "cow"), max_depth=cx.length - 1)
    assert shorter.exploration.peak < 5


@pytest.mark.parametrize("device", ["async", "stream", "streams"])
@pytest.mark.parametrize("reuse", ["lifo", "fifo", "any"])
def test_cow_is_correct_under_every_device_and_reuse(device, reuse):
    result = run("cow", 2, 3, [2, 2], device=device, reuse=reuse)
    assert broken(result) == {}
    assert result.summary == "safe and disciplined"


def test_a_result_pickles_with_its_protocols_conditions():
    """A check's result crosses to another process (the tests share one
    search between xdist workers): the protocol's `[append]` conditions
    are pickled as their text and parsed again."""
    import pickle
    from cowcheck import check
    from cowcheck.model.scenario import make_scenario
    result = check(make_scenario(2, 3, [1, 1], "premature-decrement"))
    again = pickle.loads(pickle.dumps(result))
    assert again.to_json() == result.to_json()
    for rule, was in zip(again.scenario.protocol.rules, result.scenario.protocol.rules):
        assert rule.when.text == was.when.text
        if rule.when.text == "boundary":     # the names the others read need a whole state
            assert rule.when.evaluate({"boundary": False}) == was.when.evaluate({"boundary": False})
