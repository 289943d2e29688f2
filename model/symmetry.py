"""Symmetry: states that differ only in which interchangeable branch is which,
or in which block id holds what, behave alike. `Symmetry.representative`
maps a state to one member of its orbit, so an explorer can store each orbit
once (Stateright's `Representative`, TLC's SYMMETRY).

Two kinds of renaming are symmetries of the transition system:

- Branches with the same program (appends, may_cancel) are interchangeable
  once their tokens are renamed with them (a1 <-> b1, ...): every rule,
  step and invariant treats branch names only as names. Only *plain*
  branches are put in classes (roots that only append): a branch that
  forks, speculates or has a parent is left where it is, which is sound
  (a coarser symmetry) and keeps every sequence a function of the
  branch and its pos, as the signatures and twins below assume.
- Block ids are names too: nothing in the model compares ids, except the free
  list's order, which a renaming carries along (and which `any` reuse keeps
  sorted, so there it is re-sorted).

The representative sorts each class of interchangeable branches by a
signature of its local state, then numbers blocks in order of first
appearance (branch tables in the new branch order, then the device queue,
then any block no one references and the free list, ordered by contents
where their order carries no meaning). Where signatures tie it takes the
least of the tied orders, so every member of an orbit gets the same
representative: the explorer stores each orbit exactly once, and a trace is
rebuilt by matching representatives step by step.

Trying every tied order costs the factorial of the ties (8! relabels for
eight identical branches at the fork), so that definition is kept only
where it is cheap: when no class has more than three branches (at most
3! = 6 orders, every shipped scenario), which keeps every committed trace.
Larger classes get the *refined* representative, the least relabelling
among the orders that agree with a finer, still label-free, partition:

1. signatures, as above;
2. then, within a tie, an *anchor* per branch: the queue positions of its
   kernels, and for each block it maps and each block holding one of its
   tokens, that block's place in the free list and in the queue and its
   contents with each token named by its owner's tie (never by branch or
   block). Queue and free list are ordered, so this splits almost every tie
   that is not a true symmetry;
3. branches still tied are tested pairwise for *twins*: swapping the two
   (tokens and the blocks only they map included) gives back the same state
   (`_twins` builds that block map and checks it). Orders that differ by
   swapping twins give the same relabelling, so a run of twins needs one
   order, not k!; only runs that are not all twins are enumerated, modulo
   their twin classes (in practice never, see tests/test_symmetry.py).

The partition depends only on the orbit and the twin relation is an
automorphism relation, so the least relabelling over the orders it allows
is canonical; the class-size rule is fixed per scenario."""

from __future__ import annotations

from itertools import groupby, permutations, product
from typing import Iterator, Optional, Union

from .scenario import Scenario
from .state import Block, Branch, Copy, InFlight, Kernel, State, Status

#: a block as a signature sees it: refcount, holds, filled slots
Shape = tuple[int, int, int]
#: a branch as `Symmetry._signature` sees it
Signature = tuple[Status, int, int, str, str, int, int, tuple[int, ...], bool,
                  tuple[Shape, ...], tuple[Shape, ...], tuple[int, ...]]
#: a block as an anchor sees it: refcount, holds, place in the free list, places in the queue
Place = tuple[int, int, int, tuple[tuple[int, ...], ...]]
#: a branch as `_Context.anchor` sees it
Anchor = tuple[tuple[int, ...], tuple[Place, ...], tuple[Place, ...], Union[Place, tuple[()]], Union[Place, tuple[()]],
               tuple[Place, ...]]


