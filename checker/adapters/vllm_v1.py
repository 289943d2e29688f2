"""vLLM V1's own `KVCacheManager`, with prefix caching on, as an adapter for
the engine harness (README, "Checking vLLM V1 and SGLang").

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
unchanged with stand-ins for what they import (cowcheck.adapters.sources);
else an installed vLLM. Tested on 0.9.1, 0.33.0 and 0.34.0 (`TESTED`).
The two API generations (0.9.1's and 0.33's) differ in a handful of calls,
all in `_V09` and `_V033`; a release that imports a module neither
stand-in table knows fails with one line naming it.

Pickling (the harness copies the adapter into every state): V1's objects
pickle as they are; `VllmV1.__reduce__` wraps them so that unpickling in a
fresh process first loads the same sources. A state costs one pickle of
the manager (3-6 KB on the tests' scenarios).

One idea, though long: V1's manager driven as V1's scheduler drives it,
with the few places where releases differ kept together (`_V09`, `_V033`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import types
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional

from cowcheck.adapters import OutOfBlocks
from cowcheck.adapters.sources import Fill, SourceError, dumps, unload, environment, extract, load, restore
from cowcheck.model.errors import SpecError

#: the environment variable that names a folder of vLLM's Python sources
ENV = "COWCHECK_VLLM_SOURCE"
#: the releases the tests check (tests/test_engines.py)
TESTED = ("0.9.1", "0.33.0", "0.34.0")
REF = "cowcheck.adapters.vllm_v1:make"
#: names of at most this many UTF-8 bytes are their own token id (0.34
#: keeps token ids in 32-bit arrays)
_SHORT = 3


# -- stand-ins: what V1's core modules import and this check does not need ----
# Classes live here, at module level, so that the objects V1 keeps (a
# request's SamplingParams, a spec's dtype) pickle by reference.

class DType:
    """torch.dtype: V1 core only reads a spec's dtype size."""

    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (DType, (self.name, self.itemsize))


class Placeholder:
    """A name V1 core imports for annotations or isinstance only."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.__dict__.update(kwargs)

    @staticmethod
    def from_sampling_params(params: Any) -> None:
        """StructuredOutputRequest's constructor (0.33): none without a grammar."""
        return None


@dataclass
class SamplingParams:
    """The fields V1 core and Request read, across the tested releases."""
    max_tokens: Optional[int] = 1 << 20
    guided_decoding: Any = None
    extra_args: Optional[dict[str, Any]] = None
    prompt_logprobs: Optional[int] = None
    structured_outputs: Any = None
    skip_reading_prefix_cache: Optional[bool] = None
    prompt_logprob_token_ids: Optional[list[int]] = None
    prompt_logprob_start: Optional[int] = None


class KVCacheEvent(Placeholder):
    """vllm.distributed.kv_events' events (never produced: events are off)."""


def _fills(*fills: Fill) -> Fill:
    """One stand-in made by several fills, in order."""
    def fill(module: types.ModuleType) -> None:
        for each in fills:
            each(module)
    return fill


def _put(module: types.ModuleType, **attrs: Any) -> None:
    for name, value in attrs.items():
        setattr(module, name, value)


def _placeholders(module: types.ModuleType, *names: str) -> None:
    for name in names:
        setattr(module, name, type(name, (Placeholder,), {"__module__": __name__}))


def _torch(module: types.ModuleType) -> None:
    _put(module, dtype=DType, float16=DType("float16", 2), bfloat16=DType("bfloat16", 2), float32=DType("float32", 4),
         uint8=DType("uint8", 1), Tensor=Placeholder)


def _logger(module: types.ModuleType) -> None:
    def init_logger(name: str) -> logging.Logger:
        log = logging.getLogger(name)
        for once in ("info_once", "warning_once", "debug_once"):
            setattr(log, once, getattr(log, once.removesuffix("_once")))
        return log
    module.init_logger = init_logger  # type: ignore[attr-defined]


