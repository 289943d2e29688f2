"""Symmetry for the frontier engine: each row renamed to a member of its
orbit before it is hashed, so that the search stores an orbit of
interchangeable branches and renamed blocks about once.

The symmetries are the explicit engine's (cowcheck.model.reduce.symmetry):
branches of one class (plain roots with the same appends and may_cancel,
`Symmetry.classes`) may swap places, their tokens renamed along, and block
ids are names (`Symmetry.blocks_enabled`). A renaming is a pair per row:
the branch order (`order[new] = old`) and the block order (`inv[new] =
old`). `apply` moves each branch's cells and each block's refcount, holds,
slots and (a cache scenario) key to their new places, and renames every
cell that names a branch, a block or a token; a key names tokens, so
renaming branches renames keys too (the key of the renamed tokens: a
class's requests have the same prompt and program, so their keys are
images of each other).

`canonical` is an approximate canonical form, computed for a whole batch of
rows at once: each class is sorted by a signature of its branches (stable:
ties keep their order), then blocks are numbered by first appearance (the
tables in the new branch order, then the device queue, then the free list,
then any block no cell names, by id). Every row it gives is a member of the
input's orbit, so the search is sound: it reaches every orbit, at the depth
of its nearest member, and every verdict, shortest length, peak, copies and
steady count is the one without the reduction. It is not exact: members of
an orbit whose signatures tie may keep different representatives, so the
search may store more states than there are orbits
(docs/explanation/speed.md says by how much). Traces are rebuilt by
carrying the renaming that maps the explicit state walked to its stored
row (`Frontier.path_to`)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from cowcheck.model.scenario import Scenario
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.engines.rows import BRANCH_FIELDS, COPY, EMPTY, KERNEL, SNAP, Layout

#: the multiplier of the branch signature's polynomial hash (wraps modulo 2**64: a tie only weakens the reduction)
_PRIME = 1_000_003


class Renaming(NamedTuple):
    """Per row: the branch order (order[new] = old) and the block order
    (inv[new] = old), (n, N) and (n, P); None: the identity."""
    order: Any
    inv: Any

    def then(self, other: "Renaming") -> "Renaming":
        """This renaming, then `other` (both whole): apply(apply(R, self), other) == apply(R, self.then(other))."""
        return Renaming(np.take_along_axis(self.order, other.order, axis=1),
                        np.take_along_axis(self.inv, other.inv, axis=1))


class RowOrbits:
    """A scenario's row symmetries (`of` gives None where it has none)."""

    def __init__(self, lay: Layout, classes: list[tuple[int, ...]], blocks: bool, sort_free: bool, xp: Any,
                 names: tuple[str, ...] = ()):
        self.lay, self.classes, self.blocks, self.sort_free, self.xp = lay, classes, blocks, sort_free, xp
        self.names = names = names or tuple(map(str, range(lay.N)))
        N, W, P, Q, S, BW, QW = lay.N, lay.W, lay.P, lay.Q, lay.S, lay.BW, lay.QW
        self.start = lay.BR                           # where the branches' cells start
        f = BRANCH_FIELDS.index
        head = len(BRANCH_FIELDS)
        slots = [self.start + i * BW for i in range(N)]
        entries = [lay.QU + k * QW for k in range(Q)]
        # the cells that name a block: per branch its locals and both tables (slot by slot), its hits, each
        # snapshot, the free list; a copy's source and target (only where the entry is a copy): the scan's below
        tables = [s + c for s in slots for c in [f("tail"), f("new"), *range(head, head + 2 * W)]]
        # a request's hits (a cache scenario): the blocks of its admission's lookup
        hits = [lay.hits(i) + t for i in range(N) for t in range(lay.H)] if lay.cache else []
        self.kind_cells = np.array(entries, dtype=np.int64)
        # the cells that hold a token: the slots, and with speculation the sequences and expected ones
        self.token_cells = np.array(list(range(2 * P, 2 * P + P * lay.B))
                                    + [s + head + 2 * W + 2 + t for s in slots for t in range(S)]
                                    + [e + SNAP + W + t for e in entries for t in range(S)], dtype=np.int64)
        # a token's owner (-1: the prompt, or empty) and its place among the owner's
        tokens = 1 + lay.L + N * lay.T
        self.owner = np.array([-1] * (1 + lay.L) + [(t - 1 - lay.L) // lay.T for t in range(1 + lay.L, tokens)])
        self.offset = np.array([0] * (1 + lay.L) + [(t - 1 - lay.L) % lay.T for t in range(1 + lay.L, tokens)])
        # a cache scenario's keys: their tokens (0 past a key's end), their codes, and the branches whose tokens each names
        longest = max(map(len, lay.keys), default=0)
        self.key_tokens = np.array([k + (0,) * (longest - len(k)) for k in lay.keys], dtype=np.int64).reshape(len(lay.keys), longest)
        self.key_codes = lay.key_codes
        self.powers = np.array([lay.V ** k for k in range(longest)], dtype=np.int64)
        self.key_owners = np.array([sum(1 << int(self.owner[t]) for t in set(k) if self.owner[t] >= 0) for k in lay.keys],
                                   dtype=np.int64)
        # the first appearance scan, over every cell that names a block: the working tables and locals, then the
        # published tables, then the queue (each entry's a, b and snapshot), then the free list
        published = [s + head + W + t for s in slots for t in range(W)]
        working = [c for c in tables if c not in set(published)] + hits
        self.scan_cells = np.array(working + published + [e + c for e in entries for c in (1, 2, *range(SNAP, SNAP + W))]
                                   + list(range(lay.FREE, lay.FREE + P)), dtype=np.int64)
        self.scan_queue = len(working) + len(published)      # where the queue's entries start in the scan
        # the signature's lookups: each branch's working table (branch by branch, slot by slot), then each tail, each new block
        self.named_cells = np.array([s + head + t for s in slots for t in range(W)] + [s + f("tail") for s in slots]
                                    + [s + f("new") for s in slots], dtype=np.int64)
        self.sig_fields = [f(name) for name in ("status", "pos", "done", "prog", "step", "wlen", "plen")]
        self.describe = (["branch symmetry (" + "; ".join("".join(names[i] for i in c) for c in classes) + ")"] if classes else []) \
            + (["block-id symmetry"] if blocks else [])
        if xp is not np:
            for name in ("kind_cells", "token_cells", "owner", "offset", "scan_cells",
                         "named_cells", "key_tokens", "key_codes", "powers",
                         "key_owners"):
                setattr(self, name, xp.asarray(getattr(self, name)))

    @staticmethod
    def of(scenario: Scenario, lay: Layout, xp: Any) -> Optional["RowOrbits"]:
        symmetry = Symmetry(scenario)
        blocks = symmetry.blocks_enabled and lay.P > 0
        if not symmetry.classes and not blocks:
            return None
        return RowOrbits(lay, symmetry.classes, blocks, symmetry.sort_free, xp, tuple(symmetry.names))

    def on(self, xp: Any) -> "RowOrbits":
        """The same symmetries over another array module (traces: the host)."""
        return RowOrbits(self.lay, self.classes, self.blocks, self.sort_free, xp, self.names)

    # -- the canonical form ------------------------------------------------------
    def canonical(self, R: Any) -> tuple[Any, Renaming]:
        """Each row's representative, and the renaming that gives it: the
        branches sorted and moved first, then the moved rows' blocks
        numbered and renamed (the same rows as `apply` of both at once)."""
        xp, lay = self.xp, self.lay
        out = R.copy()
        order = self._order(R) if self.classes else None
        if order is not None:
            self._move_branches(out, R, order)
        inv = None
        if self.blocks:
            named = self._named(out)
            inv = self._numbering(named, len(R))
            self._rename_blocks(out, inv, named)
        n = len(R)
        whole = Renaming(xp.broadcast_to(xp.arange(lay.N), (n, lay.N)) if order is None else order,
                         xp.broadcast_to(xp.arange(lay.P), (n, lay.P)) if inv is None else inv)
        return out, whole

    def _order(self, R: Any) -> Any:
        """Each class sorted by its branches' signatures (ties keep their order)."""
        xp, lay = self.xp, self.lay
        n, N, P, W = len(R), lay.N, lay.P, lay.W
        cells = R[:, self.start:self.start + N * lay.BW].reshape(n, N, lay.BW)
        sig = xp.zeros((n, N), dtype=np.int64)
        for field in self.sig_fields:
            sig = sig * _PRIME + cells[:, :, field]
        # per block (and a last one for no block, all 0): how shared it is (its refcount and holds), how many
        # of its slots are written, and the copies in flight into it
        ar = xp.arange(n)
        counts = xp.zeros((n, P + 1), dtype=np.int64)
        counts[:, :P] = (R[:, :P].astype(np.int64) * 64 + R[:, P:2 * P]) * 2 + 1
        slots = R[:, 2 * P:2 * P + P * lay.B].reshape(n, P, lay.B)
        filled = xp.zeros((n, P + 1), dtype=np.int64)
        for b in range(lay.B):
            filled[:, :P] += slots[:, :, b] != 0
        kinds = R[:, lay.QU:lay.QU + lay.Q * lay.QW:lay.QW]
        busy = int((kinds != EMPTY).any(axis=0).sum()) if lay.Q and n else 0     # the queue is kept front first
        kinds = kinds[:, :busy]
        dst = xp.where(kinds == COPY, R[:, lay.QU + 2:lay.QU + busy * lay.QW:lay.QW], P).astype(np.int64)
        into = xp.bincount((ar[:, None] * (P + 1) + dst).ravel(), minlength=n * (P + 1)).reshape(n, P + 1)
        into[:, P] = 0
        # the blocks each branch names, looked up in one index: its working table's, its tail's and its new block's
        names = xp.take(R, self.named_cells, axis=1).astype(np.int64)
        at = ar[:, None] * (P + 1) + xp.where(names < 0, P, names)
        counts, filled, into = (xp.take(table.ravel(), at) for table in (counts, filled, into))
        # the working table: how shared its blocks are, then how much of each is written
        for table in (counts, filled):
            for t in range(W):
                sig = sig * _PRIME + table[:, t:N * W:W]
        # the locals: how shared each is, how much of it is written, and the copies in flight into it
        for local in (N * W, N * W + N):
            for table in (counts, filled, into):
                sig = sig * _PRIME + table[:, local:local + N]
        # the kernels each branch has in flight and where its first one stands in the queue
        who = (ar[:, None] * (N + 1)
               + xp.where(kinds == KERNEL, R[:, lay.QU + 1:lay.QU + busy * lay.QW:lay.QW], N).astype(np.int64)).ravel()
        kernels = xp.bincount(who, minlength=n * (N + 1)).reshape(n, N + 1)[:, :N]
        first_kernel = xp.full(n * (N + 1), lay.Q, dtype=np.int64)
        xp.minimum.at(first_kernel, who, xp.broadcast_to(xp.arange(busy), (n, busy)).ravel())
        # where the branch's tokens lie: how many slots hold one, and the first place in the free list of a
        # block holding one (a finished branch leaves its tokens in the blocks it freed)
        owner = (ar[:, None, None] * (N + 1) + xp.take(self.owner, slots) + 1).ravel()     # (row, block, slot): row and owner + 1
        tokens = xp.bincount(owner, minlength=n * (N + 1))
        free = R[:, lay.FREE:lay.FREE + P].astype(np.int64)
        place = xp.full((n, P + 1), P, dtype=np.int64)
        place[ar[:, None], xp.where(free < 0, P, free)] = xp.arange(P)[None, :]
        first = xp.full(n * (N + 1), P, dtype=np.int64)
        xp.minimum.at(first, owner, xp.broadcast_to(place[:, :P, None], slots.shape).ravel())
        for extra in (kernels, first_kernel.reshape(n, N + 1)[:, :N], tokens.reshape(n, N + 1)[:, 1:],
                      first.reshape(n, N + 1)[:, 1:]):
            sig = sig * _PRIME + extra
        order = xp.broadcast_to(xp.arange(N), (n, N)).copy()
        for members in self.classes:
            m = xp.asarray(members)
            order[:, m] = m[xp.argsort(sig[:, m], axis=1, kind="stable")]
        return order

    def _named(self, R: Any) -> "_Named":
        """The cells that name a block, in the first appearance scan's order."""
        xp, lay = self.xp, self.lay
        n, Q = len(R), lay.Q
        scan = xp.take(R, self.scan_cells, axis=1)        # row by row in memory (R[:, cells] is column by column)
        if Q:       # a copy's source and target are blocks, a kernel's branch and position are not
            entries = scan[:, self.scan_queue:self.scan_queue + Q * (2 + lay.W)].reshape(n, Q, 2 + lay.W)
            no_copy = xp.take(R, self.kind_cells, axis=1) != COPY
            entries[:, :, :2] = xp.where(no_copy[:, :, None], -1, entries[:, :, :2])
        C = scan.shape[1]
        used = xp.nonzero(scan.ravel() >= 0)[0]
        rows = used // C
        place = used - rows * C
        return _Named(rows, place, rows * lay.P + scan.ravel()[used])

    def _numbering(self, named: "_Named", n: int) -> Any:
        """inv[new] = old: blocks in order of first appearance in the tables
        (branch by branch: the rows' branches already moved), the device
        queue, the free list, then by id. All rows at once: each row's first
        place of each block (a scatter-min over the cells that name one; a
        block no cell names after them all, by id), ranked."""
        xp, P = self.xp, self.lay.P
        C = len(self.scan_cells)
        first = (C + xp.arange(P, dtype=np.int64))[None, :].repeat(n, axis=0).ravel()
        xp.minimum.at(first, named.keys, named.place)
        return xp.argsort(first.reshape(n, P), axis=1)

    # -- mirrored moves ----------------------------------------------------------------
    def mirrored(self, R: Any) -> Optional[Any]:
        """(n, N): the branches whose moves mirror an earlier branch's of its
        class, which are left out (None: none in any row). Branch j mirrors
        i when their cells are equal, neither has a kernel in flight and no
        slot holds a token of either: then swapping them maps the row to
        itself, so each move of j leads to the orbit of a move of i, with
        the same facts renamed (the explicit engine's `Symmetry.unmirrored`,
        for the twins that are plain to see in a row)."""
        xp, lay = self.xp, self.lay
        if not self.classes:
            return None
        n = len(R)
        cells = R[:, self.start:self.start + lay.N * lay.BW].reshape(n, lay.N, lay.BW)
        kinds = R[:, lay.QU:lay.QU + lay.Q * lay.QW:lay.QW]
        owner = xp.where(kinds == KERNEL, R[:, lay.QU + 1:lay.QU + lay.Q * lay.QW:lay.QW], -1)
        slots = R[:, 2 * lay.P:2 * lay.P + lay.P * lay.B]
        first = 1 + lay.L
        named = xp.zeros(n, dtype=np.int64)         # the branches whose tokens some key names (a bit per branch)
        if lay.cache and len(lay.keys):
            keys = R[:, lay.KEY:lay.KEY + lay.P].astype(np.int64)
            owners = xp.where(keys >= 0, self.key_owners[xp.maximum(keys, 0)], 0)
            for b in range(lay.P):
                named |= owners[:, b]
        out = xp.zeros((n, lay.N), dtype=bool)
        for members in self.classes:
            quiet = {i: ~(owner == i).any(axis=1) & ~((slots >= first + i * lay.T) & (slots < first + (i + 1) * lay.T)).any(axis=1)
                     & ((named >> i) & 1 == 0) for i in members}
            for k, j in enumerate(members[1:], 1):
                for i in members[:k]:
                    out[:, j] |= quiet[i] & quiet[j] & (cells[:, i] == cells[:, j]).all(axis=1)
        return out if bool(out.any()) else None

    # -- a renaming applied ---------------------------------------------------------
    def apply(self, R: Any, by: Renaming) -> Any:
        """The rows renamed (a new array): branch order[new] as branch new,
        block inv[new] as block new. A part given as None is the identity."""
        out = R.copy()
        if by.order is not None:
            self._move_branches(out, R, by.order)
        if by.inv is not None:
            self._rename_blocks(out, by.inv)
        return out

    def _move_branches(self, out: Any, R: Any, order: Any) -> None:
        """`out` (a copy of R): branch order[new] as branch new, its tokens and keys renamed along."""
        xp, lay = self.xp, self.lay
        n = len(R)
        ar = xp.arange(n)[:, None]
        start, end = self.start, self.start + lay.N * lay.BW
        out[:, start:end] = R[:, start:end].reshape(n, lay.N, lay.BW)[ar, order].reshape(n, -1)
        new_of = xp.argsort(order, axis=1)
        owner = out[:, self.kind_cells + 1]
        kernel = out[:, self.kind_cells] == KERNEL
        out[:, self.kind_cells + 1] = xp.where(kernel, xp.take_along_axis(new_of, xp.where(kernel, owner, 0).astype(np.int64), 1),
                                               owner)
        # token t of branch j at offset o: the same offset of branch new_of[j] (a table over every token)
        table = xp.where(self.owner[None, :] >= 0,
                         1 + lay.L + new_of[:, xp.maximum(self.owner, 0)] * lay.T + self.offset[None, :],
                         xp.arange(len(self.owner))[None, :])
        self._map(out, self.token_cells, table)
        if lay.cache and len(lay.keys):         # each key: the key of its tokens renamed
            renamed = xp.take_along_axis(table, xp.broadcast_to(self.key_tokens.reshape(1, -1), (n, self.key_tokens.size)),
                                         axis=1).reshape(n, *self.key_tokens.shape)
            codes = (renamed * self.powers).sum(axis=2)
            keys = xp.searchsorted(self.key_codes, codes)
            if bool((self.key_codes[xp.minimum(keys, len(lay.keys) - 1)] != codes).any()):
                raise AssertionError("frontier engine: a renamed key is not in the row layout")
            self._map(out, xp.arange(lay.KEY, lay.KEY + lay.P), keys)

    def _rename_blocks(self, out: Any, inv: Any, named: Optional["_Named"] = None) -> None:
        """`out`, in place: block inv[new] as block new (`named`: its cells
        that name a block, where known)."""
        xp, lay = self.xp, self.lay
        n, P, B = len(out), lay.P, lay.B
        named = self._named(out) if named is None else named
        ar = xp.arange(n)[:, None]
        out[:, :P] = _take(out[:, :P], inv, xp)
        out[:, P:2 * P] = _take(out[:, P:2 * P], inv, xp)
        if lay.cache:
            out[:, lay.KEY:lay.KEY + P] = _take(out[:, lay.KEY:lay.KEY + P], inv, xp)
        out[:, 2 * P:2 * P + P * B] = out[:, 2 * P:2 * P + P * B].reshape(n, P, B)[ar, inv].reshape(n, -1)
        new_of = xp.empty_like(inv)
        new_of[ar, inv] = xp.arange(P)
        # each cell that names a block, by its place in the flat rows (`out` is a new array: its rows are contiguous)
        out.reshape(-1)[named.rows * out.shape[1] + self.scan_cells[named.place]] = new_of.ravel()[named.keys]
        if self.sort_free:          # `any` keeps the free list ascending
            free = out[:, lay.FREE:lay.FREE + P]
            free = xp.sort(xp.where(free < 0, P, free), axis=1)
            out[:, lay.FREE:lay.FREE + P] = xp.where(free == P, -1, free)

    def _map(self, out: Any, cells: Any, table: Any) -> None:
        """Each of `cells` that is not -1 replaced by its entry in the row's `table`."""
        xp = self.xp
        values = out[:, cells]
        out[:, cells] = xp.where(values < 0, values, _take(table, xp.maximum(values, 0), xp))


class _Named(NamedTuple):
    """The cells of a batch of rows that name a block: each one's row, its
    place in the first appearance scan (`RowOrbits.scan_cells`), and its
    row and block as one index (row * P + block)."""
    rows: Any
    place: Any
    keys: Any


def _take(table: Any, index: Any, xp: Any) -> Any:
    """table[r, index[r, k]] for every row r and k: one gather over the flat table."""
    flat = index.astype(np.int64) + (xp.arange(len(table), dtype=np.int64) * table.shape[1])[:, None]
    return table.ravel()[flat]

