"""What cowcheck's two vLLM adapters share (cowcheck.adapters.vllm_v1, the
allocator adapter, and cowcheck.adapters.vllm_scheduler, the scheduler
adapter): loading V1's modules unchanged from `COWCHECK_VLLM_SOURCE` or an
installed vLLM with stand-ins for what they import (`STAND_INS`, `_plan`,
`engine`), the release's calls that both make (`_call`, `_request`), and
`V1Pool`, V1's block pool as cowcheck sees it: token names and ids, the
tokens behind a cache key, and V1's null block 0 renumbered away (cowcheck's
block b is V1's block b + 1). Both adapters import this module; neither
imports the other's internals, so vllm_v1 can name the scheduler adapter's
factories without an import circle.

What V1's core imports is read from the release's own files (`_plan`); each
such module has one stand-in in `STAND_INS`, filled with the names the
release imports; a module the table lacks, or a name its file lacks, fails
with one line naming it. The releases differ in where block hashes live,
what a hash is and the cache map's shape: the readers below find each by
what the loaded modules have, never by a version number.

One idea, though long: running V1's own modules unchanged without vLLM's
dependencies, and reading what they leave behind, for both adapters.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import sys
import types
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Optional

from cowcheck.adapters.recorded import folder
from cowcheck.adapters.sources import Fill, SourceError, digest, unload, environment, extract, imports, load, release
from cowcheck.model.errors import SpecError

#: the environment variable that names a folder of vLLM's Python sources
ENV = "COWCHECK_VLLM_SOURCE"
#: the releases the tests check, fetched by CI (tests/test_adapters_releases.py): the
#: first and the newest two, 0.9.2 (vllm/utils a package, hashes still in
#: the manager) and 0.10.1.1 (hashes on the request, still tuples)
TESTED = ("0.9.1", "0.9.2", "0.10.1.1", "0.33.0", "0.34.0")
#: releases between them the tests also check where their sources are in
#: the cache (docs/how-to/vllm-sglang.md says how to fetch them)
SAMPLED = ("0.10.0", "0.10.2", "0.11.0", "0.11.2", "0.12.0", "0.18.0", "0.23.0", "0.30.0", "0.32.0")
REF = "cowcheck.adapters.vllm_v1:make"
#: names of at most this many UTF-8 bytes are their own token id (0.34
#: keeps token ids in 32-bit arrays)
_SHORT = 3
UNKNOWN = "?"  # the name of a token behind a key no request hashed


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


def _logger(name: str) -> logging.Logger:
    """vllm.logger.init_logger: a plain logger with vLLM's *_once methods,
    quiet unless the caller configures logging (a library's NullHandler):
    the harness drives the engine through thousands of states, and vLLM's
    warnings on each (a failed offload job, say) are not the checker's
    output."""
    log = logging.getLogger(name)
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    for once in ("info_once", "warning_once", "debug_once"):
        setattr(log, once, getattr(log, once.removesuffix("_once")))
    return log


def _cbor_refused(obj: Any, **kwargs: Any) -> bytes:
    raise NotImplementedError("cbor2 is not available to cowcheck's vLLM adapter: the adapter hashes with sha256")


@dataclass(frozen=True)
class _Real:
    """A stand-in's value that is a real module's attribute, where the
    release has that module (0.33's CacheHitSource)."""
    module: str
    name: str


@dataclass(frozen=True)
class _StandIn:
    """How to stand in for one module V1's core imports: the names in
    `values` are these; names in `placeholders` (None: any name) are
    Placeholder classes; every other name the core imports from it, and
    the `also` names the file defines, are the release's own definitions,
    extracted from its file (a name it lacks is one line naming it), with
    what they use of the file (a logger made by `init_logger`: ours)."""
    values: dict[str, Any] = field(default_factory=dict)
    placeholders: Optional[frozenset[str]] = frozenset()
    also: tuple[str, ...] = ()

    def fill(self, root: Path, name: str, imported: frozenset[str], module: types.ModuleType) -> None:
        for key, value in self.values.items():
            if isinstance(value, _Real):
                if _file(root, value.module) is None:
                    continue
                value = getattr(importlib.import_module(value.module), value.name)
            setattr(module, key, value)
        rest = set()
        for each in imported - set(self.values):
            if self.placeholders is None or each in self.placeholders:
                setattr(module, each, type(each, (Placeholder,), {"__module__": __name__}))
            else:
                rest.add(each)
        path = _file(root, name)
        if path is not None:
            rest |= {n for n in self.also if re.search(rf"^(def|class) {n}\b|^{n}\s*[:=]", path.read_text(), re.M)}
        if rest:
            if path is None:
                raise SourceError(f"{name}: no file under {root} for {', '.join(sorted(rest))}", name=name)
            module.init_logger = _logger  # type: ignore[attr-defined]  # a file's `logger = init_logger(__name__)`
            extract(path, rest, module)


_ANY: Optional[frozenset[str]] = None
#: every module V1's core imports, in any release from 0.9.1 to 0.34.0, that
#: the check does not run: by name
STAND_INS: dict[str, _StandIn] = {
    "torch": _StandIn(dict(dtype=DType, float16=DType("float16", 2), bfloat16=DType("bfloat16", 2),
                           float32=DType("float32", 4), uint8=DType("uint8", 1), Tensor=Placeholder)),
    "cbor2": _StandIn(dict(dumps=_cbor_refused)),
    # up to 0.10: kv_cache_interface.py takes Self from it, for annotations only
    "typing_extensions": _StandIn(placeholders=_ANY),
    "vllm.envs": _StandIn(dict(VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False, VLLM_PREFIX_CACHE_RETENTION_INTERVAL=None)),
    "vllm.config": _StandIn(dict(get_current_vllm_config_or_none=lambda: None), _ANY),
    "vllm.platforms": _StandIn(dict(current_platform=types.SimpleNamespace(register_custom_kv_cache_specs=lambda config: None))),
    "vllm.distributed.kv_events": _StandIn(dict(KVCacheEvent=KVCacheEvent, BlockStored=KVCacheEvent, BlockRemoved=KVCacheEvent,
                                                AllBlocksCleared=KVCacheEvent)),
    "vllm.logger": _StandIn(dict(init_logger=_logger)),
    # the adapter hashes with the release's own sha256 (vllm.utils up to 0.11.0, vllm.utils.hashing after)
    "vllm.utils": _StandIn(dict(get_dtype_size=lambda dt: dt.itemsize), also=("sha256",)),
    "vllm.utils.torch_utils": _StandIn(dict(get_dtype_size=lambda dt: dt.itemsize)),
    "vllm.utils.gc_utils": _StandIn(dict(gc_untrack=lambda obj: obj, untracked_list=list)),
    "vllm.utils.collection_utils": _StandIn(),
    "vllm.utils.mem_constants": _StandIn(),
    "vllm.utils.mem_utils": _StandIn(),
    "vllm.multimodal": _StandIn(placeholders=_ANY),  # 0.10.2: MULTIMODAL_REGISTRY, for encoder specs only
    "vllm.multimodal.inputs": _StandIn(placeholders=_ANY),
    "vllm.multimodal.utils": _StandIn(),
    "vllm.pooling_params": _StandIn(placeholders=_ANY),
    "vllm.lora.request": _StandIn(placeholders=_ANY),
    "vllm.sampling_params": _StandIn(dict(SamplingParams=SamplingParams)),
    "vllm.v1.attention.backends.registry": _StandIn(),
    "vllm.v1.engine": _StandIn(placeholders=frozenset({"EngineCoreEvent", "EngineCoreRequest"})),
    "vllm.v1.hisparse.layout": _StandIn(placeholders=_ANY),  # 0.30, 0.31: HiSparse's memory planning, never called here
    "vllm.v1.kv_hints": _StandIn(placeholders=_ANY),
    "vllm.v1.metrics.stats": _StandIn(dict(CacheHitSource=_Real("vllm.v1.metrics.cache_hit_source", "CacheHitSource"))),
    "vllm.v1.structured_output.request": _StandIn(dict(StructuredOutputRequest=Placeholder)),
    "vllm.v1.utils": _StandIn(dict(tensor_data=_cbor_refused)),
}

#: the modules V1's core is: run unchanged
CORE = ("vllm.v1.core.kv_cache_manager", "vllm.v1.core.block_pool", "vllm.v1.core.kv_cache_utils",
        "vllm.v1.core.single_type_kv_cache_manager", "vllm.v1.core.kv_cache_coordinator", "vllm.v1.request",
        "vllm.v1.kv_cache_interface")
#: modules that later releases split out of the core, or added to it: run
#: unchanged where the release has them
OWN = ("vllm.v1.core.kv_cache_metrics", "vllm.v1.kv_cache_spec_registry", "vllm.v1.kv_cache_layout",
       "vllm.v1.hisparse.block_pool", "vllm.utils.math_utils", "vllm.utils.hashing", "vllm.v1.metrics.cache_hit_source",
       "vllm.v1.token_buffer")


def _file(root: Path, module: str) -> Optional[Path]:
    """A module's file in the release, if it has one."""
    where = root.joinpath(*module.split("."))
    return next((p for p in (where.with_suffix(".py"), where / "__init__.py") if p.is_file()), None)


def _plan(root: Path, extra: tuple[str, ...] = (), stand_ins: Optional[dict[str, _StandIn]] = None
          ) -> tuple[list[str], dict[str, Fill], str]:
    """What to load from `root`: the real modules (CORE, the OWN ones the
    release has, and `extra`: the scheduler's, for
    cowcheck.adapters.vllm_scheduler), a stand-in for each module of
    `stand_ins` (default STAND_INS) they import, filled with the names
    they import from it, and the module whose sha256 the adapter hashes
    with."""
    table = stand_ins if stand_ins is not None else STAND_INS
    real = [m for m in CORE + OWN + extra if _file(root, m) is not None]
    wanted: dict[str, set[str]] = {}
    for module in real:
        for name, names in imports(_file(root, module)).items():  # type: ignore[arg-type]
            submodules = {n for n in names if f"{name}.{n}" in table}  # from vllm import envs
            for sub in submodules:
                wanted.setdefault(f"{name}.{sub}", set())
            if name in table and name not in real:
                wanted.setdefault(name, set()).update(names - submodules)
    hashing = "vllm.utils.hashing" if "vllm.utils.hashing" in real else "vllm.utils"
    wanted.setdefault(hashing, set())
    fills: dict[str, Fill] = {name: partial(table[name].fill, root, name, frozenset(names))
                              for name, names in wanted.items() if name not in real}
    return real, fills, hashing


# -- which vLLM ----------------------------------------------------------------

@dataclass
class _Engine:
    """The vLLM whose modules are loaded now (one at a time: they share
    names), `sha256`, the release's own hash function, and the digest of
    the files whose code runs."""
    source: Optional[str] = None
    #: the modules loaded beyond CORE (the scheduler's)
    extra: tuple[str, ...] = ()
    version: str = ""
    mods: dict[str, types.ModuleType] | None = None
    sha256: Any = None
    digest: str = ""


_engine = _Engine()


def _mods() -> dict[str, types.ModuleType]:
    """The loaded release's modules, by name."""
    assert _engine.mods is not None, "no vLLM loaded"
    return _engine.mods


def _seeded(mods: dict[str, types.ModuleType], sha256: Any) -> None:
    """V1's NONE_HASH, the parent of a request's first block hash: drawn at
    import up to 0.9.2 (seeded by PYTHONHASHSEED while the modules load),
    set by `init_none_hash` from 0.10.0; the same in every process, so a
    state copied into another process hashes as it did."""
    kv = mods["vllm.v1.core.kv_cache_utils"]
    if hasattr(kv, "init_none_hash"):
        with environment(PYTHONHASHSEED="0"):
            kv.init_none_hash(sha256)


def engine(source: Optional[str], extra: tuple[str, ...] = (), stand_ins: Optional[dict[str, _StandIn]] = None,
           ref: str = REF) -> _Engine:
    """Load vLLM V1's core, and the `extra` modules (with `stand_ins` for
    what they import: cowcheck.adapters.vllm_scheduler's), from `source`
    (a folder; None: the installed vLLM), unless they are loaded now;
    errors name the adapter `ref`."""
    if _engine.mods is not None and _engine.source == source and extra == _engine.extra \
            and all(sys.modules.get(n) is m for n, m in _engine.mods.items()):
        return _engine  # loaded, and still the modules that own the names (the same set: the digest is of what ran)
    if source is None:
        unload("vllm")
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SpecError(ref, "factory", f"vLLM is not importable: pip install vllm (one of {', '.join(TESTED)}), "
                            f"or set {ENV} to a folder of vLLM's Python sources (an unpacked wheel or a checkout)") from None
        mods = {name: importlib.import_module(name) for name in CORE + extra}
        try:
            own = importlib.import_module("vllm.utils.hashing")
        except ImportError:
            own = importlib.import_module("vllm.utils")
        _seeded(mods, own.sha256)
        files = {Path(m.__file__) for m in (*mods.values(), own) if m.__file__}
        _engine.__init__(None, extra, getattr(sys.modules["vllm"], "__version__", "installed"), mods, own.sha256,  # type: ignore[misc]
                         digest(Path(sys.modules["vllm"].__file__ or ".").parent.parent, files))
        return _engine
    root = Path(source)
    if not (root / "vllm/v1/core/block_pool.py").is_file():
        raise SpecError(ref, "factory", f"{ENV}={source!r} holds no vllm/v1/core/block_pool.py: point it at the folder "
                        "that contains vllm/ (an unpacked wheel or a vLLM checkout)")
    read: set[Path] = set()
    try:
        real, fills, hashing = _plan(root, extra, stand_ins)
        with environment(PYTHONHASHSEED="0"):  # 0.9's NONE_HASH: the same in every process
            mods = load(root, "vllm", real, fills, CORE + extra + (hashing,), read)
        sha256 = mods[hashing].sha256
        _seeded(mods, sha256)
    except SourceError as err:
        raise SpecError(ref, "factory", f"vLLM {release(root, 'vllm')} from {source}: {err}") from None
    _engine.__init__(source, extra, release(root, "vllm"), mods, sha256, digest(root, read))  # type: ignore[misc]
    return _engine


def source() -> Optional[str]:
    """The folder the adapter loads vLLM from: $COWCHECK_VLLM_SOURCE (or,
    while a counterexample is replayed, the folder it records), or None
    for the installed vLLM."""
    return folder(ENV)


# -- V1's calls, as each release spells them -------------------------------------

@lru_cache(maxsize=256)
def _parameters(fn: Any) -> Any:
    """`fn`'s parameters: the scheduler adapter builds a ModelRunnerOutput
    at every output, and reading a signature costs more than the call."""
    return inspect.signature(fn).parameters


def _call(fn: Any, known: dict[str, Any]) -> Any:
    """`fn` called with the values in `known` of the parameters it has (the
    others keep their defaults): V1's constructors gain and lose
    parameters from release to release; one it requires that the adapter
    does not know is one line naming it."""
    params = _parameters(fn)
    missing = [n for n, p in params.items() if n not in known and p.default is p.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise SpecError(REF, "factory", f"vLLM {_engine.version}: {getattr(fn, '__qualname__', fn)} requires "
                        f"{', '.join(missing)}, which the adapter does not know (a new release?)")
    return fn(**{n: v for n, v in known.items() if n in params})




def _request(rid: str, ids: list[int], block_size: int) -> Any:
    """A V1 Request; from 0.10.1 it hashes its own blocks (`block_hasher`)."""
    return _call(_mods()["vllm.v1.request"].Request, dict(
        request_id=rid, prompt_token_ids=ids, sampling_params=SamplingParams(), pooling_params=None, eos_token_id=None,
        multi_modal_inputs=None, multi_modal_kwargs=None, multi_modal_hashes=None, multi_modal_placeholders=None,
        mm_features=None, lora_request=None, arrival_time=0.0, block_hasher=BlockHasher(block_size)))




def _cached_keys(pool: Any) -> list[tuple[Any, int]]:
    """(key, V1 block id) for every block the cache map serves."""
    cache = pool.cached_block_hash_to_block
    if isinstance(cache, dict):  # up to 0.10.2: {key: {id: block}}
        return [(key, bid) for key, blocks in cache.items() for bid in blocks]
    dups = getattr(cache, "_dup_ids", {})  # 0.34: ids, several under a key kept apart
    out: list[tuple[Any, int]] = []
    for key, held in cache._cache.items():  # from 0.11.0: a BlockHashToBlockMap
        if key in dups:
            out.extend((key, bid) for bid in dups[key])
        elif isinstance(held, dict):  # {id: block} under a key cached by several blocks
            out.extend((key, bid) for bid in held)
        else:
            out.append((key, held if isinstance(held, int) else held.block_id))
    return out


def _block_hash(key: Any) -> Any:
    """A cache key's block hash: a field of the key up to 0.10.2, its bytes
    with the group id cut off from 0.11.0."""
    return key.block_hash if hasattr(key, "block_hash") else _mods()["vllm.v1.core.kv_cache_utils"].get_block_hash(key)


def _request_hashes(request: Any) -> list[Any]:
    """The block hashes a request carries (from 0.10.1; none before)."""
    return [bytes(h) if isinstance(h, (bytes, bytearray, memoryview)) else h for h in getattr(request, "block_hashes", ())]




class BlockHasher:
    """V1's `get_request_block_hasher(B, sha256)` (0.10.1 on), as an
    object: the closure it returns does not pickle, and a Request keeps it."""

    def __init__(self, block_size: int):
        self.block_size = block_size

    def __call__(self, request: Any) -> Any:
        hasher = _mods()["vllm.v1.core.kv_cache_utils"].get_request_block_hasher(self.block_size, _engine.sha256)
        return hasher(request)





# -- V1's block pool as cowcheck sees it -------------------------------------------

class V1Pool:
    """What both adapters read of V1's pool, over `self.manager` (a
    KVCacheManager) and `self.requests` (V1 Requests by name): the token
    names <-> ids, the tokens behind each cache key (`key_tokens`), and the
    observers of the GPU pool with V1's null block 0 renumbered away. The
    subclass sets `source`, `B`, `manager`, `long_names` and `key_tokens`."""

    source: Optional[str]
    B: int
    manager: Any
    requests: dict[str, Any]
    #: names longer than _SHORT bytes, by id (the others are their own id)
    long_names: dict[int, str]
    #: 0.33+: a block hash's own tokens, for the keys the cache holds
    key_tokens: dict[bytes, tuple[int, ...]]

    def version(self) -> str:
        """The engine code this adapter runs, recorded in its counterexamples."""
        return f"vLLM {_engine.version}"

    def code(self) -> dict[str, Optional[str]]:
        """Which tree of the release: its folder (None: the installed vLLM)
        and the digest of the files whose code runs."""
        return {"source": str(Path(self.source).resolve()) if self.source else None, "digest": _engine.digest}

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

    def _learn(self) -> None:
        """Remember the tokens of every block hash a live request has, and
        forget those of keys the cache no longer holds (from 0.11.0, whose
        hashes are bare bytes; before, a hash carries its tokens). A hash
        is read against the request's drafts too: V1 hashes verified tokens
        only, but a tree that hashes a draft (the bug verified-only-cached
        finds) must be described, not refused."""
        for request in self.requests.values():
            ids = list(request.all_token_ids) + list(request.spec_token_ids)
            for i, h in enumerate(_request_hashes(request)):
                if not hasattr(h, "token_ids"):
                    self.key_tokens.setdefault(h, tuple(ids[i * self.B:(i + 1) * self.B]))
        if self.key_tokens:
            live = {bytes(_block_hash(key)) for pool in self._pools() for key, _ in _cached_keys(pool)}
            live |= {h for r in self.requests.values() for h in _request_hashes(r)}
            self.key_tokens = {h: t for h, t in self.key_tokens.items() if h in live}

    def _pools(self) -> list[Any]:
        """The block pools whose cache keys the adapter describes (the
        scheduler adapter's host pool besides)."""
        return [self.manager.block_pool]

    # observers, from V1's block pool
    def _block(self, bid: int, where: str) -> int:
        """cowcheck's block for V1's block `bid`; a V1 that puts what is not
        one of its pool's blocks there (its null block 0, a free queue's
        sentinel) is the engine's own fault, reported as such (an
        exception after its call: allocator-error), not as a bad adapter."""
        if not 1 <= bid < len(self.manager.block_pool.blocks):
            raise AssertionError(f"V1 put block {bid} in {where}, which is not one of its pool's blocks "
                                 f"1 to {len(self.manager.block_pool.blocks) - 1}")
        return bid - 1

    def refcount(self, block: int) -> int:
        return int(self.manager.block_pool.blocks[block + 1].ref_cnt)

    def free_blocks(self) -> list[int]:
        return [self._block(b.block_id, "its free queue") for b in self.manager.block_pool.free_block_queue.get_all_free_blocks()]

    def cached(self) -> dict[int, tuple[str, ...]]:
        """Every block the cache map would serve as a hit, with the tokens
        of its own slots that its key names."""
        return {self._block(bid, "its cache map"): self._key_names(key)
                for key, bid in _cached_keys(self.manager.block_pool)}

    def _key_names(self, key: Any) -> tuple[str, ...]:
        """The token names of a key's own block: carried by its hash up to
        0.10.2, learned from the request that keyed it after. A key that no
        request ever hashed (a tree that writes keys of its own) names
        `UNKNOWN` tokens, which no block's content matches: the check
        reports the key as wrong instead of the observer failing."""
        h = _block_hash(key)
        if hasattr(h, "token_ids"):
            ids: tuple[int, ...] | None = tuple(h.token_ids)
        else:
            ids = self.key_tokens.get(bytes(h))
        if ids is None:
            return (UNKNOWN,) * self.B
        return tuple(self._name(t) for t in ids)