def _kv_events(root: Path, constants: tuple[str, ...], module: types.ModuleType) -> None:
    if constants:
        extract(root / "vllm/distributed/kv_events.py", constants, module)
    _put(module, KVCacheEvent=KVCacheEvent, BlockStored=KVCacheEvent, BlockRemoved=KVCacheEvent, AllBlocksCleared=KVCacheEvent)


def _extracted(path: Path, names: tuple[str, ...], module: types.ModuleType, **extra: Any) -> None:
    """A stand-in made of the release's own definitions (and `extra`)."""
    _put(module, **extra)
    extract(path, names, module)


def _stats_033(root: Path, module: types.ModuleType) -> None:
    from vllm.v1.metrics.cache_hit_source import CacheHitSource  # the real one, loaded from root
    _put(module, logger=logging.getLogger("vllm.v1.metrics.stats"), CacheHitSource=CacheHitSource)
    extract(root / "vllm/v1/metrics/stats.py",
            ("BaseCacheStats", "PrefixCacheStats", "KVCacheEvictionEvent", "PrefillStats", "RequestSpecDecodeMetrics"), module)


def _cbor_refused(obj: Any, **kwargs: Any) -> bytes:
    raise NotImplementedError("cbor2 is not available to cowcheck's vLLM adapter: the adapter hashes with sha256")


# -- the two API generations ---------------------------------------------------

class _V09:
    """vLLM 0.9.x: vllm/utils.py is one module; block hashes live in the
    manager (`req_to_block_hashes`), carry their tokens, and are chained
    from a NONE_HASH drawn at import time (fixed here by PYTHONHASHSEED);
    `allocate_slots` takes `num_draft_tokens` and caches everything else."""

    CORE = ("vllm.v1.core.kv_cache_manager", "vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils",
            "vllm.v1.core.single_type_kv_cache_manager", "vllm.v1.core.kv_cache_coordinator", "vllm.v1.request",
            "vllm.v1.kv_cache_interface")

    def real(self, root: Path) -> tuple[str, ...]:
        return self.CORE

    def stand_ins(self, root: Path) -> dict[str, Fill]:
        v = root / "vllm"
        return {
            "torch": _torch,
            "vllm.config": lambda m: _placeholders(m, "VllmConfig"),
            "vllm.distributed.kv_events": partial(_kv_events, root, ()),
            "vllm.logger": _logger,
            "vllm.utils": lambda m: _extracted(v / "utils.py", ("T", "GiB_bytes", "cdiv", "sha256", "is_list_of"), m,
                                               get_dtype_size=lambda dt: dt.itemsize),
            "vllm.multimodal.inputs": lambda m: _placeholders(m, "MultiModalKwargs", "PlaceholderRange"),
            "vllm.sampling_params": lambda m: _put(m, SamplingParams=SamplingParams),
            "vllm.v1.engine": _fills(
                partial(_extracted, v / "v1/engine/__init__.py", ("FINISH_REASON_STRINGS", "FinishReason", "EngineCoreEventType")),
                lambda m: _placeholders(m, "EngineCoreEvent", "EngineCoreRequest")),
            "vllm.v1.metrics.stats": lambda m: _extracted(v / "v1/metrics/stats.py", ("PrefixCacheStats",), m),
            "vllm.v1.structured_output.request": lambda m: _put(m, StructuredOutputRequest=Placeholder),
            "vllm.v1.utils": lambda m: _extracted(v / "v1/utils.py", ("T", "ConstantList"), m),
        }

    def manager(self, mods: dict[str, types.ModuleType], num_blocks: int, block_size: int) -> Any:
        iface = mods["vllm.v1.kv_cache_interface"]
        spec = iface.FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=DType("float16", 2),
                                       use_mla=False)
        config = iface.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                     kv_cache_groups=[iface.KVCacheGroupSpec(["layer.0"], spec)])
        return mods["vllm.v1.core.kv_cache_manager"].KVCacheManager(
            config, max_model_len=num_blocks * block_size, enable_caching=True, caching_hash_algo="sha256")

    def request(self, mods: dict[str, types.ModuleType], rid: str, ids: list[int], block_size: int) -> Any:
        return mods["vllm.v1.request"].Request(rid, ids, None, None, None, SamplingParams(), None)

    def computed(self, manager: Any, request: Any) -> tuple[Any, int]:
        blocks, hit = manager.get_computed_blocks(request)
        return blocks, hit

    def allocate(self, manager: Any, request: Any, new: int, hit: int = 0, blocks: Any = None, drafts: int = 0) -> Any:
        return manager.allocate_slots(request, new, hit, blocks, num_draft_tokens=drafts)

    def finish(self, manager: Any, request: Any) -> None:
        manager.free(request)
        manager.free_block_hashes(request)

    def cached_keys(self, pool: Any) -> list[tuple[Any, int]]:
        """(key, V1 block id) for every block the cache map serves."""
        return [(key, bid) for key, blocks in pool.cached_block_hash_to_block.items() for bid in blocks]

    def key_ids(self, adapter: "VllmV1", key: Any) -> tuple[int, ...]:
        """The token ids of a key's own block: this generation's keys carry them."""
        return tuple(key.block_hash.token_ids)

    def request_hashes(self, manager: Any, request: Any) -> list[Any]:
        return []

    def manager_hashes(self, manager: Any) -> Any:
        """Block hashes the manager keeps per request (0.9: req_to_block_hashes)."""
        return frozenset((rid, tuple(hashes)) for rid, hashes in manager.req_to_block_hashes.items())


