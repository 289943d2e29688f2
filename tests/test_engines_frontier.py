"""The frontier engine (cowcheck.engines.frontier) agrees exactly with the
explicit engine without reductions: states, transitions, depth, verdicts,
shortest lengths, peak, copies and the steady count, on every shipped
scenario it covers and on random ones; its counterexamples replay; what it
does not cover it refuses in one line. With symmetry (rows renamed to an
approximate canonical form, cowcheck.engines.orbits) every verdict,
shortest length, peak, copies and steady count is still the one without
reductions, and it stores no fewer states than the explicit engine's
orbits (an approximate form may store an orbit more than once, and on a
tiny space more states than the search without it). Cache scenarios
(prefix caching) are covered too, with the hits measure besides. With partial-order
reduction as row masks (cowcheck.engines.ample, on by default with
symmetry) the same holds of every measure, and without symmetry its
reduced search stores exactly the explorer's reduced states."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cowcheck import check
from cowcheck.engines.rows import refusal
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import builtin_names
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.scenario import load_scenario, make_scenario
from cowcheck.model.system import ProtocolModel
from cowcheck.traces.replay import replay

from tests.conftest import cache_scenarios, program_branches
from cowcheck.model.scenario import DEVICES
from tests.test_engines_random import scenarios

SPECS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
#: the pure prefix-caching scenarios shipped (no allocator or scheduler code, no transfers): all covered
CACHE = ("cache-drafts", "free-in-flight", "free-in-flight-stream", "no-evict", "prefix-cache-aligned", "prefix-cache-any-reuse",
         "prefix-cache-cancel-in-flight", "prefix-cache-continue", "prefix-cache-evict", "prefix-cache-parallel",
         "prefix-cache-speculate", "prefix-cache-warm", "prefix-v1-async", "prefix-v1-cache-drafts", "prefix-v1-cancel-in-flight",
         "prefix-v1-no-evict", "prefix-v1-step-fenced", "prefix-v1-step-fenced-async", "prefix-v1-touch-after-alloc",
         "sampling-prefix-cache", "touch-after-alloc", "vllm-v1-parallel-async", "vllm-v1-parallel-stream")


def figures(result) -> dict:
    x = result.exploration
    return {"states": x.states, "transitions": x.transitions, "depth": x.depth, "peak": x.peak, "copies": x.cost_range,
            "hits": x.hits_range, "steady": x.steady, "complete": x.complete,
            "verdicts": {k: (str(v.outcome), v.length) for k, v in result.verdicts.items()}}


def measures(result) -> dict:
    """What symmetry keeps: every figure but the counts of states, transitions and depth."""
    return {k: v for k, v in figures(result).items() if k not in ("states", "transitions", "depth")}


def agree(scenario, explicit=None, orbits=None, **limits) -> None:
    """The frontier engine against the explorer without reductions
    (`explicit`, where it was run already) and, with symmetry, against its
    orbits (`orbits`: the explorer's search with symmetry alone)."""
    explicit = explicit if explicit is not None else check(scenario, symmetry=False, por=False, **limits)
    frontier = check(scenario, engine="frontier", symmetry=False, por=False, **limits)
    assert figures(frontier) == figures(explicit)
    assert frontier.summary == explicit.summary
    replays(frontier)
    if frontier.peak_trace is not None:
        assert frontier.peak_trace.length == explicit.peak_trace.length
    symmetric = check(scenario, engine="frontier", por=False, **limits)
    orbits = orbits if orbits is not None else check(scenario, por=False, **limits)      # an orbit is stored at least once
    assert symmetric.exploration.states >= orbits.exploration.states
    # the default adds partial-order reduction where settled completions apply (else it is `symmetric`'s search)
    defaults = (check(scenario, engine="frontier", **limits),) if Ample(ProtocolModel(scenario), completions=True).completions \
        else ()
    for reduced in (symmetric, *defaults):
        assert measures(reduced) == measures(explicit)
        assert reduced.summary == explicit.summary
        replays(reduced)
        if reduced.peak_trace is not None:
            assert reduced.peak_trace.length == explicit.peak_trace.length


def replays(frontier) -> None:
    """Its counterexamples replay, each as long as its verdict says."""
    assert frontier.to_json()["engine"] == "frontier"
    for verdict in frontier.verdicts.values():
        if verdict.counterexample is not None:
            replayed = replay(verdict.counterexample)
            assert replayed.ok, replayed.message
            assert verdict.counterexample.length == verdict.length


def same_reduction(scenario) -> None:
    """Partial-order reduction without symmetry: the rows' ample sets are the
    explorer's, state by state, so where the reduced search of either
    engine runs to its end without a violation, both store the same
    states and take the same transitions; every verdict and shortest
    length agrees with the explorer's whatever the reduced searches find."""
    explicit = check(scenario, symmetry=False, por=True)
    frontier = check(scenario, engine="frontier", symmetry=False, por=True)
    assert measures(frontier) == measures(explicit)
    first, mine = explicit.searches[0], frontier.searches[0]
    if first.stop is None and not first.violations and mine.stop is None and not mine.violations:
        assert (mine.states, mine.transitions) == (first.states, first.transitions)


def covered() -> list:
    """The shipped scenarios the frontier engine covers."""
    return [pytest.param(path, id=path.stem) for path in sorted(SPECS.glob("*.toml")) if refusal(load_scenario(path)) is None]


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("path", covered())
def test_agrees_on_shipped_scenarios(path, searched):
    agree(load_scenario(path), searched(path, symmetry=False, por=False), searched(path, por=False))


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("path", covered())
def test_partial_order_rows_are_the_explorers(path):
    same_reduction(load_scenario(path))


def test_covers_every_protocol_file_scenario():
    assert len(covered()) >= 48 + len(CACHE)
    assert {p.values[0].stem for p in covered()} >= set(CACHE)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scenarios(protocols=tuple(builtin_names(cache=False)), max_block=3, max_prompt=5, max_branches=3, max_ops=2,
                 reuses=("lifo", "fifo", "any")))
