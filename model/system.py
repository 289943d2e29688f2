"""The whole system as a transition system, in the manner of Stateright's
`Model`: an initial state, the transitions enabled in a state, and whether a
state is final. `TransitionSystem` is what every engine consumes (the
explorer, the depth-first cross-check, replay, the z3 decoder's check);
`ProtocolModel`, a protocol file run under a scenario, is its first
implementation. It applies the scheduling rules (docs/semantics.md#scheduling)
through the protocol's Structure, knows nothing of search or invariants, and
reports what happened as facts (cowcheck.model.block) for the checker to judge.

What the engines may do with a system beyond exploring it, they ask it:
its capabilities are the protocol's attributes and methods after the
interface, each with the default a new kind of system gets unless it
declares otherwise (implementations subclass the protocol to inherit
them), so a new kind of system is added without touching the engines."""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager, nullcontext
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Protocol

from cowcheck.model import queue, steps, transfers
from cowcheck.model.action import CONNECTOR, Action, Transition, completion, transfer_completion
from cowcheck.model.block import Draft
from cowcheck.model.code import Code
from cowcheck.model.condition import environment
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Rule, Step
from cowcheck.model.stepkinds import COPIES, TRANSFER_LAUNCHES, WAITS
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Branch, Move, State, Status, cancel_unborn, initial_state, is_final, is_quiescent, is_steady
from cowcheck.model.steps import Request
from cowcheck.model.structure import ConnectorOp, Op, Place, Structure

#: the status a branch has once the last step of each operation is done
STATUS_AFTER = {Op.APPEND: Status.RUNNING, Op.FORK: Status.RUNNING, Op.ROLLBACK: Status.RUNNING,
                Op.FINISH: Status.FINISHED, Op.CANCEL: Status.CANCELLED, Op.ADMIT: Status.RUNNING}
#: the statuses whose branches act
ACTIVE = (Status.RUNNING, Status.WAITING)
#: a request's `after` is done once it is one of these
DONE = (Status.FINISHED, Status.CANCELLED)
#: the operations of a branch's program (finish and cancel end it)
PROGRAM_OPS = (Op.APPEND, Op.FORK, Op.ROLLBACK)
#: how an action's step text begins when it launches a copy
_COPY_LAUNCHES = tuple(op + " " for op in COPIES)
#: builds a named tuple from a tuple of its fields without the call through
#: its generated __new__ (the successor function builds millions of them)
_new = tuple.__new__


def unguarded(call: str) -> AbstractContextManager[None]:
    """The default guard: every call runs as long as it takes."""
    return nullcontext()


class TransitionSystem(Protocol):
    """What the engines need of a system under check. States are plain,
    hashable, immutable data with the shape of cowcheck.model.state.State
    (the invariants read blocks, free list, branches and queue)."""

    scenario: Scenario
    B: int
    names: tuple[str, ...]                 # branch names, by index

    def init_state(self) -> State: ...

    def successors(self, state: State) -> list[Transition]:
        """Every enabled transition (including attempted actions that lead
        nowhere, with state None, so their facts are judged)."""
        ...

    def is_final(self, state: State) -> bool: ...

    def is_steady(self, state: State) -> bool:
        """Every branch done with its program and not finished, nothing in flight."""
        ...

    def is_quiescent(self, state: State) -> bool:
        """The books are settled: nothing in flight, no branch inside an
        operation (refcount-exact is judged only here)."""
        ...

    def is_copy_launch(self, action: Action) -> int:
        """The copies the action launches (a protocol step: 0 or 1)."""
        ...

    def hits(self, action: Action) -> int:
        """The prompt blocks the action served from the prefix cache."""
        ...

    def transfer_launches(self, action: Action) -> int:
        """The transfers the action launches (a transfer scenario's measure)."""
        return 0

    def where(self, branch: Branch) -> str:
        """Where a branch stands, in words (deadlock witnesses, explain)."""
        ...

    # -- capabilities: what the engines may do with it, and their defaults ----
    @property
    def reducible(self) -> Optional[ProtocolModel]:
        """The protocol file's model by which the reductions read its
        states (symmetry renames block ids and branches, the compact
        encoding packs a state into bytes, partial-order reduction reads the
        protocol's steps to leave some interleavings unexplored), or None
        where they cannot read them (`irreducible` says why)."""
        return None

    #: why the reductions cannot read its states, where `reducible` is None
    irreducible: str = "the checker cannot read its states"
    #: the adapter through which it runs the user's code (as messages name
    #: it: an allocator's `module:factory`), or None where it runs none (a
    #: model of the code, such as a protocol file's). A system that runs
    #: code is a harness: the checker bounds each of its calls by a
    #: deadline (`guard`), a trace it cannot rebuild means the code is not
    #: deterministic, and what the code raises is judged (allocator-error)
    adapter: Optional[str] = None
    #: what each call of that code runs inside, given the call as written
    #: (`append('a', 'a1')`): the checker sets its deadline here on a system
    #: with an `adapter` (cowcheck.adapters.deadline); by default none
    guard: Callable[[str], AbstractContextManager[None]] = staticmethod(unguarded)
    #: the engine code it runs and its release ("vLLM 0.33.0"), recorded in
    #: counterexamples; None where it names none
    version: Optional[str] = None
    #: that code's release and tree (cowcheck.model.code), or None
    code: Optional[Code] = None
    #: invariant id -> why it cannot judge that invariant (an observer its
    #: code lacks)
    unsupported: Mapping[str, str] = MappingProxyType({})


