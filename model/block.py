"""Reference counting, holds and the free list: the rules that decide when a
block goes back to the pool (docs/semantics.md#steps: incref, decref, hold, release,
alloc).

They act on a `Draft`, the state being edited by one action, and record what
happened as facts (`freed`, `underflow`) for the invariants to judge."""

from __future__ import annotations

import bisect

from typing import NamedTuple, Optional, Union

from cowcheck.model.state import Block, Branch, Copy, Kernel, Move, State, Tier

#: a named tuple from a tuple of its fields, without the call through its
#: generated __new__ (every action builds a few)
_new = tuple.__new__


# The facts an action can produce: what the invariants are judged on. An
# action that produces none costs no invariant work. The z3 engines carry
# the same types, with symbolic fields and the condition under which the
# fact happens.
class Freed(NamedTuple):
    """The block went back on the free list."""
    block: int


class Underflow(NamedTuple):
    """A decref at refcount 0 or a release at holds 0."""
    block: int
    counter: str            # "refcount" | "holds"


class TableMiss(NamedTuple):
    """A write whose published table does not cover its position."""
    branch: int
    pos: int


class CopyDone(NamedTuple):
    copy: Copy


class KernelDone(NamedTuple):
    kernel: Kernel
    reads: tuple[Optional[str], ...]     # positions 0 .. pos through its snapshot


class Allocated(NamedTuple):
    """A cache scenario's allocation handed `block` out (no-stale-key is
    judged on the state after it)."""
    block: int
    #: the engine harness: the keys the block's new owner may give it in
    #: the same call, which are not stale (allocator code keys at schedule
    #: time): its own B tokens at each entry of its table that maps the
    #: block and that its sequence covers whole; (): any key is stale
    allowed: tuple[tuple[str, ...], ...] = ()


class Keyed(NamedTuple):
    """A cache-full or cache-drafts gave `block` the key of the first
    `length` positions of branch `branch`'s sequence."""
    branch: int
    block: int
    length: int
    #: the engine harness: the branch's verified count after the host call
    #: that keyed it (a rollback verifies in the same call); None: the
    #: count before the action, as the protocol model keeps it
    verified: Optional[int] = None


class AllocatorRaised(NamedTuple):
    """The allocator under the engine harness raised (not out-of-blocks)."""
    branch: int
    call: str                            # the call, as written: append('a', 'a1')
    error: str                           # the exception, as `Type: message`
    #: the allocator's own frames, outermost first, innermost (where it
    #: raised) last: `label:line in function: code`, labelled by module
    #: name or path relative to the scenario's folder (cowcheck.model.harness.user_frames)
    frames: tuple[str, ...] = ()


class OutputChecked(NamedTuple):
    branch: int
    reads: tuple[Optional[str], ...]     # positions 0 .. pos-1 through the working table
    expected: tuple[str, ...]            # the branch's sequence at that moment


class MoveDone(NamedTuple):
    """A transfer completed (`ok`) or failed; a send's `reads` are what it
    read of its block, the remote reader's (docs/semantics.md#transfers)."""
    move: Move
    ok: bool
    reads: tuple[Optional[str], ...] = ()


class HostFreed(NamedTuple):
    """The host block went back on the host free list."""
    host: int


Fact = Union[Freed, Underflow, TableMiss, CopyDone, KernelDone, OutputChecked, AllocatorRaised, Allocated, Keyed,
             MoveDone, HostFreed]


class Draft:
    """One action's working copy of a state: lists where the state has tuples,
    and the facts the action produced."""

    __slots__ = ("blocks", "free", "branches", "queue", "facts", "reuse", "code", "before", "host", "host_free", "reports")

    def __init__(self, state: State, reuse: str):
        self.before = state
        self.blocks = list(state.blocks)
        self.free = list(state.free)
        self.branches = list(state.branches)
        self.queue = list(state.queue)
        self.facts: list[Fact] = []
        self.reuse = reuse
        self.code = state.code
        # a transfer scenario's host tier (cowcheck.model.transfers edits it)
        tier = state.tier
        self.host = list(tier.host) if tier is not None else []
        self.host_free = list(tier.free) if tier is not None else []
        self.reports = list(tier.reports) if tier is not None else []

    def freeze(self) -> State:
        """The new state. A part the action left as it was is the state's
        own tuple again, not an equal copy: states then share what they
        have in common (memory), and the canonical form's caches, which
        test what they read by identity first, see it unchanged."""
        before = self.before
        blocks, free, queue = tuple(self.blocks), tuple(self.free), tuple(self.queue)
        if blocks == before.blocks:
            blocks = before.blocks
        if free == before.free:
            free = before.free
        if queue == before.queue:
            queue = before.queue
        tier = before.tier
        if tier is not None:
            new_tier = _new(Tier, (tuple(self.host), tuple(self.host_free), tuple(self.reports)))
            if new_tier != tier:
                tier = new_tier
        return _new(State, (blocks, free, tuple(self.branches), queue, self.code, tier))

    def set_branch(self, index: int, branch: Branch) -> None:
        self.branches[index] = branch


