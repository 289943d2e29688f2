"""A second, deliberately simple search: depth-first, no reductions, no
measures, no traces. It exists to cross-check the breadth-first explorer:
both must reach the same states and find the same invariants broken."""

from __future__ import annotations

from dataclasses import dataclass, field

from cowcheck.model.system import TransitionSystem

from cowcheck.engines.invariants import INVARIANTS, Invariant, Judge


@dataclass
class DepthFirst:
    states: int = 0
    violated: set[str] = field(default_factory=set)


def depth_first(model: TransitionSystem, invariants: tuple[Invariant, ...] = INVARIANTS) -> DepthFirst:
    judge = Judge(invariants)
    result = DepthFirst()
    init = model.init_state()
    seen = {init}
    stack = [init]
    while stack:
        state = stack.pop()
        successors = model.successors(state)
        result.violated.update(i for i, _ in judge.state(model, state, model.is_final(state), not successors))
        for tr in successors:
            result.violated.update(i for i, _ in judge.action(model, state, tr))
            if tr.state is not None and tr.state not in seen:
                seen.add(tr.state)
                stack.append(tr.state)
    result.states = len(seen)
    return result
