"""Actions and transitions: what one atomic step of the system is called in
traces and files, and what it led to."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

from cowcheck.model.block import Fact
from cowcheck.model.state import Copy, InFlight, Move, State
from cowcheck.model.structure import ConnectorOp, DeviceOp, EngineOp, Op

DEVICE = "device"
#: the actor of `report` and `expire` (docs/semantics.md#transfers)
CONNECTOR = "connector"
#: the actor of the scheduler harness's `schedule` and `output` (docs/semantics.md#scheduler-harness)
ENGINE = "engine"
#: a named tuple from a tuple of its fields, without the call through its __new__
_new = tuple.__new__
Bound = Union[int, str, None, tuple[int, ...], tuple[str, ...]]


class Action(NamedTuple):
    """One atomic action: a branch's decide or step, or a device completion.
    `binds` records the block ids involved, so a trace replays exactly."""
    actor: str                           # branch name, "device", "connector" or "engine"
    op: Union[Op, DeviceOp, ConnectorOp, EngineOp]
    step: str                            # "decide", a step's text, or the device op
    binds: tuple[tuple[str, Bound], ...]

    def to_json(self) -> dict[str, Any]:
        return {"actor": self.actor, "op": str(self.op), "step": self.step, "binds": dict(self.binds)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Action":
        binds = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in data["binds"].items())
        op = data["op"]
        kind: Union[Op, DeviceOp, ConnectorOp, EngineOp] = (
            DeviceOp(op) if op in DeviceOp.__members__.values() else ConnectorOp(op) if op in ConnectorOp.__members__.values()
            else EngineOp(op) if op in EngineOp.__members__.values() else Op(op))
        return Action(data["actor"], kind, data["step"], binds)

    def __str__(self) -> str:
        binds = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.binds)
        who = self.actor if self.actor in (DEVICE, CONNECTOR, ENGINE) else f"{self.actor} ({self.op})"
        return f"{who}: {self.step}" + (f" [{binds}]" if binds else "")


class Transition(NamedTuple):
    action: Action
    state: Optional[State]   # None: the action was attempted but leads nowhere (kernel-table-miss)
    facts: tuple[Fact, ...]


def completion(op: InFlight, block_size: int, names: tuple[str, ...]) -> Action:
    """The device action that completes an in-flight op."""
    assert type(op) is not Move, "a transfer's completion is transfer_completion"
    if type(op) is Copy:
        return _new(Action, (DEVICE, DeviceOp.COPY_COMPLETE, "copy-complete", (("src", op.src), ("dst", op.dst), ("n", op.n))))
    pos, snapshot = op.pos, op.snapshot
    binds: tuple[tuple[str, Bound], ...] = (("branch", names[op.branch]), ("pos", pos), ("token", op.token),
                                            ("block", snapshot[pos // block_size]), ("slot", pos % block_size), ("snapshot", snapshot))
    if op.span > 1:    # a prefill: the first position it writes, and every block it writes
        first = op.pos - op.span + 1
        binds += (("from", first), ("blocks", tuple(dict.fromkeys(snapshot[p // block_size] for p in op.written))))
    return _new(Action, (DEVICE, DeviceOp.KERNEL_COMPLETE, "kernel-complete", binds))


def transfer_completion(move: Move, ok: bool, names: tuple[str, ...]) -> Action:
    """The device action that completes (`ok`) or fails a transfer."""
    binds: tuple[tuple[str, Bound], ...] = (("kind", str(move.kind)), ("branch", names[move.owner]), ("block", move.block),
                                            ("host", move.host))
    if move.key is not None:
        binds += (("key", move.key),)
    if move.kind == "send":
        binds += (("index", move.entry),)
    op = DeviceOp.TRANSFER_COMPLETE if ok else DeviceOp.TRANSFER_FAIL
    return _new(Action, (DEVICE, op, str(op), binds))
