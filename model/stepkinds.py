"""Step kinds: every step a protocol may list, defined once.

A `StepKind` says what the rest of the code asks of a step without running
it: its arguments, the tables it may stand in, whether it launches a device
op, waits, allocates, needs a cache scenario, is local enough for
partial-order reduction or never blocks, and its one-line effect for the
manual (docs/reference/steps.md is built from `STEPS`; docs/semantics.md#steps
has the exact effects). The sets other modules test a step's op against
(`ARITY`, `WAITS`, `COPIES`, ...) are derived from `STEPS` below, so no list
of step names is written twice.

Adding a step kind is its entry here, plus its effect in each engine: the
explicit model (cowcheck.model.steps: `choices` and `apply`), the z3
engines (a `handles` handler in cowcheck.symbolic.steps), its sentence
(cowcheck.views.words), and, where it launches or waits, the partial-order
reduction (cowcheck.model.reduce.ample) and the z3 engines' bounds.
tests/test_model_step_kinds.py names whichever one is missing."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Mapping, Optional

#: the tables of a protocol file that hold steps (docs/reference/protocols.md)
TABLES = ("admit", "append", "cancel", "finish", "fork", "rollback")


class Launch(Enum):
    """What a step puts in the device queue."""
    COPY = "copy"
    KERNEL = "kernel"
    #: a store, load, recv or send (docs/semantics.md#transfers)
    TRANSFER = "transfer"


class Once(Enum):
    """How many times a step stands in its one table."""
    EXACTLY = "exactly one"
    AT_MOST = "at most one"


@dataclass(frozen=True)
class StepKind:
    name: str
    #: the locals it takes, as the manual names them (X, Y): each is `tail` or `new`
    args: tuple[str, ...]
    #: what it does, in one line of the manual's Markdown
    effect: str
    #: the tables it may stand in: all of them, or the one whose own local it uses
    tables: tuple[str, ...] = TABLES
    #: how many times it stands in that one table, and why (said when it does not)
    once: Optional[Once] = None
    why: str = ""
    launches: Optional[Launch] = None
    #: enabled only once some device op has completed (a wait of the atomic rule)
    waits: bool = False
    #: takes blocks off the free list (a free choice under `any` reuse)
    allocates: bool = False
    #: only a cache scenario (cache = "prefix") may run it
    cache_only: bool = False
    #: touches only its branch's own locals and tables, so partial-order
    #: reduction may explore it alone (a launch may be so on the async
    #: device, where nothing orders the queue: see cowcheck.model.reduce.ample)
    local: bool = False
    #: always enabled: it may stand after the first wait of an atomic [admit]
    never_blocks: bool = False

    @property
    def home(self) -> Optional[str]:
        """The one table it may stand in (None: any table)."""
        return self.tables[0] if len(self.tables) == 1 else None

    @property
    def usage(self) -> str:
        """As the manual writes it: `copy X Y`."""
        return " ".join((self.name,) + self.args)


def _kinds(*kinds: StepKind) -> Mapping[str, StepKind]:
    return MappingProxyType({k.name: k for k in kinds})


#: every step kind, in the order the manual and the error messages list them
STEPS: Mapping[str, StepKind] = _kinds(
    StepKind("alloc", ("X",), "pop a free block into local X (`tail` or `new`), refcount 1; waits while none is free",
             allocates=True),
    StepKind("incref", ("X",), "refcount + 1", never_blocks=True),
    StepKind("decref", ("X",), "refcount - 1; at 0 with no holds the block is freed; decref at 0 is an underflow",
             never_blocks=True),
    StepKind("hold", ("X",), "holds + 1", never_blocks=True),
    StepKind("release", ("X",), "holds - 1; a release that leaves refcount 0 and holds 0 frees the block",
             never_blocks=True),
    StepKind("copy", ("X", "Y"), "launch an async copy of X's valid slots (pos mod B of them) into Y",
             launches=Launch.COPY, never_blocks=True),
    StepKind("copy-block", ("X", "Y"), "launch an async copy of all B slots of X into Y",
             launches=Launch.COPY, never_blocks=True),
    StepKind("wait-copy", ("Y",), "wait until no copy into Y is in flight", waits=True, local=True),
    StepKind("append", ("X",), "add X at the end of the working table", local=True, never_blocks=True),
    StepKind("replace", ("X", "Y"), "put Y where X is in the working table", local=True, never_blocks=True),
    StepKind("publish", (), "the published table (what kernels use) := the working table", local=True,
             never_blocks=True),
    StepKind("write", (), "launch the kernel for the next position through the published table",
             tables=("append",), once=Once.EXACTLY, launches=Launch.KERNEL, never_blocks=True),
    StepKind("wait-kernel", (), "wait until none of the branch's kernels is in flight", waits=True, local=True),
    StepKind("decref-all", (), "decref every block of the working table, then clear both tables", never_blocks=True),
    StepKind("check-output", (), "compare what its working table reads with the branch's sequence", never_blocks=True),
    StepKind("incref-all", (), "incref every entry of the working table, in order"),
    StepKind("share", (), "the child is born: its tables := the parent's working table, its pos and sequence := "
             "the parent's; no refcount changes", tables=("fork",), once=Once.EXACTLY, why=" (the child is born there)"),
    StepKind("rewind", (), "pos -= rejected, the sequence loses its last `rejected` tokens (their slots keep them "
             "as garbage)", tables=("rollback",), once=Once.AT_MOST),
    StepKind("trim", (), "from the end, decref and drop every working-table entry at index >= ceil(pos / B)"),
    # prefix caching (docs/semantics.md#prefix-caching)
    StepKind("lookup", (), "hits := the blocks the cache maps the keys of the prompt's first i * B tokens to, for "
             "i = 1, 2, ... while each is a key, at most (L - 1) // B of them (the last prompt token is always "
             "recomputed); no refcount changes", tables=("admit",), cache_only=True, never_blocks=True),
    StepKind("touch-hits", (), "each hit, in order: off the free list if it is on it, refcount + 1; the hits become "
             "the first entries of the working table", tables=("admit",), cache_only=True, never_blocks=True),
    StepKind("alloc-prompt", (), "allocate ceil(L / B) - len(hits) blocks, appended to the working table in order, "
             "evicting as `alloc` does; waits until that many are free", tables=("admit",), allocates=True,
             cache_only=True),
    StepKind("prefill", (), "launch one kernel that writes positions len(hits) * B .. L - 1 through the published "
             "table, then reads 0 .. L - 1; pos := L, verified := L", tables=("admit",), once=Once.EXACTLY,
             why=" (the prompt's kernel)", launches=Launch.KERNEL, cache_only=True, never_blocks=True),
    StepKind("cache-full", (), "key each working-table entry i with (i + 1) * B <= verified and no key with the "
             "sequence's first (i + 1) * B tokens, unless another block holds that key already (a duplicate: it "
             "stays unkeyed)", cache_only=True, never_blocks=True),
    StepKind("cache-drafts", (), "`cache-full`, counting pos instead of verified (a bug to check: drafts get keyed)",
             cache_only=True, never_blocks=True),
    StepKind("alloc-no-evict", ("X",), "`alloc X` without the eviction: the block keeps its key and the cache keeps "
             "pointing at it (a bug to check)", allocates=True, cache_only=True),
    # transfers (docs/semantics.md#transfers): each one action, even when it launches nothing
    StepKind("host-lookup", (), "host-hits := the host blocks keyed with the prompt's first i * B tokens, for i = "
             "len(hits) + 1, ... while each is a host key, at most (L - 1) // B; no pin changes", tables=("admit",),
             cache_only=True, never_blocks=True),
    StepKind("load", (), "for each host hit k: launch a load of it into working-table entry len(hits) + k, pin the "
             "host block, hold the GPU block, append the block to loads", tables=("admit",),
             launches=Launch.TRANSFER, cache_only=True, never_blocks=True),
    StepKind("recv", (), "a `source = \"remote\"` request: for each full prompt block from len(hits) + len(loads) on, "
             "launch a recv of its prompt tokens into that entry (no holds) and append the block to loads; else "
             "nothing", tables=("admit",), launches=Launch.TRANSFER, cache_only=True, never_blocks=True),
    StepKind("store", (), "for each keyed working-table block whose key no host block has and no store carries: "
             "allocate the host free list's front (evicting its key, pins 1), hold the GPU block, launch a store; "
             "stops when the host free list is empty", launches=Launch.TRANSFER, cache_only=True, never_blocks=True),
    StepKind("store-free", (), "`store` over the GPU free list's keyed blocks, each taken off the free list and held",
             launches=Launch.TRANSFER, cache_only=True, never_blocks=True),
    StepKind("send", (), "a `sink = \"remote\"` request: launch a send of each table entry below ceil(pos / B), "
             "expecting its sequence there (no holds); else nothing", launches=Launch.TRANSFER, cache_only=True,
             never_blocks=True),
    StepKind("wait-transfers", (), "wait until every load, recv and send the request launched has been reported",
             waits=True, cache_only=True),
    StepKind("store-keyed", (), "`store`, keying the host block at launch (a bug to check)", launches=Launch.TRANSFER,
             cache_only=True, never_blocks=True),
)


def _named(*flags: str) -> tuple[str, ...]:
    """The steps with every one of the given flags set, in STEPS order."""
    return tuple(name for name, kind in STEPS.items() if all(getattr(kind, flag) for flag in flags))


#: step name -> the number of locals it takes (each `tail` or `new`)
ARITY = MappingProxyType({name: len(kind.args) for name, kind in STEPS.items()})
WAITS = _named("waits")
COPIES = tuple(name for name, kind in STEPS.items() if kind.launches is Launch.COPY)
KERNEL_LAUNCHES = tuple(name for name, kind in STEPS.items() if kind.launches is Launch.KERNEL)
#: the steps that launch transfers (docs/semantics.md#transfers)
TRANSFER_LAUNCHES = tuple(name for name, kind in STEPS.items() if kind.launches is Launch.TRANSFER)
#: the steps of transfers, each one action in a transfer scenario and a no-op in any other cache scenario
TRANSFER_STEPS = ("host-lookup",) + TRANSFER_LAUNCHES + ("wait-transfers",)
LAUNCHES = tuple(name for name, kind in STEPS.items() if kind.launches is not None)
#: the steps that take free blocks; ALLOCS: those that pop one into a local
ALLOCATING = _named("allocates")
ALLOCS = tuple(name for name in ALLOCATING if STEPS[name].args)
#: the steps that need a cache scenario (cache = "prefix")
CACHE_STEPS = _named("cache_only")
#: the step kinds partial-order reduction may explore alone (launches too, on the async device)
LOCAL_STEPS = frozenset(_named("local"))
#: the steps that may stand after the first wait of an atomic [admit]
NEVER_BLOCKS = frozenset(_named("never_blocks"))
