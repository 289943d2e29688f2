"""The shadow of every KV slot, read from the engine's own tables, ledger
and batch before each forward (never by changing the engine's code).

A slot is (block id, offset); its shadow is the token prefix whose last
token's KV the slot holds. Before a forward, each request in the batch
writes the slots of its new positions and reads those of every position
up to its last one; the monitor judges the writes against the tables and
the ledger, applies them, then judges the reads: a read that finds another
prefix (or nothing) is `faithful-output` broken. A fork's block copies
(the cache's `perform_cache_copy`) copy the shadows of whole blocks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

Slot = tuple[int, int]


@dataclass(frozen=True)
class Violation:
    """An invariant broken at an engine step: `detail` in words, `facts`
    the witness's keys (the request, the block, the wrong token...)."""
    invariant: str
    step: int
    detail: str
    facts: dict[str, Any] = field(default_factory=dict, compare=False)


def allocator_of(cache: Any) -> Any:
    """The cache's full-attention allocator (the small model has no other)."""
    return next(iter(cache.cache_allocators.values()))


def free_ids(cache: Any) -> set[int]:
    """The blocks the pool holds free, and the ledger's cached (evictable)
    blocks."""
    pool, ledger = cache.pool, allocator_of(cache).ledger
    free = {b for tree in pool._free_blocks[allocator_of(cache).index].trees.values() for b in tree}
    n = max(1, int(pool.blocks_per_sector[allocator_of(cache).index]))
    for sector in pool.free_sectors:
        free |= set(range(sector * n, sector * n + n))
    return free | set(ledger.cached_blocks)


def tables(cache: Any) -> dict[str, list[int]]:
    return {rid: list(t) for rid, t in allocator_of(cache).block_table.items()}


def snapshot(cache: Any) -> dict[str, Any]:
    """The engine's allocation state for a counterexample's step: the tables,
    the shared reference counts, the hashed and the free blocks."""
    ledger = allocator_of(cache).ledger
    return {"tables": tables(cache), "ref_counts": {str(b): int(n) for b, n in sorted(ledger.shared_ref_counts.items())},
            "hashed": sorted(int(b) for b in ledger.hash_to_block.values()), "free": sorted(free_ids(cache))}


@dataclass
class Shadow:
    block_size: int
    slots: dict[Slot, tuple[int, ...]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def _flag(self, invariant: str, step: int, detail: str, **facts: Any) -> None:
        if all(v.invariant != invariant for v in self.violations):
            self.violations.append(Violation(invariant, step, detail, facts))

    def forward(self, cache: Any, batch: list[Any], step: int) -> None:
        """Judge and apply one forward's writes, then judge its reads."""
        B, ledger, table = self.block_size, allocator_of(cache).ledger, tables(cache)
        free, hashed = free_ids(cache), set(ledger.hash_to_block.values())
        reads: list[tuple[str, Slot, tuple[int, ...]]] = []
        for future in batch:
            state, q = future.state, future.query_length
            rid, past = state.request_id, state.position_offset - q
            tokens = tuple(state.initial_tokens) + tuple(state.generated_tokens)
            own = table.get(rid, [])
            for p in range(past + q):
                if p // B >= len(own):
                    self._flag("no-use-after-free", step, f"{rid} position {p} has no block in its table {own}",
                               request=rid, position=p)
                    continue
                slot = (own[p // B], p % B)
                if p >= past:
                    self._write(rid, slot, tokens[:p + 1], table, free, hashed, ledger, step)
                reads.append((rid, slot, tokens[:p + 1]))
        for rid, slot, want in reads:
            if slot[0] in free:
                self._flag("no-use-after-free", step, f"{rid} reads block {slot[0]}, which is free", request=rid, block=slot[0])
            found = self.slots.get(slot)
            if found != want:
                self._flag("faithful-output", step, f"{rid} reads slot {slot} for the prefix {list(want)} and finds "
                           + ("nothing written" if found is None else f"the KV of {list(found)}"),
                           request=rid, block=slot[0], slot=slot[1], expected=list(want), found=None if found is None else list(found))

    def _write(self, rid: str, slot: Slot, prefix: tuple[int, ...], table: dict[str, list[int]], free: set[int],
               hashed: set[int], ledger: Any, step: int) -> None:
        block = slot[0]
        others = sorted(r for r, t in table.items() if r != rid and block in t)
        if others:
            self._flag("exclusive-write", step, f"{rid} writes block {block}, which {', '.join(others)} also maps",
                       request=rid, block=block, others=others)
        if ledger.shared_ref_counts.get(block, 1) > 1:
            self._flag("refcount-write", step, f"{rid} writes block {block}, ref count {ledger.shared_ref_counts[block]}",
                       request=rid, block=block, ref_count=int(ledger.shared_ref_counts[block]))
        if block in hashed:
            self._flag("cache-immutable", step, f"{rid} writes block {block}, which is hashed (cached)", request=rid, block=block)
        if block in free:
            self._flag("no-use-after-free", step, f"{rid} writes block {block}, which is free", request=rid, block=block)
        self.slots[slot] = prefix

    def copies(self, pairs: dict[str, tuple[list[int], list[int]]]) -> None:
        for src, dst in zip(*next(iter(pairs.values()), ([], []))):
            for off in range(self.block_size):
                if (src, off) in self.slots:
                    self.slots[(dst, off)] = self.slots[(src, off)]
                else:
                    self.slots.pop((dst, off), None)

    def ledger(self, cache: Any, step: int) -> None:
        """refcount-exact: the ledger's counts against the tables."""
        ledger, free = allocator_of(cache).ledger, free_ids(cache)
        mapped = Counter(b for t in tables(cache).values() for b in t)
        for block, n in mapped.items():
            counted = int(ledger.shared_ref_counts.get(block, 1))
            if counted != n:
                self._flag("refcount-exact", step, f"block {block} is in {n} tables, the ledger counts {counted}",
                           block=block, mapped=n, ref_count=counted)
            if block in free:
                self._flag("refcount-exact", step, f"block {block} is in a table and free", block=block)
        for block, n in ledger.shared_ref_counts.items():
            if block not in mapped and n > 0:
                self._flag("refcount-exact", step, f"block {block} is in no table, the ledger counts {n}",
                           block=int(block), mapped=0, ref_count=int(n))

    def end(self, cache: Any, pool: int, step: int) -> None:
        """no-leak: every block free (or cached) and no table left."""
        left = tables(cache)
        held = sorted(set(range(self_min(cache), self_min(cache) + pool)) - free_ids(cache))
        if any(left.values()) or held:
            self._flag("no-leak", step, f"after every request: tables {left}, blocks neither free nor cached {held}",
                       tables=left, held=held)


def self_min(cache: Any) -> int:
    """The first block id of the pool (transformers reserves trash sectors)."""
    return int(getattr(cache.pool, "num_reserved_sectors", 0) or 0)


def first(violations: list[Violation], invariant: str) -> Optional[Violation]:
    return next((v for v in violations if v.invariant == invariant), None)
