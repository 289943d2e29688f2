"""The model's rules, one at a time, on hand-built situations: reference
counting, the free list, device ordering, atomic paths, cancellation points,
and what a kernel and a copy read."""

from __future__ import annotations


import pytest

from cowcheck.model.block import Draft, Freed, KernelDone, OutputChecked, TableMiss, Underflow, decref, release
from cowcheck.model.protocol import protocol_from_dict
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import Block, Copy, Kernel, State
from cowcheck.model.system import ProtocolModel


def model_of(B=2, L=3, branches=(1, 1), protocol="cow", **kw) -> ProtocolModel:
    return ProtocolModel(make_scenario(B, L, list(branches), protocol, **kw))


def walk(model: ProtocolModel, choose) -> list:
    """Follow the first successor matching `choose(action)` repeatedly."""
    state = model.init_state()
    taken = []
    while True:
        options = [t for t in model.successors(state) if choose(t.action)]
        if not options:
            return taken
        taken.append(options[0])
        if options[0].state is None:
            return taken
        state = options[0].state


def test_initial_state_is_the_fork():
    model = model_of(B=4, L=6, branches=(2, 2, 2))
    s = model.init_state()
    assert s.blocks[0] == Block(3, 0, ("p0", "p1", "p2", "p3"))
    assert s.blocks[1] == Block(3, 0, ("p4", "p5", None, None))
    assert s.free == tuple(range(2, model.scenario.pool))
    assert all(b.working == b.published == (0, 1) for b in s.branches)
    hash(s)  # plain immutable data


def test_default_pool_bounds_what_the_scenario_can_hold():
    # prompt blocks + per branch appends x the most allocs of any path
    assert make_scenario(4, 6, [3, 3], "cow").pool == 2 + 6
    assert make_scenario(4, 8, [2, 2, 2], "cow").pool == 2 + 6


@pytest.mark.parametrize("reuse,expected", [("lifo", (1, 2, 3)), ("fifo", (2, 3, 1)), ("any", (1, 2, 3))])
def test_free_list_order(reuse, expected):
    state = model_of(B=2, L=3, branches=(1,), reuse=reuse).init_state()
    state = state._replace(free=(2, 3), blocks=(state.blocks[0], Block(1, 0, ("p2", None))) + state.blocks[2:])
    d = Draft(state, reuse)
    decref(d, 1)
    assert tuple(d.free) == expected
    assert Freed(1) in d.facts


def test_decref_at_zero_underflows_and_frees_nothing():
    state = model_of().init_state()
    blocks = list(state.blocks)
    blocks[1] = Block(0, 0, ("p2", None))
    d = Draft(state._replace(blocks=tuple(blocks)), "lifo")
    free_before = list(d.free)
    decref(d, 1)
    assert d.blocks[1].refcount == 0
    assert d.free == free_before
    assert d.facts == [Underflow(1, "refcount")]


def test_a_hold_defers_the_free_until_release():
    state = model_of().init_state()
    blocks = list(state.blocks)
    blocks[1] = Block(1, 1, ("p2", None))
    d = Draft(state._replace(blocks=tuple(blocks)), "lifo")
    decref(d, 1)
    assert 1 not in d.free and d.blocks[1].refcount == 0
    release(d, 1)
    assert d.free[0] == 1 and d.blocks[1].holds == 0


def test_reallocated_block_keeps_stale_contents():
    # an exactly full prompt: the first append allocates a dirty block
    model = model_of(B=2, L=2, branches=(1,), protocol="cow", pool=3)
    state = model.init_state()
    blocks = list(state.blocks)
    first_free = state.free[0]
    blocks[first_free] = Block(0, 0, ("x9", "x9"))
    state = state._replace(blocks=tuple(blocks))
    decide = model.successors(state)[0]
    alloc = next(t for t in model.successors(decide.state) if t.action.step == "alloc new")
    assert dict(alloc.action.binds) == {"new": first_free}
    assert alloc.state.blocks[first_free] == Block(1, 0, ("x9", "x9"))


def run_to_wait_kernel(model: ProtocolModel, state: State, actor: str, index: int) -> State:
    """Let `actor` take its append steps (the device completing what it
    waits for) until its next step is wait-kernel."""
    while model.program(state.branches[index])[state.branches[index].step].op != "wait-kernel":
        options = model.successors(state)
        mine = [t for t in options if t.action.actor == actor and t.action.op == "append"]
        state = (mine or [t for t in options if t.action.actor == "device"])[0].state
    return state


def _queue_state(model: ProtocolModel) -> State:
    state = model.init_state()
    queue = (Copy(1, 2, 1), Kernel(0, 3, "a1", (0, 3), ("p0", "p1", "p2", "a1")), Copy(1, 3, 1),
             Kernel(1, 3, "b1", (0, 1), ("p0", "p1", "p2", "b1")))
    return state._replace(queue=queue)


@pytest.mark.parametrize("device,ready", [
    ("async", [("copy-complete", 2), ("kernel-complete", 0), ("copy-complete", 3), ("kernel-complete", 1)]),
    ("stream", [("copy-complete", 2)]),
    ("streams", [("copy-complete", 2), ("kernel-complete", 0)]),
])
def test_device_models_order_completions(device, ready):
    model = model_of(device=device, branches=(1, 1))
    state = _queue_state(model)
    # block the branches so only device actions remain
    state = state._replace(branches=tuple(b._replace(status="finished") for b in state.branches))
    got = []
    for t in model.successors(state):
        binds = dict(t.action.binds)
        got.append((t.action.op, binds.get("dst", binds.get("pos") and {"a": 0, "b": 1}[binds["branch"]])))
    assert got == ready


