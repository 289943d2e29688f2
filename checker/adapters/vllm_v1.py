"""vLLM V1's own `KVCacheManager`, with prefix caching on, as an adapter for
the engine harness (docs/how-to/vllm-sglang.md).

    cowcheck check SCENARIO --allocator cowcheck.adapters.vllm_v1:make

The adapter plays V1's scheduler for one full-attention group: each harness
request is a V1 `Request` whose token ids come from the harness's token
names (equal names, equal ids), admitted with `get_computed_blocks` and
`allocate_slots` as `Scheduler.schedule()` admits a waiting request (the
touch of a hit, eviction and caching are V1's own); every append is the
`allocate_slots` of the step that computes the token; a speculation's
drafts live in `request.spec_token_ids`, never in the verified tokens, and
each draft append re-issues the step's `allocate_slots` with the drafts so
far (what V1 calls once with all of them); a verify rejects as
`Scheduler.update_from_output` does (the accepted drafts join the output,
the computed count drops the rejected ones, their blocks stay). The
observers read V1's block pool: `ref_cnt`, the free queue in eviction
order, and every block the cache map serves as a hit. V1's block 0 is its
null block, never handed out; cowcheck's block b is V1's block b + 1.

Which vLLM: the folder in the environment variable `COWCHECK_VLLM_SOURCE`
(an unpacked wheel or a source checkout: how an engineer checks a change to
block_pool.py in minutes, without building vLLM), whose `vllm/v1/core`
modules, `vllm/v1/request.py` and `vllm/v1/kv_cache_interface.py` run
unchanged with stand-ins for what they import (loaded by
cowcheck.adapters.vllm_core, which the scheduler adapter shares); else an
installed vLLM. Every release from 0.9.1 to 0.34.0 runs; the tests check
`TESTED` (fetched by CI) and `SAMPLED` (where they are in the cache). The
releases differ in where block hashes live (the manager's
`req_to_block_hashes` up to 0.10.0, the request from 0.10.1), what a hash
is (a tuple that carries its tokens up to 0.10.2, bare bytes after), the
cache map's shape, and the parameters of a handful of calls: the adapter
finds each by what the loaded modules have (an attribute, a parameter),
never by a version number or a file's shape (vllm_core's readers, and
`_allocate` and `_finish` below).

Pickling (the harness copies the adapter into every state): V1's objects
pickle as they are; `VllmV1.__reduce__` wraps them so that unpickling in a
fresh process first loads the same sources. A state costs one pickle of
the manager (3-6 KB on the tests' scenarios).

`scheduler` and `unavailable` are the scheduler adapter's
(cowcheck.adapters.vllm_scheduler), named here so that one module path
gives both harnesses their vLLM.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

from cowcheck.adapters import OutOfBlocks, vllm_scheduler
from cowcheck.adapters.sources import dumps, environment, restore
from cowcheck.adapters.vllm_core import (ENV, REF, SAMPLED, STAND_INS, TESTED, UNKNOWN, BlockHasher, DType, V1Pool, _Engine,
                                        _cached_keys, _call, _engine, _mods, _request, _request_hashes, engine, source)

__all__ = ["ENV", "REF", "SAMPLED", "STAND_INS", "TESTED", "UNKNOWN", "BlockHasher", "OutOfBlocks", "VllmV1", "_Engine",
           "_engine", "engine", "make", "make_exact", "scheduler", "source", "unavailable"]


def _manager(num_blocks: int, block_size: int) -> Any:
    """A KVCacheManager with prefix caching on, for one full-attention group."""
    mods = _mods()
    iface = mods["vllm.v1.kv_cache_interface"]
    spec = _call(iface.FullAttentionSpec, dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=DType("float16", 2),
                                               use_mla=False))  # use_mla: up to 0.10.2
    config = _call(iface.KVCacheConfig, dict(num_blocks=num_blocks, kv_cache_tensors=[],
                                             kv_cache_groups=[iface.KVCacheGroupSpec(["layer.0"], spec)]))
    with environment(PYTHONHASHSEED="0"):  # 0.10.0's manager sets NONE_HASH itself
        return _call(mods["vllm.v1.core.kv_cache_manager"].KVCacheManager, dict(
            kv_cache_config=config, max_model_len=num_blocks * block_size, enable_caching=True,
            caching_hash_algo="sha256",  # up to 0.10.0
            hash_block_size=block_size,  # from 0.12.0
            scheduler_block_size=block_size))  # from 0.23.0


def _allocate(manager: Any, request: Any, new: int, hit: int = 0, blocks: Any = None, drafts: int = 0) -> Any:
    """`allocate_slots`: up to 0.9.2 it takes the draft count (and caches
    every other slot); from 0.10.0 it caches at most `request.num_tokens`
    tokens, so drafts, kept in `spec_token_ids`, are never keyed."""
    if "num_draft_tokens" in inspect.signature(manager.allocate_slots).parameters:
        return manager.allocate_slots(request, new, hit, blocks, num_draft_tokens=drafts)
    return manager.allocate_slots(request, new, hit, blocks)


def _finish(manager: Any, request: Any) -> None:
    manager.free(request)
    if hasattr(manager, "free_block_hashes"):  # up to 0.10.0 the manager keeps the request's block hashes
        manager.free_block_hashes(request)


def _manager_hashes(manager: Any) -> Any:
    """The block hashes the manager keeps per request (up to 0.10.0)."""
    return frozenset((rid, tuple(hashes)) for rid, hashes in getattr(manager, "req_to_block_hashes", {}).items())


# -- the adapter -----------------------------------------------------------------

class VllmV1(V1Pool):
    """One KVCacheManager over pool + 1 V1 blocks (V1's null block is its
    block 0), and one Request per harness request."""

    def __init__(self, pool: int, block_size: int, source: Optional[str]):
        self.source = source
        self.B = block_size
        engine(source)
        self.manager = _manager(pool + 1, block_size)
        self.requests = {}
        self.long_names = {}
        self.key_tokens = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Unpickling loads the same vLLM sources before V1's objects."""
        return (restore, (engine, VllmV1, self.source, dumps(self.__dict__)))

    # the harness's calls
    def admit(self, branch: str, tokens: list[str]) -> int:
        """Schedule a waiting request: its cache hit, then slots for the rest
        of the prompt (V1 touches the hit and keys the prompt's full blocks
        here, before the prefill has run)."""
        request = _request(branch, [self._id(t) for t in tokens], self.B)
        blocks, hit = self.manager.get_computed_blocks(request)[:2]
        if _allocate(self.manager, request, request.num_tokens - hit, hit, blocks) is None:
            raise OutOfBlocks(f"V1 cannot admit request {branch!r}")
        request.status = _mods()["vllm.v1.request"].RequestStatus.RUNNING
        request.num_computed_tokens = request.num_tokens
        self.requests[branch] = request
        self._learn()
        return int(hit)

    def append(self, branch: str, token: str, draft: bool = False) -> list[tuple[int, int]]:
        """The step that computes `token`: a verified token joins the
        request's output first; a draft joins its spec_token_ids."""
        request = self.requests[branch]
        tid = self._id(token)
        if draft:
            request.spec_token_ids.append(tid)
            drafts = len(request.spec_token_ids)
            if _allocate(self.manager, request, request.num_tokens_with_spec - request.num_computed_tokens,
                                     drafts=drafts) is None:
                raise OutOfBlocks(f"V1 cannot schedule request {branch!r}'s draft")
        else:
            request.append_output_token_ids(tid)
            if _allocate(self.manager, request, request.num_tokens - request.num_computed_tokens) is None:
                raise OutOfBlocks(f"V1 cannot schedule request {branch!r}")
            request.num_computed_tokens = request.num_tokens
        self._learn()
        return []

    def rollback(self, branch: str, n: int) -> None:
        """Verify the speculation: the last n drafts are rejected (their
        blocks stay with the request, as in V1), the others accepted."""
        request = self.requests[branch]
        drafts = list(request.spec_token_ids)
        accepted = drafts[:len(drafts) - n]
        request.spec_token_ids.clear()
        if accepted:
            request.append_output_token_ids(accepted)
        request.num_computed_tokens = request.num_tokens
        self._learn()

    def free(self, branch: str) -> None:
        request = self.requests.pop(branch)
        _finish(self.manager, request)
        self._learn()

    def snapshot(self) -> tuple[Any, ...]:
        """The allocation state, canonical: what V1's next calls depend on,
        with every dict read in sorted order, so that two paths that reach
        one state are one state (pickles keep insertion order). Per request:
        its tokens, drafts, computed count, status, blocks, cached-block
        count and block hashes; per block: ref count and hash; the free
        queue in eviction order; the cache map; the adapter's own maps."""
        m = self.manager
        pool = m.block_pool
        single = m.coordinator.single_type_managers[0]
        requests = tuple(sorted(
            (rid, tuple(r.all_token_ids), tuple(r.spec_token_ids), r.num_computed_tokens, int(r.status),
             tuple(b.block_id for b in single.req_to_blocks.get(rid, ())), single.num_cached_block.get(rid),
             tuple(_request_hashes(r))) for rid, r in self.requests.items()))
        others = frozenset((rid, tuple(b.block_id for b in blocks), single.num_cached_block.get(rid))
                           for rid, blocks in single.req_to_blocks.items() if rid not in self.requests)
        blocks = tuple((b.ref_cnt, b.block_hash) for b in pool.blocks)
        free = tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())
        return (requests, others, blocks, free, frozenset(_cached_keys(pool)), _manager_hashes(m),
                frozenset(self.key_tokens.items()), frozenset(self.long_names.items()))

    def table(self, branch: str) -> list[int]:
        if branch not in self.requests:
            return []
        return [self._block(bid, f"request {branch!r}'s table") for bid in self.manager.get_block_ids(branch)[0]]


def make(pool: int, block_size: int) -> VllmV1:
    """The adapter factory: `--allocator cowcheck.adapters.vllm_v1:make`."""
    return VllmV1(pool, block_size, source())


def make_exact(pool: int, block_size: int) -> VllmV1:
    """The adapter without its canonical snapshot: states keyed by exact
    pickles, as before it had one (tests check that both give the same
    verdicts and shortest lengths)."""
    adapter = make(pool, block_size)
    setattr(adapter, "snapshot", None)
    return adapter




def scheduler(pool: int, block_size: int, host_pool: int) -> vllm_scheduler.VllmScheduler:
    """vLLM's own Scheduler with the harness's P/D connector, for the
    scheduler harness: `--scheduler cowcheck.adapters.vllm_v1:scheduler`
    (cowcheck.adapters.vllm_scheduler, which also has the AsyncScheduler
    and SimpleCPUOffload configurations)."""
    return vllm_scheduler.scheduler(pool, block_size, host_pool)


def unavailable() -> Optional[str]:
    """Why `scheduler` cannot load a vLLM here, or None (cowcheck check skips a folder's scenarios then)."""
    return vllm_scheduler.unavailable()
