"""The refined representative, for classes of more than three
interchangeable branches, where trying every tied order costs too much
(cowcheck.model.reduce.symmetry says when which is used): the least
relabelling among the orders that agree with a finer, still label-free,
partition:

1. signatures (cowcheck.model.reduce.signature), with the queue index of
   each op in flight that is the branch's own (its kernels, a copy into its
   `new` block): branches waiting at one step for copies launched at
   different times are told apart here, before any anchor is built;
2. then, within a tie, an *anchor* per branch: the queue positions of its
   kernels, and for each block it maps and each block holding one of its
   tokens, that block's place in the free list and in the queue and its
   contents with each token named by its owner's tie (never by branch or
   block). Queue and free list are ordered, so this splits almost every tie
   that is not a true symmetry;
3. branches still tied are tested pairwise for *twins*: swapping the two
   (tokens and the blocks only they map included) gives back the same state
   (`_Context._check_twins` builds that block map and checks it). Orders
   that differ by swapping twins give the same relabelling, so a run of
   twins needs one order, not k!; only runs that are not all twins are
   enumerated, modulo their twin classes (in practice never, see
   tests/test_model_reduce_symmetry.py). A run whose members are all twins of its first
   keeps its order without anchors (twins have equal anchors).

The partition depends only on the orbit and the twin relation is an
automorphism relation, so the least relabelling over the orders it allows
is canonical.

One idea: splitting the ties that the signatures leave without trying
every order. The twin relation it builds (`_Context`) also names the
mirrored branches (`Refinement.mirrored`): a twin's moves mirror those of
the twin it swaps with. It builds on signatures
(cowcheck.model.reduce.signature) and relabelling
(cowcheck.model.reduce.relabel), and only cowcheck.model.reduce.symmetry
imports it. `Refinement` is a mixin of `Symmetry`."""

from __future__ import annotations

from itertools import permutations, product
from typing import Iterator, Optional, Union

from cowcheck.model.reduce.relabel import Relabelling, _least, _new
from cowcheck.model.reduce.signature import _NO_KERNELS, Signature, Signatures
from cowcheck.model.state import Block, Copy, Kernel, State

#: a block as an anchor sees it: refcount, holds, place in the free list, places in the queue
Place = tuple[int, int, int, tuple[tuple[int, ...], ...]]
#: a branch as `_Context.anchor` sees it
Anchor = tuple[tuple[int, ...], tuple[Place, ...], tuple[Place, ...], Union[Place, tuple[()]], Union[Place, tuple[()]],
               tuple[Place, ...], tuple[Place, ...]]


