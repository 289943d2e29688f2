"""A protocol's structure, worked out once: the operations a branch runs, the
places inside them, and what the scheduling rules say about each place.

The explicit model (cowcheck.model.system), the z3 encoding, its lemmas and
its static bounds all read a protocol through this one description, so a new
step or operation is taught to it once, and each engine only adds its
handler for the new step (docs/semantics.md#scheduling)."""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import NamedTuple, Optional

from cowcheck.model.protocol import Protocol, Step
from cowcheck.model.stepkinds import COPIES, WAITS


class Op(StrEnum):
    """A branch's operations. `finish`, `cancel`, `fork` and `admit` have no
    start action of their own: their first step starts them. An append
    starts with `decide`, a rollback with `verify`
    (docs/semantics.md#branch-programs). `admit` is a cache scenario's
    request's first operation (docs/semantics.md#prefix-caching). `fence`
    is allocator code only: the engine tells the allocator that a device op
    completed (docs/semantics.md#engines-that-wait-and-allocators-that-hold)."""
    APPEND = "append"
    FINISH = "finish"
    CANCEL = "cancel"
    FORK = "fork"
    ROLLBACK = "rollback"
    ADMIT = "admit"
    FENCE = "fence"


#: the operations whose steps are the protocol's own tables (not append paths)
TABLES = (Op.FINISH, Op.CANCEL, Op.FORK, Op.ROLLBACK, Op.ADMIT)


class DeviceOp(StrEnum):
    """The device's actions: an in-flight op completes (a transfer may
    also fail, docs/semantics.md#transfers)."""
    COPY_COMPLETE = "copy-complete"
    KERNEL_COMPLETE = "kernel-complete"
    TRANSFER_COMPLETE = "transfer-complete"
    TRANSFER_FAIL = "transfer-fail"


class ConnectorOp(StrEnum):
    """The KV connector's host actions (docs/semantics.md#transfers): it
    reports the completed transfers, and a producer's lease expires."""
    REPORT = "report"
    EXPIRE = "expire"


class EngineOp(StrEnum):
    """The engine loop's own host calls under the scheduler harness
    (docs/semantics.md#scheduler-harness): one scheduler step, and the
    processing of a step's output."""
    SCHEDULE = "schedule"
    OUTPUT = "output"


class Place(NamedTuple):
    """Where a branch is inside an operation: its next step is
    `program(op, path)[step]`. `path` is the append path chosen by decide
    (None for the other operations)."""
    op: Op
    path: Optional[str]
    step: int


class Structure:
    """The places of a protocol and the scheduling facts about each:

    - `locks(place)`: inside the non-wait part of an atomic path; while a
      branch is there no other branch acts (a single-threaded scheduler);
    - `cancellable(place)`: a `may_cancel` branch may be cancelled here
      (inside an append, at its `wait-kernel`), besides between operations;
    - `is_last(place)`: the step ends its operation."""

    def __init__(self, protocol: Protocol):
        self.protocol = protocol
        # every operation's steps, looked up per action by the model
        self._programs: dict[tuple[Op, Optional[str]], tuple[Step, ...]] = {
            (Op.FINISH, None): protocol.finish, (Op.CANCEL, None): protocol.cancel,
            (Op.FORK, None): protocol.fork, (Op.ROLLBACK, None): protocol.rollback, (Op.ADMIT, None): protocol.admit}
        for path in protocol.paths.values():
            self._programs[Op.APPEND, path.name] = path.steps
        places = [Place(Op.APPEND, p.name, k) for p in protocol.paths.values() for k in range(len(p.steps))]
        places += [Place(op, None, k) for op in TABLES for k in range(len(self.program(op)))]
        self.places: tuple[Place, ...] = tuple(places)

    def program(self, op: Op, path: Optional[str] = None) -> tuple[Step, ...]:
        assert op is not Op.APPEND or path is not None, "an append's program is its path's"
        return self._programs[op, path if op is Op.APPEND else None]

    def atomic(self, op: Op, path: Optional[str] = None) -> bool:
        """Whether the operation (an append: its path) runs under the scheduler lock."""
        if op is Op.APPEND:
            assert path is not None
            return self.protocol.paths[path].atomic
        return ((op is Op.FORK and self.protocol.atomic_fork) or (op is Op.ROLLBACK and self.protocol.atomic_rollback)
                or (op is Op.ADMIT and self.protocol.atomic_admit))

    def step(self, place: Place) -> Step:
        return self.program(place.op, place.path)[place.step]

    def is_last(self, place: Place) -> bool:
        return place.step + 1 == len(self.program(place.op, place.path))

    def locks(self, place: Place) -> bool:
        return self.atomic(place.op, place.path) and self.step(place).op not in WAITS

    @cached_property
    def any_atomic(self) -> bool:
        protocol = self.protocol
        return (any(p.atomic for p in protocol.paths.values()) or protocol.atomic_fork or protocol.atomic_rollback
                or (protocol.atomic_admit and bool(protocol.admit)))

    @cached_property
    def copy_destinations(self) -> frozenset[str]:
        """The locals some `copy` / `copy-block` step writes into (a correct
        protocol copies into `new` only)."""
        return frozenset(step.args[1] for program in self._programs.values() for step in program
                         if step.op in COPIES)

    def cancellable(self, place: Place) -> bool:
        """Inside an append at its `wait-kernel`, or inside an admission at
        its `wait-transfers` (an abort while loading or receiving)."""
        op = self.step(place).op
        return (place.op is Op.APPEND and op == "wait-kernel") or (place.op is Op.ADMIT and op == "wait-transfers")

    @cached_property
    def locking_places(self) -> tuple[Place, ...]:
        return tuple(p for p in self.places if self.locks(p))

    @cached_property
    def cancel_places(self) -> tuple[Place, ...]:
        """The places inside an operation where a cancel may start (between
        operations it always may)."""
        return tuple(p for p in self.places if self.cancellable(p))
