"""Hugging Face transformers' continuous batching cache, its allocators in
`cache_allocators/` and the `PagedAttentionCache` methods that drive them,
as an adapter for the engine harness (docs/how-to/vllm-sglang.md).

    cowcheck check SCENARIO --allocator cowcheck.adapters.transformers:make

One adapter answers both kinds of scenario. In a fork scenario each branch
is a `RequestState`: `start` prefills the prompt of the first root branch
and forks the others from it, `fork` is the cache's `prepare_fork_request`
(full blocks shared, the partial tail backed by a fresh block whose copy is
returned by the next `append`, as transformers launches its fork copies
before the next forward), `append` is one decode step. In a cache scenario
`admit` is the scheduler's admission: `search_prefix_match` on the prompt,
then `can_store_request_tokens` for the rest. Every step first counts the
blocks its forward will complete (`count_new_complete_blocks`, as the
scheduler does) and the cache hashes them with `mark_complete_blocks` only
when the harness reports the step's kernel done (`kernel_done`): transformers
hashes a block after the forward that filled it, and de-duplicates there (a
table entry rewritten, the duplicate released). A request that does not fit
first has the cache evict its cached blocks (`evict_cached_blocks`, what the
scheduler does under memory pressure) and then waits (OutOfBlocks).
Cancelling or finishing is `free_blocks`.

The observers read the allocator's own ledger: a block's reference count is
its entry in `shared_ref_counts`, else 0 where it is cached or free, else 1
(the ledger keeps an owner's count implicit); free blocks are the pool's
free blocks and sectors and the ledger's cached blocks (evictable, as V1's
free queue holds its cached blocks); `cached()` is every block
`hash_to_block` serves. The pool is `pool` sectors of one block each after
the engine's two reserved trash sectors: cowcheck's block b is
transformers' block b + 2.

Which transformers: the folder in `COWCHECK_TRANSFORMERS_SOURCE` (an
unpacked wheel or a checkout: the folder that holds `transformers/`), whose
`cache.py`, `requests.py` and `cache_allocators/` modules run unchanged
with stand-ins for what they import (cowcheck.adapters.sources, torch
included: the cache tensor is never made, nothing here computes); else an
installed transformers. The releases with `cache_allocators/` (5.18.0 on)
run; the tests check `TESTED`. Continuous batching has no speculative
decoding: `rollback` is refused."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from typing import Any, Optional

from cowcheck.adapters import OutOfBlocks
from cowcheck.adapters.recorded import folder
from cowcheck.adapters.sources import Fill, SourceError, digest, dumps, installed, load, release, restore
from cowcheck.adapters.vllm_core import Placeholder
from cowcheck.model.errors import SpecError

#: the environment variable that names a folder of transformers' Python sources
ENV = "COWCHECK_TRANSFORMERS_SOURCE"
#: the releases the tests check, fetched by CI: the oldest whose continuous
#: batching keeps its allocators in cache_allocators/ (forks and prefix
#: sharing in the same ledger), and the newest
TESTED = ("5.18.0", "5.25.0")
REF = "cowcheck.adapters.transformers:make"
#: the trash sectors transformers reserves at the start of its pool
RESERVED = 2
UNKNOWN = "?"  # the name of a token behind a hash no request made

CB = "transformers.generation.continuous_batching"
ALLOCATORS = f"{CB}.cache_allocators"
#: the modules that run unchanged
REAL = (f"{ALLOCATORS}.cache_pool", f"{ALLOCATORS}.cache_allocator", f"{ALLOCATORS}.full_attention",
        f"{CB}.requests", f"{CB}.cache")


# -- stand-ins ---------------------------------------------------------------

def _any_name(module: types.ModuleType) -> None:
    """A module whose every attribute is a placeholder (torch: annotations,
    and decorators, which return the function)."""
    def attr(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder
    setattr(module, "__getattr__", attr)


def _torch(module: types.ModuleType) -> None:
    _any_name(module)
    module.compiler = types.SimpleNamespace(disable=lambda fn=None, **kw: fn if fn is not None else (lambda f: f))  # type: ignore[attr-defined]


def _values(**values: Any) -> Fill:
    def fill(module: types.ModuleType) -> None:
        _any_name(module)
        module.__dict__.update(values)
    return fill


def _allocators(module: types.ModuleType) -> None:
    """cache_allocators/__init__.py: the real full-attention allocator, pool
    and base class; the others (sliding window, MLA) are never made here."""
    import importlib
    for name in ("cache_pool", "cache_allocator", "full_attention"):
        setattr(module, name, importlib.import_module(f"{ALLOCATORS}.{name}"))
    module.CacheAllocator = module.cache_allocator.CacheAllocator  # type: ignore[attr-defined]
    module.CachePool = module.cache_pool.CachePool  # type: ignore[attr-defined]
    module.FullAttentionCacheAllocator = module.full_attention.FullAttentionCacheAllocator  # type: ignore[attr-defined]
    module.SlidingAttentionCacheAllocator = type("SlidingAttentionCacheAllocator", (Placeholder,),  # type: ignore[attr-defined]
                                                 {"layer_type": "sliding_attention"})
    module.MLACacheAllocator = type("MLACacheAllocator", (Placeholder,), {})  # type: ignore[attr-defined]
    module.FULL_ATTENTION, module.SLIDING_ATTENTION = "full_attention", "sliding_attention"  # type: ignore[attr-defined]


def _exact_div(a: int, b: int) -> int:
    return a // b


_LOG = logging.getLogger("cowcheck.transformers")
#: every module the real ones import, in 5.18.0 to 5.25.0
STAND_INS: dict[str, Fill] = {
    "torch": _torch,
    "transformers.configuration_utils": _values(),
    "transformers.generation.configuration_utils": _values(),
    "transformers.utils": _values(is_psutil_available=lambda: False, is_torch_xpu_available=lambda: False),
    "transformers.utils.generic": _values(is_flash_attention_requested=lambda *a, **k: False),
    "transformers.utils.logging": _values(logging=logging),
    "transformers.utils.metrics": _values(attach_tracer=lambda *a, **k: (lambda c: c), traced=lambda *a, **k: (lambda f: f)),
    f"{CB}.utils": _values(exact_div=_exact_div, logger=_LOG),
    f"{CB}.distributed": _values(),
    ALLOCATORS: _allocators,
}


# -- which transformers --------------------------------------------------------

class _Engine:
    """The transformers whose modules are loaded now (one at a time)."""
    source: Optional[str] = None
    version = ""
    mods: Optional[dict[str, types.ModuleType]] = None
    digest = ""


_engine = _Engine()


def engine(source: Optional[str]) -> dict[str, types.ModuleType]:
    """Load the cache's modules from `source` (None: the installed
    transformers), unless they are what is loaded now; return them."""
    if _engine.mods is not None and _engine.source == source and all(sys.modules.get(n) is m for n, m in _engine.mods.items()):
        return _engine.mods
    if source is None:
        try:
            mods, code = installed("transformers", REAL)
        except ImportError as err:
            raise SpecError(REF, "factory", f"transformers' continuous batching is not importable ({err}): pip install "
                            f"transformers (one of {', '.join(TESTED)}), or set {ENV} to a folder of its Python sources "
                            "(an unpacked wheel or a checkout)") from None
        version = getattr(sys.modules["transformers"], "__version__", "installed")
    else:
        root = Path(source)
        if not (root / "transformers/generation/continuous_batching/cache_allocators/cache_allocator.py").is_file():
            raise SpecError(REF, "factory", f"{ENV}={source!r} holds no transformers/generation/continuous_batching/"
                            "cache_allocators/ (transformers 5.18.0 or later): point it at the folder that contains "
                            "transformers/ (an unpacked wheel or a checkout)")
        files: set[Path] = set()
        try:
            mods = load(root, "transformers", REAL, STAND_INS, REAL, files)
        except SourceError as err:
            raise SpecError(REF, "factory", f"transformers {release(root, 'transformers')} from {source}: {err}") from None
        version, code = _version(root), digest(root, files)
    _engine.source, _engine.version, _engine.mods, _engine.digest = source, version, mods, code
    return mods


def _version(root: Path) -> str:
    """A transformers tree's release: its __init__.py's __version__ (a
    wheel has no _version.py)."""
    import re
    init = root / "transformers" / "__init__.py"
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", init.read_text() if init.is_file() else "", re.M)
    return found.group(1) if found else release(root, "transformers")


def source() -> Optional[str]:
    """$COWCHECK_TRANSFORMERS_SOURCE (or the folder a replayed
    counterexample records), or None for the installed transformers."""
    return folder(ENV)


def _cache(num_blocks: int, block_size: int) -> Any:
    """A PagedAttentionCache over `num_blocks` one-block sectors, one
    full-attention allocator, block and prefix sharing on, built as its
    __init__ builds it without the tensor (which only the forward uses)."""
    mods = _mods()
    cache_mod, alloc_mod = mods[f"{CB}.cache"], mods[f"{ALLOCATORS}.full_attention"]
    allocator = object.__new__(alloc_mod.FullAttentionCacheAllocator)
    allocator._before_cache_tensor_init(index=0, layer_indices=[0], tokens_per_page=block_size, bytes_per_page=1,
                                        allow_block_sharing=True)
    pool = mods[f"{ALLOCATORS}.cache_pool"].CachePool(num_blocks, 1, RESERVED)
    allocator.pool, allocator.blocks_per_sector = pool, 1
    allocator.num_pages = allocator.num_blocks = num_blocks
    pool.set_blocks_per_sector(0, 1)
    cache = object.__new__(cache_mod.PagedAttentionCache)
    cache.cache_allocators = {"full_attention": allocator}
    cache.layer_to_allocator = {0: allocator}
    cache.pool = pool
    cache.num_sectors = num_blocks
    cache.max_blocks_per_request = 0
    cache.allow_block_sharing = True
    cache.use_prefix_sharing = allocator.use_block_sharing
    return cache


def _mods() -> dict[str, types.ModuleType]:
    assert _engine.mods is not None, "no transformers loaded"
    return _engine.mods


def token_id(name: str) -> int:
    """A token name's id: its UTF-8 bytes as a number when they fit in 3
    bytes, else a stable 30-bit digest (transformers hashes ids as int32)."""
    raw = name.encode()
    if len(raw) <= 3:
        return int.from_bytes(raw, "big")
    import zlib
    return (1 << 30) | (zlib.crc32(raw) & 0x3FFFFFFF)


# -- the adapter -----------------------------------------------------------------

class Transformers:
    """One PagedAttentionCache, and one RequestState per harness request."""

    #: transformers launches its fork copies on the compute stream, before the next forward
    waits_for_copies = True

    def __init__(self, pool: int, block_size: int, source: Optional[str]):
        self.source = source
        self.B = block_size
        engine(source)
        self.cache = _cache(pool, block_size)
        self.states: dict[str, Any] = {}
        #: each request's token names, prompt first
        self.names: dict[str, list[str]] = {}
        #: per request, the blocks each step in flight completes (count_new_complete_blocks), oldest first
        self.completing: dict[str, list[dict[str, int]]] = {}
        #: the copies of forks not yet returned by an append
        self.copies: list[tuple[int, int]] = []
        #: a block hash's own token names, for every hash a request made
        self.key_names: dict[int, tuple[str, ...]] = {}

    def version(self) -> str:
        return f"transformers {_engine.version}"

    def code(self) -> dict[str, Optional[str]]:
        return {"source": str(Path(self.source).resolve()) if self.source else None, "digest": _engine.digest}

    def __reduce__(self) -> tuple[Any, ...]:
        """Unpickling loads the same transformers sources first."""
        return (restore, (engine, Transformers, self.source, dumps(self.__dict__)))

    @property
    def allocator(self) -> Any:
        return self.cache.cache_allocators["full_attention"]

    # the scheduler's steps
    def _new(self, branch: str, tokens: list[str]) -> Any:
        state = _mods()[f"{CB}.requests"].RequestState(request_id=branch, initial_tokens=[token_id(t) for t in tokens],
                                                      max_new_tokens=None)
        self.names[branch] = list(tokens)
        return state

    def _room(self, state: Any, length: int) -> None:
        """`can_store_request_tokens`, after evicting the cached blocks if it
        does not fit (the scheduler's answer to memory pressure); OutOfBlocks
        if it still does not."""
        self.cache.pool.try_to_free_sectors()
        if self.cache.can_store_request_tokens(state, length):
            return
        if self.cache.evict_cached_blocks():
            self.cache.pool.try_to_free_sectors()
            if self.cache.can_store_request_tokens(state, length):
                return
        raise OutOfBlocks(f"transformers cannot store {length} tokens of request {state.request_id!r}")

    def _step(self, state: Any, length: int) -> None:
        """Schedule `length` tokens of the request: room, the blocks its
        forward completes, and its position after the forward."""
        self._room(state, length)
        self.completing.setdefault(state.request_id, []).append(self.cache.count_new_complete_blocks(state, length))
        state.position_offset += length
        state.status = _mods()[f"{CB}.requests"].RequestStatus.DECODING
        self.states[state.request_id] = state

    def _hash(self, branch: str) -> None:
        """The update after the request's oldest forward in flight: hash the
        blocks it completed (and de-duplicate them)."""
        pending = self.completing.get(branch)
        if not pending:
            return
        complete = pending.pop(0)
        state = self.states[branch]
        self._learn(branch)
        self.cache.mark_complete_blocks(state, complete)

    def _learn(self, branch: str) -> None:
        """Remember the tokens behind every block hash of the request."""
        compute = _mods()[f"{ALLOCATORS}.cache_allocator"].compute_block_hash
        names, parent = self.names[branch], None
        for i in range(len(names) // self.B):
            block = names[i * self.B:(i + 1) * self.B]
            parent = compute(parent, [token_id(t) for t in block])
            self.key_names.setdefault(parent, tuple(block))

    # the harness's calls
    def start(self, branches: list[str], prompt: int) -> None:
        """The first root branch's prefill, hashed at once (the prompt is
        computed before the harness starts), then the others forked from it
        as num_return_sequences forks its children."""
        state = self._new(branches[0], [f"p{i}" for i in range(prompt)])
        self._step(state, prompt)
        self._hash(branches[0])
        for other in branches[1:]:
            self.fork(branches[0], other)

    def admit(self, branch: str, tokens: list[str]) -> int:
        """The scheduler admitting a pending request: its prefix match, then
        room for the rest of the prompt."""
        state = self._new(branch, tokens)
        self._learn(branch)
        hit = self.cache.search_prefix_match(branch, state.remaining_prefill_tokens) if self.cache.use_prefix_sharing else 0
        state.position_offset += hit
        self._step(state, len(tokens) - hit)
        return int(hit)

    def fork(self, parent: str, child: str) -> None:
        src = self.states[parent]
        self.cache.pool.try_to_free_sectors()
        pairs: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name in self.cache.cache_allocators}
        if not self.cache.prepare_fork_request(src, [child], pairs):
            raise OutOfBlocks(f"transformers cannot fork request {parent!r}")
        state = src.fork(child)
        self.states[child] = state
        self.names[child] = list(self.names[parent])
        sources, dests = pairs["full_attention"]
        self.copies += [(s - RESERVED, d - RESERVED) for s, d in zip(sources, dests)]

    def append(self, branch: str, token: str, draft: bool = False) -> list[tuple[int, int]]:
        """One decode step that writes `token`; the forks' copies go first."""
        if draft:
            raise SpecError(REF, "append", "transformers' continuous batching has no speculative decoding")
        state = self.states[branch]
        self._step(state, 1)
        state.generated_tokens.append(token_id(token))
        self.names[branch].append(token)
        copies, self.copies = self.copies, []
        return copies

    def kernel_done(self, branch: str) -> None:
        """The forward's update: the blocks the step completed are hashed."""
        if branch in self.states:
            self._hash(branch)

    def rollback(self, branch: str, n: int) -> None:
        raise SpecError(REF, "rollback", "transformers' continuous batching has no speculative decoding")

    def free(self, branch: str) -> None:
        self.cache.free_blocks(branch)
        self.states.pop(branch, None)
        self.completing.pop(branch, None)

    def snapshot(self) -> tuple[Any, ...]:
        """The allocation state, canonical (a RequestState also holds clock
        readings, which no call depends on): per request its tokens,
        position and steps in flight; the tables; the ledger; the free
        blocks; the fork copies not yet returned; the known hashes."""
        a, ledger = self.allocator, self.allocator.ledger
        requests = tuple(sorted((rid, tuple(self.names[rid]), s.position_offset,
                                 tuple(tuple(sorted(c.items())) for c in self.completing.get(rid, ())))
                                for rid, s in self.states.items()))
        return (requests, tuple(sorted((r, tuple(t)) for r, t in a.block_table.items())),
                tuple(sorted(ledger.shared_ref_counts.items())), tuple(sorted(ledger.hash_to_block.items())),
                tuple(ledger.cached_blocks), tuple(sorted(self._free_ids())), tuple(self.copies),
                frozenset(self.key_names.items()))

    def table(self, branch: str) -> list[int]:
        return [self._block(b) for b in self.allocator.block_table.get(branch, [])]

    # observers, from the allocator's ledger and pool
    def _block(self, bid: int) -> int:
        if not RESERVED <= bid < RESERVED + self.cache.num_sectors:
            raise AssertionError(f"transformers used block {bid}, outside its pool's blocks {RESERVED} to "
                                 f"{RESERVED + self.cache.num_sectors - 1}")
        return bid - RESERVED

    def _free_ids(self) -> list[int]:
        pool = self.cache.pool
        return list(pool.free_sectors) + [leaf for tree in pool._free_blocks[0].trees.values() for leaf in tree]

    def refcount(self, block: int) -> int:
        bid = block + RESERVED
        ledger = self.allocator.ledger
        if bid in ledger.shared_ref_counts:
            return int(ledger.shared_ref_counts[bid])
        return 0 if bid in ledger.cached_blocks or bid in self._free_ids() else 1

    def free_blocks(self) -> list[int]:
        return [self._block(b) for b in self._free_ids() + list(self.allocator.ledger.cached_blocks)]

    def cached(self) -> dict[int, tuple[str, ...]]:
        return {self._block(bid): self.key_names.get(h, (UNKNOWN,) * self.B)
                for h, bid in self.allocator.ledger.hash_to_block.items()}


def make(pool: int, block_size: int) -> Transformers:
    """The adapter factory: `--allocator cowcheck.adapters.transformers:make`."""
    return Transformers(pool, block_size, source())
