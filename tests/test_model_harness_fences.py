"""Engines that wait, and allocators that hold
(docs/semantics.md#engines-that-wait-and-allocators-that-hold): the
adapter's `waits_for_copies` declaration, its `copy_done` / `kernel_done`
callbacks as host actions after a completion, and its `holds` observer
counted as holds by every invariant. The shipped example is
specs/allocators/fenced.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

import cowcheck
from cowcheck.api import with_allocator
from cowcheck.cli import main
from cowcheck.model.action import DEVICE
from cowcheck.model.harness import HarnessModel
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import Status
from cowcheck.specs.allocators.engine import Adapter, BlockManager
from cowcheck.specs.allocators.fenced import FencedAdapter, FencedBlockManager
from cowcheck.traces.pool import replay_on_pool
from cowcheck.views.explain import explain_text
from conftest import ROOT
from cowcheck.engines import counterexample as trace
from test_model_harness import error_line, scenario_file

FENCED = "cowcheck.specs.allocators.fenced"
TWO = [{"appends": 2}, {"appends": 2}]
ONE = [{"appends": 1}, {"appends": 1}]
PRUNED = [{"appends": 2, "may_cancel": True}, {"appends": 2}]


def scenario(ref, branches=TWO, device="async"):
    """Two branches of allocator code (`ref`: module:factory)."""
    return with_allocator(make_scenario(2, 3, branches, "cow", device=device), ref)[0]


def run(factory, branches=TWO, device="async"):
    return cowcheck.check(scenario(f"{FENCED}:{factory}", branches, device))


def broken(result) -> dict[str, int]:
    return {k: v.length for k, v in result.verdicts.items() if v.holds is False}


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("device", ["async", "stream", "streams"])
@pytest.mark.parametrize("branches", [TWO, PRUNED], ids=["two-writers", "pruned-in-flight"])
def test_the_fenced_manager_holds_on_every_device(device, branches):
    result = run("fenced", branches, device)
    assert broken(result) == {}
    assert result.x.cost_range[1] >= 1


def test_without_the_wait_its_kernel_reads_the_tail_before_the_copy_lands():
    assert broken(run("fenced_no_wait", ONE)) == {"faithful-output": 2, "copy-before-use": 2, "no-use-after-free": 4}
    assert broken(run("fenced_no_wait", ONE, device="stream")) == {}


def test_engine_py_races_where_the_fenced_manager_holds():
    """The contrast the example exists for: the same scenarios, the manager
    that never waits and frees at once."""
    assert "faithful-output" in broken(cowcheck.check(scenario("cowcheck.specs.allocators.engine:correct", PRUNED)))


def _after_the_copy_on_write(factory="fenced"):
    model = HarnessModel(scenario(f"{FENCED}:{factory}"))
    init = model.init_state()
    append = next(t for t in model.successors(init) if t.action.actor == "a")
    return model, append.state


def test_a_kernel_waits_for_the_copies_its_call_returned():
    model, state = _after_the_copy_on_write()
    assert [type(op).__name__ for op in state.queue] == ["Copy", "Kernel"]
    device = [t.action.op for t in model.successors(state) if t.action.actor == DEVICE]
    assert device == ["copy-complete"]          # the kernel is not ready before its copy
    model, no_wait = _after_the_copy_on_write("fenced_no_wait")
    device = [t.action.op for t in model.successors(no_wait) if t.action.actor == DEVICE]
    assert sorted(device) == ["copy-complete", "kernel-complete"]


def test_the_allocator_is_told_of_a_completion_later_as_a_host_action_of_its_own():
    model, state = _after_the_copy_on_write()
    assert state.blocks[1].holds == 1 and state.blocks[1].refcount == 1     # b's reference, a's pin on the copy's source
    copied = next(t for t in model.successors(state) if t.action.op == "copy-complete").state
    told = [t for t in model.successors(copied) if t.action.step == "copy_done"]
    assert len(told) == 1 and dict(told[0].action.binds) == {"src": 1, "dst": 2} and told[0].action.actor == "a"
    assert told[0].state.blocks[1].holds == 0
    # with every branch done and the device idle, only the pending news keeps the state from final
    done = copied._replace(queue=(), branches=tuple(br._replace(status=Status.FINISHED) for br in copied.branches))
    settled = done._replace(code=replace(done.code, pending=()))
    assert done.code.pending and not model.is_final(done) and not model.is_quiescent(done)
    assert model.is_final(settled) and model.is_quiescent(settled)
    # the kernel may complete before the engine learns of the copy: both are enabled
    assert {t.action.op for t in model.successors(copied)} >= {"kernel-complete", "fence"}
    kernel = next(t for t in model.successors(copied) if t.action.op == "kernel-complete")
    assert [n[1] for n in kernel.state.code.pending] == ["copy_done", "kernel_done"]


def test_traces_with_fences_replay_narrate_and_run_on_the_pool():
    """The committed counterexample of the manager without the wait: the
    engine learns of a's kernels at fences, and its deferred release frees
    the copy's destination while the copy is still in flight (the kernel ran
    without waiting for it: on the pool it reads the tail wrong)."""
    path = ROOT / "counterexamples" / "engine-fenced-no-wait.no-use-after-free.json"
    cx = trace.load(path)
    assert [a.step for a in cx.actions].count("kernel_done") == 1
    text = explain_text(cx)
    assert "The engine learns at a fence that a's kernel has completed: it calls kernel_done('a')" in text
    assert "block 2 was freed while the copy 1->2 is in flight" in text
    replayed = CliRunner().invoke(main, ["replay", str(path)])
    assert replayed.exit_code == 0, replayed.output
    assert replay_on_pool(cx.scenario, cx.actions).first_divergence.step == 2     # a's kernel ran before its copy


class StepFence(FencedAdapter):
    """A V1-style step fence without callbacks: what the allocator pinned in
    one call it releases when the next call begins (the engine has then
    synchronised with the previous step). Its pins outlive quiescent
    states, so without holds() they look like table references."""

    copy_done = None  # type: ignore[assignment]
    kernel_done = None  # type: ignore[assignment]
    waits_for_copies = True

    def __init__(self, manager):
        super().__init__(manager)
        self.pinned: list[int] = []

    def _release(self):
        for block in self.pinned:
            self.manager.allocator.unpin(block)
        self.pinned = []

    def append(self, branch, token):
        self._release()
        pins = list(self.manager.allocator.pins)
        copies = super().append(branch, token)
        self.pinned = [b for b, (was, now) in enumerate(zip(pins, self.manager.allocator.pins)) if now > was]
        return copies

    def free(self, branch):
        self._release()
        self.manager.in_flight.clear()      # no deferred release: the step fence has passed
        self.manager.free(self._seq(branch))


class StepFenceHidden(StepFence):
    holds = None  # type: ignore[assignment]


def step_fence(pool, block_size):
    return StepFence(FencedBlockManager(pool, block_size))


def step_fence_hidden(pool, block_size):
    return StepFenceHidden(FencedBlockManager(pool, block_size))


def test_holds_are_what_keeps_a_pin_from_looking_like_a_table_reference():
    """refcount-exact compares the tables' references with the refcount less
    the allocator's own; without holds() a pin across a quiescent state is
    a false alarm."""
    def check(factory):
        return broken(cowcheck.check(scenario("test_model_harness_fences:" + factory.__name__, TWO, "stream")))
    assert check(step_fence) == {}
    assert "refcount-exact" in check(step_fence_hidden)


class BadWaits(Adapter):
    waits_for_copies = "yes"


class HoldsWithoutRefcount(Adapter):
    refcount = None  # type: ignore[assignment]

    def holds(self, block):
        return 0


class TooManyHolds(Adapter):
    def holds(self, block):
        return 5


def bad_waits(pool, block_size):
    return BadWaits(BlockManager(pool, block_size))


def holds_without_refcount(pool, block_size):
    return HoldsWithoutRefcount(BlockManager(pool, block_size))


def too_many_holds(pool, block_size):
    return TooManyHolds(BlockManager(pool, block_size))


@pytest.mark.parametrize("factory, words", [
    ("bad_waits", ["'waits_for_copies'", "True or False", "'yes'"]),
    ("holds_without_refcount", ["'holds'", "needs refcount(block) too"]),
    ("too_many_holds", ["'holds'", "from 0 to", "got 5"]),
])
def test_a_bad_wait_or_holds_part_is_one_line(tmp_path, factory, words):
    path = scenario_file(tmp_path, f"test_model_harness_fences:{factory}")
    line = error_line(CliRunner().invoke(main, ["check", str(path)]))
    for word in words:
        assert word in line, line


class Raising(FencedAdapter):
    def kernel_done(self, branch):
        raise AssertionError("kernel_done for an unknown sequence")


def raising(pool, block_size):
    return Raising(FencedBlockManager(pool, block_size))


def test_a_callback_that_raises_is_allocator_error():
    verdict = cowcheck.check(scenario("test_model_harness_fences:raising", TWO, "stream")).verdicts["allocator-error"]
    assert verdict.holds is False
    assert verdict.counterexample.actions[-1].step == "kernel_done"
