"""SGLang's own `RadixCache` over its token allocator, as an adapter for
the engine harness (docs/how-to/vllm-sglang.md).

    cowcheck check SCENARIO --allocator cowcheck.adapters.sglang:make

SGLang keeps KV per token slot in pages of `page_size` slots: a page is
cowcheck's block, so B = 1 is SGLang's `TokenToKVPoolAllocator` and B > 1
its `PagedTokenToKVPoolAllocator` with page size B. The adapter plays
SGLang's scheduler: admission matches the prompt in the radix tree (at
most L - 1 tokens, as `Req._compute_max_prefix_len` does; `match_prefix`
cuts the key to whole pages), locks the matched node (`inc_lock_ref`), and
allocates slots for the rest, evicting unlocked tree leaves first when the
allocator is short (the scheduler's `evict_from_tree_cache`); each append
allocates one slot the same way; a verify frees the rejected drafts'
slots; finishing inserts the request's tokens and slots into the tree and
frees the slots the tree already held for the same tokens (SGLang's
de-duplication), then unlocks (`dec_lock_ref`). The observers are the
allocator's free pages and the tree's pages (`cached()`); SGLang keeps no
count per page, so `refcount` is not offered (refcount-exact is reported
as not checked). Page p of the allocator (1 .. P; page 0 is its padding
page) is cowcheck's block p - 1; with B > 1 page p holds slots pB .. pB +
B - 1.

B > 1, as mem_cache/allocation.py drives the paged allocator: admission is
`alloc_extend` after evicting for the new tokens and one page more
(`alloc_paged_token_slots_extend`'s conservative demand), an append is
`alloc_decode` after evicting for one page (`alloc_paged_token_slots_decode`),
both of which fill the request's last page before taking a new one; the
tree takes only whole pages (`RadixKey.page_aligned`), so finishing frees
the request's last, partial page (`release_kv_cache`'s `free_kv_row` after
the checkpoint); a verify frees only the pages wholly past the kept tokens
(the page rule of `_release_overallocated_kv_indices`: from the next page
boundary), and the kept last page's rejected slots are the next appends'.
SGLang 0.5.23's speculative decoding (`alloc_for_spec_decode`) instead
keeps a request's rejected slots reserved until it finishes; the adapter
frees them at the verify, on every page size. The paged
allocator runs unchanged on its torch-native path: paged.py picks
`alloc_extend_naive` / `alloc_decode_naive` (its own, in the same file)
when `current_platform.capabilities.supports_triton` is False, as on
SGLang's CPU platform (platforms/cpu.py, `CpuSRTPlatform`); the Triton
kernels it imports (`sglang.kernels.ops.memory.allocator`:
`alloc_extend_kernel`, `alloc_decode_kernel`) are stand-ins that raise if
ever launched, and the platform is a stand-in that says no Triton.

A request cancelled in flight: SGLang's scheduler sets `to_finish` on a
running request (`Scheduler.abort_request`, "abort method 3"), and the
result processing of its batch turns it into a finish and calls
`release_kv_cache(req, tree, checkpoint=True)`: the tree takes its tokens,
its slots are unlocked and its over-allocated ones freed. Under the
overlap scheduler (`event_loop_overlap`, SGLang's default) that runs after
the request's next forward has been launched, with that kernel still
writing its newest slot; so the harness's `free` with a kernel in flight
is SGLang's order, and SGLang relies on its one forward stream (the next
allocation's kernels queue behind it). With `--disable-overlap-schedule`
the release waits for the forward, which is the harness's cancel after the
kernel lands.

Which SGLang: the folder in `COWCHECK_SGLANG_SOURCE` (an unpacked wheel or
a checkout), else an installed SGLang. Tested on 0.5.23 (`TESTED`). From
a folder, radix_cache.py, base_prefix_cache.py, the allocator's base.py,
token.py and paged.py and three small modules run unchanged; torch is a
small numpy stand-in (`Tensor`) for exactly the operations they use, and
the four helpers paged.py takes from sglang.srt.utils (`get_num_new_pages`
and three more) are the release's own, extracted from utils/common.py.

States, deterministic and canonical: SGLang's tree nodes carry
`time.monotonic()` timestamps (LRU eviction compares them) and ids from a
global counter (`TreeNode.counter`), so no two paths ever pickled alike and
rebuilding a trace would not reproduce its states. The adapter gives
radix_cache.py and base_prefix_cache.py (only those modules: their `time`
attribute, never the process's `time`) a logical clock (`LogicalTime`):
`monotonic()` is one tick per call, `perf_counter()` (metrics only) is 0.
The clock's reading and `TreeNode.counter` are kept in the adapter and set
around every call (`_engine_call`), so a replay sees the same timestamps
and ids. `snapshot()` is canonical: the tree as nested tuples (children in
their dict order, which breaks eviction ties), timestamps as ranks, no node
ids; the allocator's free slots in order; the requests sorted.

One idea, though long: SGLang's cache and allocator driven as SGLang's
scheduler drives them, with the stand-ins their imports need and the
canonical snapshot of their state; split, each part would need the
others' view of the same engine objects."""

