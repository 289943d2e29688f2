"""Hypothesis drives random scenarios through the engines.

- Under the correct `cow` protocol no invariant ever breaks and every complete
  run ends with every block back in the pool.
- A second, simple depth-first search agrees with the breadth-first explorer
  on the verdicts and the number of distinct states, for every built-in
  protocol, device model and reuse order."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, given, settings

from cowcheck import check
from cowcheck.engines.depth_first import depth_first
from cowcheck.fuzzing.generators import Knobs
from cowcheck.fuzzing.strategies import scenarios as fuzz_scenarios
from cowcheck.model.protocol import builtin_names
from cowcheck.model.system import ProtocolModel

CAP = 10_000


def scenarios(protocols=("cow",), max_block=4, max_prompt=8, max_branches=3, max_ops=3, reuses=("lifo", "fifo")):
    """The fork scenarios `cowcheck fuzz` draws (cowcheck.fuzzing.strategies), with the pools at their default."""
    return fuzz_scenarios("fork", protocols, Knobs(max_block=max_block, max_prompt=max_prompt, max_branches=max_branches,
                                                   max_ops=max_ops, reuses=reuses, tight_pools=False))


@pytest.mark.slow      # about 12 s alone on hypothesis's fixed examples
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_cow_never_breaks_an_invariant(scenario):
    result = check(scenario, max_states=CAP)
    broken = {k: v.length for k, v in result.verdicts.items() if v.holds is False}
    assert broken == {}, (scenario, broken)
    event("complete" if result.exploration.complete else "capped")
    if result.exploration.complete:
        assert result.verdicts["no-leak"].holds is True
        assert result.summary == "safe and disciplined"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scenarios(protocols=tuple(builtin_names(cache=False)), max_block=3, max_prompt=5, max_branches=3, max_ops=2,
                 reuses=("lifo", "fifo", "any")))
def test_depth_first_agrees_with_breadth_first(scenario):
    bfs = check(scenario, max_states=4_000, symmetry=False, por=False)
    assume(bfs.exploration.complete)
    dfs = depth_first(ProtocolModel(scenario))
    assert dfs.states == bfs.exploration.states
    assert dfs.violated == {k for k, v in bfs.verdicts.items() if v.holds is False}
