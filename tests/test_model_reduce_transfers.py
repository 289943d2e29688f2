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
from conftest import SPECS, transfer_scenarios
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.scenario import load_scenario, scenario_from_dict
from cowcheck.model.state import Block, Copy, HostBlock, Kernel, Move, Report, State, Tier
from cowcheck.model.stepkinds import TRANSFER_STEPS
from cowcheck.model.system import ProtocolModel
from test_model_reduce import keeps_reachability, measures, same_as_without_partial_order, settled_search
from test_model_reduce import test_an_ample_step_commutes_with_every_other_enabled_action as commutes

#: the shipped transfer scenarios (S1-S8 and their variants)
TRANSFER_SPECS = [p for p in sorted((SPECS / "scenarios").glob("*.toml")) if load_scenario(p).transfers]
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


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(transfer_scenarios(most=2, longest=3))
def test_reductions_agree_on_small_random_transfer_scenarios(scenario):
    """The quick form of the above (not marked slow)."""
    agrees(scenario, max_states=3_000)


@pytest.mark.parametrize("path", TRANSFER_SPECS, ids=lambda p: p.stem)
def test_every_reduction_agrees_on_every_shipped_transfer_scenario(path):
    agrees(load_scenario(path))


@settings(max_examples=60, deadline=None)
@given(transfer_scenarios(most=3), st.randoms(use_true_random=False))
def test_an_ample_step_commutes_with_every_other_action_in_transfer_scenarios(scenario, rnd):
    """tests/test_model_reduce.py's commutation check (C1 and C2 step by
    step: the same states, facts and judgements in either order) on
    transfer scenarios alone: transfer completions and failures, reports
    and lease expiries are the other actions there."""
    commutes.hypothesis.inner_test(scenario, rnd)


def scramble(state: State, scenario, rnd) -> State:
    """The same transfer-scenario state under random names: GPU blocks and
    host blocks permuted (each free list keeps its order, as `lifo` and the
    host tier's rule read it; `any` keeps the GPU list sorted and, there,
    its ids), and requests of one symmetry class permuted with their tokens,
    wherever those lie: slots, keys, sequences, kernels, transfers, reports."""
    sym = Symmetry(scenario)
    blocks = list(range(len(state.blocks)))
    if sym.blocks_enabled:
        rnd.shuffle(blocks)                                   # blocks[old] = new
    tier = state.tier
    assert tier is not None
    hosts = list(range(len(tier.host)))
    if sym.blocks_enabled:
        rnd.shuffle(hosts)
    order = list(range(len(state.branches)))                  # order[new] = old
    for members in sym.classes:
        shuffled = list(members)
        rnd.shuffle(shuffled)
        for slot, old in zip(members, shuffled):
            order[slot] = old
    new_of = {old: new for new, old in enumerate(order)}
    tokens = {a: b for new, old in enumerate(order) for a, b in zip(scenario.tokens(old), scenario.tokens(new))}

    def t(seq):
        return tuple(tokens.get(x, x) for x in seq)

    m, h = blocks.__getitem__, hosts.__getitem__
    new_blocks: list = [None] * len(blocks)
    for old, blk in enumerate(state.blocks):
        new_blocks[m(old)] = Block(blk.refcount, blk.holds, t(blk.slots), None if blk.key is None else t(blk.key))
    new_host: list = [None] * len(hosts)
    for old, hb in enumerate(tier.host):
        new_host[h(old)] = HostBlock(hb.pins, t(hb.slots), None if hb.key is None else t(hb.key))
    branches = [state.branches[old] for old in order]
    branches = [b._replace(tail=None if b.tail is None else m(b.tail), new=None if b.new is None else m(b.new),
                           working=tuple(map(m, b.working)), published=tuple(map(m, b.published)),
                           hits=tuple(map(m, b.hits)), loads=tuple(map(m, b.loads)), host_hits=tuple(map(h, b.host_hits)),
                           seq=t(b.seq)) for b in branches]

    def move(q: Move) -> Move:
        return q._replace(owner=new_of[q.owner], block=m(q.block), host=None if q.host is None else h(q.host),
                          key=None if q.key is None else t(q.key), tokens=t(q.tokens))

    queue = tuple(Copy(m(q.src), m(q.dst), q.n) if type(q) is Copy else move(q) if type(q) is Move else
                  Kernel(new_of[q.branch], q.pos, tokens.get(q.token, q.token), tuple(map(m, q.snapshot)),
                         t(q.expected), q.span) for q in state.queue)
    free = tuple(map(m, state.free))
    if scenario.reuse == "any":
        free = tuple(sorted(free))
    new_tier = Tier(tuple(new_host), tuple(map(h, tier.free)), tuple(Report(move(r.move), r.ok) for r in tier.reports))
    return State(tuple(new_blocks), free, tuple(branches), queue, None, new_tier)


@settings(max_examples=30, deadline=None)
@given(transfer_scenarios(most=3), st.randoms(use_true_random=False))
def test_the_representative_of_a_transfer_state_is_canonical(scenario, rnd):
    """Walk randomly; every state and any renaming of it (host blocks,
    transfers and reports included) get the same representative, which is
    itself a fixed point."""
    model, sym = ProtocolModel(scenario), Symmetry(scenario)
    state = model.init_state()
    for _ in range(40):
        rep = sym.representative(state)
        assert sym.representative(rep) == rep
        assert sym.representative(scramble(state, scenario, rnd)) == rep
        assert rep.tier is not None and len(rep.tier.free) == len(state.tier.free)
        assert len(rep.tier.reports) == len(state.tier.reports) and len(rep.queue) == len(state.queue)
        options = [tr for tr in model.successors(state) if tr.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


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