from __future__ import annotations

import sys
import types
from array import array
from contextlib import contextmanager
from pathlib import Path
from functools import wraps
from typing import Any, Callable, Iterator, Optional, TypeVar, cast

import numpy as np

from cowcheck.adapters import OutOfBlocks
from cowcheck.adapters.recorded import folder
from cowcheck.adapters.sources import Fill, SourceError, digest, dumps, extract, installed, load, release, restore
from cowcheck.model.errors import SpecError

ENV = "COWCHECK_SGLANG_SOURCE"
TESTED = ("0.5.23",)
REF = "cowcheck.adapters.sglang:make"
MC = "sglang.srt.mem_cache"
REAL = (f"{MC}.radix_cache", f"{MC}.base_prefix_cache", f"{MC}.allocator.base", f"{MC}.allocator.token",
        f"{MC}.allocator.paged", f"{MC}.cache_init_params", f"{MC}.evict_policy", f"{MC}.unified_cache.component_type")
#: the paged allocator's Triton kernels (sglang/kernels/ops/memory/allocator.py), never launched here
KERNELS = "sglang.kernels.ops.memory.allocator"


# -- torch, for index tensors --------------------------------------------------

class Tensor(np.ndarray):
    """A 1-D index tensor: the methods the radix tree and the token
    allocator call on theirs (numel, clone, to) over numpy."""

    def numel(self) -> int:
        return int(self.size)

    def clone(self) -> "Tensor":
        return np.array(self, copy=True).view(Tensor)

    def to(self, dtype: Any = None, copy: bool = False, **kwargs: Any) -> "Tensor":
        return np.array(self, dtype=dtype.np if isinstance(dtype, DType) else self.dtype, copy=True).view(Tensor)

    # the paged allocator's torch-native path (alloc_extend_naive, alloc_decode_naive, get_num_new_pages)
    @property
    def device(self) -> str:  # type: ignore[override]
        return "cpu"

    def copy_(self, other: Any) -> "Tensor":
        self[...] = other
        return self

    def bool(self) -> "Tensor":
        return self.astype(np.bool_).view(Tensor)

    def int(self) -> "Tensor":
        return self.astype(np.int32).view(Tensor)

    def clamp_(self, min: Any = None, max: Any = None) -> "Tensor":
        np.clip(self, min, max, out=self)
        return self


