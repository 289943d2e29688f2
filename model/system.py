"""The whole system as a transition system, in the manner of Stateright's
`Model`: an initial state, the actions enabled in a state, and the state each
one leads to. It applies the scheduling rules of DESIGN.md (atomic paths,
cancellation points, finish) and knows nothing of search or invariants; it
reports what happened as facts (model.block) for the checker to judge."""

from __future__ import annotations

from typing import NamedTuple, Optional

from . import device, steps
from .block import Draft
from .errors import SpecError
from .protocol import COPIES, WAITS, Rule, Step
from .condition import environment
from .scenario import Scenario
from .state import CANCELLED, FINISHED, RUNNING, Branch, Copy, State, initial_state, is_final

DEVICE = "device"


class Action(NamedTuple):
    """One atomic action: a branch's decide or step, or a device completion.
    `binds` records the block ids involved, so a trace replays exactly."""
    actor: str                           # branch name, or "device"
    op: str                              # append | finish | cancel | copy-complete | kernel-complete
    step: str                            # "decide", a step's text, or the device op
    binds: tuple[tuple[str, object], ...]

    def to_json(self) -> dict:
        return {"actor": self.actor, "op": self.op, "step": self.step, "binds": dict(self.binds)}

    @staticmethod
    def from_json(data: dict) -> "Action":
        binds = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in data["binds"].items())
        return Action(data["actor"], data["op"], data["step"], binds)

    def __str__(self) -> str:
        binds = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.binds)
        who = self.actor if self.actor == DEVICE else f"{self.actor} ({self.op})"
        return f"{who}: {self.step}" + (f" [{binds}]" if binds else "")


class Transition(NamedTuple):
    action: Action
    state: Optional[State]   # None: the action was attempted but leads nowhere (kernel-table-miss)
    facts: tuple[tuple, ...]


class Model:
    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.protocol = scenario.protocol
        self.B = scenario.block_size
        self.reuse = scenario.reuse
        self.device = scenario.device
        self.names = tuple(scenario.branch_name(i) for i in range(len(scenario.branches)))
        self.tokens = tuple(scenario.tokens(i) for i in range(len(scenario.branches)))
        self.source = scenario.protocol.source

    # -- the Model interface ------------------------------------------------
    def init_state(self) -> State:
        return initial_state(self.scenario)

    def is_final(self, state: State) -> bool:
        return is_final(state)

    def successors(self, state: State) -> list[Transition]:
        out: list[Transition] = []
        lock = self.exclusive(state)
        for i, br in enumerate(state.branches):
            if br.status == RUNNING and (lock is None or lock == i):
                self._branch_actions(state, i, br, out)
        for index in device.ready(state, self.device):
            d = Draft(state, self.reuse)
            op = state.queue[index]
            device.complete(d, index, self.B)
            out.append(Transition(self._device_action(op), d.freeze(), tuple(d.facts)))
        return out

    # -- scheduling ---------------------------------------------------------
    def program(self, br: Branch) -> tuple[Step, ...]:
        if br.op == "append":
            return self.protocol.paths[br.path].steps
        return self.protocol.cancel if br.op == "cancel" else self.protocol.finish

    def exclusive(self, state: State) -> Optional[int]:
        """The branch inside the non-wait part of an atomic path, if any: while
        it is there no other branch takes a step (a single-threaded scheduler)."""
        for i, br in enumerate(state.branches):
            if br.op == "append":
                path = self.protocol.paths[br.path]
                if path.atomic and path.steps[br.step].op not in WAITS:
                    return i
        return None

    def _branch_actions(self, state: State, i: int, br: Branch, out: list) -> None:
        spec = self.scenario.branches[i]
        if br.op is None:
            if br.done < spec.appends:
                self._decide(state, i, br, out)
            else:
                self._step(state, i, br, "finish", self.protocol.finish, 0, out)
            if spec.may_cancel:
                self._step(state, i, br, "cancel", self.protocol.cancel, 0, out)
            return
        program = self.program(br)
        self._step(state, i, br, br.op, program, br.step, out)
        if br.op == "append" and spec.may_cancel and program[br.step].op == "wait-kernel":
            self._step(state, i, br, "cancel", self.protocol.cancel, 0, out)

    def _decide(self, state: State, i: int, br: Branch, out: list) -> None:
        fill = br.pos % self.B
        boundary = fill == 0
        index = br.pos // self.B
        tail = None if boundary or index >= len(br.working) else br.working[index]
        rule = self.choose(state, tail, boundary, fill)
        if rule is None:
            return  # no rule matches: the branch cannot proceed
        after = br._replace(op="append", path=rule.path, step=0, tail=tail, new=None)
        branches = state.branches[:i] + (after,) + state.branches[i + 1:]
        action = Action(self.names[i], "append", "decide", (("path", rule.path), ("tail", tail)))
        out.append(Transition(action, State(state.blocks, state.free, branches, state.queue), ()))

    def choose(self, state: State, tail: Optional[int], boundary: bool, fill: int) -> Optional[Rule]:
        def counter(field: str):
            def read(block: Optional[int]) -> int:
                if block is None:
                    raise SpecError(self.source, "append.rules", f"a condition reads {field}(tail) where no tail is bound (at a block boundary); test `boundary` first")
                return getattr(state.blocks[block], field)
            return read

        env = environment(boundary, fill, self.B, {"tail": tail}, counter("refcount"), counter("holds"))
        for rule in self.protocol.rules:
            if rule.when.evaluate(env):
                return rule
        return None

    def _step(self, state: State, i: int, br: Branch, opname: str, program: tuple[Step, ...], k: int, out: list) -> None:
        step = program[k]
        for choice in steps.choices(state, i, step, self.reuse, self.source):
            d = Draft(state, self.reuse)
            if opname != br.op:  # starting finish or cancel (a cancel abandons the append, keeping its locals)
                br = br._replace(op=opname, path=None, step=0)
            after, binds = steps.apply(d, i, br, step, choice, self.B, self.tokens[i], self.source)
            action = Action(self.names[i], opname, step.text, binds)
            if after is None:
                out.append(Transition(action, None, tuple(d.facts)))
                continue
            d.set_branch(i, self._advance(after, opname, program, k))
            out.append(Transition(action, d.freeze(), tuple(d.facts)))

    @staticmethod
    def _advance(br: Branch, opname: str, program: tuple[Step, ...], k: int) -> Branch:
        if k + 1 < len(program):
            return br._replace(step=k + 1)
        status = {"append": RUNNING, "finish": FINISHED, "cancel": CANCELLED}[opname]
        done = br.done + (opname == "append")
        return Branch(status, br.pos, done, None, None, 0, None, None, br.working, br.published)

    def _device_action(self, op) -> Action:
        if type(op) is Copy:
            return Action(DEVICE, "copy-complete", "copy-complete", (("src", op.src), ("dst", op.dst), ("n", op.n)))
        target = op.snapshot[op.pos // self.B]
        return Action(DEVICE, "kernel-complete", "kernel-complete",
                      (("branch", self.names[op.branch]), ("pos", op.pos), ("token", op.token),
                       ("block", target), ("slot", op.pos % self.B), ("snapshot", op.snapshot)))

    # -- views used by measures ----------------------------------------------
    @staticmethod
    def is_copy_launch(action: Action) -> bool:
        return action.step.split(" ", 1)[0] in COPIES

    def is_steady(self, state: State) -> bool:
        """All branches done appending, none finished, the queue empty."""
        return not state.queue and all(
            br.status == RUNNING and br.op is None and br.done == spec.appends
            for br, spec in zip(state.branches, self.scenario.branches)
        )