class ProtocolModel(TransitionSystem):
    """A scenario run under its protocol file."""

    @property
    def reducible(self) -> Optional[ProtocolModel]:
        """Itself: its states are plain data the reductions read
        (cowcheck.model.state), a transfer scenario's host tier included
        (the compact encoding alone has no fields for it: `encodable`)."""
        return self

    @property
    def encodable(self) -> bool:
        """Whether the compact encoding (cowcheck.model.compact) can pack
        its states: not a transfer scenario's, whose host tier, transfers
        and reports it has no fields for (--compact is then ignored)."""
        return not self.scenario.transfers

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.protocol = scenario.protocol
        self.structure = Structure(scenario.protocol)
        self.B = scenario.block_size
        self.reuse = scenario.reuse
        self.device = scenario.device
        #: the device model, with the transfer model beside it in a transfer scenario
        self.orders = scenario.orders
        self.faults = frozenset(scenario.faults)
        self.lease = scenario.lease
        self.names, self.operations, self.descendants = scenario.names, scenario.operations, scenario.lineage
        self.source = scenario.protocol.source
        self._locking = frozenset(self.structure.locking_places)   # Places compare as plain tuples
        self._may_cancel = tuple(spec.may_cancel for spec in scenario.branches)
        self.cache = scenario.cache
        self.requests = tuple(Request(name, self.cache, scenario.prompt_of(i) if self.cache else (),
                                      scenario.branches[i].source is not None, scenario.branches[i].sink is not None)
                              for i, name in enumerate(self.names))
        self._after = tuple(spec.after for spec in scenario.branches)
        self._drafts = tuple(spec.drafts for spec in scenario.branches)
        #: allocations take one of each set of indistinguishable free blocks
        #: (cowcheck.model.block.twin_classes): `up_to_block_ids`
        self.twins = False

    def up_to_block_ids(self) -> ProtocolModel:
        """This model for a search that stores states up to renaming block
        ids (block-id symmetry): its allocations under `any` reuse take one
        of each set of free blocks that differ only in their ids, the first
        of the successors that each set stands for, so that search stores
        the same states and rebuilds the same traces from far fewer
        successors. Any other search needs every choice: the model itself."""
        if self.reuse != "any" or self.scenario.transfers:
            return self         # a transfer scenario under `any` keeps block ids (cowcheck.model.reduce.symmetry)
        twin = copy.copy(self)
        twin.twins = True
        return twin

    # -- the TransitionSystem interface ---------------------------------------
    def init_state(self) -> State:
        return initial_state(self.scenario)

    def is_final(self, state: State) -> bool:
        return is_final(state)

    def successors(self, state: State) -> list[Transition]:
        out: list[Transition] = []
        lock = self.exclusive(state)
        for i, br in enumerate(state.branches):
            if br.status in ACTIVE and (lock is None or lock == i):
                self._branch_actions(state, i, br, out)
        for index in queue.ready(state, self.orders):
            op = state.queue[index]
            if type(op) is Move:
                self._transfer_ends(state, index, op, out)
                continue
            d = Draft(state, self.reuse)
            queue.complete(d, index, self.B)
            out.append(_new(Transition, (completion(op, self.B, self.names), d.freeze(), tuple(d.facts))))
        if state.tier is not None and lock is None:
            self._connector(state, out)
        return out

    def _transfer_ends(self, state: State, index: int, op: Move, out: list[Transition]) -> None:
        """A transfer completes, or, where its kind may fail, fails: two successors."""
        for ok in (True, False) if op.kind in self.faults else (True,):
            d = Draft(state, self.reuse)
            queue.complete(d, index, self.B, ok)
            out.append(_new(Transition, (transfer_completion(op, ok, self.names), d.freeze(), tuple(d.facts))))

    def _connector(self, state: State, out: list[Transition]) -> None:
        """The connector's host actions: report every pending completion;
        under `lease`, a producer's lease expires while it has sends in flight."""
        assert state.tier is not None
        if state.tier.reports:
            d = Draft(state, self.reuse)
            binds = transfers.report(d)
            out.append(_new(Transition, (Action(CONNECTOR, ConnectorOp.REPORT, "report", binds), d.freeze(), tuple(d.facts))))
        if self.lease:
            for i, name in enumerate(self.names):
                if transfers.expirable(state, i):
                    d = Draft(state, self.reuse)
                    transfers.expire(d, i)
                    out.append(_new(Transition, (Action(CONNECTOR, ConnectorOp.EXPIRE, "expire", (("branch", name),)),
                                                 d.freeze(), ())))

    def is_steady(self, state: State) -> bool:
        return is_steady(state, self.operations)

    def is_quiescent(self, state: State) -> bool:
        return is_quiescent(state)

    @staticmethod
    def is_copy_launch(action: Action) -> int:
        return action.step.startswith(_COPY_LAUNCHES)

    @staticmethod
    def hits(action: Action) -> int:
        """The prompt blocks an action served from the cache (touch-hits)."""
        if action.step != "touch-hits":
            return 0
        hits = dict(action.binds)["hits"]
        return len(hits) if isinstance(hits, tuple) else 0

    @staticmethod
    def transfer_launches(action: Action) -> int:
        """The transfers a step launched (loads, recvs, stores, sends)."""
        if action.step not in TRANSFER_LAUNCHES:
            return 0
        blocks = dict(action.binds).get("blocks")
        return len(blocks) if isinstance(blocks, tuple) else 0

    def where(self, br: Branch) -> str:
        if br.status is Status.UNBORN:
            return "unborn (its parent has not forked it)"
        if br.status is Status.WAITING and br.op is None:
            return "waiting for admission"
        place = self.place(br)
        if place is None:
            return "between operations"
        return f"at '{self.structure.step(place).text}' ({br.path or br.op})"

    # -- scheduling -------------------------------------------------------------
    @staticmethod
    def place(br: Branch) -> Optional[Place]:
        return None if br.op is None else Place(br.op, br.path, br.step)

    def program(self, br: Branch) -> tuple[Step, ...]:
        assert br.op is not None
        return self.structure.program(br.op, br.path)

    def exclusive(self, state: State) -> Optional[int]:
        """The branch holding the scheduler lock (inside the non-wait part of
        an atomic path), if any: while it does, no other branch takes a step."""
        if not self.structure.any_atomic:
            return None
        locking = self._locking
        for i, br in enumerate(state.branches):
            if br.op is not None and (br.op, br.path, br.step) in locking:
                return i
        return None

    def _branch_actions(self, state: State, i: int, br: Branch, out: list[Transition]) -> None:
        if br.op is None and br.status is Status.WAITING:
            self._admit(state, i, br, out)
            if self._may_cancel[i]:
                self._step(state, i, br, Op.CANCEL, self.protocol.cancel, 0, out)
            return
        if br.op is None:
            ops = self.operations[i]
            if br.done < len(ops):
                nxt = ops[br.done]
                if nxt.op is Op.APPEND:
                    self._decide(state, i, br, out)
                elif nxt.op is Op.FORK:
                    self._step(state, i, br, Op.FORK, self.protocol.fork, 0, out)
                else:
                    self._verify(state, i, br, nxt.arg, out)
            else:
                self._step(state, i, br, Op.FINISH, self.protocol.finish, 0, out)
            if self._may_cancel[i]:
                self._step(state, i, br, Op.CANCEL, self.protocol.cancel, 0, out)
            return
        self._step(state, i, br, br.op, self.structure.program(br.op, br.path), br.step, out)
        if self._may_cancel[i] and self.structure.cancellable(Place(br.op, br.path, br.step)):
            self._step(state, i, br, Op.CANCEL, self.protocol.cancel, 0, out)

    def _admit(self, state: State, i: int, br: Branch, out: list[Transition]) -> None:
        """A waiting request's admission starts once its `after` request is
        done; an atomic one only when its steps up to its first wait can
        all run now, one after another (V1 checks capacity before it
        touches or allocates anything: a request it cannot admit stays
        waiting and holds nothing)."""
        after = self._after[i]
        if after is not None and state.branches[after].status not in DONE:
            return
        admit = self.protocol.admit
        if self.protocol.atomic_admit and not self._admissible(state, i, br, admit):
            return
        self._step(state, i, br, Op.ADMIT, admit, 0, out)

    def _admissible(self, state: State, i: int, br: Branch, admit: tuple[Step, ...]) -> bool:
        """Whether the admission's steps up to its first wait are each
        enabled in turn (each applied with its first choice: whether an
        allocation is enabled depends only on how many blocks are free)."""
        for step in admit:
            if step.op in WAITS:
                return True
            options = steps.choices(state, i, step, self.reuse, self.source, self.requests[i], self.twins)
            if not options:
                return False
            d = Draft(state, self.reuse)
            after, _ = steps.apply(d, i, br, step, options[0], self.B, self.requests[i], self.source)
            if after is None:
                return True     # a kernel-table-miss: the admission starts, and its prefill reports it
            br = d.branches[i] = after
            state = d.freeze()
        return True

    def _decide(self, state: State, i: int, br: Branch, out: list[Transition]) -> None:
        fill = br.pos % self.B
        boundary = fill == 0
        index = br.pos // self.B
        tail = None if boundary or index >= len(br.working) else br.working[index]
        rule = self.choose(state, tail, boundary, fill)
        if rule is None:
            return  # no rule matches: the branch cannot proceed
        after = _new(Branch, br[:3] + (Op.APPEND, rule.path, 0, tail, None) + br[8:])
        branches = state.branches[:i] + (after,) + state.branches[i + 1:]
        action = Action(self.names[i], Op.APPEND, "decide", (("path", rule.path), ("tail", tail)))
        out.append(Transition(action, _new(State, (state.blocks, state.free, branches, state.queue, state.code, state.tier)), ()))

    def _verify(self, state: State, i: int, br: Branch, drafts: int, out: list[Transition]) -> None:
        """The rollback's first action: the verifier accepts j of the drafts,
        each j its own successor, and binds `rejected`."""
        for accepted in range(drafts + 1):
            rejected = drafts - accepted
            # the accepted drafts are verified now (cache scenarios keep the count)
            verified = br.pos - rejected if self.cache else br.verified
            after = _new(Branch, br[:3] + (Op.ROLLBACK, None, 0) + br[6:12] + (rejected, verified) + br[14:])
            if not self.protocol.rollback:       # an empty [rollback]: the operation ends here
                after = self._end(after, Op.ROLLBACK)
            branches = state.branches[:i] + (after,) + state.branches[i + 1:]
            action = Action(self.names[i], Op.ROLLBACK, "verify", (("accepted", accepted), ("rejected", rejected)))
            out.append(Transition(action, _new(State, (state.blocks, state.free, branches, state.queue, state.code, state.tier)), ()))

    def choose(self, state: State, tail: Optional[int], boundary: bool, fill: int) -> Optional[Rule]:
        def counter(field: str) -> Callable[[Optional[int]], int]:
            def read(block: Optional[int]) -> int:
                if block is None:
                    raise SpecError(self.source, "append.rules", f"a condition reads {field}(tail) where no tail is bound (at a block boundary); test `boundary` first")
                return int(getattr(state.blocks[block], field))
            return read

        env = environment(boundary, fill, self.B, {"tail": tail}, counter("refcount"), counter("holds"))
        for rule in self.protocol.rules:
            if rule.when.evaluate(env):
                return rule
        return None

    def _step(self, state: State, i: int, br: Branch, op: Op, program: tuple[Step, ...], k: int,
              out: list[Transition]) -> None:
        step = program[k]
        options = steps.choices(state, i, step, self.reuse, self.source, self.requests[i], self.twins)
        if not options:
            return
        child = self.operations[i][br.done].arg if op is Op.FORK else None
        draft = op is Op.APPEND and self._drafts[i][br.done]
        if op is not br.op:  # starting finish, cancel, fork or admit (a cancel abandons the append, keeping its locals)
            status = Status.RUNNING if op is Op.ADMIT else br.status
            br = _new(Branch, (status, br.pos, br.done, op, None, 0) + br[6:])
        name, last = self.names[i], k + 1 == len(program)
        for choice in options:
            d = Draft(state, self.reuse)
            after, binds = steps.apply(d, i, br, step, choice, self.B, self.requests[i], self.source, child, draft)
            action = _new(Action, (name, op, step.text, binds))
            if after is None:
                out.append(_new(Transition, (action, None, tuple(d.facts))))
                continue
            if not last:
                after = _new(Branch, after[:5] + (k + 1,) + after[6:])
            else:
                after = self._end(after, op)
                if op is Op.CANCEL:
                    cancel_unborn(d.branches, self.descendants[i])
            d.branches[i] = after
            out.append(_new(Transition, (action, d.freeze(), tuple(d.facts))))

    @staticmethod
    def _end(br: Branch, op: Op) -> Branch:
        """The branch once operation `op` is done: locals cleared, and the
        program moved on (or the branch finished or cancelled)."""
        done = br.done + (op in PROGRAM_OPS)
        return _new(Branch, (STATUS_AFTER[op], br.pos, done, None, None, 0, None, None, br.working, br.published, br.writes,
                             br.seq, None, br.verified, (), (), ()))
