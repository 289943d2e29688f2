"""The z3 engines on cache scenarios (docs/semantics.md#prefix-caching)
against the explorer.

- On every state of the explorer's shortest traces of two cache races, and
  on random reachable states of random cache scenarios, the symbolic
  transition relation enables exactly the explicit model's actions with the
  same successors, and every invariant's z3 formula (prefix caching's
  three included) agrees with its explicit predicate.
- The array sizes and earliest depths of cowcheck.symbolic.bounds hold in
  every reachable state of small cache scenarios of every cache protocol.
- BMC's verdicts and shortest lengths equal the explorer's within its bound:
  DESIGN's reference rows for cache scenarios (where their lengths are
  affordable), the shipped cache scenarios, and random cache scenarios.
- k-induction never claims a proof of an invariant the explorer sees broken
  in a cache scenario."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from cowcheck import check
from cowcheck.engines.invariants import CACHE_INVARIANTS, INVARIANTS, select
from cowcheck.engines.results import Outcome
from cowcheck.model.scenario import load_scenario, make_scenario
from cowcheck.symbolic.bmc import run_bmc
from cowcheck.symbolic.kind import run_kinduction
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.traces.replay import replay

from conftest import CACHE_PROTOCOLS, broken, cache_scenarios
from test_model_prefix_cache import ROWS, cache_scenario
from test_symbolic import Bench, _by_depth, agree_along_a_walk

SCENARIOS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
#: the shipped cache scenarios of protocol files (allocator code is the explorer's alone)
def _refused(scenario) -> bool:
    """A transfer scenario, or one whose protocol has a transfer step: the
    z3 engines refuse it in one line (tests/test_model_transfers.py)."""
    from cowcheck.model.errors import SpecError
    from cowcheck.symbolic.system import refuse_transfers
    try:
        refuse_transfers(scenario)
    except SpecError:
        return True
    return False


CACHE_SPECS = sorted(p.stem for p in SCENARIOS.glob("*.toml")
                     if (s := load_scenario(p)).cache and s.allocator is None and not _refused(s))
P3 = {"prompt": 3, "appends": 1}


def _agrees_within(bmc, explicit, bound: int) -> None:
    """Within the bound BMC breaks exactly what the explorer breaks, at the
    same shortest lengths; where every run ended within it, holds agrees too."""
    found = {k: v.length for k, v in bmc.verdicts.items() if v.holds is False}
    expected = {k: v.length for k, v in explicit.verdicts.items() if v.holds is False and v.length <= bound}
    assert found == expected
    assert set(bmc.verdicts) == set(explicit.verdicts)
    if bmc.complete and bmc.stopped is None:
        assert {k: v.holds for k, v in bmc.verdicts.items()} == {k: v.holds for k, v in explicit.verdicts.items()}


# -- the engines take cache scenarios ------------------------------------------------------
def test_bmc_checks_a_cache_scenario_through_the_api(tmp_path):
    """vllm-v1, two requests admitted together: the reference row's two
    discipline breaks at 9 actions, prefix caching's invariants judged,
    and the counterexamples replay."""
    result = check(cache_scenario("vllm-v1", [P3, P3]), engine="bmc", depth=9)
    assert broken(result) == {"exclusive-write": 9, "refcount-write": 9}
    assert {inv.id for inv in CACHE_INVARIANTS} <= set(result.verdicts)
    for inv_id in ("exclusive-write", "refcount-write"):
        cx = result.verdicts[inv_id].counterexample
        assert cx is not None
        replayed = replay(cx)
        assert replayed.ok, replayed.message


def test_cache_invariants_are_not_judged_without_a_cache():
    """As the explorer: a scenario without a cache has none of them."""
    scenario = make_scenario(2, 3, [1], "cow")
    result = run_bmc(scenario, INVARIANTS + CACHE_INVARIANTS, 2)
    for inv in CACHE_INVARIANTS:
        assert result.verdicts[inv.id].outcome is Outcome.UNSUPPORTED
        assert "cache" in (result.verdicts[inv.id].note or "")


# -- the encoding, state by state ----------------------------------------------------------
@pytest.mark.parametrize("protocol,invariant", [("vllm-v1", "exclusive-write"), ("free-in-flight", "no-use-after-free")])
def test_encoding_agrees_along_a_cache_race(protocol, invariant):
    """Every state of the explorer's shortest trace of a cache race: an
    admission hitting a block whose fill has not landed (vllm-v1), a
    request cancelled while its kernel is in flight (free-in-flight)."""
    branches = [P3, P3] if protocol == "vllm-v1" else [dict(P3, may_cancel=True), dict(P3, after="a")]
    scenario = cache_scenario(protocol, branches)
    bench = Bench(scenario)
    verdict = check(scenario, symmetry=False, invariants=select([invariant])).verdicts[invariant]
    replayed = replay(verdict.counterexample)
    assert replayed.ok, replayed.message
    for state in replayed.states:
        bench.agree(state)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cache_scenarios(most=2, longest=3), st.integers(0, 2**32 - 1))
def test_encoding_agrees_on_random_cache_scenarios(scenario, seed):
    rnd = random.Random(seed)
    agree_along_a_walk(Bench(scenario), rnd, rnd.randint(0, 30))


# -- the static bounds ---------------------------------------------------------------------
@pytest.mark.parametrize("protocol", CACHE_PROTOCOLS)
def test_bounds_hold_in_every_reachable_cache_state(protocol):
    """Queue and table sizes bound every reachable state, and no action
    fires before its earliest depth (admissions, cancels while waiting,
    speculation and a request continuing another's output)."""
    for block_size, pool, branches in [
            (2, None, [dict(P3, may_cancel=True), dict(P3, after="a")]),
            (1, 3, [{"prompt": 2, "program": ["speculate 1"], "may_cancel": True},
                    {"prompt": ["p0", "p1", "a1"], "appends": 1}])]:
        enc = SymbolicSystem(cache_scenario(protocol, branches, pool, block_size=block_size))
        for state, depth, transitions in _by_depth(enc.model):
            assert len(state.queue) <= enc.Q
            assert all(len(t) <= enc.T for b in state.branches for t in (b.working, b.published))
            for t in transitions:
                inst = next(i for i in enc.instances if enc.matches(i, state, t))
                assert enc.earliest(inst) is not None and enc.earliest(inst) <= depth, (inst.label, depth)


# -- BMC against the explorer --------------------------------------------------------------
#: each reference row and the bound BMC checks it to: its first violations
#: (free-in-flight on async: the three it shares with stream, to 15; no-evict:
#: the first, to 21; cache-drafts: the first, at 21), each well under a
#: minute of z3; rows that hold, to 10. The longer lengths (to 26 and 36,
#: two minutes of z3 each) are the explorer's to check (test_model_prefix_cache's
#: reference rows); BMC and the explorer agree on every length up to a bound.
AFFORDABLE = {("vllm-v1", "async"): 12, ("vllm-v1", "stream"): 9, ("free-in-flight", "stream"): 15,
              ("free-in-flight", "async"): 15, ("prefix-cache", "async"): 10, ("prefix-cache", "stream"): 10,
              ("no-evict", "async"): 21, ("cache-drafts", "async"): 21}
#: the rows over ten seconds of z3 (measured with `pytest --durations`): slow
HEAVY_ROWS = {("free-in-flight", "stream"), ("free-in-flight", "async"), ("no-evict", "async"), ("cache-drafts", "async")}
REFERENCE = [pytest.param(protocol, branches, pool, device, violated, AFFORDABLE[protocol, device],
                          marks=[pytest.mark.slow] if (protocol, device) in HEAVY_ROWS else [],
                          id=f"{protocol}-{name}-{device}")
             for name, protocol, branches, pool, device, violated, _, _ in ROWS if (protocol, device) in AFFORDABLE]


@pytest.mark.parametrize("protocol,branches,pool,device,violated,bound", REFERENCE)
def test_bmc_reproduces_the_reference_rows_within_the_bound(protocol, branches, pool, device, violated, bound):
    """DESIGN's reference rows for cache scenarios: every violation within
    the bound at its reference length, nothing else broken."""
    scenario = cache_scenario(protocol, branches, pool, device)
    bmc = run_bmc(scenario, INVARIANTS, bound)
    assert broken(bmc) == {k: n for k, n in violated.items() if n <= bound}
    _agrees_within(bmc, check(scenario, symmetry=False), bound)


#: the bound BMC checks each shipped cache scenario to
SPEC_BOUND = 10


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("name", CACHE_SPECS)
def test_bmc_agrees_with_the_explorer_on_shipped_cache_scenarios(name, searched):
    path = SCENARIOS / f"{name}.toml"
    _agrees_within(run_bmc(load_scenario(path), INVARIANTS, SPEC_BOUND), searched(path, symmetry=False, por=False),
                   SPEC_BOUND)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cache_scenarios(most=2, longest=2))
