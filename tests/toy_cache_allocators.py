"""Adapters for cache scenarios that break the harness's contract, one way
each (tests/test_model_harness_cache.py), around the shipped V1-style pool."""

from __future__ import annotations

from pathlib import Path

from cowcheck.specs.allocators.prefix import Adapter, FencedAdapter, KVCacheManager, StepFenced

TOY = Path(__file__).resolve()


class Words(Adapter):
    def admit(self, branch, tokens):
        super().admit(branch, tokens)
        return "three"


class TooMany(Adapter):
    def admit(self, branch, tokens):
        super().admit(branch, tokens)
        return len(tokens) + 1


class Negative(Adapter):
    def admit(self, branch, tokens):
        super().admit(branch, tokens)
        return -1


class BadCopies(Adapter):
    def admit(self, branch, tokens):
        return (super().admit(branch, tokens), "none")


class CachedOutside(Adapter):
    def cached(self):
        return {99: ("p0", "p1")}


class CachedShort(Adapter):
    def cached(self):
        return {block: tokens[:1] for block, tokens in super().cached().items()}


class Blind(Adapter):
    cached = None       # type: ignore[assignment]


class Copying(Adapter):
    """Admits with one whole-block copy of its first hit into a fresh
    block, as an engine that copies a partly matching block would."""
    def admit(self, branch, tokens):
        computed = super().admit(branch, tokens)
        table = self.manager.req_to_blocks[branch]
        return (computed, [(table[0], table[-1])]) if computed else computed



def words(pool, block_size): return Words(KVCacheManager(pool, block_size))
def too_many(pool, block_size): return TooMany(KVCacheManager(pool, block_size))
def negative(pool, block_size): return Negative(KVCacheManager(pool, block_size))
def bad_copies(pool, block_size): return BadCopies(KVCacheManager(pool, block_size))
def cached_outside(pool, block_size): return CachedOutside(KVCacheManager(pool, block_size))
def cached_short(pool, block_size): return CachedShort(KVCacheManager(pool, block_size))
def blind(pool, block_size): return Blind(KVCacheManager(pool, block_size))
def copying(pool, block_size): return Copying(KVCacheManager(pool, block_size))


#: what Recording adapters were called with, across the states' copies
CALLS: list[tuple] = []


class Recording(Adapter):
    def append(self, branch, token, draft):
        CALLS.append(("append", branch, token, draft))
        return super().append(branch, token, draft)

    def rollback(self, branch, n):
        CALLS.append(("rollback", branch, n))
        return super().rollback(branch, n)


def recording(pool, block_size): return Recording(KVCacheManager(pool, block_size))


class DeferredAsHolds(FencedAdapter):
    """step_fenced that reports a freed request's deferred blocks as holds
    of its own, not as the request's references."""

    def holds(self, block):
        manager = self.manager
        return sum(block in manager.req_to_blocks[r] for r in manager.deferred)


def deferred_as_holds(pool, block_size): return DeferredAsHolds(StepFenced(pool, block_size))
