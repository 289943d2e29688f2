"""The device models: which in-flight operation may complete next, and what a
completion does (docs/semantics.md#device-actions).

`async` lets any in-flight op complete; `stream` is one FIFO queue; `streams`
is a FIFO copy stream beside an independent FIFO compute stream."""

from __future__ import annotations

from cowcheck.model.block import CopyDone, Draft, KernelDone, write_slots
from cowcheck.model.state import Copy, InFlight, State, read
from cowcheck.model.structure import DeviceOp


def ready(state: State, device: str) -> list[int]:
    """Queue indices of the ops that may complete now."""
    queue = state.queue
    if not queue:
        return []
    if device == "async":
        return list(range(len(queue)))
    if device == "stream":
        return [0]
    first_copy = next((i for i, q in enumerate(queue) if type(q) is Copy), None)
    first_kernel = next((i for i, q in enumerate(queue) if type(q) is not Copy), None)
    return sorted(i for i in (first_copy, first_kernel) if i is not None)


def complete(d: Draft, index: int, block_size: int) -> None:
    op = d.queue.pop(index)
    if type(op) is Copy:
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