class Symmetry:
    #: recent representatives kept, per generation (refined form only)
    CACHE = 1 << 15

    def __init__(self, scenario: Scenario, branches: bool = True, blocks: bool = True):
        self.blocks_enabled = blocks
        self.sort_free = scenario.reuse == "any"
        self.names = [scenario.branch_name(i) for i in range(len(scenario.branches))]
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, spec in enumerate(scenario.branches):
            if spec.plain:
                groups.setdefault((spec.appends, spec.may_cancel), []).append(i)
        self.classes = [tuple(g) for g in groups.values() if len(g) > 1] if branches else []
        # tokens each branch owns, for renaming: own[i][k-1] = f"{name_i}{k}"
        self.own = [scenario.own_tokens(i) for i in range(len(scenario.branches))]
        #: the old definition (every tied order) where it is cheap, else the refined one
        self.exhaustive = all(len(c) <= 3 for c in self.classes)
        # token -> (owning branch, index); prompt tokens belong to -1
        self.owner: dict[Optional[str], tuple[int, int]] = {f"p{k}": (-1, k) for k in range(scenario.prompt)}
        for i, own in enumerate(self.own):
            for k, token in enumerate(own):
                self.owner[token] = (i, k)
        self.identity = list(range(len(scenario.branches)))
        self.prompt = scenario.prompt
        self._recent: dict[State, State] = {}
        self._older: dict[State, State] = {}
        self.own_set = [frozenset(own) for own in self.own]

    def describe(self) -> list[str]:
        out = []
        if self.classes:
            out.append("branch symmetry (" + "; ".join("".join(self.names[i] for i in c) for c in self.classes) + ")")
        if self.blocks_enabled:
            out.append("block-id symmetry")
        return out

    # -- the representative -------------------------------------------------
    @staticmethod
    def _shapes(state: State) -> list[Shape]:
        """Per block what a signature may say of it: refcount, holds, filled slots."""
        return [(blk.refcount, blk.holds, len(blk.slots) - blk.slots.count(None)) for blk in state.blocks]

    @staticmethod
    def _signature(state: State, i: int, shapes: list[Shape]) -> Signature:
        """What branch i looks like without naming blocks or branches: the
        finer it is, the fewer ties are left for `representative` to try."""
        br = state.branches[i]
        shape = shapes.__getitem__
        kernels = tuple(q.pos for q in state.queue if type(q) is Kernel and q.branch == i)
        return (br.status, br.pos, br.done, br.op or "", br.path or "", br.step,
                -1 if br.tail is None else br.working.index(br.tail) if br.tail in br.working else -2,
                (-1,) if br.new is None else shape(br.new),
                br.working == br.published, tuple(map(shape, br.working)), tuple(map(shape, br.published)), kernels)

    def representative(self, state: State) -> State:
        """The orbit's canonical member: branches of each class sorted by
        signature, blocks numbered by first appearance; where signatures tie,
        the least (by repr) of the tied orders. Canonical, since the
        signature and the numbering name no branch and no block."""
        # Interleavings meet: the same state comes back as a successor of
        # several stored ones, so recent answers are kept (two generations
        # of at most CACHE states each).
        rep = self._recent.get(state)
        if rep is None:
            rep = self._older.get(state)
            if rep is None:
                rep = self._refined(state) if not self.exhaustive else self._exhaustive(state)
            if len(self._recent) >= self.CACHE:
                self._older, self._recent = self._recent, {}
            self._recent[state] = rep
        return rep

    def _exhaustive(self, state: State) -> State:
        """The least relabelling over every order that sorts each class by
        signature (cheap while no class has more than three branches)."""
        orders = self._orders(state)
        if len(orders) == 1:
            return self._relabel(state, orders[0])
        candidates = {self._relabel(state, order) for order in orders}
        # tied branches are often truly alike (swapping them changes nothing)
        return candidates.pop() if len(candidates) == 1 else min(candidates, key=repr)

    def _orders(self, state: State) -> list[list[int]]:
        """Every branch order (order[new] = old) that sorts each class by
        signature; more than one only where signatures tie."""
        orders = [list(range(len(state.branches)))]
        shapes = self._shapes(state) if self.classes else []
        for members in self.classes:
            sig = {i: self._signature(state, i, shapes) for i in members}
            ranked = sorted(members, key=sig.__getitem__)
            runs = [list(g) for _, g in groupby(ranked, key=sig.__getitem__)]
            extended = []
            for choice in product(*(permutations(run) for run in runs)):
                flat = [i for run in choice for i in run]
                for order in orders:
                    order = list(order)
                    for slot, old in zip(members, flat):
                        order[slot] = old
                    extended.append(order)
            orders = extended
        return orders

    # -- the refined representative (classes of more than three) -------------
    def _refined(self, state: State) -> State:
        """The least relabelling among the orders that sort each class by
        signature, then each tie by anchor, and differ only inside runs of
        branches that are not all twins (see the module docstring)."""
        branches = state.branches
        order = list(self.identity)
        shapes = self._shapes(state)
        kernels: dict[int, list[int]] = {}
        for op in state.queue:
            if type(op) is Kernel:
                kernels.setdefault(op.branch, []).append(op.pos)
        ties: list[tuple[tuple[int, ...], list[int]]] = []    # (slots, branches tied for them)
        for members in self.classes:
            sig = {i: self._quick_signature(branches[i], shapes, kernels.get(i, ())) for i in members}
            ranked = sorted(members, key=sig.__getitem__)
            start = 0
            for k in range(1, len(ranked) + 1):
                if k == len(ranked) or sig[ranked[k]] != sig[ranked[start]]:
                    if k - start > 1:
                        ties.append((members[start:k], ranked[start:k]))
                    start = k
            for slot, old in zip(members, ranked):
                order[slot] = old
        if not ties:
            return self._relabel(state, order)
        ctx = _Context(self, state, kernels)
        runs: list[tuple[tuple[int, ...], list[list[int]]]] = []   # (slots, twin classes in slot order) to enumerate
        prompt = self.prompt
        for slots, run in ties:
            first = branches[run[0]]
            if first.pos == prompt and all(branches[i] == first for i in run):
                continue     # the same tables and no token yet: twins, and any order of them is as good
            anchor = {i: ctx.anchor(i) for i in run}
            ranked = sorted(run, key=anchor.__getitem__)
            for slot, old in zip(slots, ranked):
                order[slot] = old
            start = 0
            for k in range(1, len(ranked) + 1):
                if k == len(ranked) or anchor[ranked[k]] != anchor[ranked[start]]:
                    if k - start > 1:
                        classes = ctx.twin_classes(ranked[start:k])
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
        return candidates.pop() if len(candidates) == 1 else min(candidates, key=repr)

    @staticmethod
    def _quick_signature(br: Branch, shapes: list[Shape], kernels: list[int] | tuple[()]) -> Signature:
        """`_signature`, with the kernels' positions gathered by the caller."""
        shape = shapes.__getitem__
        tail = br.tail
        return (br.status, br.pos, br.done, br.op or "", br.path or "", br.step,
                -1 if tail is None else br.working.index(tail) if tail in br.working else -2,
                (-1,) if br.new is None else shape(br.new),
                br.working == br.published, tuple(map(shape, br.working)), tuple(map(shape, br.published)), tuple(kernels))

    def _relabel(self, state: State, order: list[int]) -> State:
        branches = state.branches
        moved = order != self.identity
        tokens = self._token_map(order) if moved else None
        if self.blocks_enabled:
            block_map = self._block_map(state, order, tokens)
        else:
            block_map = list(range(len(state.blocks)))
        if not moved and block_map == self._ranges(len(block_map)):
            return state

        m = block_map.__getitem__
        new = tuple.__new__
        new_blocks: list[Block] = [None] * len(state.blocks)  # type: ignore[list-item]  # block_map is onto: every slot is set
        if tokens is None:
            for old, blk in enumerate(state.blocks):
                new_blocks[block_map[old]] = blk
        else:                       # blocks are immutable: moved as they are unless their tokens change
            renamed = tokens.keys()
            get = tokens.get
            for old, blk in enumerate(state.blocks):
                if not renamed.isdisjoint(blk.slots):
                    blk = new(Block, (blk.refcount, blk.holds, tuple(map(get, blk.slots, blk.slots))))  # type: ignore[arg-type]  # get(None, None) is None
                new_blocks[block_map[old]] = blk
        new_branches = []
        for new_index, old in enumerate(order):
            br = branches[old]
            tail, nw = br.tail, br.new
            seq = br.seq if tokens is None or new_index == old else tuple(map(tokens.get, br.seq, br.seq))
            new_branches.append(new(Branch, (br.status, br.pos, br.done, br.op, br.path, br.step,
                                             None if tail is None else block_map[tail], None if nw is None else block_map[nw],
                                             tuple(map(m, br.working)), tuple(map(m, br.published)), br.writes, seq, br.rejected)))
        queue: list[InFlight] = []
        if state.queue:
            new_of = [0] * len(order)                   # new_of[old] = new
            for position, old in enumerate(order):
                new_of[old] = position
            for op in state.queue:
                if type(op) is Copy:
                    queue.append(new(Copy, (block_map[op.src], block_map[op.dst], op.n)))
                else:
                    if tokens is None or new_of[op.branch] == op.branch:
                        token, expected = op.token, op.expected
                    else:
                        token, expected = tokens.get(op.token, op.token), tuple(map(tokens.get, op.expected, op.expected))
                    queue.append(new(Kernel, (new_of[op.branch], op.pos, token, tuple(map(m, op.snapshot)), expected)))
        free = tuple(map(m, state.free))
        if self.sort_free:
            free = tuple(sorted(free))
        return new(State, (tuple(new_blocks), free, tuple(new_branches), tuple(queue), state.code))

    _range_cache: dict[int, list[int]] = {}

    @classmethod
    def _ranges(cls, n: int) -> list[int]:
        out = cls._range_cache.get(n)
        if out is None:
            out = cls._range_cache[n] = list(range(n))
        return out

    def _token_map(self, order: list[int]) -> dict[str, str]:
        """Old token -> new token when branch `order[new]` becomes branch `new`."""
        out = {}
        for new, old in enumerate(order):
            if new != old:
                for old_token, new_token in zip(self.own[old], self.own[new]):
                    out[old_token] = new_token
        return out

    def _block_map(self, state: State, order: list[int], tokens: Optional[dict[str, str]]) -> list[int]:
        """old block id -> new id, numbered in order of first appearance."""
        size = len(state.blocks)
        seq: list[Optional[int]] = []
        for old in order:
            br = state.branches[old]
            seq += br.working
            seq += br.published
            seq.append(br.tail)
            seq.append(br.new)
        for op in state.queue:
            if type(op) is Copy:
                seq.append(op.src)
                seq.append(op.dst)
            else:
                seq += op.snapshot
        first = dict.fromkeys(seq)
        first.pop(None, None)
        mapping = [-1] * size
        count = 0
        for b in first:
            mapping[b] = count      # type: ignore[index]  # None was popped
            count += 1
        if count == size:
            return mapping
        # Blocks no one references are told apart only by their contents, so
        # order them by contents: equal ones are interchangeable, and any
        # order among them gives the same state. Under `any` reuse the free
        # list is a set, so its blocks are ordered the same way.
        def contents(b: int) -> tuple[int, int, tuple[str, ...]]:
            blk = state.blocks[b]
            slots = blk.slots if tokens is None else tuple(map(tokens.get, blk.slots, blk.slots))  # type: ignore[arg-type]  # get(None, None) is None
            return blk.refcount, blk.holds, tuple(t or "" for t in slots)

        free = state.free
        if count + sum(1 for b in free if mapping[b] < 0) < size:    # some allocated block no one references
            rest = sorted((b for b in range(size) if mapping[b] < 0 and b not in free), key=contents)
            for b in rest:
                mapping[b] = count
                count += 1
        for b in (sorted(free, key=contents) if self.sort_free else free):
            if mapping[b] < 0:
                mapping[b] = count
                count += 1
        return mapping


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

    def __init__(self, sym: Symmetry, state: State, kernels: dict[int, list[int]]):
        self.sym, self.state, self.kernels = sym, state, kernels
        self.free = dict.fromkeys(state.free, 0) if sym.sort_free else {b: k for k, b in enumerate(state.free)}
        self._queued: Optional[set[int]] = None
        self._holding: dict[int, set[int]] = {}
        self._place: Optional[list[Place]] = None
        self._twins: dict[tuple[int, int], bool] = {}

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
                    out.update(op.snapshot)
            self._queued = out
        return self._queued

    def holding(self, i: int) -> set[int]:
        """Blocks holding one of branch i's tokens (none before its first write)."""
        out = self._holding.get(i)
        if out is None:
            out = set()
            if self.state.branches[i].pos > self.sym.prompt:
                own = self.sym.own_set[i]
                for b, blk in enumerate(self.state.blocks):
                    if not own.isdisjoint(blk.slots):
                        out.add(b)
            self._holding[i] = out
        return out

    def used_by_others(self, b: int, pair: tuple[int, int]) -> bool:
        for i, br in enumerate(self.state.branches):
            if i not in pair and (b in br.working or b in br.published or b == br.tail or b == br.new):
                return True
        return False

    def anchor(self, i: int) -> Anchor:
        """Branch i as the refinement sees it, naming no block and no branch:
        its kernels' places in the queue, and the place (in the free list
        and the queue) of each block it maps and of each block holding one
        of its tokens."""
        if self._place is None:
            self._place = self._places()
        place = self._place.__getitem__
        br = self.state.branches[i]
        kernels = tuple(q for q, op in enumerate(self.state.queue) if type(op) is Kernel and op.branch == i)
        return (kernels, tuple(map(place, br.working)), tuple(map(place, br.published)),
                () if br.tail is None else place(br.tail), () if br.new is None else place(br.new),
                tuple(sorted(map(place, self.holding(i)))))

    def _places(self) -> list[Place]:
        """Per block: refcount, holds, place in the free list (-1 when not
        free) and places in the queue."""
        state = self.state
        queued: list[list[tuple[int, ...]]] = [[] for _ in state.blocks]
        for q, op in enumerate(state.queue):
            if type(op) is Copy:
                queued[op.src].append((q, 0))
                queued[op.dst].append((q, 1))
            else:
                for j, b in enumerate(op.snapshot):
                    queued[b].append((q, 2, j))
        free = self.free
        return [(blk.refcount, blk.holds, free.get(b, -1), tuple(queued[b])) for b, blk in enumerate(state.blocks)]

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
        complete: a False only costs enumeration."""
        state, sym = self.state, self.sym
        bx, by = state.branches[x], state.branches[y]
        if bx[:6] != by[:6] or x in self.kernels or y in self.kernels:
            return False
        if bx == by and bx.pos == sym.prompt:
            return True          # the same tables and no token yet: nothing to swap
        if len(bx.working) != len(by.working) or len(bx.published) != len(by.published) \
                or (bx.tail is None) != (by.tail is None) or (bx.new is None) != (by.new is None):
            return False
        beta: dict[int, int] = {}
        pairs = list(zip(bx.working, by.working)) + list(zip(bx.published, by.published))
        if bx.tail is not None and by.tail is not None:
            pairs.append((bx.tail, by.tail))
        if bx.new is not None and by.new is not None:
            pairs.append((bx.new, by.new))
        for p, q in pairs:
            if beta.setdefault(p, q) != q or beta.setdefault(q, p) != p:
                return False
        free, sort_free = self.free, sym.sort_free
        moved = [b for b, c in beta.items() if b != c]
        if moved:
            queued = self.queued
            for b in moved:
                c = beta[b]
                if b in queued or ((b in free) != (c in free)) or (b in free and not sort_free) \
                        or self.used_by_others(b, (x, y)):
                    return False
        blocks = state.blocks
        tokened = self.holding(x) | self.holding(y)
        for b in moved:                 # blocks without their tokens must match as they are
            if b not in tokened and blocks[beta[b]] != blocks[b]:
                return False
        if not tokened:
            return True
        rho = {}
        for tx, ty in zip(sym.own[x], sym.own[y]):
            rho[tx], rho[ty] = ty, tx
        get = rho.get

        def renamed(b: int) -> Block:
            blk = blocks[b]
            return Block(blk.refcount, blk.holds, tuple(map(get, blk.slots, blk.slots)))  # type: ignore[arg-type]  # get(None, None) is None

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
