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

1. signatures, as above, with the queue index of each op in flight that is
   the branch's own (its kernels, a copy into its `new` block): branches
   waiting at one step for copies launched at different times are told
   apart here, before any anchor is built;
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
   tests/test_symmetry.py). A run whose members are all twins of its first
   keeps its order without anchors (twins have equal anchors).

The partition depends only on the orbit and the twin relation is an
automorphism relation, so the least relabelling over the orders it allows
is canonical; the class-size rule is fixed per scenario."""

from __future__ import annotations

from itertools import groupby, permutations, product
from typing import Iterable, Iterator, Optional, Union

from .action import Transition
from .scenario import Scenario
from .state import Block, Branch, Copy, InFlight, Kernel, State, Status

#: a block as a signature sees it: refcount, holds, filled slots
Shape = tuple[int, int, int]
#: a branch as `_local` sees it
Local = tuple[Status, int, int, str, str, int, int, Union[Shape, tuple[int]], bool, tuple[Shape, ...], tuple[Shape, ...]]
#: a branch as `Symmetry._signatures` sees it: that, and its kernels' positions
Signature = tuple[Local, tuple[int, ...]]
#: a block as an anchor sees it: refcount, holds, place in the free list, places in the queue
Place = tuple[int, int, int, tuple[tuple[int, ...], ...]]
#: a branch as `_Context.anchor` sees it
Anchor = tuple[tuple[int, ...], tuple[Place, ...], tuple[Place, ...], Union[Place, tuple[()]], Union[Place, tuple[()]],
               tuple[Place, ...]]

#: no kernel in flight (shared: never written to)
_NO_KERNELS: dict[int, tuple[int, ...]] = {}

#: hot loops build states with tuple.__new__: the named tuples' own __new__
#: is a Python function, and these are the very same objects
_new = tuple.__new__


class Symmetry:
    #: recent representatives kept, per generation
    CACHE = 1 << 15
    #: branch orders whose token renaming is kept (at most 8! orders at eight branches)
    RENAMINGS = 1 << 12
    #: branches whose local signature is kept
    LOCALS = 1 << 13

    def __init__(self, scenario: Scenario, branches: bool = True, blocks: bool = True):
        self.blocks_enabled = blocks
        self.sort_free = scenario.reuse == "any"
        self.names = [scenario.branch_name(i) for i in range(len(scenario.branches))]
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, spec in enumerate(scenario.branches):
            if spec.plain:
                groups.setdefault((spec.appends, spec.may_cancel), []).append(i)
        self.classes = [tuple(g) for g in groups.values() if len(g) > 1] if branches else []
        # each class with the positions of its members
        self._members = [(members, range(len(members))) for members in self.classes]
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
        # hash(state) -> (state, representative): keyed by the hash so that a
        # miss costs one hash of the state, not one per look-up and insertion
        self._recent: dict[int, tuple[State, State]] = {}
        self._older: dict[int, tuple[State, State]] = {}
        self.own_set = [frozenset(own) for own in self.own]
        # tuple(order) -> (old token -> new token, new_of[old] = new)
        self._renamings: dict[tuple[int, ...], tuple[dict[str, str], list[int]]] = {}
        # id(branch) -> (branch, the blocks its local signature reads, those Block objects, that signature,
        # the state's blocks it was read from: when a later state has the very same tuple, nothing changed)
        self._locals: dict[int, tuple[Branch, tuple[int, ...], tuple[Block, ...], Local, tuple[Block, ...]]] = {}

    def describe(self) -> list[str]:
        out = []
        if self.classes:
            out.append("branch symmetry (" + "; ".join("".join(self.names[i] for i in c) for c in self.classes) + ")")
        if self.blocks_enabled:
            out.append("block-id symmetry")
        return out

    # -- the representative -------------------------------------------------
    def representative(self, state: State) -> State:
        """The orbit's canonical member: branches of each class sorted by
        signature, blocks numbered by first appearance; where signatures tie,
        the least (by repr) of the tied orders. Canonical, since the
        signature and the numbering name no branch and no block."""
        # Interleavings meet: the same state comes back as a successor of
        # several stored ones, so recent answers are kept (two generations
        # of at most CACHE states each).
        key = hash(state)
        known = self._recent.get(key)
        if known is not None and known[0] == state:
            return known[1]
        known = self._older.get(key)
        if known is not None and known[0] == state:
            rep = known[1]
        else:
            rep = self._refined(state) if not self.exhaustive else self._exhaustive(state)
        if len(self._recent) >= self.CACHE:
            self._older, self._recent = self._recent, {}
        self._recent[key] = (state, rep)
        return rep

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

    # -- mirrored moves -------------------------------------------------------
    def unmirrored(self, state: State, transitions: list[Transition]) -> list[Transition]:
        """The transitions but those of branches whose moves mirror an
        earlier branch's (`mirrored`): each leads to the orbit of one kept,
        with the same facts renamed, so the explorer stores the same states
        and finds the same violations at the same depths without them."""
        return without_actors(transitions, self.mirrored_actors(state))

    def mirrored_actors(self, state: State) -> frozenset[str]:
        """The names of the `mirrored` branches."""
        mirrored = self.mirrored(state)
        return frozenset(self.names[i] for i in mirrored) if mirrored else _NO_ACTORS

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
        branches, prompt = state.branches, self.prompt
        ctx: Optional[_Context] = None
        for members in self.classes:
            first: dict[Signature, int] = {}
            for i, sig in zip(members, self._signatures(state, members, kernels)):
                x = first.setdefault(sig, i)
                if x == i:
                    continue
                bx = branches[x]
                if bx.pos == prompt and bx == branches[i]:
                    out.append(i)       # the same tables and no token yet
                    continue
                if ctx is None:
                    ctx = _Context(self, state, kernels)
                if ctx.twins(x, i):
                    out.append(i)
        return out

    def _exhaustive(self, state: State) -> State:
        """The least relabelling over every order that sorts each class by
        signature (cheap while no class has more than three branches)."""
        orders = self._orders(state)
        if len(orders) == 1:
            return self._relabel(state, orders[0])
        candidates = {self._relabel(state, order) for order in orders}
        # tied branches are often truly alike (swapping them changes nothing)
        return candidates.pop() if len(candidates) == 1 else _least(candidates)

    def _orders(self, state: State) -> list[list[int]]:
        """Every branch order (order[new] = old) that sorts each class by
        signature; more than one only where signatures tie."""
        orders = [list(self.identity)]
        if not self.classes:
            return orders
        kernels = self._kernels(state.queue)
        for members in self.classes:
            sig = dict(zip(members, self._signatures(state, members, kernels)))
            ranked = sorted(members, key=sig.__getitem__)
            runs = [list(g) for _, g in groupby(ranked, key=sig.__getitem__)]
            if len(runs) == len(ranked):        # no tie: one order
                for order in orders:
                    for slot, old in zip(members, ranked):
                        order[slot] = old
                continue
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
        prompt = self.prompt
        for slots, run in ties:
            head = branches[run[0]]
            if head.pos == prompt and all(map(head.__eq__, map(branches.__getitem__, run))):
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

    # -- relabelling ----------------------------------------------------------
    def _relabel(self, state: State, order: list[int]) -> State:
        """The state with branch `order[new]` as branch `new` (tokens
        renamed along) and blocks numbered by `_numbering`. The state itself
        when that renames nothing; a branch, block or op that the renaming
        leaves as it was is kept as the same object."""
        moved = order != self.identity
        tokens: Optional[dict[str, str]] = None
        if moved:
            tokens, new_of = self._renaming(order)
            # a plain branch's tokens exist (in blocks, its sequence or a
            # kernel) only once it has launched a write: if no branch that
            # moves has, there is nothing to rename
            prompt, branches = self.prompt, state.branches
            if all(branches[old].pos == prompt for new, old in enumerate(order) if new != old):
                tokens = None
        else:
            new_of = self.identity
        blocks = state.blocks
        size = len(blocks)
        identity = self._ranges(size)
        inv = self._numbering(state, order, tokens) if self.blocks_enabled else identity
        if not moved and inv == identity:
            return state

        same_ids = inv == identity
        if same_ids:
            mapping = inv
            new_blocks = list(blocks)
        else:
            mapping = [0] * size
            for position, old in enumerate(inv):
                mapping[old] = position
            new_blocks = list(map(blocks.__getitem__, inv))
        if tokens is not None:      # blocks are immutable: moved as they are unless their tokens change
            renamed = tokens.keys()
            get = tokens.get
            for position, blk in enumerate(new_blocks):
                slots = blk[2]
                if not renamed.isdisjoint(slots):
                    new_blocks[position] = _new(Block, (blk[0], blk[1], tuple(map(get, slots, slots))))  # type: ignore[arg-type]  # get(None, None) is None
        m = mapping.__getitem__
        branches = state.branches
        new_branches = []
        for new_index, old in enumerate(order):
            br = branches[old]
            status, pos, done, op, path, step, tail, new, working, published, writes, seq, rejected = br
            # its sequence holds tokens to rename only if it moved and has written
            rename_seq = tokens is not None and new_index != old and pos != self.prompt
            if same_ids:
                if not rename_seq:
                    new_branches.append(br)
                    continue
                new_working, new_published, new_tail, new_new = working, published, tail, new
            else:
                new_working = tuple(map(m, working))
                new_published = new_working if published == working else tuple(map(m, published))
                new_tail = None if tail is None else mapping[tail]
                new_new = None if new is None else mapping[new]
            if rename_seq:
                assert tokens is not None
                renamed_seq = tuple(map(tokens.get, seq, seq))
                if renamed_seq != seq:
                    seq = renamed_seq
                    new_branches.append(_new(Branch, (status, pos, done, op, path, step, new_tail, new_new,
                                                      new_working, new_published, writes, seq, rejected)))
                    continue
            if new_working == working and new_published == published and new_tail == tail and new_new == new:
                new_branches.append(br)
                continue
            new_branches.append(_new(Branch, (status, pos, done, op, path, step, new_tail, new_new,
                                              new_working, new_published, writes, seq, rejected)))
        queue: list[InFlight] = []
        for inflight in state.queue:
            if type(inflight) is Copy:
                queue.append(_new(Copy, (mapping[inflight.src], mapping[inflight.dst], inflight.n)))
            else:
                branch, pos, token, snapshot, expected = inflight
                if tokens is not None and new_of[branch] != branch:
                    token, expected = tokens.get(token, token), tuple(map(tokens.get, expected, expected))
                queue.append(_new(Kernel, (new_of[branch], pos, token, tuple(map(m, snapshot)), expected)))
        if same_ids:
            free = state.free
            new_blocks_tuple = blocks if tokens is None else tuple(new_blocks)
        else:
            free = tuple(map(m, state.free))
            if self.sort_free:
                free = tuple(sorted(free))
            new_blocks_tuple = tuple(new_blocks)
        return _new(State, (new_blocks_tuple, free, tuple(new_branches), tuple(queue), state.code))

    _range_cache: dict[int, list[int]] = {}

    @classmethod
    def _ranges(cls, n: int) -> list[int]:
        out = cls._range_cache.get(n)
        if out is None:
            out = cls._range_cache[n] = list(range(n))
        return out

    def _renaming(self, order: list[int]) -> tuple[dict[str, str], list[int]]:
        """`_token_map(order)` and the inverse order (new_of[old] = new),
        kept per order: the same few orders come back state after state."""
        key = tuple(order)
        known = self._renamings.get(key)
        if known is None:
            if len(self._renamings) >= self.RENAMINGS:
                self._renamings.clear()
            new_of = [0] * len(order)
            for position, old in enumerate(order):
                new_of[old] = position
            known = self._renamings[key] = (self._token_map(order), new_of)
        return known

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
        mapping = [0] * len(state.blocks)
        for position, old in enumerate(self._numbering(state, order, tokens)):
            mapping[old] = position
        return mapping

    def _numbering(self, state: State, order: list[int], tokens: Optional[dict[str, str]]) -> list[int]:
        """new block id -> old id: blocks in order of first appearance
        (branch tables in the new branch order, then the queue), then the
        blocks no one references."""
        branches = state.branches
        seq: list[Optional[int]] = []
        for br in map(branches.__getitem__, order):
            working, published = br.working, br.published
            seq += working
            if published is not working:    # else it adds nothing
                seq += published
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
        size = len(state.blocks)
        if len(first) == size:
            return list(first)      # type: ignore[arg-type]  # None was popped
        if not self.sort_free:
            # the usual case: every block no one references is free, and
            # those are numbered in free-list order
            numbered = len(first)
            first.update(dict.fromkeys(state.free))
            if len(first) == size:
                return list(first)      # type: ignore[arg-type]
            first = dict.fromkeys(list(first)[:numbered])
        return self._number_unreferenced(state, first, tokens)  # type: ignore[arg-type]

    def _number_unreferenced(self, state: State, first: dict[int, None], tokens: Optional[dict[str, str]]) -> list[int]:
        """`first` (the blocks in order of first appearance) followed by the
        blocks no one references: allocated ones, then free ones.

        Blocks no one references are told apart only by their contents, so
        order them by contents: equal ones are interchangeable, and any
        order among them gives the same state. Under `any` reuse the free
        list is a set, so its blocks are ordered the same way (sorting is
        stable, so sorting only the free blocks not yet numbered keeps them
        in the order that sorting the whole list gives them)."""
        blocks, size = state.blocks, len(state.blocks)

        def contents(b: int) -> tuple[int, int, tuple[str, ...]]:
            blk = blocks[b]
            slots = blk.slots if tokens is None else tuple(map(tokens.get, blk.slots, blk.slots))  # type: ignore[arg-type]  # get(None, None) is None
            return blk.refcount, blk.holds, tuple(t or "" for t in slots)

        free = state.free
        unnumbered_free = [b for b in free if b not in first]
        if len(first) + len(unnumbered_free) < size:    # some allocated block no one references
            first.update(dict.fromkeys(sorted((b for b in range(size) if b not in first and b not in free), key=contents)))
        if self.sort_free:
            unnumbered_free.sort(key=contents)
        first.update(dict.fromkeys(unnumbered_free))
        return list(first)


#: no actor skipped
_NO_ACTORS: frozenset[str] = frozenset()


def without_actors(transitions: list[Transition], actors: frozenset[str]) -> list[Transition]:
    """The transitions whose actor is not one of `actors`."""
    return [tr for tr in transitions if tr.action.actor not in actors] if actors else transitions


def _local(br: Branch, blocks: tuple[Block, ...]) -> tuple[Branch, tuple[int, ...], tuple[Block, ...], Local, tuple[Block, ...]]:
    """Branch `br` as a signature sees it, but for its kernels, naming no
    block and no branch: status, pos, done, op, path, step, where its tail
    is in its table, and the shapes (refcount, holds, filled slots) of the
    blocks it maps; with the ids and objects of the blocks read."""
    status, pos, done, op, path, step, tail, new, working, published, _, _, _ = br
    reads = working + published if new is None else working + published + (new,)
    held = tuple(map(blocks.__getitem__, reads))
    shapes = list(map(_shape, held))
    n = len(working)
    same = working == published
    mapped = tuple(shapes[:n])
    local = (status, pos, done, op or "", path or "", step,
             -1 if tail is None else working.index(tail) if tail in working else -2,
             (-1,) if new is None else shapes[-1],
             same, mapped, mapped if same else tuple(shapes[n:n + len(published)]))
    return br, reads, held, local, blocks


#: id(block) -> (block, its shape); Blocks are immutable and shared by many states
_SHAPES: dict[int, tuple[Block, Shape]] = {}


def _shape(block: Block) -> Shape:
    """A block as a signature sees it: refcount, holds, filled slots."""
    known = _SHAPES.get(id(block))
    if known is not None and known[0] is block:
        return known[1]
    if len(_SHAPES) >= 1 << 14:
        _SHAPES.clear()
    refcount, holds, slots = block
    shape = _SHAPES[id(block)] = block, (refcount, holds, len(slots) - slots.count(None))
    return shape[1]


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


def _least(candidates: Iterable[State]) -> State:
    """`min(candidates, key=repr)` (the first least in iteration order),
    without writing out every repr: a state's repr is about 100 us of
    Python, and candidates mostly differ in one branch or block."""
    best: Optional[State] = None
    for state in candidates:
        if best is None:
            best = state
            continue
        sign = _repr_order(state, best)
        if sign is None:
            sign = -1 if repr(state) < repr(best) else 0
        if sign < 0:
            best = state
    assert best is not None
    return best


def _repr_order(x: object, y: object) -> Optional[int]:
    """The sign of repr(x) against repr(y), or None where neither decides
    it without the other: one repr is a prefix of the other, so what follows
    them in an enclosing repr does. Two (named) tuples of one type and
    length are written with the same template, field after field, so their
    reprs first differ inside the first field that differs (equal fields of
    the same types are written alike), and that field's reprs decide unless
    one is a prefix of the other."""
    if type(x) is type(y) and isinstance(x, tuple) and len(x) == len(y):  # type: ignore[arg-type]  # a tuple
        for u, v in zip(x, y):     # type: ignore[call-overload]
            if u != v:
                sign = _repr_order(u, v)
                if sign is not None:
                    return sign
                break
        else:
            return 0
    rx, ry = repr(x), repr(y)
    if rx == ry:
        return 0
    if rx.startswith(ry) or ry.startswith(rx):
        return None
    return -1 if rx < ry else 1


class _Context:
    """What the refinement of one state needs, each part computed once and
    only when asked for: who maps each block, which blocks the queue and the
    free list hold, where each branch's tokens lie, and each block's
    label-free place."""

    __slots__ = ("sym", "state", "kernels", "_free", "_queued", "_holding", "_place", "_launched", "_twins")

    def __init__(self, sym: Symmetry, state: State, kernels: dict[int, tuple[int, ...]]):
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
                    out.update(op.snapshot)
            self._queued = out
        return self._queued

    def holding(self, i: int) -> set[int]:
        """Blocks holding one of branch i's tokens (none before its first write)."""
        out = self._holding.get(i)
        if out is None:
            if self.state.branches[i].pos > self.sym.prompt:
                disjoint = self.sym.own_set[i].isdisjoint
                out = {b for b, (_, _, slots) in enumerate(self.state.blocks) if not disjoint(slots)}
            else:
                out = set()
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
        if self._launched is None:
            launched: dict[int, tuple[int, ...]] = {}
            for q, op in enumerate(self.state.queue):
                if type(op) is Kernel:
                    launched[op.branch] = launched.get(op.branch, ()) + (q,)
            self._launched = launched
        place = self._place.__getitem__
        _, _, _, _, _, _, tail, new, working, published, _, _, _ = self.state.branches[i]
        return (self._launched.get(i, ()), tuple(map(place, working)), tuple(map(place, published)),
                () if tail is None else place(tail), () if new is None else place(new),
                tuple(sorted(map(place, self.holding(i)))))

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
                for j, b in enumerate(op.snapshot):
                    queued.setdefault(b, []).append((q, 2, j))
        free = self.free.get
        at = queued.get
        return [(refcount, holds, free(b, -1), tuple(at(b, ()))) for b, (refcount, holds, _) in enumerate(state.blocks)]

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
        if bx[:6] != by[:6] or x in kernels or y in kernels:
            return False
        _, pos, _, _, _, _, tail_x, new_x, working_x, published_x, _, _, _ = bx
        if pos == sym.prompt and bx == by:
            return True          # the same tables and no token yet: nothing to swap
        _, _, _, _, _, _, tail_y, new_y, working_y, published_y, _, _, _ = by
        if len(working_x) != len(working_y) or len(published_x) != len(published_y) \
                or (tail_x is None) != (tail_y is None) or (new_x is None) != (new_y is None):
            return False
        # beta: the block swap that goes with the branch swap (an involution)
        beta: dict[int, int] = {}
        setdefault = beta.setdefault
        for p, q in zip(working_x + published_x + (tail_x, new_x), working_y + published_y + (tail_y, new_y)):
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
            for i, (_, _, _, _, _, _, tail, new, working, published, _, _, _) in enumerate(branches):
                if i != x and i != y and not (disjoint(working) and disjoint(published)
                                              and tail not in moved and new not in moved):
                    return False        # a block that others map too
        blocks = state.blocks
        # blocks holding x's or y's tokens (none before their first write)
        tokened = self.holding(x) | self.holding(y) if pos > sym.prompt else _NOTHING
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
            refcount, holds, slots = blocks[b]
            return _new(Block, (refcount, holds, tuple(map(get, slots, slots))))  # type: ignore[arg-type]  # get(None, None) is None

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
