"""Relabelling: a state with its branches put in a given order (their
tokens renamed along) and its blocks numbered in order of first appearance
(`Relabelling._relabel`), and the least (by repr) of several such states
(`_least`).

One idea: applying a renaming. Either representative turns a branch order
into a state with it (the exhaustive one in cowcheck.model.reduce.symmetry,
the refined one in cowcheck.model.reduce.refine) and keeps the least of the
candidates; it chooses no order itself and reads no signature, so it
imports no other part of the reduction. `Relabelling` is a mixin of
`Symmetry`, reading the scenario's tokens (`own`), `identity`, whether
blocks carry keys (`keys`) and reuse policy (`sort_free`) that `Symmetry.__init__` sets, and keeping the
token renaming per branch order (`RENAMINGS` of them). In a transfer
scenario the host tier is renamed along: host blocks numbered as blocks
are (`_host_numbering`), the transfers in flight and the pending reports
with their blocks, owners and tokens."""

from __future__ import annotations

from typing import Iterable, Optional

from cowcheck.model.state import Block, Branch, Copy, HostBlock, InFlight, Kernel, Move, Report, State, Tier

#: hot loops build states with tuple.__new__: the named tuples' own __new__
#: is a Python function, and these are the very same objects
_new = tuple.__new__


class Relabelling:
    """The relabelling methods of `Symmetry` (its `__init__` sets the attributes below)."""

    #: branch orders whose token renaming is kept (at most 8! orders at eight branches)
    RENAMINGS = 1 << 12

    blocks_enabled: bool
    sort_free: bool
    own: list[tuple[str, ...]]
    identity: list[int]
    keys: bool
    # tuple(order) -> (old token -> new token, new_of[old] = new)
    _renamings: dict[tuple[int, ...], tuple[dict[str, str], list[int]]]

    def _relabel(self, state: State, order: list[int]) -> State:
        """The state with branch `order[new]` as branch `new` (tokens
        renamed along) and blocks numbered by `_numbering`. The state itself
        when that renames nothing; a branch, block or op that the renaming
        leaves as it was is kept as the same object."""
        moved = order != self.identity
        tokens: Optional[dict[str, str]] = None
        if moved:
            tokens, new_of = self._renaming(order)
            # a branch's tokens exist (in blocks, keys, its sequence or a
            # kernel) only once it has launched a write: if no branch that
            # moves has, there is nothing to rename
            branches = state.branches
            if all(branches[old].writes == 0 for new, old in enumerate(order) if new != old):
                tokens = None
        else:
            new_of = self.identity
        blocks = state.blocks
        size = len(blocks)
        identity = self._ranges(size)
        inv = self._numbering(state, order, tokens) if self.blocks_enabled else identity
        tier = state.tier
        # a transfer scenario's host blocks are numbered as GPU blocks are (`_host_numbering`)
        host_inv = None if tier is None or not self.blocks_enabled else self._host_numbering(state, order, tokens)
        if host_inv is not None and host_inv == self._ranges(len(host_inv)):
            host_inv = None
        if not moved and inv == identity and host_inv is None:
            return state
        hm: Optional[list[int]] = None      # old host block -> new, where any moves
        if host_inv is not None:
            hm = [0] * len(host_inv)
            for position, old in enumerate(host_inv):
                hm[old] = position

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
            keys = self.keys     # a cache scenario's keys name tokens too
            for position, blk in enumerate(new_blocks):
                slots, key = blk[2], blk[3]
                in_slots = not renamed.isdisjoint(slots)
                in_key = keys and key is not None and not renamed.isdisjoint(key)
                if in_slots or in_key:
                    new_blocks[position] = _new(Block, (blk[0], blk[1],
                                                        tuple(map(get, slots, slots)) if in_slots else slots,  # type: ignore[arg-type]  # get(None, None) is None
                                                        tuple(map(get, key, key)) if in_key else key))  # type: ignore[arg-type]
        m = mapping.__getitem__
        branches = state.branches
        new_branches = []
        for new_index, old in enumerate(order):
            br = branches[old]
            status, pos, done, op, path, step, tail, new, working, published, writes, seq, rejected, verified, hits, host_hits, loads = br
            # its sequence holds tokens to rename only if it moved and has written
            rename_seq = tokens is not None and new_index != old and writes != 0
            new_host_hits = host_hits if hm is None or not host_hits else tuple(map(hm.__getitem__, host_hits))
            if same_ids:
                if not rename_seq and new_host_hits == host_hits:
                    new_branches.append(br)
                    continue
                new_working, new_published, new_tail, new_new, new_hits, new_loads = working, published, tail, new, hits, loads
            else:
                new_hits = tuple(map(m, hits)) if hits else hits
                new_working = tuple(map(m, working))
                new_published = new_working if published == working else tuple(map(m, published))
                new_tail = None if tail is None else mapping[tail]
                new_new = None if new is None else mapping[new]
                new_loads = tuple(map(m, loads)) if loads else loads
            if rename_seq:
                assert tokens is not None
                renamed_seq = tuple(map(tokens.get, seq, seq))
                if renamed_seq != seq:
                    seq = renamed_seq
                    new_branches.append(_new(Branch, (status, pos, done, op, path, step, new_tail, new_new, new_working,
                                                      new_published, writes, seq, rejected, verified, new_hits,
                                                      new_host_hits, new_loads)))
                    continue
            if new_working == working and new_published == published and new_tail == tail and new_new == new \
                    and new_hits == hits and new_host_hits == host_hits and new_loads == loads:
                new_branches.append(br)
                continue
            new_branches.append(_new(Branch, (status, pos, done, op, path, step, new_tail, new_new, new_working,
                                              new_published, writes, seq, rejected, verified, new_hits, new_host_hits,
                                              new_loads)))
        queue: list[InFlight] = []
        for inflight in state.queue:
            if type(inflight) is Copy:
                queue.append(_new(Copy, (mapping[inflight.src], mapping[inflight.dst], inflight.n)))
            elif type(inflight) is Move:
                queue.append(_renamed_move(inflight, mapping, hm, new_of, tokens))
            else:
                branch, pos, token, snapshot, expected, span = inflight
                if tokens is not None and new_of[branch] != branch:
                    token, expected = tokens.get(token, token), tuple(map(tokens.get, expected, expected))
                queue.append(_new(Kernel, (new_of[branch], pos, token, tuple(map(m, snapshot)), expected, span)))
        if same_ids:
            free = state.free
            new_blocks_tuple = blocks if tokens is None else tuple(new_blocks)
        else:
            free = tuple(map(m, state.free))
            if self.sort_free:
                free = tuple(sorted(free))
            new_blocks_tuple = tuple(new_blocks)
        if tier is not None:
            tier = _renamed_tier(tier, host_inv, hm, mapping, new_of, tokens)
        return _new(State, (new_blocks_tuple, free, tuple(new_branches), tuple(queue), state.code, tier))

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
            seq += br.hits
            seq += br.loads
        for op in state.queue:
            if type(op) is Copy:
                seq.append(op.src)
                seq.append(op.dst)
            elif type(op) is Move:
                seq.append(op.block)
            else:
                seq += op.snapshot
        if state.tier is not None:      # blocks a pending report still releases
            seq += [report.move.block for report in state.tier.reports]
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

    def _host_numbering(self, state: State, order: list[int], tokens: Optional[dict[str, str]]) -> list[int]:
        """new host block id -> old id, in a transfer scenario: host blocks
        in order of first appearance (host hits in the new branch order,
        then the transfers in flight, then the pending reports), then the
        allocated ones no one references (ordered by contents), then the
        host free list in its order. That order is kept, never sorted: the
        host free list is lifo whatever `reuse` says, so its order decides
        which host block the next store takes."""
        tier = state.tier
        assert tier is not None
        branches = state.branches
        seq: list[Optional[int]] = []
        for br in map(branches.__getitem__, order):
            seq += br.host_hits
        for op in state.queue:
            if type(op) is Move:
                seq.append(op.host)
        seq += [report.move.host for report in tier.reports]
        first = dict.fromkeys(seq)
        first.pop(None, None)
        size, free = len(tier.host), tier.free
        if len(first) + len(free) < size:       # some allocated host block no one references
            host = tier.host
            get = None if tokens is None else tokens.get

            def contents(h: int) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
                pins, slots, key = host[h]
                if get is not None:
                    slots, key = tuple(map(get, slots, slots)), None if key is None else tuple(map(get, key, key))  # type: ignore[arg-type]  # get(None, None) is None
                return pins, tuple(t or "" for t in slots), key or ()

            unreferenced: list[int] = sorted((h for h in range(size) if h not in first and h not in free), key=contents)
            first.update(dict.fromkeys(unreferenced))
        first.update(dict.fromkeys(free))
        return list(first)      # type: ignore[arg-type]  # None was popped

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

        def contents(b: int) -> tuple[int, int, tuple[str, ...], tuple[str, ...]]:
            blk = blocks[b]
            slots = blk.slots if tokens is None else tuple(map(tokens.get, blk.slots, blk.slots))  # type: ignore[arg-type]  # get(None, None) is None
            key = blk.key or ()
            if tokens is not None and key:
                key = tuple(map(tokens.get, key, key))
            return blk.refcount, blk.holds, tuple(t or "" for t in slots), key

        free = state.free
        unnumbered_free = [b for b in free if b not in first]
        if len(first) + len(unnumbered_free) < size:    # some allocated block no one references
            first.update(dict.fromkeys(sorted((b for b in range(size) if b not in first and b not in free), key=contents)))
        if self.sort_free:
            unnumbered_free.sort(key=contents)
        first.update(dict.fromkeys(unnumbered_free))
        return list(first)