class DType:
    def __init__(self, name: str):
        self.name, self.np = name, np.dtype(name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (DType, (self.name,))


def _np(dtype: Any) -> Any:
    return dtype.np if isinstance(dtype, DType) else (dtype or np.int64)


def _torch(module: types.ModuleType) -> None:
    def arange(start: int, end: Optional[int] = None, dtype: Any = None, device: Any = None) -> Tensor:
        return np.arange(start, end, dtype=_np(dtype)).view(Tensor)

    def empty(shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return np.empty(shape, dtype=_np(dtype)).view(Tensor)

    def tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return np.asarray(list(data), dtype=_np(dtype)).view(Tensor)

    def cat(tensors: Any, dim: int = 0) -> Tensor:
        return np.concatenate([np.asarray(t, dtype=np.int64) for t in tensors]).view(Tensor)

    def t(value: Any) -> Tensor:
        return np.asarray(value).view(Tensor)

    def clamp(x: Any, min: Any = None, max: Any = None) -> Tensor:
        return t(np.clip(x, min, max))

    def sort(x: Any) -> tuple[Tensor, Tensor]:
        return t(np.sort(x, kind="stable")), t(np.argsort(x, kind="stable"))

    for name, value in dict(Tensor=Tensor, dtype=DType, device=lambda kind="cpu": str(kind), int64=DType("int64"),
                            int32=DType("int32"), arange=arange, empty=empty, zeros=lambda *a, **k: np.zeros(*a).view(Tensor),
                            tensor=tensor, cat=cat, iinfo=lambda dt: np.iinfo(_np(dt)),
                            # the paged allocator's torch-native path
                            cumsum=lambda x, dim=0: t(np.cumsum(x)), clamp=clamp, sort=sort,
                            searchsorted=lambda s, v, right=False: t(np.searchsorted(s, v, side="right" if right else "left")),
                            where=lambda c, a, b: t(np.where(c, a, b)), zeros_like=lambda x: t(np.zeros_like(x)),
                            all=lambda x: bool(np.all(x)), unique=lambda x: t(np.unique(x)), sum=lambda x: t(np.sum(x)),
                            version=types.SimpleNamespace(hip=None),
                            cuda=types.SimpleNamespace(is_available=lambda: False)).items():
        setattr(module, name, value)


class _Placeholder:
    def __init__(self, *args: Any, **kwargs: Any):
        pass


class EventRecorder:
    """KV events are off: the real recorder imports msgspec."""

    def __init__(self, enabled: bool = False, *args: Any, **kwargs: Any):
        assert not enabled

    def record_all_cleared(self) -> None: ...

    def record_store(self, *args: Any) -> None: ...

    def record_remove(self, *args: Any) -> None: ...

    def take(self) -> list[Any]:
        return []


def _put(module: types.ModuleType, **attrs: Any) -> None:
    for name, value in attrs.items():
        setattr(module, name, value)


class LogicalTime:
    """SGLang's tree modules' `time`: a logical clock. `now` is set from the
    adapter before each call and read back after it."""
    now = 0

    @classmethod
    def monotonic(cls) -> float:
        cls.now += 1
        return float(cls.now)

    @staticmethod
    def perf_counter() -> float:
        return 0.0

    @staticmethod
    def time() -> float:
        return 0.0


#: the modules whose `time` is the logical clock
CLOCKED = (f"{MC}.radix_cache", f"{MC}.base_prefix_cache")


def _allocator_package(module: types.ModuleType) -> None:
    """allocator/__init__.py's names, from the three modules it imports
    (base, paged, token), which run unchanged."""
    from sglang.srt.mem_cache.allocator import base, paged, token
    _put(module, BaseTokenToKVPoolAllocator=base.BaseTokenToKVPoolAllocator, TokenToKVPoolAllocator=token.TokenToKVPoolAllocator,
         PagedTokenToKVPoolAllocator=paged.PagedTokenToKVPoolAllocator, alloc_extend_naive=paged.alloc_extend_naive,
         alloc_decode_naive=paged.alloc_decode_naive)


def _utils(root: Path, module: types.ModuleType) -> None:
    """mem_cache/utils.py imports Triton kernels: the eviction policies only."""
    import sglang.srt.mem_cache.evict_policy as policies
    _put(module, **{n: getattr(policies, n) for n in dir(policies) if n.endswith("Strategy")})
    extract(root / "sglang/srt/mem_cache/utils.py", ("_EVICTION_POLICY_FACTORIES", "get_eviction_strategy", "split_node_hash_value"),
            module)


class NoTriton:
    """One of the paged allocator's Triton kernels (`KERNELS`): never
    launched, as the CPU platform's allocator takes SGLang's own
    torch-native path (`alloc_extend_naive`, `alloc_decode_naive`)."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, grid: Any) -> Any:
        raise RuntimeError(f"SGLang's Triton kernel {KERNELS}.{self.name} was launched: the adapter runs the paged "
                           "allocator's torch-native path (use_triton_kernels False), as SGLang does on a CPU platform")


def _srt_utils(root: Path, module: types.ModuleType) -> None:
    """sglang/srt/utils/__init__.py imports all of utils/common.py (torch,
    CUDA, the serving stack): the paged allocator's four helpers, from the
    release's own common.py."""
    import importlib
    module.torch = importlib.import_module("torch")  # type: ignore[attr-defined]  # the stand-in, while the modules load
    extract(root / "sglang/srt/utils/common.py", ("logger", "is_hip", "_warned_bool_env_var_keys", "get_bool_env_var",
                                                  "next_power_of_2", "get_num_new_pages"), module)


#: SGLang's CPU platform (srt/platforms/cpu.py, `CpuSRTPlatform`): no Triton, so
#: the paged allocator takes its torch-native path
CPU_PLATFORM = types.SimpleNamespace(capabilities=types.SimpleNamespace(supports_triton=False),
                                     get_paged_allocator_cls=lambda: None)


def stand_ins(root: Path) -> dict[str, Fill]:
    return {
        "torch": _torch,
        KERNELS: lambda m: _put(m, alloc_extend_kernel=NoTriton("alloc_extend_kernel"),
                                alloc_decode_kernel=NoTriton("alloc_decode_kernel")),
        "sglang.srt.platforms": lambda m: _put(m, current_platform=CPU_PLATFORM),
        "sglang.srt.utils": lambda m: _srt_utils(root, m),
        f"{MC}.allocator": _allocator_package,
        f"{MC}.events": lambda m: _put(m, KVCacheEventRecorder=EventRecorder, LoRANameTable=_Placeholder,
                                       KvEventLoraNames=_Placeholder),
        f"{MC}.utils": lambda m: _utils(root, m),
        f"{MC}.memory_pool": lambda m: _put(m, ReqToTokenPool=_Placeholder),
        "sglang.srt.observability.metrics_collector": lambda m: _put(
            m, RadixCacheMetricsCollector=_Placeholder, STAT_LOGGER_ROLE_RADIX_CACHE="radix_cache",
            radix_cache_metric_labels=lambda *a: {}, resolve_collector_class=lambda role, default: default),
        "sglang.srt.runtime_context": lambda m: _put(m, get_observability=lambda: types.SimpleNamespace(extra_metric_labels=None),
                                                     get_parallel=lambda: None),
        "sglang.srt.utils.common": lambda m: extract(root / "sglang/srt/utils/common.py", ("ceil_align",), m),
    }


_loaded: dict[str, Any] = {}


def engine(source: Optional[str]) -> dict[str, types.ModuleType]:
    """SGLang's modules from `source` (None: the installed SGLang)."""
    if _loaded.get("source", "") == source and all(sys.modules.get(n) is m for n, m in _loaded["mods"].items()):
        return _loaded["mods"]  # type: ignore[no-any-return]
    wanted = (f"{MC}.radix_cache", f"{MC}.base_prefix_cache", f"{MC}.allocator.token", f"{MC}.allocator.paged",
              f"{MC}.cache_init_params")
    if source is None:
        try:
            mods, code = installed("sglang", wanted)
        except ImportError as err:
            raise SpecError(REF, "factory", f"SGLang is not importable ({err}): pip install sglang=={TESTED[-1]}, "
                            f"or set {ENV} to a folder of SGLang's Python sources (an unpacked wheel or a checkout)") from None
    else:
        root = Path(source)
        if not (root / "sglang/srt/mem_cache/radix_cache.py").is_file():
            raise SpecError(REF, "factory", f"{ENV}={source!r} holds no sglang/srt/mem_cache/radix_cache.py: point it at the folder "
                            "that contains sglang/ (an unpacked wheel or an SGLang checkout's python/ folder)")
        read: set[Path] = set()
        try:
            mods = load(root, "sglang", REAL, stand_ins(root), wanted, read)
        except SourceError as err:
            raise SpecError(REF, "factory", f"SGLang from {source}: {err}") from None
        code = digest(root, read)
    for name in CLOCKED:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "time"):
            module.time = LogicalTime  # type: ignore[attr-defined]
    version = release(Path(source), "sglang") if source is not None else getattr(sys.modules.get("sglang"), "__version__", "installed")
    _loaded.update(source=source, mods=mods, version=version, digest=code)
    return mods


def source() -> Optional[str]:
    """The folder the adapter loads SGLang from: $COWCHECK_SGLANG_SOURCE
    (or, while a counterexample is replayed, the folder it records), or
    None for the installed SGLang."""
    return folder(ENV)


F = TypeVar("F", bound=Callable[..., Any])


def _clocked(method: F) -> F:
    """An adapter call that runs SGLang's code: on the adapter's own clock."""
    @wraps(method)
    def call(self: "SGLang", *args: Any) -> Any:
        with self._engine_call():
            return method(self, *args)
    return cast(F, call)


class SGLang:
    """One RadixCache over one token allocator of `pool` blocks of `page`
    slots (page 1: TokenToKVPoolAllocator; more: PagedTokenToKVPoolAllocator),
    and per request its token ids, slots, matched length and locked node."""

    def __init__(self, pool: int, source: Optional[str], page: int = 1):
        self.source, self.page = source, page
        #: the logical clock's reading and TreeNode.counter after the last call
        self.clock, self.nodes = 0, 0
        mods = engine(source)
        with self._engine_call():
            self._build(mods, pool)

    def version(self) -> str:
        """The engine code this adapter runs, recorded in its counterexamples."""
        return f"SGLang {_loaded['version']}"

    def code(self) -> dict[str, Optional[str]]:
        """Which tree of the release: its folder (None: the installed SGLang)
        and the digest of the files whose code runs."""
        return {"source": str(Path(self.source).resolve()) if self.source else None, "digest": _loaded["digest"]}

    def _build(self, mods: dict[str, types.ModuleType], pool: int) -> None:
        torch = sys.modules.get("torch") if self.source is None else None
        dtype = torch.int64 if torch is not None else DType("int64")
        if self.page == 1:
            self.allocator = mods[f"{MC}.allocator.token"].TokenToKVPoolAllocator(
                size=pool, dtype=dtype, device="cpu", kvcache=None, need_sort=False)
        else:
            self.allocator = mods[f"{MC}.allocator.paged"].PagedTokenToKVPoolAllocator(
                size=pool * self.page, page_size=self.page, dtype=dtype, device="cpu", kvcache=None, need_sort=False)
            # SGLang's CPU platform's choice (already so with the stand-in platform; an installed SGLang on a
            # GPU machine would pick the Triton kernels, which cannot take the adapter's CPU tensors)
            self.allocator.use_triton_kernels = False
        self.tree = mods[f"{MC}.radix_cache"].RadixCache(mods[f"{MC}.cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.allocator, page_size=self.page))
        self.ids: dict[str, int] = {}
        #: per request: token ids, slots (allocator ids), matched length, locked node
        self.requests: dict[str, dict[str, Any]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (restore, (engine, SGLang, self.source, dumps(self.__dict__)))

    @contextmanager
    def _engine_call(self) -> Iterator[None]:
        """Run SGLang's code on this adapter's clock and node counter."""
        node = engine(self.source)[f"{MC}.radix_cache"].TreeNode
        LogicalTime.now, node.counter = self.clock, self.nodes
        try:
            yield
        finally:
            self.clock, self.nodes = LogicalTime.now, node.counter

    def snapshot(self) -> tuple[Any, ...]:
        """The state, canonical (module docstring): tree, free slots, requests."""
        nodes: list[Any] = []
        where: dict[int, tuple[int, ...]] = {}

        def walk(node: Any, path: tuple[int, ...]) -> None:
            where[id(node)] = path
            nodes.append(node)
            for i, child in enumerate(node.children.values()):
                walk(child, path + (i,))
        walk(self.tree.root_node, ())
        ranks = {t: r for r, t in enumerate(sorted({n.last_access_time for n in nodes} | {n.creation_time for n in nodes}))}
        tree = tuple((where[id(n)], tuple(n.key.token_ids) if n.key is not None else (),
                      tuple(int(v) for v in n.value) if n.value is not None else None, n.lock_ref, ranks[n.last_access_time],
                      ranks[n.creation_time], n.hit_count, n.priority) for n in nodes)
        requests = tuple(sorted((name, tuple(r["ids"]), tuple(r["slots"]), r["matched"], where.get(id(r["node"])), r["drafts"])
                                for name, r in self.requests.items()))
        alloc = self.allocator
        release = getattr(alloc, "release_pages", None)
        return (tree, tuple(int(s) for s in alloc.free_pages), tuple(int(s) for s in release) if release is not None else (),
                alloc.free_group is not None, requests, tuple(sorted(self.ids.items())))

    def _key(self, ids: list[int]) -> Any:
        return engine(self.source)[f"{MC}.radix_cache"].RadixKey(array("q", ids))

    def _id(self, name: str) -> int:
        return self.ids.setdefault(name, len(self.ids) + 1)

    def _evict(self, n: int) -> None:
        """Evict unlocked tree leaves until n slots are free, as the
        scheduler does before it allocates (`evict_to_free_tokens`)."""
        short = n - self.allocator.available_size()
        if short > 0:
            self.tree.evict(engine(self.source)[f"{MC}.base_prefix_cache"].EvictParams(num_tokens=short))

    def _alloc(self, n: int) -> Any:
        """n slots (page 1), evicting first when short."""
        self._evict(n)
        slots = self.allocator.alloc(n) if n else np.zeros(0, dtype=np.int64).view(Tensor)
        if slots is None:
            raise OutOfBlocks(f"SGLang has {self.allocator.available_size()} free slots, {n} needed")
        return slots

    def _alloc_paged(self, prefix: int, length: int, last: int, decode: bool) -> Any:
        """Slots for positions prefix .. length - 1 of a request whose
        position prefix - 1 is in slot `last` (-1: none), from the paged
        allocator, as allocation.py's alloc_paged_token_slots_extend (and
        _decode, one token) does: evict for a conservative demand first
        (the new tokens and one page), then `alloc_extend` (`alloc_decode`
        for one token after the first), which fills the last page first."""
        n = length - prefix
        self._evict(self.page if decode else n + self.page)
        def one(v: int) -> Tensor:
            return np.asarray([v], dtype=np.int64).view(Tensor)
        if decode:
            slots = self.allocator.alloc_decode(one(length), one(length), one(last))
        else:
            slots = self.allocator.alloc_extend(one(prefix), one(prefix), one(length), one(length), one(last), n)
        if slots is None:
            raise OutOfBlocks(f"SGLang has {self.allocator.available_size() // self.page} free pages of {self.page} slots, "
                              f"{n} slots needed after position {prefix}")
        return slots

    @_clocked
    def admit(self, branch: str, tokens: list[str]) -> int:
        ids = [self._id(t) for t in tokens]
        # at most L - 1 tokens (Req._compute_max_prefix_len); match_prefix cuts the key to whole pages
        match = self.tree.match_prefix(engine(self.source)[f"{MC}.base_prefix_cache"].MatchPrefixParams(key=self._key(ids[:-1])))
        node = match.last_device_node
        prefix = self.tree.path_device_indices(node) if hasattr(self.tree, "path_device_indices") else match.device_indices
        self.tree.inc_lock_ref(node)
        if self.page == 1:
            slots = self._alloc(len(ids) - len(prefix))
        else:
            slots = self._alloc_paged(len(prefix), len(ids), int(prefix[-1]) if len(prefix) else -1, decode=False)
        self.requests[branch] = dict(ids=ids, slots=[int(s) for s in prefix] + [int(s) for s in slots],
                                     matched=len(prefix), node=node, drafts=0)
        return len(prefix)

    @_clocked
    def append(self, branch: str, token: str, draft: bool = False) -> list[tuple[int, int]]:
        req = self.requests[branch]
        if self.page == 1:
            slot = self._alloc(1)
        else:
            slot = self._alloc_paged(len(req["slots"]), len(req["slots"]) + 1, req["slots"][-1], decode=True)
        req["ids"].append(self._id(token))
        req["slots"].append(int(slot[0]))
        req["drafts"] += bool(draft)
        return []

    def _free_from(self, slots: list[int], start: int) -> None:
        """Free a request's slots from position `start` (a page boundary) on:
        the pages they are in, once each (`free_segment`)."""
        if slots:
            self.allocator.free_segment(np.asarray(slots, dtype=np.int64).view(Tensor), start_pos=start)

    @_clocked
    def rollback(self, branch: str, n: int) -> None:
        """Verify: the rejected drafts' slots go back to the allocator (page
        > 1: only the pages past the kept tokens, by release_kv_cache's rule
        for over-allocated slots, from the next page boundary; the kept
        last page's rejected slots are the next append's). SGLang's own
        speculative decoding frees them only when the request finishes
        (module docstring)."""
        req = self.requests[branch]
        if n:
            rejected = req["slots"][-n:]
            del req["slots"][-n:], req["ids"][-n:]
            kept = len(req["slots"])
            start = -(-kept // self.page) * self.page
            if self.page == 1:
                self.allocator.free(np.asarray(rejected, dtype=np.int64).view(Tensor))
            else:
                self._free_from(rejected[start - kept:], start)
        req["drafts"] = 0

    @_clocked
    def free(self, branch: str) -> None:
        """Finish (release_kv_cache with its checkpoint): insert the whole
        pages into the tree, free the duplicates, free the last partial
        page (page > 1), unlock."""
        req = self.requests.pop(branch)
        base = engine(self.source)[f"{MC}.base_prefix_cache"]
        slots = np.asarray(req["slots"], dtype=np.int64).view(Tensor)
        result = self.tree.insert(base.InsertParams(key=self._key(req["ids"]), value=slots.clone()))
        self._free_from(req["slots"][req["matched"]:result.prefix_len], req["matched"])  # the duplicates
        whole = len(slots) // self.page * self.page  # insert cuts the key to whole pages
        self._free_from(req["slots"][whole:], whole)
        self.tree.dec_lock_ref(req["node"])

    def _block(self, slot: Any) -> int:
        return int(slot) // self.page - 1

    def table(self, branch: str) -> list[int]:
        req = self.requests.get(branch)
        return [self._block(s) for s in req["slots"][::self.page]] if req else []

    def free_blocks(self) -> list[int]:
        """The allocator's free pages, then the pages of unlocked tree nodes
        (evictable: an allocation that is short evicts them, as V1's free
        queue holds its cached blocks), least recently used first."""
        release = getattr(self.allocator, "release_pages", None)
        free = [int(p) - 1 for p in self.allocator.free_pages.tolist()] + \
            ([int(p) - 1 for p in release.tolist()] if release is not None else [])
        evictable: list[tuple[float, list[int]]] = []
        stack = [self.tree.root_node]
        while stack:
            node = stack.pop()
            for child in node.children.values():
                if child.lock_ref == 0 and child.value is not None:
                    evictable.append((child.last_access_time, [self._block(s) for s in child.value.tolist()[::self.page]]))
                stack.append(child)
        return free + [b for _, blocks in sorted(evictable, key=lambda e: e[0]) for b in blocks]

    def cached(self) -> dict[int, tuple[str, ...]]:
        """Every page the tree holds, with its tokens."""
        names = {i: n for n, i in self.ids.items()}
        out: dict[int, tuple[str, ...]] = {}
        stack = [self.tree.root_node]
        while stack:
            node = stack.pop()
            for child in node.children.values():
                tids, slots = list(child.key.token_ids), child.value.tolist()
                for i in range(0, len(slots), self.page):
                    out[self._block(slots[i])] = tuple(names[int(t)] for t in tids[i:i + self.page])
                stack.append(child)
        return out


def make(pool: int, block_size: int) -> SGLang:
    """The adapter factory: `--allocator cowcheck.adapters.sglang:make`
    (page size B: B = 1 the token allocator, B > 1 the paged one)."""
    if block_size < 1:
        raise SpecError(REF, "factory", f"B must be at least 1, got {block_size}")
    return SGLang(pool, source(), block_size)
