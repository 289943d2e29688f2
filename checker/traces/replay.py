"""Replay: re-apply a counterexample's actions to the model and confirm that
the recorded invariant breaks at the recorded step, or say exactly where the
trace no longer applies. A call-deadline trace re-drives the allocator code
under the recorded deadline: its last state's calls must again not return
(the same call), or it says that they now do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.state import State, allocated, host_allocated, state_to_json
from cowcheck.model.action import Transition
from cowcheck.model.code import other_code
from cowcheck.model.harness import CallDeadline
from cowcheck.model.subject import system_for
from cowcheck.model.system import TransitionSystem

from cowcheck.adapters.deadline import Deadline
from cowcheck.adapters.recorded import Recorded, loading, recorded

from cowcheck.engines.invariants import BY_ID, Invariant, Judge
from cowcheck.engines import counterexample as trace
from cowcheck.engines.counterexample import Counterexample


@dataclass
class Replayed:
    ok: bool
    message: str
    step: Optional[int] = None                 # where it failed to apply, or where the violation occurred
    witness: Optional[dict] = None
    states: list[State] = field(default_factory=list)   # the initial state and the state after each action
    transitions: list[Transition] = field(default_factory=list)
    #: allocator code: why the code replayed on is not the code that found the trace, or None
    other_code: Optional[str] = None
    #: the system it was replayed on (explain narrates the states with it)
    system: Optional[TransitionSystem] = field(default=None, repr=False, compare=False)


def first_violation(model: TransitionSystem, judge: Judge, before: State, depth: int, successors: list[Transition],
                    taken: Optional[Transition]) -> Optional[tuple[int, dict]]:
    """Does the judged invariant break in state `before` (at its depth) or at
    the action taken from it (one longer)?"""
    for _, witness in judge.state(model, before, model.is_final(before), not successors):
        return depth, witness
    if taken is not None:
        for _, witness in judge.action(model, before, taken):
            return depth + 1, witness
    return None


def judging(cx: Counterexample, invariants: tuple[Invariant, ...] = ()) -> Optional[Invariant]:
    """The invariant a counterexample is judged by: the one that found it
    (in this process), one of `invariants`, or a built-in; None for a peak
    trace. An id none of these knows is bad input."""
    if cx.invariant is None:
        return None
    if cx.judged_by is not None and cx.judged_by.id == cx.invariant:
        return cx.judged_by
    for inv in (*invariants, *BY_ID.values()):
        if inv.id == cx.invariant:
            return inv
    raise SpecError(cx.loaded_from or cx.scenario.name, "invariant",
                    f"unknown invariant {cx.invariant!r}: a custom invariant's counterexample replays only with its "
                    f"definition (cowcheck.replay(cx, invariants=...)); built-in: {', '.join(BY_ID)}")


def engine_folder(cx: Counterexample) -> Optional[Recorded]:
    """The folder of the engine's sources a counterexample records, where
    the adapter's variable is unset: the engine is loaded from it, where it
    is there, for the replay (adapters/recorded.py)."""
    return recorded(cx.scenario.allocator, cx.allocator_code)


def _system(cx: Counterexample) -> TransitionSystem:
    """The system a counterexample replays on; allocator code that can no
    longer be loaded (moved, deleted) is one line saying so, and so is an
    engine whose recorded folder is gone (with the variable to set)."""
    try:
        return system_for(cx.scenario)
    except SpecError as err:
        found = engine_folder(cx)
        if err.key == "factory" and found is not None and not found.there:
            raise SpecError(cx.loaded_from or cx.scenario.name, "allocator_code.source", found.gone()) from None
        if err.key != "allocator":
            raise
        raise SpecError(cx.loaded_from or cx.scenario.name, "allocator", "the allocator code this counterexample was "
                        f"checked with is no longer there: {err.message}") from None


def replay(cx: Counterexample, invariants: tuple[Invariant, ...] = (), model: Optional[TransitionSystem] = None) -> Replayed:
    """Re-apply the actions from the initial state of `model` (by default
    the scenario's protocol model, or its allocator code through the
    harness) and judge the recorded invariant."""
    inv = judging(cx, invariants)
    with loading(engine_folder(cx)):     # the engine from the folder the file records, where no variable names one
        model = model or _system(cx)
        if cx.kind == trace.CALL_DEADLINE:     # the code re-driven under the recorded deadline
            assert cx.deadline is not None
            model.guard = Deadline(cx.deadline, model.adapter or "")
        out = _replay(cx, inv, model)
    out.other_code = other_code(cx.allocator_code, model.code)
    if out.other_code is not None:     # said first: what follows is about that other code
        out.message = f"{out.other_code}; {out.message}"
    return out


def _replay(cx: Counterexample, inv: Optional[Invariant], model: TransitionSystem) -> Replayed:
    state = model.init_state()
    out = Replayed(ok=False, message="", states=[state], system=model)
    if state_to_json(state, cx.scenario) != cx.initial:
        out.message = "the initial state differs from the recorded one" + (
            " (the allocator is not deterministic: start() gave other observations)" if model.adapter is not None else "")
        out.step = 0
        return out
    judge = Judge((inv,)) if inv is not None else Judge(())
    found: Optional[tuple[int, dict]] = None
    for n, (action, recorded) in enumerate(zip(cx.actions, cx.states), 1):
        try:
            successors = model.successors(state)
        except CallDeadline as late:      # under a call-deadline trace's deadline, before its last state
            out.step, out.message = n, f"step {n}: {late} (after step {n - 1}); the file records {cx.call} after step {cx.length}"
            return out
        taken = next((t for t in successors if t.action == action), None)
        if taken is None:
            same_call = next((t for t in successors if t.action[:3] == action[:3]), None)
            if same_call is not None and model.adapter is not None:
                out.step, out.message = n, (f"step {n}: the allocator is not deterministic: the same call gave different "
                                            f"observations (recorded '{action}', now '{same_call.action}')")
                return out
            enabled = "; ".join(str(t.action) for t in successors) or "none"
            out.step, out.message = n, f"step {n}: action '{action}' is not enabled here (enabled: {enabled})"
            return out
        if inv is not None and found is None:
            found = first_violation(model, judge, state, n - 1, successors, taken)
        out.transitions.append(taken)
        if taken.state is None:
            if n != len(cx.actions):
                out.step, out.message = n, f"step {n}: the action leads nowhere (kernel-table-miss) but the trace goes on"
                return out
            break
        if recorded is not None and state_to_json(taken.state, cx.scenario) != recorded:
            out.step, out.message = n, f"step {n}: the state after '{action}' differs from the recorded one"
            return out
        state = taken.state
        out.states.append(state)
    else:
        if inv is not None and found is None:
            found = first_violation(model, judge, state, len(cx.actions), model.successors(state), None)

    if cx.kind == trace.CALL_DEADLINE:
        return _redriven(cx, model, state, out)
    if inv is None:  # a peak trace, or a host peak's
        host = cx.kind == trace.HOST_PEAK
        reached, recorded_peak = (host_allocated(state), cx.host_peak) if host else (allocated(state), cx.peak)
        what = "allocated host blocks" if host else "allocated blocks"
        out.ok = reached == recorded_peak
        out.step = len(cx.actions)
        out.message = (f"reaches the {'host ' if host else ''}peak of {reached} {what} at step {out.step}" if out.ok
                       else f"ends with {reached} {what}, the file records a {'host ' if host else ''}peak of {recorded_peak}")
        return out
    if found is None:
        out.message = f"{cx.invariant} holds along the whole trace; the file says it breaks at step {cx.length}"
        return out
    out.step, out.witness = found
    out.ok = out.step == cx.length
    out.message = (f"{cx.invariant} breaks at step {out.step}, as recorded" if out.ok
                   else f"{cx.invariant} breaks at step {out.step}, the file records step {cx.length}")
    return out


def _redriven(cx: Counterexample, model: TransitionSystem, state: State, out: Replayed) -> Replayed:
    """The calls from a call-deadline trace's last state, under its
    deadline: it replays when the recorded call again does not return."""
    out.step = at = len(cx.actions)
    try:
        model.successors(state)
    except CallDeadline as late:
        out.ok = late.call == cx.call
        out.message = (f"the call {late.call} again did not return within {late.seconds:g} s after step {at}, as recorded"
                       if out.ok else f"the call {late.call} did not return within {late.seconds:g} s after step {at}; "
                       f"the file records {cx.call}")
        return out
    out.message = f"the call {cx.call} now returns within {cx.deadline:g} s after step {at}; the file records that it did not"
    return out


def load_replayed(path, invariants: tuple[Invariant, ...] = ()) -> tuple[Counterexample, Replayed]:
    """A counterexample file that the model replays as recorded, for the
    commands that build on it (pages, pictures, the replay benchmark): one
    that does not (edited, or made by an older model) is bad input, one line
    saying where; `cowcheck replay` is the command that explains it."""
    cx = trace.load(path)
    return cx, replayed_as_recorded(cx, invariants)


def replayed_as_recorded(cx: Counterexample, invariants: tuple[Invariant, ...] = ()) -> Replayed:
    """The model's replay of a counterexample that must replay as recorded."""
    replayed = replay(cx, invariants)
    path = cx.loaded_from or cx.scenario.name
    if not replayed.ok:
        where = f"steps[{replayed.step - 1}]" if replayed.step else "steps"
        raise SpecError(str(path), where, f"does not replay in the model ({replayed.message}); "
                        "see cowcheck replay FILE")
    return replayed
