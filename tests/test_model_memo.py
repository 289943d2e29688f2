"""The harness's memo of host calls (cowcheck.model.memo): a repeated call
on the same adapter pickle is answered from the memo, and the search is the
same with it as without (states, transitions, verdicts, lengths); an
adapter that declares itself non-deterministic is never memoized."""

from __future__ import annotations

import pytest

from cowcheck import check
from cowcheck.bench.table import bench_scenario
from cowcheck.model import memo
from cowcheck.model.harness import HarnessModel
from cowcheck.model.scenario import make_scenario
from cowcheck.specs.allocators import engine


def figures(result) -> tuple:
    return (result.exploration.states, result.exploration.transitions,
            {k: (str(v.outcome), v.length) for k, v in result.verdicts.items()})


CASES = [
    (make_scenario(4, 6, [(2, False), (1, True)], "engine"), "cowcheck.specs.allocators.engine:correct"),
    (make_scenario(2, 3, [(2, False), (2, False)], "engine"), "cowcheck.specs.allocators.engine:correct"),
    (bench_scenario("prefix-cache B=2 warm cache, pool 6"), "cowcheck.specs.allocators.prefix:correct"),
]


@pytest.mark.parametrize("scenario, allocator", CASES, ids=["engine-cancel", "engine-2x2", "prefix-warm"])
def test_the_memo_changes_nothing_but_time(scenario, allocator, monkeypatch):
    remembered = check(scenario, allocator=allocator, symmetry=False)
    monkeypatch.setattr(memo, "LIMIT", 0)
    asked = check(scenario, allocator=allocator, symmetry=False)
    assert figures(remembered) == figures(asked)


def test_repeated_calls_are_answered_from_the_memo():
    from cowcheck.engines.explicit import explore
    from cowcheck.engines.options import SearchOptions
    scenario = make_scenario(4, 6, [(2, False), (2, False)], "engine")
    model = HarnessModel(scenario, engine.correct)
    explore(scenario, SearchOptions(symmetry=False), system=model)
    assert model.memo is not None and model.memo.calls > 0
    assert model.memo.hits > model.memo.calls // 3


def test_a_bounded_memo_forgets_the_oldest():
    kept = memo.Memo(limit=2)
    for k in range(3):
        kept.put((b"x", str(k)), memo.Outcome(k, None))
    assert list(kept.entries) == [(b"x", "1"), (b"x", "2")]


def test_a_non_deterministic_adapter_is_not_memoized():
    def factory(pool, block_size):
        adapter = engine.correct(pool, block_size)
        adapter.deterministic = False
        return adapter
    model = HarnessModel(make_scenario(4, 6, [(1, False)], "engine"), factory)
    assert model.memo is None
