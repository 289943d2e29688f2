"""A prefix-caching block pool written the way vLLM V1 writes its own
(vllm/v1/core/block_pool.py and kv_cache_manager.py), and buggy variants of
it, for the engine harness on cache scenarios
(docs/semantics.md#engine-harness).

`BlockPool` keeps a content-keyed cache of *full* blocks: a block's key is
a chained hash, `(parent key, its B tokens)`, computed from the request's
own tokens, so it names the block's slots and everything before them. A
key names one block at most; a full block filled a second time while its
key is cached stays an unkeyed duplicate. Free blocks wait in one
evictable free queue: a freed block without a key goes to the front (it is
reused first), a freed cached block to the back (cached blocks are evicted
oldest first), and a request's blocks are freed last entry first (a
chain's later blocks are evicted before its earlier ones). Allocation pops
the front and *evicts*: the block's key leaves the cache. A hit is
*touched*: its refcount rises and, if it was free, it leaves the queue.

`KVCacheManager` admits a request (`get_computed_blocks`, then
`allocate_slots`: V1 checks capacity before it touches or allocates
anything, and always recomputes the last prompt token), opens a block for
a token that needs one, and keys its full blocks *when the step that fills
them is scheduled*, before the device has written them, as V1 does
(`cache_blocks` inside `allocate_slots`). Drafts are never in the tokens it
keys: it keeps them apart until the verifier accepts them. A finished or
aborted request's blocks are freed at once, whatever the device still
runs. So it behaves as the `prefix-v1` protocol file says: safe on one
stream but undisciplined there (a fill lands in a block another request
already maps; a cancelled request's kernel writes blocks it freed), wrong
output on an asynchronous device.

The buggy managers change one method each, one per bug protocol of
prefix caching; each docstring names the real bug it stands for, and each
has a protocol file of its own (`prefix-v1-*.toml`). Every factory takes
`(pool, block_size)` and returns an adapter: reference them as
`cowcheck.specs.allocators.prefix:correct` (or by this file's path).
Everything is plain dicts, lists and tuples, so the harness can pickle the
adapter to copy a state.
"""

from __future__ import annotations

from typing import Optional

from cowcheck.adapters import OutOfBlocks
from cowcheck.specs.allocators.deferred import DeferredRelease

#: a chained block hash: (the previous block's key, this block's tokens)
BlockHash = tuple


class BlockPool:
    """Blocks 0 .. num_blocks-1 with a refcount each, the cache (key ->
    block, and each block's key) and the evictable free queue."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.ref_cnt: list[int] = [0] * num_blocks
        self.block_hash: list[Optional[BlockHash]] = [None] * num_blocks
        self.cached_block_hash_to_block: dict[BlockHash, int] = {}
        #: front first: the next block allocated
        self.free_block_queue: list[int] = list(range(num_blocks))

    def get_cached_block(self, block_hash: BlockHash) -> Optional[int]:
        return self.cached_block_hash_to_block.get(block_hash)

    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    def touch(self, blocks: list[int]) -> None:
        """A hit: one more reference; a free hit leaves the free queue."""
        for block in blocks:
            if self.ref_cnt[block] == 0:
                self.free_block_queue.remove(block)
            self.ref_cnt[block] += 1

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop blocks off the front of the free queue, evicting their keys."""
        if num_blocks > len(self.free_block_queue):
            raise OutOfBlocks(f"{num_blocks} blocks wanted, {len(self.free_block_queue)} free")
        out = []
        for _ in range(num_blocks):
            block = self.free_block_queue.pop(0)
            self._maybe_evict_cached_block(block)
            self.ref_cnt[block] = 1
            out.append(block)
        return out

    def _maybe_evict_cached_block(self, block: int) -> None:
        block_hash = self.block_hash[block]
        if block_hash is not None:
            del self.cached_block_hash_to_block[block_hash]
            self.block_hash[block] = None

    def cache_full_blocks(self, blocks: list[int], tokens: list[str], num_tokens: int) -> None:
        """Key every full block of the first `num_tokens` tokens that has no
        key yet, unless its key is cached already (a duplicate stays
        unkeyed; it may be keyed later, once the other block is evicted)."""
        B = self.block_size
        parent: Optional[BlockHash] = None
        for i, block in enumerate(blocks):
            if (i + 1) * B > num_tokens:
                break
            block_hash: BlockHash = (parent, tuple(tokens[i * B:(i + 1) * B]))
            parent = block_hash
            if self.block_hash[block] is not None or block_hash in self.cached_block_hash_to_block:
                continue
            self.block_hash[block] = block_hash
            self.cached_block_hash_to_block[block_hash] = block

    def free_blocks(self, ordered_blocks: list[int]) -> None:
        """Drop one reference each, in the order given; a block whose last
        reference goes waits in the queue: at the front without a key, at
        the back with one."""
        for block in ordered_blocks:
            if self.ref_cnt[block] <= 0:
                raise AssertionError(f"block {block} freed with ref_cnt {self.ref_cnt[block]}")
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0 and block not in self.free_block_queue:
                if self.block_hash[block] is None:
                    self.free_block_queue.insert(0, block)
                else:
                    self.free_block_queue.append(block)