def free_choices(state: State, reuse: str, twins: bool = False) -> tuple[int, ...]:
    """The blocks an `alloc` may pop: the front of the list, or under `any`
    reuse every free block (each a separate successor); with `twins`, one
    of each set of indistinguishable ones (`twin_classes`)."""
    if not state.free:
        return ()
    if reuse != "any":
        return state.free[:1]
    return tuple(members[0] for members in twin_classes(state)) if twins else state.free


def twin_classes(state: State) -> list[tuple[int, ...]]:
    """The free list cut into classes of indistinguishable blocks, each in
    list order, the classes in the order of their first members. Free
    blocks that nothing references (no table, local, hit or op in flight)
    and that hold the same (refcount, holds, slots, key) differ only in
    their ids: a successor that takes one is a successor that takes the
    other with the two ids swapped, the same state up to renaming block
    ids. A search that stores states up to that renaming (block-id
    symmetry, cowcheck.model.reduce.symmetry) needs one of each class;
    under `any` reuse, where every free block is a choice, that is what
    keeps a large pool from multiplying the successors (`ProtocolModel`'s
    `twins`). A referenced free block is a class of its own. "References"
    are the ones the representative numbers blocks by
    (cowcheck.model.reduce.relabel, `_numbering`): what it does not number
    by them, it orders by these contents, which is why twins are one state."""
    referenced: set[Optional[int]] = set()
    for br in state.branches:
        referenced.update(br.working)
        referenced.update(br.published)
        referenced.update(br.hits)
        referenced.add(br.tail)
        referenced.add(br.new)
    for op in state.queue:
        if type(op) is Copy:
            referenced.add(op.src)
            referenced.add(op.dst)
        elif type(op) is Kernel:
            referenced.update(op.snapshot)
    classes: dict[Union[int, Block], list[int]] = {}
    for b in state.free:
        classes.setdefault(b if b in referenced else state.blocks[b], []).append(b)
    return [tuple(members) for members in classes.values()]


def twin_orders(state: State, n: int) -> list[tuple[int, ...]]:
    """`permutations(state.free, n)` less the orders that another one kept
    gives up to renaming twins (`twin_classes`): in each order kept, the
    blocks of a class are its first members, in list order. In the order
    `permutations` gives them, so that each order kept is the first of
    those it stands for."""
    classes = twin_classes(state)
    position = {b: k for k, b in enumerate(state.free)}
    taken = [0] * len(classes)
    out: list[tuple[int, ...]] = []
    prefix: list[int] = []

    def extend() -> None:
        if len(prefix) == n:
            out.append(tuple(prefix))
            return
        nexts = sorted((position[members[taken[k]]], k) for k, members in enumerate(classes) if taken[k] < len(members))
        for _, k in nexts:
            prefix.append(classes[k][taken[k]])
            taken[k] += 1
            extend()
            taken[k] -= 1
            prefix.pop()

    extend()
    return out


def alloc(d: Draft, block: int, evict: bool = True) -> bool:
    """Pop `block` off the free list with refcount 1. A cached block is
    evicted (its key leaves the cache with it) unless `evict` is False (the
    alloc-no-evict bug). Returns whether a key was evicted."""
    d.free.remove(block)
    old = d.blocks[block]
    evicted = evict and old.key is not None
    # stale slots stay: a real pool is not zeroed
    d.blocks[block] = _new(Block, (1, old.holds, old.slots, None if evicted else old.key))
    return evicted


def _push_free(d: Draft, block: int) -> None:
    """Back on the free list: a cached block at the back (evicted last,
    oldest first), any other by the reuse order."""
    if block in d.free:
        return
    if d.reuse == "any":
        bisect.insort(d.free, block)   # order is irrelevant, keep it canonical
    elif d.blocks[block].key is not None:
        d.free.append(block)
    elif d.reuse == "lifo":
        d.free.insert(0, block)
    else:
        d.free.append(block)
    d.facts.append(Freed(block))


def incref(d: Draft, block: int) -> None:
    old = d.blocks[block]
    d.blocks[block] = _new(Block, (old.refcount + 1,) + old[1:])


def decref(d: Draft, block: int) -> None:
    old = d.blocks[block]
    if old.refcount == 0:
        d.facts.append(Underflow(block, "refcount"))
        return
    d.blocks[block] = _new(Block, (old.refcount - 1,) + old[1:])
    if old.refcount == 1 and old.holds == 0:
        _push_free(d, block)


def hold(d: Draft, block: int) -> None:
    old = d.blocks[block]
    d.blocks[block] = _new(Block, (old.refcount, old.holds + 1) + old[2:])


def release(d: Draft, block: int) -> None:
    old = d.blocks[block]
    if old.holds == 0:
        d.facts.append(Underflow(block, "holds"))
        return
    d.blocks[block] = _new(Block, (old.refcount, old.holds - 1) + old[2:])
    if old.holds == 1 and old.refcount == 0:
        _push_free(d, block)


def write_slots(d: Draft, block: int, start: int, cells: tuple[Optional[str], ...]) -> None:
    old = d.blocks[block]
    slots = old.slots[:start] + tuple(cells) + old.slots[start + len(cells):]
    d.blocks[block] = _new(Block, (old.refcount, old.holds, slots, old.key))


def set_key(d: Draft, block: int, key: tuple[str, ...] | None) -> None:
    old = d.blocks[block]
    d.blocks[block] = _new(Block, old[:3] + (key,))
