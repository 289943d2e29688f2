"""Why a run stopped, as a value (cowcheck.engines.stop), and the
capabilities a transition system declares (cowcheck.model.system): each
kind of stop in the command line's words and in a sweep's, through pickle,
the hint a bound gets; and a system that is not a protocol file's model,
explored by what it declares alone."""

from __future__ import annotations

import pickle
import time
from dataclasses import replace

import pytest

from cowcheck.adapters.deadline import Deadline
from cowcheck.engines.explicit import explore
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import Outcome
from cowcheck.engines.stop import PEAK_REACHED, Stop, StopKind, interrupted, past
from cowcheck.interrupts import Terminated
from cowcheck.model.action import Action, Transition
from cowcheck.model.harness import CallDeadline
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import Block, Branch, State
from cowcheck.model.structure import Op
from cowcheck.model.system import TransitionSystem
from cowcheck.views.report import bound_hint


def _inside_a_call() -> KeyboardInterrupt:
    interrupt = KeyboardInterrupt()
    interrupt.during = "toy:manager append('a', 'a1') (0.1 s)"  # type: ignore[attr-defined]  # as the deadline's guard names it
    return interrupt


#: each kind of stop, and the words the command line printed for it before it was a value
WORDS = [
    (Stop(StopKind.STATES, 1000), "--max-states 1000"),
    (Stop(StopKind.DEPTH, 5), "--max-depth 5"),
    (Stop(StopKind.MEMORY, 1024), "--max-memory 1,024 MiB"),
    (Stop(StopKind.OUT_OF_MEMORY), "out of memory (MemoryError)"),
    (Stop(StopKind.SECONDS, 2.5), "max_seconds 2.5"),
    (interrupted(KeyboardInterrupt()), "interrupted (Ctrl-C)"),
    (interrupted(Terminated()), "interrupted (SIGTERM)"),
    (interrupted(_inside_a_call()), "interrupted (Ctrl-C) in toy:manager append('a', 'a1') (0.1 s)"),
    (past(CallDeadline("toy:hangs", "append('a', 'a2')", 0.5)),
     "call deadline: toy:hangs append('a', 'a2') did not return within 0.5 s"),
    (Stop(StopKind.BMC_BOUND, 12), "bmc bound 12"),
    (Stop(StopKind.NOT_CLOSED, 4, open=("no-leak", "exclusive-write")),
     "k-induction did not close within k <= 4: no-leak, exclusive-write"),
    (Stop(StopKind.FIRST_VIOLATION), "first violation"),
    (Stop(StopKind.SOUGHT), "every sought violation found"),
    (PEAK_REACHED, "the peak reached"),
    (Stop(StopKind.PEAK_NOT_REACHED), "the peak not reached"),
    (Stop(StopKind.SECONDS, 3, peak=True), "max_seconds 3 (searching for the peak's shortest trace)"),
    (replace(interrupted(KeyboardInterrupt()), peak=True),
     "interrupted (Ctrl-C) (searching for the peak's shortest trace)"),
]


@pytest.mark.parametrize("stop, words", WORDS, ids=[w for _, w in WORDS])
def test_each_stop_in_the_command_line_s_words(stop, words):
    assert str(stop) == words
    assert stop.interrupted is words.startswith("interrupted")


def test_every_kind_has_its_words():
    assert {stop.kind for stop, _ in WORDS} == set(StopKind)


@pytest.mark.parametrize("stop", [stop for stop, _ in WORDS], ids=[w for _, w in WORDS])
def test_a_stop_survives_pickle(stop):
    """Sweeps send results through Dask, which pickles them."""
    again = pickle.loads(pickle.dumps(stop))
    assert again == stop and str(again) == str(stop) and again.interrupted is stop.interrupted


def test_a_call_deadline_reads_as_the_exception_does():
    late = CallDeadline("toy:hangs", "append('a', 'a2')", 0.3)
    assert str(past(late)) == str(late)


def test_a_sweep_names_its_budget():
    """A cell's bound on states or seconds is the sweep's budget; the
    seconds are the budget's, not what was left for a last search."""
    assert Stop(StopKind.SECONDS, 1.25).in_sweep(5) == "budget: 5 s"
    assert Stop(StopKind.SECONDS, 1.25, peak=True).in_sweep(5) == "budget: 5 s"
    assert Stop(StopKind.STATES, 1000).in_sweep(5) == "budget: max-states 1000"
    assert Stop(StopKind.STATES, 1000).in_sweep(None) == "budget: max-states 1000"
    for stop, words in WORDS:
        if stop.kind not in (StopKind.SECONDS, StopKind.STATES):
            assert stop.in_sweep(5) == words


@pytest.mark.parametrize("stop", [stop for stop, _ in WORDS], ids=[w for _, w in WORDS])
def test_the_bound_hint_is_chosen_by_kind(stop):
    hint = bound_hint(stop, ())
    if stop.kind in (StopKind.STATES, StopKind.MEMORY, StopKind.OUT_OF_MEMORY):
        assert hint == (f"stopped by {stop}: the verdicts above are partial; to get further try --symmetry, "
                        "--fingerprints (8 bytes a state), --compact, --por, --first (stop at the first violation), "
                        "--engine bmc --depth K (no states stored)")
    else:
        assert hint is None
    assert bound_hint(None, ()) is None