def test_copy_reads_its_source_when_it_completes_not_when_launched():
    model = model_of(device="async")
    state = model.init_state()
    blocks = list(state.blocks)
    blocks[1] = Block(2, 0, ("zz", None))  # the source changed after launch
    state = state._replace(blocks=tuple(blocks), queue=(Copy(1, 2, 1),))
    done = next(t for t in model.successors(state) if t.action.op == "copy-complete")
    assert done.state.blocks[2].slots == ("zz", None)


def test_kernel_writes_then_reads_through_its_snapshot():
    model = model_of(device="async")
    state = model.init_state()._replace(queue=(Kernel(0, 3, "a1", (0, 1), ("p0", "p1", "p2", "a1")),))
    done = next(t for t in model.successors(state) if t.action.op == "kernel-complete")
    fact = done.facts[0]
    assert type(fact) is KernelDone
    assert fact.reads == ("p0", "p1", "p2", "a1")
    assert done.state.blocks[1].slots == ("p2", "a1")


def test_atomic_path_excludes_other_branches_until_it_waits():
    model = model_of(protocol="vllm-bmv1", branches=(1, 1))
    state = model.init_state()
    a_decide = next(t for t in model.successors(state) if t.action.actor == "a")
    state = a_decide.state
    # inside the non-wait part of a's atomic path: only a acts
    while True:
        actors = {t.action.actor for t in model.successors(state)}
        br = state.branches[0]
        if br.op is None or model.program(br)[br.step].op.startswith("wait"):
            break
        assert actors <= {"a", "device"}
        state = next(t for t in model.successors(state) if t.action.actor == "a").state
    assert "b" in {t.action.actor for t in model.successors(state)}


def test_non_atomic_paths_interleave():
    model = model_of(protocol="cow", branches=(1, 1))
    state = next(t for t in model.successors(model.init_state()) if t.action.actor == "a").state
    assert {"a", "b"} <= {t.action.actor for t in model.successors(state)}


def test_cancellation_points():
    model = model_of(protocol="cow", branches=(1, (1, True)))
    state = model.init_state()
    # between operations (before the first append): cancel is offered to b only
    ops = [(t.action.actor, t.action.op) for t in model.successors(state)]
    assert ("b", "cancel") in ops and ("a", "cancel") not in ops
    # b decides: mid-path (not at wait-kernel) no cancel
    state = next(t for t in model.successors(state) if t.action.actor == "b").state
    assert ("b", "cancel") not in [(t.action.actor, t.action.op) for t in model.successors(state)]
    # run b up to its wait-kernel: its kernel is in flight, cow's cancel
    # (wait-kernel first) is not enabled yet; after the kernel completes it is
    state = run_to_wait_kernel(model, state, "b", 1)
    assert any(type(q) is Kernel for q in state.queue)
    assert ("b", "cancel") not in [(t.action.actor, t.action.op) for t in model.successors(state)]
    state = next(t for t in model.successors(state) if t.action.op == "kernel-complete").state
    cancel = next(t for t in model.successors(state) if t.action.op == "cancel")
    assert cancel.state.branches[1].op == "cancel"


def test_cancel_without_wait_is_offered_with_the_kernel_in_flight():
    model = model_of(protocol="cancel-in-flight", branches=(1, (1, True)))
    state = model.init_state()
    state = next(t for t in model.successors(state) if t.action.actor == "b" and t.action.op == "append").state
    state = run_to_wait_kernel(model, state, "b", 1)
    assert any(t.action.op == "cancel" for t in model.successors(state))
    assert any(type(q) is Kernel for q in state.queue)


def test_kernel_table_miss_is_reported_and_not_explored():
    proto = protocol_from_dict({
        "name": "write-before-publish",
        "append": {"rules": [{"when": "boundary", "path": "fresh"}, {"when": "true", "path": "in-place"}],
                   "paths": {"fresh": ["alloc new", "append new", "write", "publish", "wait-kernel"],
                             "in-place": ["write", "wait-kernel"]}},
    }, "<test>")
    model = ProtocolModel(make_scenario(2, 2, [1], proto))
    taken = walk(model, lambda a: a.actor == "a")
    assert taken[-1].state is None
    assert type(taken[-1].facts[0]) is TableMiss


def test_finish_runs_check_output_and_frees_everything():
    model = model_of(protocol="cow", branches=(1,))
    taken = walk(model, lambda a: True)
    final = taken[-1].state
    assert model.is_final(final)
    assert set(final.free) == set(range(len(final.blocks)))
    checks = [f for t in taken for f in t.facts if type(f) is OutputChecked]
    assert checks and checks[0].reads == ("p0", "p1", "p2", "a1")


def test_unbound_tail_is_a_clear_runtime_error():
    from cowcheck.model.errors import SpecError
    proto = protocol_from_dict({
        "name": "bad",
        "append": {"rules": [{"when": "true", "path": "p"}], "paths": {"p": ["copy tail new", "write", "wait-kernel"]}},
    }, "bad.toml")
    model = ProtocolModel(make_scenario(2, 2, [1], proto))
    state = model.successors(model.init_state())[0].state
    with pytest.raises(SpecError, match="tail"):
        model.successors(state)