def _renamed_move(op: Move, mapping: list[int], hm: Optional[list[int]], new_of: list[int],
                  tokens: Optional[dict[str, str]]) -> Move:
    """A transfer in flight (or reported) under a renaming: its GPU block,
    host block, owner, and the tokens of its key and data."""
    kind, owner, block, host, entry, key, data, reported = op
    if tokens is not None:
        get = tokens.get
        if key is not None:
            key = tuple(map(get, key, key))
        data = tuple(map(get, data, data))
    if host is not None and hm is not None:
        host = hm[host]
    return _new(Move, (kind, new_of[owner], mapping[block], host, entry, key, data, reported))


def _renamed_tier(tier: Tier, host_inv: Optional[list[int]], hm: Optional[list[int]], mapping: list[int],
                  new_of: list[int], tokens: Optional[dict[str, str]]) -> Tier:
    """A transfer scenario's host tier under a renaming: host blocks put in
    the new numbering (their slots and keys renamed), the host free list
    renamed in its order, the pending reports' transfers renamed."""
    host = tier.host if host_inv is None else tuple(map(tier.host.__getitem__, host_inv))
    if tokens is not None:
        renamed = tokens.keys()
        get = tokens.get
        out = []
        for hb in host:
            pins, slots, key = hb
            in_slots = not renamed.isdisjoint(slots)
            in_key = key is not None and not renamed.isdisjoint(key)
            if in_slots or in_key:
                hb = _new(HostBlock, (pins, tuple(map(get, slots, slots)) if in_slots else slots,  # type: ignore[arg-type]  # get(None, None) is None
                                      tuple(map(get, key, key)) if in_key else key))  # type: ignore[arg-type]
            out.append(hb)
        host = tuple(out)
    free = tier.free if hm is None else tuple(map(hm.__getitem__, tier.free))
    reports = tuple(_new(Report, (_renamed_move(r.move, mapping, hm, new_of, tokens), r.ok)) for r in tier.reports)
    return _new(Tier, (host, free, reports))


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