class Refinement(Signatures, Relabelling):
    """The refined representative and the mirrored branches, methods of
    `Symmetry` (its `__init__` sets the attributes below)."""

    classes: list[tuple[int, ...]]
    # each class with the positions of its members
    _members: list[tuple[tuple[int, ...], range]]
    exhaustive: bool
    own_set: list[frozenset[str]]
    plain: list[bool]

    # -- the refined representative (classes of more than three) -------------
    def _refined(self, state: State) -> State:
        """The least relabelling among the orders that sort each class by
        signature, then each tie by anchor, and differ only inside runs of
        branches that are not all twins (see the module docstring)."""
        branches = state.branches
        order = self.identity[:]
        kernels = self._in_flight(state) if state.queue else _NO_KERNELS
        ties: list[tuple[tuple[int, ...], list[int]]] = []    # (slots, branches tied for them)
        signatures = self._signatures
        for members, positions in self._members:
            sig = signatures(state, members, kernels)
            ranked = sorted(positions, key=sig.__getitem__)  # indices into members; stable: ties stay in index order
            start, first = 0, sig[ranked[0]]
            for k in positions[1:]:
                current = sig[ranked[k]]
                if current != first:
                    if k - start > 1:
                        ties.append((members[start:k], [members[j] for j in ranked[start:k]]))
                    start, first = k, current
            if len(ranked) - start > 1:
                ties.append((members[start:], [members[j] for j in ranked[start:]]))
            for slot, j in zip(members, ranked):
                order[slot] = members[j]
        if not ties:
            return self._relabel(state, order)
        ctx: Optional[_Context] = None
        runs: list[tuple[tuple[int, ...], list[list[int]]]] = []   # (slots, twin classes in slot order) to enumerate
        for slots, run in ties:
            head = branches[run[0]]
            if head.writes == 0 and all(map(head.__eq__, map(branches.__getitem__, run))):
                continue     # the same tables and no token yet: twins, and any order of them is as good
            if ctx is None:
                ctx = _Context(self, state, kernels)
            # Most ties that survive the signatures are runs of twins. Twins
            # have equal anchors (the twin swap carries one anchor onto the
            # other), so a run whose every member is a twin of its first
            # keeps its order and enumerates nothing, as it would after the
            # anchors below. A branch with a kernel is never a twin.
            if kernels.keys().isdisjoint(run):
                check, x = ctx._check_twins, run[0]
                for y in run[1:]:
                    if not check(x, y):
                        break
                else:
                    continue
            anchor = {i: ctx.anchor(i) for i in run}
            ranked_run = sorted(run, key=anchor.__getitem__)
            for slot, old in zip(slots, ranked_run):
                order[slot] = old
            start = 0
            for k in range(1, len(ranked_run) + 1):
                if k == len(ranked_run) or anchor[ranked_run[k]] != anchor[ranked_run[start]]:
                    if k - start > 1:
                        classes = ctx.twin_classes(ranked_run[start:k])
                        if len(classes) > 1:
                            runs.append((slots[start:k], classes))
                    start = k
        if not runs:
            return self._relabel(state, order)
        candidates = set()
        for choice in product(*(_arrangements(classes) for _, classes in runs)):
            for (slots, _), flat in zip(runs, choice):
                for slot, old in zip(slots, flat):
                    order[slot] = old
            candidates.add(self._relabel(state, order))
        return candidates.pop() if len(candidates) == 1 else _least(candidates)

    # -- mirrored moves (see `Symmetry.unmirrored`) -------------------------
    def mirrored(self, state: State) -> list[int]:
        """Branches that are twins (see the module docstring) of an earlier
        branch of their class with the same signature: a symmetry of the
        state swaps the two, so whatever one does the other does too, up to
        that renaming. Only where the refined representative is used (a
        class of more than three): elsewhere every move is explored, which
        keeps each committed counterexample's choice of actor."""
        if self.exhaustive:
            return []
        out: list[int] = []
        kernels = self._in_flight(state) if state.queue else _NO_KERNELS
        branches = state.branches
        ctx: Optional[_Context] = None
        for members in self.classes:
            first: dict[Signature, int] = {}
            for i, sig in zip(members, self._signatures(state, members, kernels)):
                x = first.setdefault(sig, i)
                if x == i:
                    continue
                bx = branches[x]
                if bx.writes == 0 and bx == branches[i]:
                    out.append(i)       # the same tables and no token yet
                    continue
                if ctx is None:
                    ctx = _Context(self, state, kernels)
                if ctx.twins(x, i):
                    out.append(i)
        return out


def _arrangements(classes: list[list[int]]) -> Iterator[list[int]]:
    """Every order of the branches in `classes` that differs in which class
    sits where (members of a class are interchangeable: they go in their
    listed order)."""
    labels = [c for c, members in enumerate(classes) for _ in members]
    seen = set()
    for perm in permutations(labels):
        if perm in seen:
            continue
        seen.add(perm)
        taken = [0] * len(classes)
        out = []
        for c in perm:
            out.append(classes[c][taken[c]])
            taken[c] += 1
        yield out


