"""Hypothesis drives random scenarios through the engines.

- Under the correct `cow` protocol no invariant ever breaks and every complete
  run ends with every block back in the pool.
- A second, simple depth-first search agrees with the breadth-first explorer
  on the verdicts and the number of distinct states, for every built-in
  protocol, device model and reuse order."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from cowcheck import check
from cowcheck.engines.depth_first import depth_first
from cowcheck.model.protocol import builtin_names
from cowcheck.model.scenario import DEVICES, make_scenario
from cowcheck.model.system import ProtocolModel

CAP = 10_000


@st.composite
def scenarios(draw, protocols=("cow",), max_block=4, max_prompt=8, max_branches=3, max_appends=3, reuses=("lifo", "fifo")):
    B = draw(st.integers(1, max_block))
    L = draw(st.integers(0, max_prompt))
    n = draw(st.integers(1, max_branches))
    branches = [(draw(st.integers(0, max_appends)), draw(st.booleans())) for _ in range(n)]
    return make_scenario(B, L, branches, draw(st.sampled_from(protocols)),
                         device=draw(st.sampled_from(DEVICES)), reuse=draw(st.sampled_from(reuses)))


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
@given(scenarios(protocols=tuple(builtin_names(cache=False)), max_block=3, max_prompt=5, max_branches=3, max_appends=2,
                 reuses=("lifo", "fifo", "any")))
def test_depth_first_agrees_with_breadth_first(scenario):
    bfs = check(scenario, max_states=4_000, symmetry=False, por=False)
    assume(bfs.exploration.complete)
    dfs = depth_first(ProtocolModel(scenario))
    assert dfs.states == bfs.exploration.states
    assert dfs.violated == {k for k, v in bfs.verdicts.items() if v.holds is False}
