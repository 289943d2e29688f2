"""Signatures: a branch as the symmetry reduction first sees it, naming no
block and no branch: its local part (`_local`: status, position, step,
where its tail lies in its table, the shapes of the blocks it maps) and the
places of its own ops in flight (`Signatures._kernels`, `_in_flight`).

One idea: a label-free summary of a branch. Both representatives sort each
class of interchangeable branches by it (cowcheck.model.reduce.symmetry),
and the refinement and the mirrored moves start from the ties it leaves
(cowcheck.model.reduce.refine). It reads only the state, so it imports no
other part of the reduction. `Signatures` is a mixin of `Symmetry`, which
keeps the local parts per Branch object from state to state (`LOCALS` of
them)."""

from __future__ import annotations

from typing import Iterable, Union

from cowcheck.model.state import Block, Branch, Copy, InFlight, Kernel, State, Status

#: a block as a signature sees it: refcount, holds, filled slots, keyed (a cache scenario's)
Shape = tuple[int, int, int, bool]
#: a branch as `_local` sees it
Local = tuple[Status, int, int, str, str, int, int, Union[Shape, tuple[int]], bool, tuple[Shape, ...], tuple[Shape, ...],
              int, int, int]
#: a branch as `Symmetry._signatures` sees it: that, and its kernels' positions
Signature = tuple[Local, tuple[int, ...]]

#: no kernel in flight (shared: never written to)
_NO_KERNELS: dict[int, tuple[int, ...]] = {}


class Signatures:
    """The signature methods of `Symmetry` (its `__init__` sets `_locals`)."""

    #: branches whose local signature is kept
    LOCALS = 1 << 13
    # id(branch) -> (branch, the blocks its local signature reads, those Block objects, that signature,
    # the state's blocks it was read from): see `Symmetry.__init__`
    _locals: dict[int, tuple[Branch, tuple[int, ...], tuple[Block, ...], Local, tuple[Block, ...]]]

    @staticmethod
    def _kernels(queue: tuple[InFlight, ...]) -> dict[int, tuple[int, ...]]:
        """Per branch with a kernel in flight, the kernels' positions in queue order."""
        out: dict[int, tuple[int, ...]] = {}
        for op in queue:
            if type(op) is Kernel:
                out[op.branch] = out.get(op.branch, ()) + (op.pos,)
        return out

    @staticmethod
    def _in_flight(state: State) -> dict[int, tuple[int, ...]]:
        """Per branch with an op of its own in flight, where: for each of
        its kernels its queue index and position, for each copy into its
        `new` block its queue index (and -1), in queue order. Label-free,
        like the kernels' positions alone, and it splits most of the ties
        that the anchors would otherwise have to: branches waiting at the
        same step for copies launched at different times. (A branch with
        an op of its own in flight is never a twin: the op names it or a
        block only it maps.)"""
        out: dict[int, tuple[int, ...]] = {}
        into: dict[int, tuple[int, ...]] = {}
        for q, op in enumerate(state.queue):
            if type(op) is Kernel:
                out[op.branch] = out.get(op.branch, ()) + (q, op.pos)
            else:
                assert type(op) is Copy         # no transfers: the refined representative is not used with them
                into[op.dst] = into.get(op.dst, ()) + (q, -1)
        if into:
            for i, br in enumerate(state.branches):
                copies = into.get(br.new)        # type: ignore[arg-type]  # get(None) is None
                if copies is not None:
                    out[i] = out.get(i, ()) + copies
        return out

    def _signatures(self, state: State, members: Iterable[int], kernels: dict[int, tuple[int, ...]]) -> list[Signature]:
        """What each member looks like without naming blocks or branches:
        its local part (`_local`) and its kernels' positions. The finer it
        is, the fewer ties are left for `representative` to try.

        The local part is kept per Branch object, with the Block objects it
        was read from: a successor shares every branch but one with the
        state it came from (and its siblings share them all), and the
        relabelling keeps a branch it does not change, so most branches
        come back as the same object over the same blocks."""
        blocks = state.blocks
        block = blocks.__getitem__
        branches = state.branches
        known = self._locals
        out: list[Signature] = []
        append = out.append
        for i in members:
            br = branches[i]
            entry = known.get(id(br))
            if entry is None or entry[0] is not br or (entry[4] is not blocks and tuple(map(block, entry[1])) != entry[2]):
                if len(known) >= self.LOCALS:
                    known.clear()
                entry = known[id(br)] = _local(br, blocks)
            append((entry[3], kernels.get(i, ())))
        return out


def _local(br: Branch, blocks: tuple[Block, ...]) -> tuple[Branch, tuple[int, ...], tuple[Block, ...], Local, tuple[Block, ...]]:
    """Branch `br` as a signature sees it, but for its kernels, naming no
    block and no branch: status, pos, done, op, path, step, where its tail
    is in its table, the shapes (refcount, holds, filled slots, keyed) of
    the blocks it maps, and how many hits, host hits and loads it holds
    (an admission's); with the ids and objects of the blocks read."""
    status, pos, done, op, path, step, tail, new, working, published, _, _, _, _, hits, host_hits, loads = br
    reads = working + published if new is None else working + published + (new,)
    held = tuple(map(blocks.__getitem__, reads))
    shapes = list(map(_shape, held))
    n = len(working)
    same = working == published
    mapped = tuple(shapes[:n])
    local = (status, pos, done, op or "", path or "", step,
             -1 if tail is None else working.index(tail) if tail in working else -2,
             (-1,) if new is None else shapes[-1],
             same, mapped, mapped if same else tuple(shapes[n:n + len(published)]), len(hits), len(host_hits), len(loads))
    return br, reads, held, local, blocks


#: id(block) -> (block, its shape); Blocks are immutable and shared by many states
_SHAPES: dict[int, tuple[Block, Shape]] = {}


def _shape(block: Block) -> Shape:
    """A block as a signature sees it: refcount, holds, filled slots, and
    whether it is keyed (always not outside cache scenarios)."""
    known = _SHAPES.get(id(block))
    if known is not None and known[0] is block:
        return known[1]
    if len(_SHAPES) >= 1 << 14:
        _SHAPES.clear()
    refcount, holds, slots, key = block
    shape = _SHAPES[id(block)] = block, (refcount, holds, len(slots) - slots.count(None), key is not None)
    return shape[1]