class _V033(_V09):
    """vLLM 0.33 and later: vllm/utils is a package; the request carries its
    block hashes (raw sha256 bytes, filled by a block hasher as tokens
    arrive), the cache map is a `BlockHashToBlockMap`; `allocate_slots`
    caches at most `request.num_tokens` tokens, so drafts, kept in
    `spec_token_ids`, are never keyed. 0.34 adds vllm/v1/token_buffer.py."""

    EXTRA = ("vllm.v1.core.kv_cache_metrics", "vllm.v1.kv_cache_spec_registry", "vllm.v1.kv_cache_layout",
             "vllm.v1.hisparse.block_pool", "vllm.utils.math_utils", "vllm.utils.hashing", "vllm.v1.metrics.cache_hit_source")

    def real(self, root: Path) -> tuple[str, ...]:
        extra = ("vllm.v1.token_buffer",) if (root / "vllm/v1/token_buffer.py").is_file() else ()
        return self.CORE + self.EXTRA + extra

    def stand_ins(self, root: Path) -> dict[str, Fill]:
        v = root / "vllm"
        table: dict[str, Fill] = {
            "torch": _torch,
            "cbor2": lambda m: _put(m, dumps=_cbor_refused),
            "vllm.envs": lambda m: _put(m, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False),
            "vllm.config": _fills(lambda m: _placeholders(m, "VllmConfig"),
                                  lambda m: _put(m, get_current_vllm_config_or_none=lambda: None)),
            "vllm.platforms": lambda m: _put(m, current_platform=types.SimpleNamespace(
                register_custom_kv_cache_specs=lambda config: None)),
            "vllm.distributed.kv_events": partial(_kv_events, root, ("MEDIUM_GPU", "MEDIUM_CPU", "MEDIUM_STORAGE")),
            "vllm.logger": _logger,
            "vllm.utils": lambda m: _extracted(v / "utils/__init__.py", ("length_from_prompt_token_ids_or_embeds",), m),
            "vllm.utils.torch_utils": lambda m: _put(m, get_dtype_size=lambda dt: dt.itemsize),
            "vllm.multimodal.inputs": lambda m: _placeholders(m, "MultiModalFeatureSpec"),
            "vllm.multimodal.utils": lambda m: _extracted(v / "multimodal/utils.py", ("get_mm_features_in_window",), m),
            "vllm.pooling_params": lambda m: _placeholders(m, "PoolingParams"),
            "vllm.sampling_params": lambda m: _put(m, SamplingParams=SamplingParams),
            "vllm.v1.attention.backends.registry": lambda m: _extracted(
                v / "v1/attention/backends/registry.py", ("_AttentionBackendEnumMeta", "MambaAttentionBackendEnum"), m),
            "vllm.v1.engine": _fills(
                partial(_extracted, v / "v1/engine/__init__.py", ("FINISH_REASON_STRINGS", "FinishReason", "EngineCoreEventType")),
                lambda m: _placeholders(m, "EngineCoreEvent", "EngineCoreRequest")),
            "vllm.v1.kv_hints": lambda m: _placeholders(m, "KvHintsEnvelope"),
            "vllm.v1.metrics.stats": partial(_stats_033, root),
            "vllm.v1.structured_output.request": lambda m: _put(m, StructuredOutputRequest=Placeholder),
            "vllm.v1.utils": lambda m: _extracted(v / "v1/utils.py", ("T", "ConstantList"), m,
                                                  tensor_data=_cbor_refused),
        }
        if (root / "vllm/v1/token_buffer.py").is_file():  # 0.34
            table["vllm.utils.gc_utils"] = lambda m: _put(m, gc_untrack=lambda obj: obj, untracked_list=list)
            table["vllm.utils.collection_utils"] = lambda m: _extracted(v / "utils/collection_utils.py", ("T", "as_list"), m)
        return table

    def manager(self, mods: dict[str, types.ModuleType], num_blocks: int, block_size: int) -> Any:
        mods["vllm.v1.core.kv_cache_utils"].init_none_hash(mods["vllm.utils.hashing"].sha256)
        iface = mods["vllm.v1.kv_cache_interface"]
        spec = iface.FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=DType("float16", 2))
        config = iface.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                     kv_cache_groups=[iface.KVCacheGroupSpec(["layer.0"], spec)])
        return mods["vllm.v1.core.kv_cache_manager"].KVCacheManager(
            config, max_model_len=num_blocks * block_size, scheduler_block_size=block_size, hash_block_size=block_size,
            enable_caching=True)

    def request(self, mods: dict[str, types.ModuleType], rid: str, ids: list[int], block_size: int) -> Any:
        return mods["vllm.v1.request"].Request(rid, ids, SamplingParams(), None, arrival_time=0.0,
                                               block_hasher=BlockHasher(block_size))

    def computed(self, manager: Any, request: Any) -> tuple[Any, int]:
        blocks, hit, *_ = manager.get_computed_blocks(request)
        return blocks, hit

    def allocate(self, manager: Any, request: Any, new: int, hit: int = 0, blocks: Any = None, drafts: int = 0) -> Any:
        return manager.allocate_slots(request, new, hit, blocks)

    def finish(self, manager: Any, request: Any) -> None:
        manager.free(request)

    def cached_keys(self, pool: Any) -> list[tuple[Any, int]]:
        cache = pool.cached_block_hash_to_block
        dups = getattr(cache, "_dup_ids", {})  # 0.34: ids, several under a key kept apart
        out: list[tuple[Any, int]] = []
        for key, held in cache._cache.items():
            if key in dups:
                out.extend((key, bid) for bid in dups[key])
            elif isinstance(held, dict):  # 0.33: {id: block} under a key cached by several blocks
                out.extend((key, bid) for bid in held)
            else:
                out.append((key, held if isinstance(held, int) else held.block_id))
        return out

    def key_ids(self, adapter: "VllmV1", key: Any) -> tuple[int, ...]:
        """The tokens of a key's block, as learned from the request that keyed it."""
        return adapter.key_tokens[bytes(_mods()["vllm.v1.core.kv_cache_utils"].get_block_hash(key))]

    def request_hashes(self, manager: Any, request: Any) -> list[Any]:
        return [bytes(h) for h in request.block_hashes]

    def manager_hashes(self, manager: Any) -> Any:
        return ()