def test_agrees_on_random_scenarios(scenario):
    assume(refusal(scenario) is None)
    bound = check(scenario, max_states=3_000, symmetry=False, por=False)
    assume(bound.exploration.complete)
    agree(scenario)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scenarios(protocols=("vllm-bmv1", "vllm-bmv2"), max_block=3, max_prompt=5, max_branches=3, max_ops=2))
def test_agrees_under_the_scheduler_lock(scenario):
    """Protocols with atomic paths: while a branch is inside one (short of
    its wait), no other branch moves, in rows as in the model."""
    assume(refusal(scenario) is None)
    bound = check(scenario, max_states=3_000, symmetry=False, por=False)
    assume(bound.exploration.complete)
    agree(scenario)
    same_reduction(scenario)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cache_scenarios(most=2, longest=3))
def test_agrees_on_random_cache_scenarios(scenario):
    """Prefix caching without reductions: keys, evictions, lookups and
    hits, admissions (atomic, `after`), prefills, cache-full and its bug
    variants, speculation, cancels, the three reuse orders and device
    models (with reductions: the slow test below)."""
    assume(refusal(scenario) is None)
    explicit = check(scenario, max_states=1_000, symmetry=False, por=False)
    assume(explicit.exploration.complete)
    frontier = check(scenario, engine="frontier", symmetry=False, por=False)
    assert figures(frontier) == figures(explicit)
    assert frontier.summary == explicit.summary
    replays(frontier)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cache_scenarios(most=3, longest=4))
def test_agrees_on_random_cache_scenarios_with_reductions(scenario):
    """The same, and with symmetry (keys renamed with blocks and tokens) and
    partial-order reduction (the cache's conditions): every verdict, length
    and measure, and without symmetry the explorer's reduced states."""
    assume(refusal(scenario) is None)
    bound = check(scenario, max_states=3_000, symmetry=False, por=False)
    assume(bound.exploration.complete)
    agree(scenario)
    same_reduction(scenario)


@st.composite
def programs(draw):
    """Scenarios with branch programs: forks and speculation (tests/conftest.program_branches)."""
    return make_scenario(draw(st.integers(1, 3)), draw(st.integers(0, 4)), program_branches(draw, st),
                         draw(st.sampled_from(builtin_names(cache=False))), device=draw(st.sampled_from(DEVICES)),
                         reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs())