def test_the_hint_leaves_out_the_reductions_used():
    hint = bound_hint(Stop(StopKind.MEMORY, 150), ("block-id symmetry", "partial-order reduction"))
    assert hint is not None and hint.startswith("stopped by --max-memory 150 MiB: ")
    assert "--symmetry" not in hint and "--por" not in hint and "--compact" in hint


# -- a transition system that is not a protocol file's model ---------------------------------
SCENARIO = make_scenario(2, 1, [1])
TICKS = 3


class Ticks(TransitionSystem):
    """A counter from 0 to TICKS in the state's `code`, over a pool nobody
    allocates from: it declares the interface and nothing of the
    capabilities, so it gets every default."""

    def __init__(self) -> None:
        self.scenario, self.B, self.names = SCENARIO, SCENARIO.block_size, SCENARIO.names
        self.calls: list[str] = []

    def init_state(self) -> State:
        pool = tuple(Block(0, 0, (None,) * self.B) for _ in range(SCENARIO.pool))
        return State(pool, tuple(range(SCENARIO.pool)), (), (), 0)

    def successors(self, state: State) -> list[Transition]:
        if state.code == TICKS:
            return []
        return [Transition(Action("a", Op.APPEND, "tick", ()), state._replace(code=self.tick(state.code)), ())]

    def tick(self, count: int) -> int:
        return count + 1

    def is_final(self, state: State) -> bool:
        return state.code == TICKS

    def is_steady(self, state: State) -> bool:
        return False

    def is_quiescent(self, state: State) -> bool:
        return True

    def is_copy_launch(self, action: Action) -> int:
        return 0

    def hits(self, action: Action) -> int:
        return 0

    def where(self, branch: Branch) -> str:
        return "ticking"


def test_the_explorer_explores_a_system_by_its_capabilities_alone():
    """No reduction for states it cannot read (symmetry and the compact
    encoding are asked for by default), no partial-order reduction, no
    deadline: the defaults of what it did not declare."""
    toy = Ticks()
    result = explore(SCENARIO, SearchOptions(), system=toy)
    assert result.complete and result.stop is None and result.stopped is None
    assert (result.x.states, result.x.transitions, result.x.depth) == (TICKS + 1, TICKS, TICKS)
    assert result.x.reductions == () and result.x.encoding is None
    assert result.choice == "auto: without partial-order reduction: the checker cannot read its states"
    assert {v.outcome for v in result.verdicts.values()} <= {Outcome.HOLDS, Outcome.UNSUPPORTED}
    assert "allocator-error" not in result.verdicts          # it runs no code of the user's
    assert result.to_json()["stopped"] is None


def test_a_bound_stops_a_system_with_its_value():
    result = explore(SCENARIO, SearchOptions(max_depth=2), system=Ticks())
    assert not result.complete and result.stop == Stop(StopKind.DEPTH, 2)
    assert result.summary_line.endswith("(partial: --max-depth 2)") and result.to_json()["stopped"] == "--max-depth 2"


class Hangs(Ticks):
    """Ticks that runs the user's code through an adapter (so declares
    one): each tick is a call, and the second never returns."""
    adapter = "toy:ticks"

    def tick(self, count: int) -> int:
        with self.guard(f"tick({count})"):
            if count == 1:
                time.sleep(30)
        return count + 1


def test_a_system_that_runs_code_gets_a_deadline_on_each_call():
    toy = Hangs()
    started = time.perf_counter()
    result = explore(SCENARIO, SearchOptions(call_deadline=0.2), system=toy)
    assert time.perf_counter() - started < 10 and isinstance(toy.guard, Deadline)
    assert not result.complete and result.stop == Stop(StopKind.CALL_DEADLINE, 0.2, during="toy:ticks tick(1)")
    assert result.stopped == "call deadline: toy:ticks tick(1) did not return within 0.2 s"
    assert "allocator-error" in result.verdicts and not result.interrupted


def test_a_stop_marked_for_the_peak_search_keeps_its_kind():
    stop = replace(interrupted(Terminated()), peak=True)
    assert stop.interrupted and str(stop) == "interrupted (SIGTERM) (searching for the peak's shortest trace)"


def test_a_sweep_cell_stopped_by_its_budget_says_so():
    """What a sweep's worker returns: the cell's JSON, with its stop in the
    sweep's words (the searches keep the engine's)."""
    from cowcheck.sweeps.runner import run_cell, task_for
    out = run_cell(task_for(make_scenario(2, 3, [2, 2], name="cell"), {"max_states": 5}))
    assert out["result"]["stopped"] == "budget: max-states 5" and not out["result"]["complete"]
    assert [s["stopped"] for s in out["result"]["searches"]] == ["--max-states 5"]