def test_bmc_agrees_with_the_explorer_on_random_cache_scenarios(scenario):
    """Random cache scenarios of every cache protocol, device and reuse
    order (two requests, prompts of one or two tokens): BMC to depth 10
    and the explorer share only the model."""
    bound = 10
    explicit = check(scenario, symmetry=False, max_states=50_000)     # `any` reuse on B = 1 can be vast
    assume(explicit.exploration.complete)
    _agrees_within(run_bmc(scenario, INVARIANTS, bound), explicit, bound)


# -- k-induction -------------------------------------------------------------------------
@pytest.mark.parametrize("protocol,branches", [
    pytest.param("vllm-v1", [{"prompt": 3}, {"prompt": 3}], marks=pytest.mark.slow),   # breaks what [P3, P3] breaks, at the same lengths, in a third of the time
    pytest.param("free-in-flight", [dict(P3, may_cancel=True), dict(P3, after="a")], marks=pytest.mark.slow),
])
def test_kinduction_never_proves_a_broken_cache_invariant(protocol, branches):
    scenario = cache_scenario(protocol, branches)
    explicit = check(scenario, symmetry=False)
    result = run_kinduction(scenario, INVARIANTS, 2)
    assert set(result.verdicts) == set(explicit.verdicts)
    for inv_id, v in explicit.verdicts.items():
        if v.holds is False:
            assert result.verdicts[inv_id].holds is not True, inv_id
            assert result.closed_at.get(inv_id) is None, inv_id
