"""The frontier engine's set of stored states: 64-bit row hashes to state
ids in one open-addressing table with linear probing, looked up and filled
a whole batch at a time (numpy or CuPy, `xp`).

A batch probes its home slots at once; the hashes that meet neither their
own key nor an empty slot move one slot on, and the next round probes only
them. The table is kept at most half full, so almost every hash is settled
in its first round or two. This replaced sorted runs of hashes merged as
they grew: their sorts and merges were a fifth of the engine's time.

Key 0 marks an empty slot: a hash is never 0 (the frontier engine's hash
maps 0 to 1). Two rows with one hash are the caller's to tell apart (it
compares the rows); the table only maps hashes."""

from __future__ import annotations

from typing import Any

import numpy as np

#: the most a table is filled before it doubles
LOAD = 0.5


class HashTable:
    """Distinct nonzero 64-bit hashes -> state ids (int32)."""

    def __init__(self, xp: Any, capacity: int = 1 << 12):
        self.xp = xp
        self.keys = xp.zeros(capacity, dtype=np.uint64)
        self.ids = xp.full(capacity, -1, dtype=np.int32)
        self.size = 0

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.ids.nbytes)

    def _home(self, hashes: Any) -> Any:
        return (hashes & np.uint64(len(self.keys) - 1)).astype(np.int64)

    def lookup(self, hashes: Any) -> Any:
        """The stored id of each hash, or -1."""
        xp = self.xp
        found = xp.full(len(hashes), -1, dtype=np.int64)
        mask = len(self.keys) - 1
        at, slot, h = xp.arange(len(hashes)), self._home(hashes), hashes
        while len(at):
            keys = self.keys[slot]
            hit = keys == h
            found[at[hit]] = self.ids[slot[hit]]
            on = (keys != 0) & ~hit
            at, slot, h = at[on], (slot[on] + 1) & mask, h[on]
        return found

    def insert(self, hashes: Any, ids: Any) -> None:
        """Add hashes none of which is stored, distinct among themselves."""
        if (self.size + len(hashes)) > LOAD * len(self.keys):
            self._grow(self.size + len(hashes))
        self._place(hashes, self.xp.asarray(ids, dtype=np.int32))
        self.size += len(hashes)

    def _place(self, hashes: Any, ids: Any) -> None:
        """Each hash in the first empty slot from its home on: all of a round
        write their slots, and those that read their own hash back hold them
        (of two hashes that met at one empty slot one wins, the other moves on)."""
        mask = len(self.keys) - 1
        slot = self._home(hashes)
        while len(hashes):
            empty = self.keys[slot] == 0
            self.keys[slot[empty]] = hashes[empty]
            won = empty
            won[empty] = self.keys[slot[empty]] == hashes[empty]
            self.ids[slot[won]] = ids[won]
            on = ~won
            hashes, ids, slot = hashes[on], ids[on], (slot[on] + 1) & mask

    def _grow(self, size: int) -> None:
        capacity = len(self.keys)
        while size > LOAD * capacity:
            capacity *= 2
        used = self.keys != 0
        hashes, ids = self.keys[used], self.ids[used]
        self.keys = self.xp.zeros(capacity, dtype=np.uint64)
        self.ids = self.xp.full(capacity, -1, dtype=np.int32)
        self._place(hashes, ids)