class BlockHasher:
    """V1 0.33's `get_request_block_hasher(B, sha256)`, as an object: the
    closure it returns does not pickle, and a Request keeps it."""

    def __init__(self, block_size: int):
        self.block_size = block_size

    def __call__(self, request: Any) -> Any:
        mods = _mods()
        hasher = mods["vllm.v1.core.kv_cache_utils"].get_request_block_hasher(self.block_size, mods["vllm.utils.hashing"].sha256)
        return hasher(request)


# -- which vLLM ----------------------------------------------------------------

@dataclass
class _Engine:
    """The vLLM whose modules are loaded now (one at a time: they share names)."""
    source: Optional[str] = None
    version: str = ""
    layout: _V09 = _V09()
    mods: dict[str, types.ModuleType] | None = None


_engine = _Engine()


def _mods() -> dict[str, types.ModuleType]:
    """The loaded release's modules, by name."""
    assert _engine.mods is not None, "no vLLM loaded"
    return _engine.mods


def _version(root: Path) -> str:
    text = (root / "vllm/_version.py").read_text() if (root / "vllm/_version.py").is_file() else ""
    found = re.search(r"^__version__\b.*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else "unknown version"


def engine(source: Optional[str]) -> _Engine:
    """Load vLLM V1's core from `source` (a folder; None: the installed
    vLLM), unless it is what is loaded now."""
    if _engine.mods is not None and _engine.source == source and all(sys.modules.get(n) is m for n, m in _engine.mods.items()):
        return _engine  # loaded, and still the modules that own the names
    if source is None:
        unload("vllm")
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SpecError(REF, "factory", f"vLLM is not importable: pip install vllm (one of {', '.join(TESTED)}), "
                            f"or set {ENV} to a folder of vLLM's Python sources (an unpacked wheel or a checkout)") from None
        import inspect
        import importlib
        wanted = _V09.CORE + ("vllm.utils.hashing",)
        mods = {}
        for name in wanted:
            try:
                mods[name] = importlib.import_module(name)
            except ImportError:
                if name != "vllm.utils.hashing":
                    raise
        params = inspect.signature(mods["vllm.v1.core.kv_cache_manager"].KVCacheManager.allocate_slots).parameters
        layout: _V09 = _V09() if "num_draft_tokens" in params else _V033()
        _engine.__init__(None, getattr(sys.modules["vllm"], "__version__", "installed"), layout, mods)  # type: ignore[misc]
        return _engine
    root = Path(source)
    if not (root / "vllm/v1/core/block_pool.py").is_file():
        raise SpecError(REF, "factory", f"{ENV}={source!r} holds no vllm/v1/core/block_pool.py: point it at the folder "
                        "that contains vllm/ (an unpacked wheel or a vLLM checkout)")
    layout = _V09() if (root / "vllm/utils.py").is_file() else _V033()
    try:
        with environment(PYTHONHASHSEED="0"):  # 0.9's NONE_HASH: the same in every process
            mods = load(root, "vllm", layout.real(root), layout.stand_ins(root), layout.real(root))
    except SourceError as err:
        raise SpecError(REF, "factory", f"vLLM {_version(root)} from {source}: {err}") from None
    _engine.__init__(source, _version(root), layout, mods)  # type: ignore[misc]
    return _engine


def source() -> Optional[str]:
    """The folder the adapter loads vLLM from: $COWCHECK_VLLM_SOURCE, or
    None for the installed vLLM."""
    return os.environ.get(ENV) or None


# -- the adapter -----------------------------------------------------------------

class VllmV1:
    """One KVCacheManager over pool + 1 V1 blocks (V1's null block is its
    block 0), and one Request per harness request."""

    def __init__(self, pool: int, block_size: int, source: Optional[str]):
        self.source = source
        self.B = block_size
        eng = engine(source)
        self.manager = eng.layout.manager(_mods(), pool + 1, block_size)
        self.requests: dict[str, Any] = {}
        #: names longer than _SHORT bytes, by id (the others are their own id)
        self.long_names: dict[int, str] = {}
        #: 0.33+: a block hash's own tokens, for the keys the cache holds
        self.key_tokens: dict[bytes, tuple[int, ...]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Unpickling loads the same vLLM sources before V1's objects."""
        return (restore, (engine, VllmV1, self.source, dumps(self.__dict__)))

    # token names <-> ids
    def _id(self, name: str) -> int:
        raw = name.encode()
        if len(raw) <= _SHORT:
            return int.from_bytes(raw, "big")
        for tid, known in self.long_names.items():
            if known == name:
                return tid
        tid = (1 << 8 * _SHORT) + len(self.long_names)
        self.long_names[tid] = name
        return tid

    def _name(self, tid: int) -> str:
        if tid in self.long_names:
            return self.long_names[tid]
        return tid.to_bytes(_SHORT, "big").lstrip(b"\0").decode()

    @property
    def _layout(self) -> _V09:
        return _engine.layout

    def _learn(self) -> None:
        """Remember the tokens of every block hash a live request has, and
        forget those of keys the cache no longer holds (0.33+)."""
        for request in self.requests.values():
            ids = list(request.all_token_ids)
            for i, h in enumerate(self._layout.request_hashes(self.manager, request)):
                self.key_tokens.setdefault(h, tuple(ids[i * self.B:(i + 1) * self.B]))
        if self.key_tokens:
            kv = _mods()["vllm.v1.core.kv_cache_utils"]
            live = {bytes(kv.get_block_hash(key)) for key, _ in self._layout.cached_keys(self.manager.block_pool)}
            live |= {h for r in self.requests.values() for h in self._layout.request_hashes(self.manager, r)}
            self.key_tokens = {h: t for h, t in self.key_tokens.items() if h in live}

    # the harness's calls
    def admit(self, branch: str, tokens: list[str]) -> int:
        """Schedule a waiting request: its cache hit, then slots for the rest
        of the prompt (V1 touches the hit and keys the prompt's full blocks
        here, before the prefill has run)."""
        layout = self._layout
        request = layout.request(_mods(), branch, [self._id(t) for t in tokens], self.B)
        blocks, hit = layout.computed(self.manager, request)
        if layout.allocate(self.manager, request, request.num_tokens - hit, hit, blocks) is None:
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
            if self._layout.allocate(self.manager, request, request.num_tokens_with_spec - request.num_computed_tokens,
                                     drafts=drafts) is None:
                raise OutOfBlocks(f"V1 cannot schedule request {branch!r}'s draft")
        else:
            request.append_output_token_ids(tid)
            if self._layout.allocate(self.manager, request, request.num_tokens - request.num_computed_tokens) is None:
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
        self._layout.finish(self.manager, request)
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
        layout = self._layout
        requests = tuple(sorted(
            (rid, tuple(r.all_token_ids), tuple(r.spec_token_ids), r.num_computed_tokens, int(r.status),
             tuple(b.block_id for b in single.req_to_blocks.get(rid, ())), single.num_cached_block.get(rid),
             tuple(layout.request_hashes(m, r))) for rid, r in self.requests.items()))
        others = frozenset((rid, tuple(b.block_id for b in blocks), single.num_cached_block.get(rid))
                           for rid, blocks in single.req_to_blocks.items() if rid not in self.requests)
        blocks = tuple((b.ref_cnt, b.block_hash) for b in pool.blocks)
        free = tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())
        return (requests, others, blocks, free, frozenset(layout.cached_keys(pool)), layout.manager_hashes(m),
                frozenset(self.key_tokens.items()), frozenset(self.long_names.items()))

    def table(self, branch: str) -> list[int]:
        if branch not in self.requests:
            return []
        return [bid - 1 for bid in self.manager.get_block_ids(branch)[0]]

    # observers, from V1's block pool
    def refcount(self, block: int) -> int:
        return int(self.manager.block_pool.blocks[block + 1].ref_cnt)

    def free_blocks(self) -> list[int]:
        return [b.block_id - 1 for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]

    def cached(self) -> dict[int, tuple[str, ...]]:
        """Every block the cache map would serve as a hit, with the tokens
        of its own slots that its key names."""
        return {bid - 1: tuple(self._name(t) for t in self._layout.key_ids(self, key))
                for key, bid in self._layout.cached_keys(self.manager.block_pool)}


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