class _Context:
    """What the refinement of one state needs, each part computed once and
    only when asked for: who maps each block, which blocks the queue and the
    free list hold, where each branch's tokens lie, and each block's
    label-free place."""

    __slots__ = ("sym", "state", "kernels", "_free", "_queued", "_holding", "_place", "_launched", "_twins")

    def __init__(self, sym: Refinement, state: State, kernels: dict[int, tuple[int, ...]]):
        self.sym, self.state, self.kernels = sym, state, kernels
        self._free: Optional[dict[int, int]] = None
        self._queued: Optional[set[int]] = None
        self._holding: dict[int, set[int]] = {}
        self._place: Optional[list[Place]] = None
        self._launched: Optional[dict[int, tuple[int, ...]]] = None
        self._twins: dict[tuple[int, int], bool] = {}

    @property
    def free(self) -> dict[int, int]:
        """Free block -> its place in the free list (0 for all under `any` reuse, where it is a set)."""
        if self._free is None:
            free = self.state.free
            self._free = dict.fromkeys(free, 0) if self.sym.sort_free else {b: k for k, b in enumerate(free)}
        return self._free

    @property
    def queued(self) -> set[int]:
        """Blocks an in-flight op names."""
        if self._queued is None:
            out: set[int] = set()
            for op in self.state.queue:
                if type(op) is Copy:
                    out.add(op.src)
                    out.add(op.dst)
                else:
                    assert type(op) is Kernel   # no transfers: the refined representative is not used with them
                    out.update(op.snapshot)
            self._queued = out
        return self._queued

    def holding(self, i: int) -> set[int]:
        """Blocks holding one of branch i's tokens (none before its first write)."""
        out = self._holding.get(i)
        if out is None:
            if self.state.branches[i].writes:
                disjoint = self.sym.own_set[i].isdisjoint
                out = {b for b, (_, _, slots, key) in enumerate(self.state.blocks)
                       if not disjoint(slots) or (key is not None and not disjoint(key))}
            else:
                out = set()
            self._holding[i] = out
        return out

    def used_by_others(self, b: int, pair: tuple[int, int]) -> bool:
        for i, br in enumerate(self.state.branches):
            if i not in pair and (b in br.working or b in br.published or b == br.tail or b == br.new or b in br.hits):
                return True
        return False

    def anchor(self, i: int) -> Anchor:
        """Branch i as the refinement sees it, naming no block and no branch:
        its kernels' places in the queue, and the place (in the free list
        and the queue) of each block it maps and of each block holding one
        of its tokens."""
        if self._place is None:
            self._place = self._places()
        if self._launched is None:
            launched: dict[int, tuple[int, ...]] = {}
            for q, op in enumerate(self.state.queue):
                if type(op) is Kernel:
                    launched[op.branch] = launched.get(op.branch, ()) + (q,)
            self._launched = launched
        place = self._place.__getitem__
        _, _, _, _, _, _, tail, new, working, published, _, _, _, _, hits, _, _ = self.state.branches[i]
        return (self._launched.get(i, ()), tuple(map(place, working)), tuple(map(place, published)),
                () if tail is None else place(tail), () if new is None else place(new),
                tuple(sorted(map(place, self.holding(i)))), tuple(map(place, hits)))

    def _places(self) -> list[Place]:
        """Per block: refcount, holds, place in the free list (-1 when not
        free) and places in the queue."""
        state = self.state
        queued: dict[int, list[tuple[int, ...]]] = {}
        for q, op in enumerate(state.queue):
            if type(op) is Copy:
                queued.setdefault(op.src, []).append((q, 0))
                queued.setdefault(op.dst, []).append((q, 1))
            else:
                assert type(op) is Kernel       # no transfers: the refined representative is not used with them
                for j, b in enumerate(op.snapshot):
                    queued.setdefault(b, []).append((q, 2, j))
        free = self.free.get
        at = queued.get
        return [(refcount, holds, free(b, -1), tuple(at(b, ()))) for b, (refcount, holds, *_) in enumerate(state.blocks)]

    def twin_classes(self, run: list[int]) -> list[list[int]]:
        """`run` split into classes of twins (each checked against the first
        member of its class), classes and members in run order."""
        classes: list[list[int]] = []
        for i in run:
            for c in classes:
                if self.twins(c[0], i):
                    c.append(i)
                    break
            else:
                classes.append([i])
        return classes

    def twins(self, x: int, y: int) -> bool:
        known = self._twins.get((x, y))
        if known is None:
            known = self._twins[x, y] = self._check_twins(x, y)
        return known

    def _check_twins(self, x: int, y: int) -> bool:
        """Whether swapping branches x and y (their tokens with them) and
        the blocks only they map gives back the same state: an automorphism,
        so orders that differ by it give the same relabelling. Sound, not
        complete: a False only costs enumeration. (Every test below is a
        condition of the answer; the cheap ones, and the ones that fail
        most often, go first.)"""
        state, sym, kernels = self.state, self.sym, self.kernels
        branches = state.branches
        bx, by = branches[x], branches[y]
        if bx[:6] != by[:6] or bx[10] != by[10] or bx[12:14] != by[12:14] or x in kernels or y in kernels:
            return False        # status .. step, writes, rejected and verified differ, or a kernel names one
        _, pos, _, _, _, _, tail_x, new_x, working_x, published_x = bx[:10]
        if bx.writes == 0 and bx == by:
            return True          # the same tables and no token yet: nothing to swap
        _, _, _, _, _, _, tail_y, new_y, working_y, published_y = by[:10]
        hits_x, hits_y = bx.hits, by.hits
        if len(working_x) != len(working_y) or len(published_x) != len(published_y) or len(hits_x) != len(hits_y) \
                or (tail_x is None) != (tail_y is None) or (new_x is None) != (new_y is None):
            return False
        # beta: the block swap that goes with the branch swap (an involution)
        beta: dict[int, int] = {}
        setdefault = beta.setdefault
        for p, q in zip(working_x + published_x + hits_x + (tail_x, new_x), working_y + published_y + hits_y + (tail_y, new_y)):
            if p is None:               # then q is None too
                continue
            if setdefault(p, q) != q or setdefault(q, p) != p:  # type: ignore[arg-type]  # q is not None either
                return False
        moved = {b for b, c in beta.items() if b != c}
        free, sort_free = state.free, sym.sort_free
        if moved:
            queued = self.queued
            for b in moved:             # beta(b) is moved too, and checked in its turn
                if b in queued or (b in free and not sort_free) or ((b in free) != (beta[b] in free)):
                    return False
            disjoint = moved.isdisjoint
            for i, (_, _, _, _, _, _, tail, new, working, published, _, _, _, _, hits, _, _) in enumerate(branches):
                if i != x and i != y and not (disjoint(working) and disjoint(published) and disjoint(hits)
                                              and tail not in moved and new not in moved):
                    return False        # a block that others map too
        blocks = state.blocks
        # blocks holding x's or y's tokens (none before their first write)
        tokened = self.holding(x) | self.holding(y) if bx.writes else _NOTHING
        for b in moved:                 # blocks without their tokens must match as they are
            if b not in tokened and blocks[beta[b]] != blocks[b]:
                return False
        rho = {}
        for tx, ty in zip(sym.own[x], sym.own[y]):
            rho[tx], rho[ty] = ty, tx
        get = rho.get
        # a plain branch's sequence is its prompt and its first writes; a
        # request that speculates may have rewound over some of them
        if not sym.plain[x] and tuple(map(get, bx.seq, bx.seq)) != by.seq:
            return False
        if not tokened:
            return True

        def renamed(b: int) -> Block:
            refcount, holds, slots, key = blocks[b]
            if key is not None:         # a cache scenario's key names tokens too
                key = tuple(map(get, key, key))
            return _new(Block, (refcount, holds, tuple(map(get, slots, slots)), key))  # type: ignore[arg-type]  # get(None, None) is None

        loose: dict[bool, list[int]] = {False: [], True: []}   # unreferenced blocks, interchangeable by contents
        for b in tokened:
            c = beta.get(b, b)
            if blocks[c] == renamed(b):
                continue
            if c != b or b in self.queued or (b in free and not sort_free) or self.used_by_others(b, (-1, -1)):
                return False
            loose[b in free].append(b)
        for group in loose.values():
            if group and sorted(map(repr, map(renamed, group))) != sorted(repr(blocks[b]) for b in group):
                return False
        return True


#: no blocks
_NOTHING: frozenset[int] = frozenset()
