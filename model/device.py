"""The device models: which in-flight operation may complete next, and what a
completion does (docs/semantics.md#device-actions).

A device model is an *ordering*: it says, for an operation launched earlier
and one launched later, whether the earlier one, while still in flight, keeps
the later one from completing (it is *ordered before* it). An in-flight op
may complete when no op launched before it and still in flight is ordered
before it. `async` orders nothing; `stream` orders every op before every
later one (one FIFO queue); `streams` orders a copy before a later copy and a
kernel before a later kernel (a FIFO copy stream beside an independent FIFO
compute stream).

Every engine asks the `Device` (its `orders`, `unordered`, `rank`), never its
name, so a new device model is one new value of `Device`. The transfer
models of the design (`transfer = stream | own-stream | own-stream-fenced |
nic`) are the same shape: a second `Ordering` enum, `Transfer`, whose values
order the transfer kinds (an `OpKind` for local and one for remote
transfers) before each other and after kernels; an op is then ordered before
another when the scenario's device or its transfer model orders them
(docs/explanation/architecture.md#adding-a-device-or-transfer-model)."""

from __future__ import annotations

from enum import Enum, StrEnum
from itertools import product
from typing import Any, Self

from cowcheck.model.block import CopyDone, Draft, KernelDone, write_slots
from cowcheck.model.fields import choice
from cowcheck.model.state import Copy, InFlight, State, read


class OpKind(Enum):
    """What an ordering model sees of an in-flight op: its kind."""
    COPY = "copy"
    KERNEL = "kernel"


def kind_of(op: InFlight) -> OpKind:
    return OpKind.COPY if type(op) is Copy else OpKind.KERNEL


#: which kinds of op an ordering puts before which: (earlier, later) pairs
Pairs = frozenset[tuple[OpKind, OpKind]]


class Ordering(StrEnum):
    """An ordering model, named in files and JSON by its value (a string, so a
    scenario serialises and pickles as the name it was read from). Its
    subclasses list the values, each as (name, rank, pairs, description):
    `rank` orders them from the simplest to explain to the most permissive
    (the shrinker tries simpler ones first), `pairs` are the (earlier,
    later) kinds it orders, `description` one line for the docs and the
    command line's help."""
    rank: int
    pairs: Pairs
    description: str

    def __new__(cls, name: str, rank: int, pairs: Pairs, description: str) -> Self:
        member = str.__new__(cls, name)
        member._value_ = name
        member.rank, member.pairs, member.description = rank, pairs, description
        return member

    def orders(self, earlier: OpKind, later: OpKind) -> bool:
        """Whether an op of kind `earlier`, while in flight, keeps an op of
        kind `later` launched after it from completing."""
        return (earlier, later) in self.pairs

    @property
    def unordered(self) -> bool:
        """Whatever is in flight may complete next: the queue's order decides nothing."""
        return not self.pairs

    @classmethod
    def named(cls, value: Any, source: str, key: str) -> Self:
        """The value called `value`, or bad input in one line naming
        `source`, `key` and the allowed names."""
        name = choice({key: value}, key, tuple(cls), value, source)
        return next(member for member in cls if member == name)

    @classmethod
    def help(cls) -> str:
        """Every value with its description, for the command line's help."""
        return "; ".join(f"{m.value}: {m.description}" for m in cls)


class Device(Ordering):
    """The device models of copies and kernels (docs/semantics.md#device-models)."""
    ASYNC = ("async", 2, Pairs(),
             "any in-flight op may complete next")
    STREAM = ("stream", 0, frozenset(product(OpKind, OpKind)),
              "one FIFO queue: ops complete in launch order")
    STREAMS = ("streams", 1, frozenset({(OpKind.COPY, OpKind.COPY), (OpKind.KERNEL, OpKind.KERNEL)}),
               "copies FIFO, kernels FIFO, the two independent")


def ready(state: State, device: Ordering) -> list[int]:
    """Queue indices of the ops that may complete now: those that no op
    launched before them and still in flight is ordered before."""
    queue = state.queue
    if device.unordered:
        return list(range(len(queue)))
    out: list[int] = []
    launched: set[OpKind] = set()       # the kinds of the ops before index i
    for i, op in enumerate(queue):
        kind = kind_of(op)
        if not any(device.orders(earlier, kind) for earlier in launched):
            out.append(i)
        launched.add(kind)
    return out


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
