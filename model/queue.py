"""The device queue: which in-flight ops may complete now, under the
scenario's device model (cowcheck.model.device), and what a completion does
(docs/semantics.md#device-actions)."""

from __future__ import annotations

from typing import Union

from cowcheck.model import transfers
from cowcheck.model.block import CopyDone, Draft, KernelDone, write_slots
from cowcheck.model.device import OpKind, Orders, Ordering
from cowcheck.model.state import Copy, Kernel, Move, State, read

_LOCAL, _REMOTE = OpKind.LOCAL, OpKind.REMOTE


def ready(state: State, device: Union[Ordering, Orders]) -> list[int]:
    """Queue indices of the ops that may complete now: those that no op
    launched before them and still in flight is ordered before (`device`:
    the device model, or in a transfer scenario the device and transfer
    models together, cowcheck.model.device.Orders)."""
    queue = state.queue
    if device.unordered:
        return list(range(len(queue)))
    before = device.before
    out: list[int] = []
    launched: set[OpKind] = set()       # the kinds of the ops before index i
    for i, op in enumerate(queue):
        t = type(op)
        kind = OpKind.COPY if t is Copy else OpKind.KERNEL if t is Kernel else _LOCAL if op.kind.local else _REMOTE  # type: ignore[union-attr]
        if launched.isdisjoint(before[kind]):
            out.append(i)
        if kind in device.barriers:
            break                       # nothing after it may complete
        launched.add(kind)
    return out


def complete(d: Draft, index: int, block_size: int, ok: bool = True) -> None:
    """The op at `index` completes (a transfer: succeeds, or with `ok`
    False fails, docs/semantics.md#transfers)."""
    op = d.queue.pop(index)
    if type(op) is Move:
        transfers.complete(d, op, ok, block_size)
    elif type(op) is Copy:
        # the copy reads its source now, not when it was launched
        write_slots(d, op.dst, 0, d.blocks[op.src].slots[:op.n])
        d.facts.append(CopyDone(op))
    else:
        if op.span == 1:
            write_slots(d, op.snapshot[op.pos // block_size], op.pos % block_size, (op.token,))
        else:       # a prefill: its positions, block by block
            for p in op.written:
                write_slots(d, op.snapshot[p // block_size], p % block_size, (op.expected[p],))
        reads = read(tuple(d.blocks), op.snapshot, op.pos + 1, block_size)
        d.facts.append(KernelDone(op, reads))