class KVCacheManager:
    """One block list per request, its verified tokens, and its pending
    drafts, over a BlockPool."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.block_pool = BlockPool(num_blocks, block_size)
        self.req_to_blocks: dict[str, list[int]] = {}
        #: each request's tokens, drafts excluded (V1's all_token_ids)
        self.req_to_tokens: dict[str, list[str]] = {}
        #: each request's scheduled drafts, not yet verified (V1's spec_token_ids)
        self.req_to_drafts: dict[str, list[str]] = {}

    def get_computed_blocks(self, tokens: list[str]) -> list[int]:
        """The cached blocks of the prompt's longest cached prefix, at most
        (L - 1) // B of them: the last prompt token is always recomputed."""
        B, hits = self.block_size, []
        parent: Optional[BlockHash] = None
        for i in range((len(tokens) - 1) // B):
            block_hash = (parent, tuple(tokens[i * B:(i + 1) * B]))
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
            parent = block_hash
        return hits

    def admit(self, request_id: str, tokens: list[str]) -> int:
        """Admit a request: its hits, its other prompt blocks, its full
        blocks keyed at once. Returns the tokens computed already."""
        hits = self.get_computed_blocks(tokens)
        num_new = -(-len(tokens) // self.block_size) - len(hits)
        self._check_capacity(hits, num_new)
        new = self._allocate_prompt(hits, num_new)
        self.req_to_blocks[request_id] = hits + new
        self.req_to_tokens[request_id] = list(tokens)
        self.req_to_drafts[request_id] = []
        self._cache(request_id)
        return len(hits) * self.block_size

    def _check_capacity(self, hits: list[int], num_new: int) -> None:
        """V1 checks before it touches or allocates anything: a free hit
        leaves the queue when touched, so it cannot also be allocated."""
        evictable_hits = sum(1 for b in hits if self.block_pool.ref_cnt[b] == 0)
        if num_new > self.block_pool.num_free_blocks() - evictable_hits:
            raise OutOfBlocks("not enough free blocks to admit")

    def _allocate_prompt(self, hits: list[int], num_new: int) -> list[int]:
        self.block_pool.touch(hits)
        return self.block_pool.get_new_blocks(num_new)

    def allocate_slot(self, request_id: str, token: str, draft: bool) -> None:
        """Make room for one token (a draft is scheduled apart from the
        request's tokens), then key the full blocks of its tokens."""
        blocks = self.req_to_blocks[request_id]
        pos = len(self.req_to_tokens[request_id]) + len(self.req_to_drafts[request_id])
        if pos // self.block_size >= len(blocks):
            blocks.extend(self._new_decode_block())
        (self.req_to_drafts if draft else self.req_to_tokens)[request_id].append(token)
        self._cache(request_id)

    def _new_decode_block(self) -> list[int]:
        return self.block_pool.get_new_blocks(1)

    def verify(self, request_id: str, num_rejected: int) -> None:
        """The verifier accepted all drafts but the last `num_rejected`: the
        accepted ones become the request's tokens (and their full blocks are
        keyed); the rest are dropped, their blocks kept (V1's tables only grow)."""
        drafts = self.req_to_drafts[request_id]
        self.req_to_tokens[request_id] += drafts[:len(drafts) - num_rejected]
        self.req_to_drafts[request_id] = []
        self._cache(request_id)

    def _cache(self, request_id: str) -> None:
        tokens = self.req_to_tokens[request_id]
        self.block_pool.cache_full_blocks(self.req_to_blocks[request_id], tokens, len(tokens))

    def free(self, request_id: str) -> None:
        """The request finished or was aborted: its blocks, last first."""
        blocks = self.req_to_blocks.pop(request_id)
        del self.req_to_tokens[request_id], self.req_to_drafts[request_id]
        self.block_pool.free_blocks(list(reversed(blocks)))


class Adapter:
    """What cowcheck drives: its request names are the request ids, its
    token names the token ids (equal names, equal tokens)."""

    def __init__(self, manager: KVCacheManager) -> None:
        self.manager = manager

    def admit(self, branch: str, tokens: list[str]) -> int:
        return self.manager.admit(branch, tokens)

    def append(self, branch: str, token: str, draft: bool) -> list[tuple[int, int]]:
        self.manager.allocate_slot(branch, token, draft)
        return []       # blocks are never shared partly filled: no copy

    def rollback(self, branch: str, n: int) -> None:
        self.manager.verify(branch, n)

    def free(self, branch: str) -> None:
        self.manager.free(branch)

    def table(self, branch: str) -> list[int]:
        return list(self.manager.req_to_blocks[branch])

    def refcount(self, block: int) -> int:
        return self.manager.block_pool.ref_cnt[block]

    def free_blocks(self) -> list[int]:
        return list(self.manager.block_pool.free_block_queue)

    def cached(self) -> dict[int, tuple[str, ...]]:
        pool = self.manager.block_pool
        return {block: block_hash[1] for block_hash, block in pool.cached_block_hash_to_block.items()}


def correct(pool: int, block_size: int) -> Adapter:
    """The pool as V1 writes it (protocol `prefix-v1`)."""
    return Adapter(KVCacheManager(pool, block_size))


# -- buggy variants -----------------------------------------------------------

class TouchAfterAlloc(KVCacheManager):
    """BUG (vLLM issue 33775): the admission allocates its new blocks
    before it touches its hits, and counts its free hits as free blocks,
    so an allocation can pop (and evict) a block the same admission has
    just hit; the request then maps that block twice, and its prefill
    overwrites its own hit. Protocol `prefix-v1-touch-after-alloc`."""

    def _check_capacity(self, hits: list[int], num_new: int) -> None:
        if num_new > self.block_pool.num_free_blocks():     # BUG: a free hit counted as free
            raise OutOfBlocks("not enough free blocks to admit")

    def _allocate_prompt(self, hits: list[int], num_new: int) -> list[int]:
        new = self.block_pool.get_new_blocks(num_new)       # BUG: before the touch
        for block in hits:
            if block in self.block_pool.free_block_queue:
                self.block_pool.free_block_queue.remove(block)
            self.block_pool.ref_cnt[block] += 1
        return new


class NoEvictPool(BlockPool):
    """The pool's allocation without the eviction (see NoEvict)."""

    def get_new_blocks_no_evict(self, num_blocks: int) -> list[int]:
        if num_blocks > len(self.free_block_queue):
            raise OutOfBlocks(f"{num_blocks} blocks wanted, {len(self.free_block_queue)} free")
        out = []
        for _ in range(num_blocks):
            block = self.free_block_queue.pop(0)    # BUG: its key stays in the cache
            self.ref_cnt[block] = 1
            out.append(block)
        return out


class NoEvict(KVCacheManager):
    """BUG (vLLM issue 4764, kvcached issue 362): a decode that opens a
    fresh block reuses a free block without evicting it, so the cache still
    maps the block's old key to it while its new owner writes it; a later
    request that hits the key reads the new owner's tokens. Protocol
    `prefix-v1-no-evict`."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.block_pool = NoEvictPool(num_blocks, block_size)

    def _new_decode_block(self) -> list[int]:
        pool = self.block_pool
        assert isinstance(pool, NoEvictPool)
        return pool.get_new_blocks_no_evict(1)


class CacheDrafts(KVCacheManager):
    """BUG (SGLang issue 24590): the full blocks are keyed with the
    request's drafts included, so a block keyed over a speculative token
    the verifier then rejects stays in the cache, and a later request whose
    prompt matches the key reads the rejected draft. Protocol
    `prefix-v1-cache-drafts`."""

    def _cache(self, request_id: str) -> None:
        tokens = self.req_to_tokens[request_id] + self.req_to_drafts[request_id]   # BUG: drafts too
        self.block_pool.cache_full_blocks(self.req_to_blocks[request_id], tokens, len(tokens))


# -- a fix ---------------------------------------------------------------------

class StepFenced(DeferredRelease, KVCacheManager):
    """The pool with V1's free-in-flight fixed the way an engine with step
    fences fixes it (vLLM 45357): a request freed while a kernel it
    launched may still run keeps its blocks until the engine learns, at a
    fence, that the last such kernel completed (`kernel_done`); the
    deferral is deferred.py's, as fenced.py's manager's is."""


class FencedAdapter(Adapter):
    """The adapter of StepFenced: each admission and append launches one
    kernel, and the harness says when each completed."""

    manager: StepFenced

    def admit(self, branch: str, tokens: list[str]) -> int:
        computed = super().admit(branch, tokens)
        self.manager.launched(branch)        # its prefill
        return computed

    def append(self, branch: str, token: str, draft: bool) -> list[tuple[int, int]]:
        copies = super().append(branch, token, draft)
        self.manager.launched(branch)
        return copies

    def kernel_done(self, branch: str) -> None:
        self.manager.kernel_done(branch)


def step_fenced(pool: int, block_size: int) -> Adapter:
    """The pool with a freed request's blocks kept until its last kernel is done."""
    return FencedAdapter(StepFenced(pool, block_size))


def touch_after_alloc(pool: int, block_size: int) -> Adapter:
    return Adapter(TouchAfterAlloc(pool, block_size))


def no_evict(pool: int, block_size: int) -> Adapter:
    return Adapter(NoEvict(pool, block_size))


def cache_drafts(pool: int, block_size: int) -> Adapter:
    return Adapter(CacheDrafts(pool, block_size))
