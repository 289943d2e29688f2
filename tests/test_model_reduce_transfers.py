"""Reductions in transfer scenarios (docs/explanation/reductions.md#transfers):
symmetry renames host blocks, transfers in flight and pending reports too,
and never interchanges requests whose `source` or `sink` differ;
partial-order reduction reads the transfers and reports. Each reduction
alone, both together and the default choice report the unreduced search's
verdicts, shortest lengths and measures (peak, host peak, transfers fewest
and most, copies, hits, steady blocks), on random transfer scenarios and on
every shipped one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cowcheck import check
from cowcheck.bench.table import SCENARIOS, bench_scenario
from conftest import SPECS, transfer_scenarios
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.scenario import load_scenario, scenario_from_dict
from cowcheck.model.stepkinds import TRANSFER_STEPS
from cowcheck.model.system import ProtocolModel
from test_model_reduce import keeps_reachability, measures, same_as_without_partial_order, settled_search
from test_model_reduce import test_an_ample_step_commutes_with_every_other_enabled_action as commutes
from test_model_reduce import test_representative_is_canonical as canonical

#: the shipped transfer scenarios (S1-S8 and their variants)
#: the shipped transfer scenarios of protocol files (scheduler code gets no reduction)
TRANSFER_SPECS = [p for p in sorted((SPECS / "scenarios").glob("*.toml"))
                  if load_scenario(p).transfers and load_scenario(p).scheduler is None]
#: the checks a reduction must agree with the unreduced search on: (label, options)
REDUCTIONS = (("symmetry", {"symmetry": True, "por": False}), ("partial-order", {"symmetry": False, "por": True}),
              ("both", {"symmetry": True, "por": True}), ("default", {}))


def agrees(scenario, max_states=None) -> None:
    """Every reduction, and the default, reports the unreduced search's
    verdicts, shortest lengths and measures, storing no more states; the
    default also writes the same traces; the first of --por's searches on
    its own keeps whether some violation is reachable."""
    plain = check(scenario, max_states=max_states, symmetry=False, por=False)
    if max_states is None:
        assert plain.exploration.complete
    else:
        assume(plain.exploration.complete)
    for label, options in REDUCTIONS:
        reduced = check(scenario, **options)
        assert measures(reduced) == measures(plain), label
        assert reduced.exploration.states <= plain.exploration.states, label
    same_as_without_partial_order(scenario)
    keeps_reachability(settled_search(scenario, symmetry=True), plain)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(transfer_scenarios(most=3, longest=3))
def test_every_reduction_agrees_with_the_unreduced_search_on_random_transfer_scenarios(scenario):
    agrees(scenario, max_states=8_000)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(transfer_scenarios(most=2, longest=3))
def test_reductions_agree_on_small_random_transfer_scenarios(scenario):
    """The quick form of the above (not marked slow)."""
    agrees(scenario, max_states=2_000)


@pytest.mark.parametrize("path", TRANSFER_SPECS, ids=lambda p: p.stem)
def test_every_reduction_agrees_on_every_shipped_transfer_scenario(path):
    agrees(load_scenario(path))


@pytest.mark.parametrize("label", [label for label, spec in SCENARIOS.items() if isinstance(spec, dict)])
def test_the_bench_rows_for_transfers_are_transfer_scenarios_every_reduction_agrees_on(label):
    """`cowcheck bench`'s rows for S1, S2 and S6 (one more request each)."""
    scenario = bench_scenario(label)
    assert scenario.transfers and scenario.name == label and len(scenario.branches) == 4
    agrees(scenario)


@settings(max_examples=60, deadline=None)
@given(transfer_scenarios(most=3), st.randoms(use_true_random=False))
def test_an_ample_step_commutes_with_every_other_action_in_transfer_scenarios(scenario, rnd):
    """tests/test_model_reduce.py's commutation check (C1 and C2 step by
    step: the same states, facts and judgements in either order) on
    transfer scenarios alone: transfer completions and failures, reports
    and lease expiries are the other actions there."""
    commutes.hypothesis.inner_test(scenario, rnd)


@settings(max_examples=30, deadline=None)
@given(transfer_scenarios(most=3), st.randoms(use_true_random=False))
def test_the_representative_of_a_transfer_state_is_canonical(scenario, rnd):
    """tests/test_model_reduce.py's canonicity check (every state and any
    renaming of it get the same representative, itself a fixed point) on
    transfer scenarios alone: its renamings move host blocks, transfers in
    flight and pending reports too."""
    canonical.hypothesis.inner_test(scenario, rnd)


def _scenario(**changes) -> object:
    data = {"cache": "prefix", "block_size": 2, "pool": 4, "host_pool": 2,
            "branch": [{"prompt": 3}, {"prompt": 3}, {"prompt": 3}], **changes}
    return scenario_from_dict(data, "<scenario>", SPECS / "protocols", "s")


def test_requests_with_other_roles_are_never_interchanged():
    assert Symmetry(_scenario()).classes == [(0, 1, 2)]
    roles = [{"prompt": 3}, {"prompt": 3, "source": "remote"}, {"prompt": 3, "sink": "remote"}, {"prompt": 3}]
    assert Symmetry(_scenario(branch=roles)).classes == [(0, 3)]
    consumers = [{"prompt": 3, "source": "remote"}] * 2 + [{"prompt": 3}]
    assert Symmetry(_scenario(branch=consumers)).classes == [(0, 1)]


def test_under_any_reuse_a_transfer_scenario_keeps_its_block_ids():
    """`store-free` stores the free list's keyed blocks in its order, which
    `any` reuse keeps sorted by id: renaming ids is no symmetry there."""
    assert Symmetry(_scenario(reuse="lifo")).blocks_enabled
    assert not Symmetry(_scenario(reuse="any")).blocks_enabled
    assert not ProtocolModel(_scenario(reuse="any")).up_to_block_ids().twins


def test_transfer_launches_are_never_explored_alone_but_a_wait_for_reports_may_be():
    """A step that launches a transfer touches the host tier, the GPU free
    list or what another request reaches; `wait-transfers` changes nothing
    and, once enabled, stays so (as `wait-kernel` does)."""
    model = ProtocolModel(_scenario(device="async", transfer="nic"))
    ample = Ample(model)
    assert ample.enabled and "wait-transfers" in ample.local_steps
    state = model.init_state()
    seen = set()
    for step in model.protocol.admit + model.protocol.finish:
        if step.op in TRANSFER_STEPS:
            seen.add(step.op)
            assert ample._local(state, 0, state.branches[0], step) == (step.op == "wait-transfers"), step.op
    assert seen == {"host-lookup", "load", "recv", "wait-transfers", "store", "send"}
