"""The device models: which in-flight operation may complete next
(docs/semantics.md#device-models); cowcheck.model.queue applies them to a
state's queue and says what a completion does.

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

from cowcheck.model.fields import choice


class OpKind(Enum):
    """What an ordering model sees of an in-flight op: its kind. A store or
    a load is a *local* transfer, a recv or a send a *remote* one
    (docs/semantics.md#transfers)."""
    COPY = "copy"
    KERNEL = "kernel"
    LOCAL = "local transfer"
    REMOTE = "remote transfer"


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
    #: whatever is in flight may complete next: the queue's order decides nothing
    unordered: bool
    #: for each kind, the kinds of earlier ops ordered before it (what `ready` reads, per state)
    before: dict[OpKind, frozenset[OpKind]]
    #: the kinds of op that, in flight, hold back every op launched after them
    barriers: frozenset[OpKind]

    def __new__(cls, name: str, rank: int, pairs: Pairs, description: str) -> Self:
        member = str.__new__(cls, name)
        member._value_ = name
        member.rank, member.pairs, member.description = rank, pairs, description
        member.unordered = not pairs
        member.before = {k: frozenset(e for e, later in pairs if later is k) for k in OpKind}
        kinds = {k for pair in pairs for k in pair}    # the kinds it speaks of (a device: copies and kernels)
        member.barriers = frozenset(e for e in kinds if all((e, k) in pairs for k in kinds))
        return member

    def orders(self, earlier: OpKind, later: OpKind) -> bool:
        """Whether an op of kind `earlier`, while in flight, keeps an op of
        kind `later` launched after it from completing."""
        return (earlier, later) in self.pairs

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
    STREAM = ("stream", 0, frozenset(product((OpKind.COPY, OpKind.KERNEL), repeat=2)),
              "one FIFO queue: ops complete in launch order")
    STREAMS = ("streams", 1, frozenset({(OpKind.COPY, OpKind.COPY), (OpKind.KERNEL, OpKind.KERNEL)}),
               "copies FIFO, kernels FIFO, the two independent")


class Transfer(Ordering):
    """The transfer models: how stores and loads (local transfers) are
    ordered against kernels and each other (docs/semantics.md#transfers).
    Recvs and sends are never ordered. `stream` orders nothing of its own:
    a local transfer counts as a kernel for the device model (`as_kernel`)."""
    STREAM = ("stream", 0, Pairs(),
              "stores and loads run on the compute stream: a kernel for the device model")
    OWN_STREAM = ("own-stream", 1, frozenset({(OpKind.LOCAL, OpKind.LOCAL)}),
                  "stores and loads FIFO among themselves, unordered against copies and kernels")
    OWN_STREAM_FENCED = ("own-stream-fenced", 2, frozenset({(OpKind.LOCAL, OpKind.LOCAL), (OpKind.KERNEL, OpKind.LOCAL)}),
                         "as own-stream, and each waits for every kernel launched before it")
    NIC = ("nic", 3, Pairs(),
           "a store or load completes at any time")

    @property
    def as_kernel(self) -> bool:
        """A local transfer counts as a kernel for the device model."""
        return self is Transfer.STREAM


class Orders:
    """A device model and a transfer model together: an op is ordered before
    a later one when the device orders them (a local transfer counting as
    a kernel under `transfer = "stream"`) or the transfer model does. It
    answers what `ready` asks of an Ordering (`unordered`, `before`,
    `barriers`), over every kind of op."""

    def __init__(self, device: Device, transfer: Transfer):
        pairs = set(device.pairs) | transfer.pairs
        if transfer.as_kernel:
            def as_kernel(k: OpKind) -> tuple[OpKind, ...]:
                return (OpKind.KERNEL, OpKind.LOCAL) if k is OpKind.KERNEL else (k,)
            pairs |= {(e, later) for a, b in device.pairs for e in as_kernel(a) for later in as_kernel(b)}
        self.device, self.transfer = device, transfer
        self.pairs: Pairs = frozenset(pairs)
        self.unordered = not pairs
        self.before = {k: frozenset(e for e, later in pairs if later is k) for k in OpKind}
        self.barriers = frozenset(e for e in OpKind if all((e, k) in pairs for k in OpKind))

    def orders(self, earlier: OpKind, later: OpKind) -> bool:
        return (earlier, later) in self.pairs