def test_agrees_on_random_programs(scenario):
    """Forks (incref-all, share, unborn children, cancelled with a cancelled
    parent) and speculation (verify's choices, rewind, trim, a sequence
    that depends on the run)."""
    assume(refusal(scenario) is None)
    bound = check(scenario, max_states=3_000, symmetry=False, por=False)
    assume(bound.exploration.complete)
    agree(scenario)


def test_max_states_is_a_partial_result():
    scenario = make_scenario(2, 3, [(2, False), (2, False)], "cow")
    partial = check(scenario, engine="frontier", max_states=50)
    assert not partial.complete and partial.exploration.states == 50
    assert partial.exploration.stop.kind.name == "STATES"


def test_max_memory_stops_with_a_partial_result():
    scenario = make_scenario(2, 3, [(2, True), (2, False), (1, False)], "cow")
    partial = check(scenario, engine="frontier", max_memory_mib=1)
    assert not partial.complete and partial.exploration.stop.kind.name == "MEMORY"


def test_refuses_what_it_does_not_cover_in_one_line():
    with pytest.raises(SpecError) as refused:
        check(SPECS / "offload-kv-connector.toml", engine="frontier")
    assert "a transfer scenario" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(SpecError, match="uses the step 'store'"):
        check(SPECS / "pd-consumer-ahead-local.toml", engine="frontier")
    with pytest.raises(SpecError, match="allocator code"):
        check(SPECS / "engine-code.toml", engine="frontier")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(1, 2 ** 64 - 1), max_size=40), max_size=8),
       st.lists(st.integers(1, 2 ** 64 - 1), max_size=40))
def test_hash_table_maps_what_was_inserted(batches, probes):
    """The open-addressing table against a dict: batches inserted one after
    another (it grows from 4 slots), then every stored hash and some others looked up."""
    import numpy as np

    from cowcheck.engines.hashtable import HashTable
    table, stored = HashTable(np, capacity=4), {}
    for batch in batches:
        fresh = list(dict.fromkeys(h for h in batch if h not in stored))
        ids = list(range(len(stored), len(stored) + len(fresh)))
        table.insert(np.array(fresh, dtype=np.uint64), np.array(ids, dtype=np.int64))
        stored.update(zip(fresh, ids))
    asked = list(stored) + probes
    found = table.lookup(np.array(asked, dtype=np.uint64)).tolist()
    assert found == [stored.get(h, -1) for h in asked]


@pytest.mark.parametrize("name", ["cow-fork", "cow-speculate", "vllm-bmv1-streams", "cow-any-reuse", "double-decrement",
                                  "prefix-cache-parallel", "cache-drafts"])
def test_cupy_agrees_with_numpy(name):
    """The same array code on CuPy (a GPU; .ci/gpu runs this, where a
    missing GPU fails instead of skipping)."""
    from tests.test_traces_pool import _gpu
    _gpu()
    for symmetry in (False, True):
        on_host = check(SPECS / f"{name}.toml", engine="frontier", symmetry=symmetry)
        on_gpu = check(SPECS / f"{name}.toml", engine="frontier", array="cupy", symmetry=symmetry)
        assert figures(on_gpu) == figures(on_host)


def test_a_check_without_an_engine_runs_the_frontier_engine_from_five_branches():
    """cowcheck.engines.default: the frontier engine for a covered protocol
    file with five branches or more, unless an option only the explorer
    has is asked for; the explorer for fewer branches (every shipped
    scenario) and for what the frontier engine refuses."""
    from cowcheck.engines.default import FRONTIER_BRANCHES, default_engine
    from cowcheck.engines.options import SearchOptions
    five = make_scenario(2, 1, [(1, False)] * FRONTIER_BRANCHES, "cow")
    assert check(five, max_states=50).to_json()["engine"] == "frontier"
    assert default_engine(five, SearchOptions(compact=True)).value == "explicit"
    assert default_engine(make_scenario(2, 1, [(1, False)] * (FRONTIER_BRANCHES - 1), "cow"), SearchOptions()).value \
        == "explicit"
    assert all(len(load_scenario(p).branches) < FRONTIER_BRANCHES for p in SPECS.glob("*.toml"))
    cached = make_scenario(2, 1, [{"appends": 1}] * FRONTIER_BRANCHES, "prefix-cache", cache=True)
    assert default_engine(cached, SearchOptions()).value == "frontier"
    assert default_engine(replace(cached, host_pool=2), SearchOptions()).value == "explicit"     # transfers: refused
