"""The refined representative (classes of more than three branches): it is
canonical at up to eight branches, agrees with the unreduced search, and
never falls back to trying every order on the benchmark's states; the
explorer's profiling hook changes nothing but the timing."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowcheck import check
from cowcheck.bench.branches import measure_branches, measure_floor, measure_profile
from cowcheck.bench.child import in_child
from cowcheck.engines.explorer import Explorer
from cowcheck.engines.invariants import INVARIANTS
from cowcheck.model.reduce import refine as refine_module
from cowcheck.model.protocol import builtin_names
from cowcheck.model.scenario import DEVICES, make_scenario
from cowcheck.model.state import allocated
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.system import ProtocolModel
from conftest import cache_scenarios
from test_model_reduce import measures, repeated_cache_scenarios, scramble


@st.composite
def wide_scenarios(draw):
    """Four to eight branches with one program (and perhaps one more branch)."""
    spec = (draw(st.integers(0, 2)), draw(st.booleans()))
    branches = [spec] * draw(st.integers(4, 8)) + [(draw(st.integers(0, 1)), False)] * draw(st.integers(0, 1))
    return make_scenario(draw(st.integers(1, 4)), draw(st.integers(0, 6)), branches, draw(st.sampled_from(builtin_names(cache=False))),
                         device=draw(st.sampled_from(DEVICES)), reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


def wide_cache_scenarios():
    """Random cache scenarios with one request repeated 3 to 6 more times
    (plain requests only: so that it forms a class of four or more)."""
    return repeated_cache_scenarios(copies=6, least=3, most=2).filter(lambda s: not Symmetry(s).exhaustive)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(wide_scenarios(), wide_cache_scenarios()), st.randoms(use_true_random=False))
def test_refined_representative_is_canonical_up_to_eight_branches(scenario, rnd):
    model, sym = ProtocolModel(scenario), Symmetry(scenario)
    assert not sym.exhaustive
    state = model.init_state()
    for _ in range(60):
        rep = sym.representative(state)
        assert sym.representative(rep) == rep
        for _ in range(2):
            assert Symmetry(scenario).representative(scramble(state, scenario, rnd)) == rep
        options = [t for t in model.successors(state) if t.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


def test_eight_identical_branches_at_the_fork_cost_one_relabelling(monkeypatch):
    scenario = make_scenario(4, 6, [(1, False)] * 8, "cow")
    sym = Symmetry(scenario)
    calls = []
    relabel = sym._relabel
    monkeypatch.setattr(sym, "_relabel", lambda state, order: calls.append(order) or relabel(state, order))
    state = ProtocolModel(scenario).init_state()
    assert sym.representative(state) == state
    assert len(calls) == 1


@pytest.mark.parametrize("protocol, branches, pool, device", [
    ("cow", [(1, False)] * 4, 3, "async"),
    ("cow", [(0, True)] * 5, None, "async"),
    ("premature-decrement", [(1, False)] * 4, 2, "async"),
    ("premature-decrement", [(1, False)] * 3 + [(1, True)], 2, "streams"),
])
def test_wide_scenarios_agree_with_the_unreduced_search(protocol, branches, pool, device):
    scenario = make_scenario(2, 1, branches, protocol, pool=pool, device=device)
    plain = check(scenario, symmetry=False, por=False)
    reduced = check(scenario, symmetry=True, por=False)
    ordered = check(scenario, symmetry=True, por=True)
    assert plain.exploration.complete and reduced.exploration.complete
    assert measures(reduced) == measures(plain) == measures(ordered)
    assert reduced.exploration.states < plain.exploration.states


#: cache scenarios with four interchangeable requests, small enough to search without symmetry
WIDE_CACHE = [
    ("prefix-cache", [{"prompt": 3}] * 4, 2, "stream", "fifo"),
    ("prefix-cache", [{"prompt": 3, "appends": 1}] * 4, 3, "async", "lifo"),
    ("vllm-v1", [{"prompt": 2, "appends": 1}] * 4, 2, "async", "lifo"),
    ("no-evict", [{"prompt": 3}] * 4, 2, "async", "any"),
    ("free-in-flight", [{"prompt": 1, "may_cancel": True}] * 4, 2, "async", "lifo"),
    ("prefix-cache", [{"prompt": 3, "appends": 1}, {"prompt": ["p0", "p1", "a1"], "after": "a"}]
     + [{"prompt": ["p0", "p1", "x0"], "after": "a"}] * 4, 3, "async", "lifo"),
]


@pytest.mark.parametrize("protocol, requests, pool, device, reuse", WIDE_CACHE,
                         ids=["prefix-cache-stream", "prefix-cache-appends", "vllm-v1", "no-evict-any", "free-in-flight",
                              "later-turns"])
def test_wide_cache_scenarios_agree_with_the_unreduced_search(protocol, requests, pool, device, reuse):
    """Four interchangeable requests (the refined representative, mirrored
    moves skipped): the same verdicts, lengths, peak, copies, hits and
    steady count as the unreduced search, from fewer states."""
    scenario = make_scenario(2, 0, requests, protocol, pool=pool, device=device, reuse=reuse, cache=True)
    assert not Symmetry(scenario).exhaustive
    plain = check(scenario, symmetry=False)
    reduced = check(scenario, symmetry=True)
    assert plain.exploration.complete and reduced.exploration.complete
    assert measures(reduced) == measures(plain)
    assert reduced.exploration.states < plain.exploration.states
    full, skipped = _explore(scenario, False), _explore(scenario, True)
    assert skipped.states == full.states and skipped.depth == full.depth
    assert {k: v.length for k, v in skipped.violations.items()} == {k: v.length for k, v in full.violations.items()}
    assert (skipped.peak, skipped.cost_range, skipped.steady_values) == (full.peak, full.cost_range, full.steady_values)


def test_a_mirrored_request_moves_to_the_orbits_of_an_earlier_one():
    scenario = make_scenario(2, 0, [{"prompt": 3, "appends": 1}] * 5, "prefix-cache", cache=True)
    checked = _check_mirrored_on_walks(scenario, random.Random(5), walks=6, steps=60)
    assert checked > 20


def test_no_fallback_to_enumeration_on_the_benchmark_states(monkeypatch):
    """Every tie that the signatures and anchors leave is a run of twins on
    6 branches x 1 append (random walks): nothing is enumerated."""
    monkeypatch.setattr(refine_module, "_arrangements", lambda classes: pytest.fail(f"enumerated {classes}"))
    scenario = make_scenario(4, 6, [(1, False)] * 6, "cow")
    model, sym, rnd = ProtocolModel(scenario), Symmetry(scenario), random.Random(0)
    for _ in range(20):
        state = model.init_state()
        while True:
            sym.representative(state)
            options = [t.state for t in model.successors(state) if t.state is not None]
            if not options:
                break
            state = rnd.choice(options)


def test_profiling_changes_nothing_but_the_timing():
    scenario = make_scenario(2, 3, [(1, False)] * 5, "cow", pool=3)
    model = ProtocolModel(scenario)

    def run(profile):
        explorer = Explorer(model, INVARIANTS, gauge=allocated, steady=model.is_steady, cost=model.is_copy_launch,
                            representative=Symmetry(scenario).representative, profile=profile)
        return explorer, explorer.run()

    plain_explorer, plain = run(False)
    profiled_explorer, profiled = run(True)
    assert plain_explorer.times is None
    assert (profiled.states, profiled.transitions, profiled.peak, profiled.cost_range) == \
        (plain.states, plain.transitions, plain.peak, plain.cost_range)
    times = profiled_explorer.times
    assert times is not None and set(times) == set(Explorer.PARTS)
    assert times["successors"] > 0 and times["canonical form"] > 0 and times["invariants"] > 0
    assert sum(times.values()) <= profiled.seconds
    assert profiled_explorer.path_to(profiled.peak_state) == plain_explorer.path_to(plain.peak_state)


def _sleep(args, conn):
    time.sleep(args)
    conn.send({"slept": args})


def test_a_bench_row_over_its_limit_is_stopped():
    assert in_child(_sleep, 0.0, limit=5) == {"slept": 0.0}
    start = time.perf_counter()
    assert in_child(_sleep, 30.0, limit=1) is None
    assert time.perf_counter() - start < 10


def test_a_bench_row_at_its_limit_reports_what_it_explored():
    """--branches and --profile rows stop their search at the limit and still
    give the per-state figures of the part they explored."""
    row = in_child(measure_branches, (8, 1, False, 1.0), limit=120)
    assert row is not None and row["complete"] is False and row["states"] > 0
    row = in_child(measure_profile, (8, 1, 1.0), limit=120)
    assert row is not None and row["complete"] is False and row["states"] > 0
    assert row["seconds"]["successors"] > 0 and row["seconds"]["canonical form"] > 0


def _explore(scenario, mirror: bool):
    model, sym = ProtocolModel(scenario), Symmetry(scenario)
    explorer = Explorer(model, INVARIANTS, gauge=allocated, steady=model.is_steady, cost=model.is_copy_launch,
                        representative=sym.representative, mirror=sym.unmirrored if mirror else None)
    return explorer.run()


@pytest.mark.parametrize("protocol, branches, pool, device, reuse", [
    ("cow", [(1, False)] * 4, None, "async", "lifo"),
    pytest.param("cow", [(1, True)] * 4, None, "streams", "fifo", marks=pytest.mark.slow),
    ("cow", [(0, True)] * 5, None, "async", "any"),
    ("premature-decrement", [(1, False)] * 4, 3, "async", "lifo"),
    pytest.param("publish-before-copy", [(1, False)] * 4, None, "stream", "lifo", marks=pytest.mark.slow),
    pytest.param("double-decrement", [(1, False)] * 4, None, "async", "any", marks=pytest.mark.slow),
])
def test_skipping_mirrored_moves_keeps_every_state_verdict_and_measure(protocol, branches, pool, device, reuse):
    """Moves of a branch that mirrors a twin's lead to the same orbits: the
    search without them stores the same states and finds the same
    violations at the same depths, peak, steady values and copy range."""
    scenario = make_scenario(2, 1, branches, protocol, pool=pool, device=device, reuse=reuse)
    full, skipped = _explore(scenario, False), _explore(scenario, True)
    assert skipped.states == full.states and skipped.depth == full.depth
    assert {k: v.length for k, v in skipped.violations.items()} == {k: v.length for k, v in full.violations.items()}
    assert (skipped.peak, skipped.cost_range, skipped.steady_values) == (full.peak, full.cost_range, full.steady_values)
    assert skipped.transitions < full.transitions


def _moves_by_actor(model, sym, state) -> dict[str, set]:
    out: dict[str, set] = {}
    for tr in model.successors(state):
        out.setdefault(tr.action.actor, set()).add(
            (tr.action.step, tr.facts != (), None if tr.state is None else sym.representative(tr.state)))
    return out


def _check_mirrored_on_walks(scenario, rnd, walks: int, steps: int) -> int:
    """Random walks over representatives: every branch `mirrored` names has
    an earlier branch whose moves reach the same orbits by the same steps.
    Returns how many mirrored branches were checked."""
    model, sym = ProtocolModel(scenario), Symmetry(scenario)
    checked = 0
    for _ in range(walks):
        state = sym.representative(model.init_state())
        for _ in range(steps):
            moves = _moves_by_actor(model, sym, state)
            for i in sym.mirrored(state):
                mine = moves.get(scenario.branch_name(i), set())
                assert any(moves.get(scenario.branch_name(x), set()) == mine for x in range(i)), (i, state)
                checked += 1
            options = [t.state for t in model.successors(state) if t.state is not None]
            if not options:
                break
            state = sym.representative(rnd.choice(options))
    return checked


@pytest.mark.parametrize("n", [4, 6, 8])
def test_a_mirrored_branch_moves_to_the_orbits_of_an_earlier_one(n):
    checked = _check_mirrored_on_walks(make_scenario(4, 6, [(1, False)] * n, "cow"), random.Random(n), walks=6, steps=60)
    assert checked > 20


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(wide_scenarios(), wide_cache_scenarios()), st.randoms(use_true_random=False))
def test_mirrored_branches_on_random_scenarios(scenario, rnd):
    _check_mirrored_on_walks(scenario, rnd, walks=1, steps=40)


def test_eight_branches_at_the_fork_move_as_one():
    scenario = make_scenario(4, 6, [(1, False)] * 8, "cow")
    sym = Symmetry(scenario)
    state = ProtocolModel(scenario).init_state()
    assert sym.mirrored(state) == list(range(1, 8))
    assert {tr.action.actor for tr in sym.unmirrored(state, ProtocolModel(scenario).successors(state))} == {"a"}


def test_the_floor_row_looks_up_the_same_search():
    """`cowcheck bench --floor`: the second search, with the canonical form
    looked up, runs (it would raise KeyError on a state the first did not
    see) and the first explores the scenario in full."""
    row = in_child(measure_floor, (4, 1, 60.0), limit=300)
    assert row is not None and row["complete"] and row["states"] == 6059
    assert row["looked_up_seconds"] is not None and row["looked_up_seconds"] > 0


# -- twin free blocks under `any` reuse (cowcheck.model.block.twin_classes) ----------
@st.composite
def any_reuse_scenarios(draw):
    """Random scenarios with `any` reuse, cache or not, with room to spare
    in the pool (no pool given), so that some free blocks are twins."""
    if draw(st.booleans()):
        scenario = draw(cache_scenarios(most=3, longest=3, tight=False))
        return replace(scenario, reuse="any")
    branches = [(draw(st.integers(0, 2)), draw(st.booleans())) for _ in range(draw(st.integers(1, 3)))]
    return make_scenario(draw(st.integers(1, 3)), draw(st.integers(0, 4)), branches,
                         draw(st.sampled_from(builtin_names(cache=False))), device=draw(st.sampled_from(DEVICES)), reuse="any")


def _without_twins(monkeypatch):
    monkeypatch.setattr(ProtocolModel, "up_to_block_ids", lambda self: self)


def _everything(result) -> tuple:
    """Every figure of a check, and its traces to the last byte."""
    traces = {k: v.counterexample.to_json() for k, v in result.verdicts.items() if v.counterexample is not None}
    peak = result.peak_trace.to_json() if result.peak_trace is not None else None
    return measures(result), result.exploration.states, result.exploration.depth, traces, peak


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(any_reuse_scenarios())
def test_taking_one_of_each_set_of_twin_free_blocks_changes_no_figure_and_no_trace(scenario):
    """With block-id symmetry, an allocation under `any` reuse takes one
    free block of each set that differ only in their ids: the search stores
    the same states and finds the same verdicts, lengths, measures and
    traces (byte for byte), from no more transitions.

    The search with twins runs first: it takes a subset of the successors
    (ProtocolModel.up_to_block_ids), so it reaches no more states than the
    search with every choice, and where it stops at the bound that one
    would too. It is then not run: with every choice it can take hundreds
    of thousands of transitions to reach the bound (on the examples this
    test drew before, one such search of a cache-drafts scenario took 48 s
    of its 60 s, to be thrown away)."""
    twins = check(scenario, max_states=5_000)
    if not twins.exploration.complete:
        return
    with pytest.MonkeyPatch.context() as patch:
        _without_twins(patch)
        every = check(scenario, max_states=5_000)
    assert every.exploration.complete
    assert _everything(twins) == _everything(every)
    assert twins.exploration.transitions <= every.exploration.transitions


def test_a_roomy_pool_under_any_reuse_no_longer_multiplies_the_successors():
    """Three requests of one-token blocks and no pool bound: each admission
    may take its 3 or 4 blocks from a dozen free ones in any order
    (thousands of orders), nearly all of them twins of each other."""
    branches = [{"prompt": ["p0", "p1", "p1"], "appends": 1}, {"prompt": ["p1", "x0", "p3", "p1"], "appends": 3},
                {"prompt": ["p0", "p1", "x0"], "appends": 2}]
    scenario = make_scenario(1, 0, branches, "prefix-cache", device="stream", reuse="any", cache=True)
    x = check(scenario, max_states=3_000).exploration
    assert x.transitions < 3 * x.states      # every order: 1,263,949 transitions for these 3,000 states


def test_twin_classes_keep_referenced_and_distinct_blocks_apart():
    from cowcheck.model.block import twin_classes, twin_orders
    from cowcheck.model.state import Block
    scenario = make_scenario(2, 2, [(1, False)], "cow", reuse="any", pool=6)
    state = ProtocolModel(scenario).init_state()
    empty, stale = Block(0, 0, (None, None)), Block(0, 0, ("x", None))
    blocks = (state.blocks[0], stale, empty, stale, empty, empty)
    table = state.branches[0]._replace(working=(0, 5), published=(0, 5))       # 5 is free, yet in a table
    state = state._replace(blocks=blocks, free=(1, 2, 3, 4, 5), branches=(table,))
    assert twin_classes(state) == [(1, 3), (2, 4), (5,)]
    assert twin_orders(state, 2) == [(1, 2), (1, 3), (1, 5), (2, 1), (2, 4), (2, 5), (5, 1), (5, 2)]
