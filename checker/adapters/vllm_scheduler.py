"""vLLM V1's own `Scheduler` (and `AsyncScheduler`), with a P/D KV connector
written for the harness, as an adapter for the scheduler harness
(docs/how-to/scheduler-code.md).

    cowcheck check SCENARIO --scheduler cowcheck.adapters.vllm_v1:scheduler

`vllm/v1/core/sched/` runs unchanged, loaded as the allocator adapter
loads V1's core (cowcheck.adapters.vllm_core: `engine`, `_plan`, its
`STAND_INS`, and the modules below with theirs), from
`COWCHECK_VLLM_SOURCE` or an installed vLLM; no torch. The config is a
small stand-in (`_config`) with what the scheduler reads: one
full-attention group of P + 1 blocks (V1's null block 0 is renumbered
away, as in the allocator adapter), prefix caching on, no chunking limit
that the scenarios reach, a KV transfer config whose connector is
`PDConnector`.

The calls: `add` is `Request` + `add_request` (`max_tokens` is the appends
+ 1: the prefill samples the first token, the step that computes the
request's last position samples one more, as cowcheck's `output`
reports); `schedule` is `schedule()`, its kernels read from the
`SchedulerOutput` (each scheduled request computes its last
`num_scheduled_tokens` positions) and its transfers from the connector's
metadata; `output` is `update_from_output` with a `ModelRunnerOutput`
(the sampled tokens) and a `KVConnectorOutput` (`finished_recving` and
`finished_sending` per request once all its transfers are reported; a
failed recv as NIXL reports it: `finished_recving`, the request's recv
blocks in `invalid_block_ids`, and `failed_recving` from 0.30.0);
`abort` is
`finish_requests(id, FINISHED_ABORTED)`.

`PDConnector` keeps vLLM's KV connector contract as NIXL does, so that it
is vLLM's *scheduler* code around it that is checked: a consumer
(`do_remote_prefill`) loads its whole prompt asynchronously
(`get_num_new_matched_tokens` returns it with `load_kv_async`), one recv
per block launched by the step that allocated them
(`update_state_after_alloc`, `build_connector_meta`); a producer
(`do_remote_decode`) that finishes by length keeps its blocks
(`request_finished` returns `delay_free_blocks`), one send per block
launched by the next step, freed by the scheduler at `finished_sending`.

`OffloadConnector` is vLLM's SimpleCPUOffloadConnector on the
scheduler's side: each call delegated to the real
`SimpleCPUOffloadScheduler` (vllm/v1/simple_kv_offload/manager.py, eager
or lazy), whose own host BlockPool the host observers read; its loads and
stores are the step's transfers, a load event reported in
`finished_recving`, a store event in the worker metadata's
`completed_store_events`.

`OffloadingConnector` is vLLM's OffloadingConnector on the scheduler's
side: the real `OffloadingConnectorScheduler` over the real
`CPUOffloadingManager` (0.34.0's `kv_connector/v1/offloading/` and
`v1/kv_offload/`), whose chunks the host observers read; each block of a
load or store job is one transfer, the step's `jobs_to_flush` the plan's
`waits`, a job's completion reported in `completed_jobs`.

Configurations (factories): `scheduler`, the Scheduler (one plan in
flight); `async_scheduler`, the AsyncScheduler (two: vLLM sets
`defer_block_free` for a consumer with two batches in flight);
`async_scheduler_no_defer`, the same with `defer_block_free` off (vLLM
before 45357's deferred frees); `offload_eager`, `offload_lazy` and their
`_async` forms, SimpleCPUOffload in place of the P/D connector;
`offloading` and `offloading_async`, the OffloadingConnector.

States are keyed by the exact pickle of the scheduler (no canonical
snapshot): vLLM's scheduler keeps counters and queues a snapshot would
have to list in full, and a snapshot would not spare the pickle that
copies each state. What the scheduler only reads (the config and the
KVCacheConfig) is shared and pickled by reference (`by_reference`).

One idea, over 500 lines: the stand-ins, the P/D connector and the two
offloading connectors' delegation all exist to run vllm/v1/core/sched/
unchanged, and each is a few dozen lines that only make sense beside the
others."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional

from cowcheck.adapters.sources import dumps, restore
from cowcheck.adapters.vllm_core import (STAND_INS, KVCacheEvent, Placeholder, SamplingParams, V1Pool, _ANY, _Real, _StandIn,
                                        DType, ENV, _cached_keys, _call, _engine, _cbor_refused, _mods, _request, engine, source)
from cowcheck.model.errors import SpecError

REF = "cowcheck.adapters.vllm_v1:scheduler"
#: the scheduler's modules, run unchanged beside V1's core
SCHEDULER = ("vllm.v1.core.sched.scheduler", "vllm.v1.core.sched.async_scheduler", "vllm.v1.core.sched.interface",
             "vllm.v1.core.sched.output", "vllm.v1.core.sched.request_queue", "vllm.v1.core.sched.utils",
             "vllm.v1.core.encoder_cache_manager")
#: SimpleCPUOffloadScheduler's modules, where the release has them
OFFLOAD = ("vllm.v1.simple_kv_offload.manager", "vllm.v1.simple_kv_offload.metadata")
#: the releases whose scheduler this adapter drives (tests/test_adapters_scheduler.py): the newest, for
#: each fix of FIXES the last release without it and the first with it, and every release between 0.24.0 and 0.34.0
BETWEEN = ("0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
TESTED = ("0.15.1", "0.16.0", "0.23.0", "0.24.0", *BETWEEN, "0.33.0", "0.34.0")


class Fix(NamedTuple):
    """One of vLLM's fixes the transfer section cites, and where it shipped:
    the scenario that shows the bug, the configuration (a factory of this
    module) it runs under, the last release without the fix and the first
    with it (read from the releases' sources)."""
    scenario: str
    factory: str
    without: str
    first: str


#: the fixes by vLLM pull request (docs/how-to/scheduler-code.md, "Releases tested")
FIXES = {
    # finish_requests delays the free of a request aborted in WAITING_FOR_REMOTE_KVS
    "32255": Fix("pd-consumer-abort", "scheduler", "0.15.1", "0.16.0"),
    # AsyncScheduler's defer_block_free and deferred_frees
    "45357": Fix("pd-consumer-ahead", "async_scheduler", "0.23.0", "0.24.0"),
    # the worker's compute-done event before a store (simple_kv_offload/worker.py, no scheduler change)
    "46278": Fix("offload-eager-store", "offload_eager_async", "0.23.0", "0.24.0"),
}


# -- stand-ins for what the scheduler imports beyond V1's core -------------------

class _NullPublisher:
    """KV events are off: the publisher V1 makes then."""

    def publish(self, events: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None


class EventPublisherFactory:
    @staticmethod
    def create(config: Any, data_parallel_rank: int = 0) -> _NullPublisher:
        return _NullPublisher()


class KVConnectorFactory:
    """The scheduler makes its connector through this: the one the
    config's kv_transfer_config carries (a PDConnector)."""

    @staticmethod
    def create_connector(config: Any, role: Any, kv_cache_config: Any = None) -> Any:
        return config.kv_transfer_config.connector


class SupportsHMA:
    """vLLM's marker for a connector that takes every KV cache group's
    blocks (request_finished_all_groups): SimpleCPUOffload's is one."""


_PLACES = _StandIn(placeholders=_ANY)
STAND_INS_SCHEDULER: dict[str, _StandIn] = {
    **STAND_INS,
    "vllm.distributed.kv_events": _StandIn(dict(KVCacheEvent=KVCacheEvent, BlockStored=KVCacheEvent, BlockRemoved=KVCacheEvent,
                                                AllBlocksCleared=KVCacheEvent, KVEventBatch=KVCacheEvent,
                                                EventPublisherFactory=EventPublisherFactory, MEDIUM_CPU="CPU",
                                                MEDIUM_STORAGE="STORAGE")),
    # SimpleCPUOffloadScheduler's: the release's own small pieces, its stats for log_stats only
    "vllm.distributed.kv_transfer.kv_connector.utils": _StandIn(),
    "vllm.v1.simple_kv_offload.sizing": _StandIn(),
    "vllm.v1.simple_kv_offload.metrics": _StandIn(placeholders=frozenset({"SimpleCPUOffloadStats"})),
    "vllm.distributed.kv_transfer.kv_connector.factory": _StandIn(dict(KVConnectorFactory=KVConnectorFactory)),
    # KVConnectorRole is the release's enum; the base class (it imports torch) is not needed: PDConnector keeps its contract
    "vllm.distributed.kv_transfer.kv_connector.v1": _StandIn(
        dict(KVConnectorRole=_Real("vllm.distributed.kv_transfer.kv_connector.v1.base", "KVConnectorRole"),
             SupportsHMA=SupportsHMA), frozenset({"KVConnectorBase_V1"})),
    "vllm.distributed.kv_transfer.kv_connector.v1.base": _StandIn(
        dict(SupportsHMA=SupportsHMA),
        placeholders=frozenset({"KVConnectorMetadata", "KVConnectorWorkerMetadata", "KVConnectorBase_V1"}),
        also=("KVConnectorRole",)),
    # the release's KVConnectorOutput and ModelRunnerOutput, without numpy and torch (annotations only)
    "vllm.v1.outputs": _StandIn(dict(np=types.SimpleNamespace(ndarray=object), torch=types.SimpleNamespace(Tensor=object)),
                                frozenset({"DraftTokenIds"})),
    "vllm.v1.utils": _StandIn(dict(tensor_data=_cbor_refused, record_function_or_nullcontext=contextlib.nullcontext)),
    "vllm.utils.gc_utils": _StandIn(dict(gc_untrack=lambda obj: obj, untracked_list=list,
                                         untrack_long_lists=lambda *args, **kwargs: None)),
    "vllm.sampling_params": _StandIn(dict(SamplingParams=SamplingParams), frozenset({"RepetitionDetectionParams"})),
    "vllm.envs": _StandIn(dict(VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=False, VLLM_PREFIX_CACHE_RETENTION_INTERVAL=None,
                               VLLM_XPU_PP_MICROBATCH=False, VLLM_USE_V2_MODEL_RUNNER=False)),
    "vllm.platforms": _StandIn(dict(current_platform=types.SimpleNamespace(
        register_custom_kv_cache_specs=lambda config: None, is_xpu=lambda: False))),
    "vllm.v1.engine": _StandIn(placeholders=frozenset({"EngineCoreEvent", "EngineCoreRequest", "EngineCoreEventType",
                                                       "EngineCoreOutput", "EngineCoreOutputs"})),
    # older releases: a decorator that marks classes for vLLM's own API linter; routed experts (the config leaves them off)
    "vllm._bc_linter": _StandIn(dict(bc_linter_include=lambda obj=None, **kwargs: obj if obj is not None else (lambda o: o))),
    "vllm.model_executor.layers.fused_moe.routed_experts_capturer": _PLACES,
    # older releases ask the registry (0.34, the model config) whether inputs may be multimodal
    "vllm.multimodal": _StandIn(dict(MULTIMODAL_REGISTRY=types.SimpleNamespace(
        supports_multimodal_inputs=lambda config: False, get_encdec_max_encoder_len=lambda config: 0)),
                                _ANY),
    # for annotations, isinstance, stats and features the config leaves off
    **{name: _PLACES for name in (
        "vllm.compilation.cuda_graph", "vllm.config.ec_manager_config", "vllm.v1.structured_output.utils", "vllm.distributed.aux_output_connector.connector",
        "vllm.distributed.ec_transfer.ec_connector.base", "vllm.distributed.ec_transfer.ec_connector.factory",
        "vllm.distributed.ec_transfer.ec_connector.metrics", "vllm.distributed.kv_transfer.kv_connector.v1.metrics",
        "vllm.multimodal.encoder_budget", "vllm.outputs", "vllm.v1.metrics.perf",
        "vllm.v1.spec_decode.dynamic.utils", "vllm.v1.spec_decode.metrics", "vllm.v1.structured_output")},
}


#: the folder of vLLM's sources the tests fetch, relative to a checkout's
#: root: the scheduler's folder where COWCHECK_VLLM_SOURCE is unset
DEFAULT = Path("build") / "engines" / f"vllm-{TESTED[-1]}"


def folder() -> Optional[str]:
    """The folder the adapter loads vLLM from: $COWCHECK_VLLM_SOURCE (or a
    replayed counterexample's), else build/engines/vllm-0.34.0 where the
    working folder has it (a checkout whose tests fetched it: the shipped
    sched-vllm-* scenarios run there), else None (the installed vLLM)."""
    given = source()
    if given is None and (DEFAULT / "vllm").is_dir():
        return str(DEFAULT)
    return given


def unavailable() -> Optional[str]:
    """Why no vLLM can be loaded here (None: one can): `cowcheck check`
    skips a folder's scenarios of this adapter then, and counts them."""
    if folder() is not None or importlib.util.find_spec("vllm") is not None:
        return None
    return (f"no vLLM sources: set {ENV} to a folder of vLLM's Python sources, or fetch {DEFAULT} "
            f"(python -c 'from cowcheck.adapters.sources import fetch; fetch(\"vllm\", \"{TESTED[-1]}\")')")


def load(source: Optional[str]) -> Any:
    """V1's core and its scheduler, from `source` (None: the installed vLLM);
    called by every unpickling of a state's scheduler, so what to load is
    found once per folder (`_modules`)."""
    return engine(source, _modules(source), STAND_INS_SCHEDULER, REF)


@functools.lru_cache(maxsize=64)
def _modules(source: Optional[str]) -> tuple[str, ...]:
    """The scheduler's modules and SimpleCPUOffload's where the release has them."""
    has = (lambda m: (Path(source).joinpath(*m.split(".")).with_suffix(".py")).is_file()) if source else \
        (lambda m: importlib.util.find_spec(m.rpartition(".")[0]) is not None)
    return SCHEDULER + tuple(m for m in OFFLOAD if has(m))


# -- vLLM's OffloadingConnectorScheduler (vllm/v1/kv_offload/) -------------------------------------------------

#: OffloadingConnectorScheduler's modules and the real CPUOffloadingManager's (0.34.0's layout), run unchanged;
#: the LRU policy is imported by name at run time (CachePolicyFactory)
OFFLOADING = tuple(f"vllm.distributed.kv_transfer.kv_connector.v1.offloading.{m}"
                   for m in ("scheduler", "common", "config", "events", "metrics")) + \
    tuple(f"vllm.v1.kv_offload.{m}" for m in ("base", "config", "factory", "cpu.spec", "cpu.manager", "cpu.common",
                                             "cpu.policies.base", "cpu.policies.factory", "cpu.policies.lru"))


class Struct:
    """msgspec.Struct: the offload events' payload class (events are off)."""

    def __init_subclass__(cls, **options: Any) -> None:
        return None

    def __init__(self, *args: Any, **fields: Any):
        self.__dict__.update(fields)


class SharedOffloadRegion:
    """The worker's shared host region: the spec reads its alignment only."""
    BLOCK_SIZE_ALIGNMENT = 1


#: what they import beyond the scheduler's: the worker side (torch, CUDA, triton) as placeholders, msgspec,
#: typing_extensions' `override` as what it is (the identity), and the connector stats' base class, the release's own
STAND_INS_OFFLOADING: dict[str, _StandIn] = {
    **STAND_INS_SCHEDULER,
    "typing_extensions": _StandIn(dict(override=lambda method: method), _ANY),
    "msgspec": _StandIn(dict(Struct=Struct)),
    "vllm.v1.kv_offload.cpu.shared_offload_region": _StandIn(dict(SharedOffloadRegion=SharedOffloadRegion), _ANY),
    "vllm.v1.kv_offload.cpu.gpu_worker": _PLACES,
    "vllm.v1.kv_offload.cpu.host_register": _PLACES,
    "vllm.distributed.kv_transfer.kv_connector.v1.metrics": _StandIn(
        placeholders=frozenset({"KVConnectorPromMetrics", "KVConnectorPrometheus", "PromMetric", "PromMetricT"})),
}


#: the clock the OffloadingConnectorScheduler reads (its lookup-delay stats and a reset's warning only): stopped,
#: so that the same calls give the same scheduler (a state is its pickle)
STOPPED_CLOCK = types.SimpleNamespace(monotonic=lambda: 0.0)


def load_offloading(source: Optional[str]) -> Any:
    """`load`, and the OffloadingConnectorScheduler's modules besides, its clock stopped."""
    loaded = engine(source, _modules(source) + OFFLOADING, STAND_INS_OFFLOADING, REF)
    assert loaded.mods is not None
    setattr(loaded.mods[OFFLOADING[0]], "time", STOPPED_CLOCK)
    return loaded


def offloading_connector_scheduler(pool: int, block_size: int, host_pool: int, batches: int = 1) -> Any:
    """vLLM's `OffloadingConnectorScheduler` over the real
    `CPUOffloadingManager` with `host_pool` chunks of one block, for the
    scheduler's config of P + 1 blocks (and `batches` in flight): what
    `OffloadingConnector` (the `offloading` configurations) delegates to."""
    load_offloading(folder())
    mods = _mods()
    conf = mods["vllm.v1.kv_offload.config"]
    config, kv_config = constants(Shape(pool, block_size, batches, True))[:2]
    offloading = _call(conf.OffloadingConfig, dict(
        groups=(conf.OffloadingGroupConfig(tokens_per_block=block_size, layer_names=("layer.0",), group_id=0),),
        worker_kv_bytes_per_block=1, enable_kv_cache_events=False, engine_id="cowcheck",
        extra_config={"cpu_bytes_to_use": host_pool},       # one byte a block, one block a chunk: host_pool chunks
        model=conf.OffloadingModelConfig(name="cowcheck", dtype="float16"),
        cache=conf.OffloadingCacheConfig(tokens_per_hash=block_size, blocks_per_chunk=1),
        parallel=conf.OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                               data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                                               is_parallelism_agnostic=False)))
    spec = mods["vllm.v1.kv_offload.cpu.spec"].CPUOffloadingSpec(offloading)
    scheduler = mods["vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"]
    return _call(scheduler.OffloadingConnectorScheduler, dict(spec=spec, vllm_config=config, kv_cache_config=kv_config))


@dataclass
class StopParams(SamplingParams):
    """SamplingParams with what the scheduler's `check_stop` reads: no stop
    token, so a request stops at max_tokens."""
    eos_token_id: Optional[int] = None
    stop_token_ids: Optional[list[int]] = None
    min_tokens: int = 0
    repetition_detection: Any = None
    ignore_eos: bool = False                    # older releases
    logprobs: Optional[int] = None              # older releases
    num_logprobs: Optional[int] = None


# -- the config ---------------------------------------------------------------------

class Settings(types.SimpleNamespace):
    """One of VllmConfig's parts: the fields the scheduler reads."""


class NoGrammar:
    """StructuredOutputManager without structured outputs: every token accepted."""

    @staticmethod
    def accept_tokens(request: Any, token_ids: Any) -> bool:
        return True

    @staticmethod
    def should_advance(request: Any, **tokens: Any) -> bool:
        """Older releases: whether a request's grammar takes its tokens
        (none has one; 0.27 passes new_token_ids)."""
        return False


class _NoEncoderCacheManager:
    @staticmethod
    def get_encoder_cache_manager_obj() -> None:
        return None


@dataclass
class TransferConfig:
    """KVTransferConfig: the role and the connector object."""
    connector: Any
    is_kv_consumer: bool = True
    is_kv_producer: bool = True
    kv_load_failure_policy: str = "recompute"


def _config(blocks: int, block_size: int, batches: int, connector: Any) -> Settings:
    long = 1 << 16
    return Settings(
        model_config=Settings(uses_mrope=False, uses_xdrope=False, is_encoder_decoder=False, max_model_len=long, runner_type="generate",
                              is_diffusion=False, supports_multimodal_inputs=False, return_sampling_mask=False,
                              enable_return_routed_experts=False),
        scheduler_config=Settings(max_num_seqs=16, max_num_active_seqs=None, max_num_scheduled_tokens=None,
                                  max_num_batched_tokens=long, long_prefill_token_threshold_adaptive=False,
                                  long_prefill_token_threshold=0, policy="fcfs", prefill_schedule_interval=1,
                                  scheduler_reserve_full_isl=False, cache_aware_admission_window=0,
                                  cache_aware_admission_threshold=0, enable_chunked_prefill=True,
                                  disable_chunked_mm_input=False, max_num_inflight_kv_loads=None,
                                  async_scheduling=batches > 1, watermark=0.0),
        cache_config=Settings(num_gpu_blocks=blocks, enable_prefix_caching=True, block_size=block_size,
                              mamba_cache_mode="none", enable_mamba_shared_prefix_checkpoint=False,
                              enable_mamba_fine_grained_prefix_cache=False,
                              simple_cpu_offload_num_blocks=None, prefix_cache_retention_interval=None),
        parallel_config=Settings(pipeline_parallel_size=1, world_size=1, data_parallel_size=1, data_parallel_index=0,
                                 decode_context_parallel_size=1, prefill_context_parallel_size=1),
        observability_config=Settings(per_request_spec_decode_metrics="none", kv_cache_metrics=False,
                                      kv_cache_metrics_sample=0.0, enable_mfu_metrics=False,
                                      enable_logging_iteration_details=False),
        kv_transfer_config=TransferConfig(connector),
        lora_config=None, kv_events_config=None, ec_transfer_config=None, speculative_config=None,
        ec_manager_config=_NoEncoderCacheManager(), aux_output_config=Settings(enabled=False), watermark_config=None,
        is_mm_encoder_only=False, is_encoder_only=False, max_concurrent_batches=batches, max_in_flight_tokens=None, num_speculative_tokens=0,
        num_lookahead_tokens=0, num_prefill_lookahead_tokens=0, num_hash_lookahead_tokens=0,
        use_v2_model_runner=False)


# -- what a scheduler only reads: shared, and pickled by reference -------------------

class Shape(NamedTuple):
    """What the config and the KVCacheConfig of an adapter depend on: P,
    B, the batches in flight, and whether SimpleCPUOffload needs the KV
    tensors' layout."""
    pool: int
    block_size: int
    batches: int
    offload: bool


class Constants(NamedTuple):
    """The config and KVCacheConfig of a Shape, which vLLM's scheduler,
    KVCacheManager and SimpleCPUOffloadScheduler read and never change
    after construction; `parts` names each of their objects (the config's
    parts by attribute), for `by_reference`; `iface`, the loaded
    kv_cache_interface they were built with."""
    config: Settings
    kv_config: Any
    parts: dict[int, str]
    iface: types.ModuleType


_constants: dict[Shape, Constants] = {}


def constants(shape: Shape) -> Constants:
    """The shape's config and KVCacheConfig, built once per loaded release."""
    iface = _mods()["vllm.v1.kv_cache_interface"]
    known = _constants.get(shape)
    if known is not None and known.iface is iface:
        return known
    pool, block_size, batches, offload = shape
    spec = _call(iface.FullAttentionSpec, dict(block_size=block_size, num_kv_heads=1, head_size=1,
                                               dtype=DType("float16", 2), use_mla=False))
    tensors = [_call(iface.KVCacheTensor, dict(size=pool + 1, layers=["layer.0"], shared_by=["layer.0"], layer_stride=0,
                                               block_stride=1, offset=0))] if offload else []
    kv_config = _call(iface.KVCacheConfig, dict(num_blocks=pool + 1, kv_cache_tensors=tensors,
                                                kv_cache_groups=[iface.KVCacheGroupSpec(["layer.0"], spec)]))
    config = _config(pool + 1, block_size, batches, None)
    parts = {id(value): name for name, value in vars(config).items() if isinstance(value, (Settings, TransferConfig))}
    _constants[shape] = Constants(config, kv_config, {**parts, id(config): "config", id(kv_config): "kv_config"}, iface)
    return _constants[shape]


def constant(shape: Shape, name: str) -> Any:
    """One of a shape's constants, unpickled (built first in a fresh process)."""
    known = constants(shape)
    return known.kv_config if name == "kv_config" else known.config if name == "config" else getattr(known.config, name)


def by_reference(shape: Shape) -> dict[type, Any]:
    """Reducers that pickle the shape's constants as a reference (a state's
    pickle is a third the size: the config is most of a scheduler's);
    any other object of their types pickles whole."""
    known = constants(shape)

    def reduce(obj: Any) -> Any:
        name = known.parts.get(id(obj))
        return (constant, (shape, name)) if name is not None else obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    return {Settings: reduce, TransferConfig: reduce, type(known.kv_config): reduce}


# -- the harness's P/D connector -----------------------------------------------------

@dataclass
class PDMeta:
    """KVConnectorMetadata for one step: the transfers it launches,
    (id, kind, request, V1 block, index)."""
    transfers: list[tuple[str, str, str, int, int]] = field(default_factory=list)


class PDConnector:
    """A P/D KV connector to vLLM's scheduler-side connector contract
    (KVConnectorBase_V1, NIXL's choices): recvs for a consumer's prompt,
    sends for a finished producer's blocks, each request reported once all
    its transfers of a kind are done."""

    def __init__(self, block_size: int):
        self.B = block_size
        #: transfers decided since the last build_connector_meta
        self.pending: list[tuple[str, str, str, int, int]] = []
        #: per request and kind, the ids not yet reported
        self.unreported: dict[tuple[str, str], set[str]] = {}
        #: V1 block of each transfer, for invalid_block_ids
        self.block_of: dict[str, int] = {}
        #: per request, the V1 blocks of its recvs, and whether one of them failed
        self.recv_blocks: dict[str, list[int]] = {}
        self.recv_failed: set[str] = set()

    # the contract's properties
    supports_divergent_local_hybrid_hits = False
    requires_kv_delivery = True

    def bind_kv_cache_manager(self, manager: Any) -> None:
        return None

    def bind_gpu_block_pool(self, pool: Any) -> None:
        """Older releases bind the pool itself (0.34, the manager)."""
        return None

    def on_new_request(self, request: Any) -> None:
        return None

    def may_load_async(self, request: Any) -> bool:
        params = request.kv_transfer_params
        return bool(params and params.get("do_remote_prefill"))

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        """A consumer's whole prompt is remote (NIXL: the prompt's length
        less what is computed locally), loaded asynchronously."""
        if self.may_load_async(request):
            count = len(request.prompt_token_ids) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def get_loaded_kv_cache_group_ids(self, request: Any) -> tuple[int, ...]:
        return (0,)

    def get_external_cache_hit_sources(self, request: Any, num_external_tokens: int) -> dict[Any, int]:
        return {}

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        """One recv per block that holds a remote token, launched by this
        step; the request loads once (NIXL clears do_remote_prefill). A
        block of a local prefix hit is keyed already and is never received
        into: as NIXL's `get_unhashed_block_ids`, the recvs go to the
        blocks after the request's leading keyed ones (its local hit)."""
        if not (num_external_tokens and self.may_load_async(request)):
            return
        request.kv_transfer_params["do_remote_prefill"] = False
        ids = blocks.get_block_ids()[0]
        fresh = set(blocks.get_unhashed_block_ids()) if hasattr(blocks, "get_unhashed_block_ids") else set(ids)
        local = next((i for i, bid in enumerate(ids) if bid in fresh), len(ids)) * self.B
        local = max(local, request.num_computed_tokens)
        first, last = local // self.B, (local + num_external_tokens - 1) // self.B
        for index in range(first, min(last, len(ids) - 1) + 1):
            self._launch("recv", request.request_id, ids[index], index)

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, Optional[dict[str, Any]]]:
        """A producer that finished by length keeps its blocks until its
        sends are reported (delay_free_blocks); every other request frees them."""
        params = request.kv_transfer_params
        status = _mods()["vllm.v1.request"].RequestStatus
        if not (params and params.get("do_remote_decode")) or request.status != status.FINISHED_LENGTH_CAPPED:
            return False, None
        ids = block_ids[0] if block_ids and isinstance(block_ids[0], (list, tuple)) else block_ids
        for index, bid in enumerate(ids):
            self._launch("send", request.request_id, bid, index)
        return True, {"do_remote_prefill": True, "remote_block_ids": list(ids)}

    def request_finished_all_groups(self, request: Any, block_ids: Any) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.request_finished(request, block_ids)

    def register_finished_partial_tail(self, request: Any, block_ids: Any, partial_tail_offloads: Any) -> bool:
        return False

    def build_connector_meta(self, scheduler_output: Any) -> PDMeta:
        meta, self.pending = PDMeta(self.pending), []
        return meta

    def update_connector_output(self, connector_output: Any) -> None:
        return None

    def take_events(self) -> tuple[()]:
        return ()

    def get_kv_connector_stats(self) -> None:
        return None

    def has_pending_block_frees(self) -> bool:
        return False

    def has_pending_push_work(self) -> bool:
        return False

    # the worker's side, played by cowcheck: what it launches and reports
    def transfers(self, meta: Any, adapter: "VllmScheduler") -> list[tuple[str, str, str, int, Optional[int], int, bool]]:
        """The step's transfers in the harness's shape."""
        return [(tid, kind, rid, adapter._block(bid, f"the {kind} {tid}"), None, index, False)
                for tid, kind, rid, bid, index in meta.transfers]

    def _launch(self, kind: str, rid: str, bid: int, index: int) -> None:
        tid = f"{rid}-{kind}{index}"
        self.pending.append((tid, kind, rid, bid, index))
        self.unreported.setdefault((rid, kind), set()).add(tid)
        self.block_of[tid] = bid
        if kind == "recv":
            self.recv_blocks.setdefault(rid, []).append(bid)

    def report(self, done: list[tuple[str, bool]], output_type: Any) -> Any:
        """The KVConnectorOutput for these completions, as NIXL's worker
        builds it: a request's recvs or sends finished once all of them
        are. A request one of whose recvs failed is finished too (so the
        scheduler takes it out of WAITING_FOR_REMOTE_KVS), and then all
        its recv blocks are in `invalid_block_ids` (NIXL's
        `get_block_ids_with_load_errors`: the request's local blocks) and,
        from 0.30.0 where KVConnectorOutput has the field, the request in
        `failed_recving`. A failed send is finished as a successful one:
        NIXL's producer learns nothing of a read that failed, and its
        lease frees the blocks."""
        finished: dict[str, set[str]] = {"recv": set(), "send": set()}
        invalid: set[int] = set()
        failed: set[str] = set()
        for tid, ok in done:
            rid, kind = next((r, k) for (r, k), ids in self.unreported.items() if tid in ids)
            self.unreported[(rid, kind)].discard(tid)
            if not ok and kind == "recv":
                self.recv_failed.add(rid)
            if not self.unreported[(rid, kind)]:
                del self.unreported[(rid, kind)]
                finished[kind].add(rid)
                if kind == "recv":
                    blocks = self.recv_blocks.pop(rid, [])
                    if rid in self.recv_failed:
                        self.recv_failed.discard(rid)
                        invalid.update(blocks)
                        failed.add(rid)
        return _call(output_type, dict(finished_sending=finished["send"] or None,
                                       finished_recving=finished["recv"] or None,
                                       invalid_block_ids=invalid, failed_recving=failed))


class OffloadConnector(SupportsHMA):
    """vLLM's SimpleCPUOffloadConnector on the scheduler's side: what its
    connector class does there is delegate each call to the real
    `SimpleCPUOffloadScheduler` (vllm/v1/simple_kv_offload/manager.py),
    which keeps its own host BlockPool; the connector class itself
    imports torch, so this is that delegation. The worker's side is
    cowcheck's: each load and store of the step's metadata is one
    transfer; a load event's requests are reported in finished_recving
    once all its loads are done, a store event in the worker metadata's
    completed_store_events once all its stores are."""

    supports_divergent_local_hybrid_hits = False
    requires_kv_delivery = False        # the connector's own: a best-effort cache

    def __init__(self, manager: Any):
        self.manager = manager
        #: per (kind, event), the transfer ids not yet reported
        self.unreported: dict[tuple[str, int], set[str]] = {}
        self.load_reqs: dict[int, list[str]] = {}

    def bind_kv_cache_manager(self, kv_cache_manager: Any) -> None:
        self.manager.bind_gpu_block_pool(kv_cache_manager.block_pool)

    def bind_gpu_block_pool(self, pool: Any) -> None:
        self.manager.bind_gpu_block_pool(pool)

    def __getattr__(self, name: str) -> Any:
        if name in ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                    "update_connector_output", "request_finished", "request_finished_all_groups", "take_events"):
            return getattr(self.__dict__["manager"], name)
        raise AttributeError(name)

    def on_new_request(self, request: Any) -> None:
        return None

    def may_load_async(self, request: Any) -> bool:
        return False

    def get_loaded_kv_cache_group_ids(self, request: Any) -> tuple[int, ...]:
        return tuple(self.manager.prefix_cacheable_group_ids)

    def get_external_cache_hit_sources(self, request: Any, num_external_tokens: int) -> dict[Any, int]:
        return {}

    def register_finished_partial_tail(self, request: Any, block_ids: Any, partial_tail_offloads: Any) -> bool:
        return False

    def get_kv_connector_stats(self) -> None:
        return None

    def has_pending_block_frees(self) -> bool:
        return False

    def has_pending_push_work(self) -> bool:
        return bool(self.manager.has_pending_stores())

    def transfers(self, meta: Any, adapter: "VllmScheduler") -> list[tuple[str, str, str, int, Optional[int], int, bool]]:
        out: list[tuple[str, str, str, int, Optional[int], int, bool]] = []
        for kind, event, gpu, cpu in (("load", meta.load_event, meta.load_gpu_blocks, meta.load_cpu_blocks),
                                      ("store", meta.store_event, meta.store_gpu_blocks, meta.store_cpu_blocks)):
            if event < 0:
                continue
            owners = meta.load_event_to_reqs.get(event, []) if kind == "load" else list(adapter.added)
            if kind == "load":
                self.load_reqs[event] = list(owners)
            for i, (g, c) in enumerate(zip(gpu, cpu)):
                tid = f"{kind}{event}.{i}"
                self.unreported.setdefault((kind, event), set()).add(tid)
                owner, index = adapter.owner_of(g, owners)
                out.append((tid, kind, owner, adapter._block(g, f"the {kind} {tid}"), adapter.host(c), index, False))
        return out

    def report(self, done: list[tuple[str, bool]], output_type: Any) -> Any:
        """A load event's requests finished once all its loads are done, a
        store event completed once all its stores are. SimpleCPUOffload
        has no failure path: its worker reports every copy it launched as
        done (SimpleCPUOffloadWorkerMetadata has completed store events
        only), so a failed one is bad input, not a success."""
        failed = next((tid for tid, ok in done if not ok), None)
        if failed is not None:
            raise SpecError("cowcheck.adapters.vllm_scheduler:offload_*", "faults",
                            f"the {failed.rstrip('.0123456789')} {failed} failed, and vLLM {_engine.version}'s "
                            "SimpleCPUOffloadScheduler has no failure path (its worker reports every load and store "
                            "it launched as done, never failed): check faults on the offloading configurations "
                            "(cowcheck.adapters.vllm_scheduler:offloading) or the P/D connector's recvs")
        finished, stored = set(), {}
        for tid, _ in done:
            kind, event = next(key for key, ids in self.unreported.items() if tid in ids)
            self.unreported[(kind, event)].discard(tid)
            if not self.unreported[(kind, event)]:
                del self.unreported[(kind, event)]
                if kind == "load":
                    finished |= set(self.load_reqs.pop(event))
                else:
                    stored[event] = 1
        worker = _mods()["vllm.v1.simple_kv_offload.metadata"].SimpleCPUOffloadWorkerMetadata(completed_store_events=stored) \
            if stored else None
        return output_type(finished_recving=finished or None, kv_connector_worker_meta=worker)


class OffloadingConnector(OffloadConnector):
    """vLLM's OffloadingConnector on the scheduler's side: each call
    delegated to the real `OffloadingConnectorScheduler`
    (kv_connector/v1/offloading/scheduler.py) over the real
    `CPUOffloadingManager`, as the connector class does (it imports
    torch). The worker's side (OffloadingConnectorWorker) is cowcheck's:
    each block of a load or store job is one transfer; the step's kernels
    wait for the unreported transfers of its `jobs_to_flush` (the worker's
    `handle_preemptions` submits them and waits before the forward pass:
    the plan's `waits`); a job is reported in the worker metadata's
    `completed_jobs` once all its transfers are done, an async load's
    request in `finished_recving` too. The worker defers a step's stores
    to the next step's start, after the step's kernels; on
    `own-stream-fenced` the harness orders them so."""

    def __init__(self, scheduler: Any):
        super().__init__(scheduler.manager)
        self.scheduler = scheduler
        #: per job, the transfer ids not yet reported, and each id's job; an async load job's request
        self.job_tids: dict[int, set[str]] = {}
        self.job_of: dict[str, int] = {}
        self.load_reqs: dict[int, str] = {}     # type: ignore[assignment]
        #: jobs one of whose transfers failed, until all of them are done
        self.job_failed: set[int] = set()

    def bind_kv_cache_manager(self, kv_cache_manager: Any) -> None:
        self._kv_cache_manager = kv_cache_manager

    def bind_gpu_block_pool(self, pool: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name in ("update_state_after_alloc", "build_connector_meta", "update_connector_output", "take_events"):
            return getattr(self.__dict__["scheduler"], name)
        raise AttributeError(name)

    def on_new_request(self, request: Any) -> None:
        self.scheduler.on_new_request(request)

    def has_pending_push_work(self) -> bool:
        return bool(self.scheduler.has_pending_push_work())

    def get_external_cache_hit_sources(self, request: Any, num_external_tokens: int) -> dict[Any, int]:
        return dict(self.scheduler.get_external_cache_hit_sources(request, num_external_tokens))

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[Optional[int], bool]:
        """OffloadingConnector's: no group bounds the load (one group, offloaded)."""
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens, max_num_new_tokens=None)

    def get_loaded_kv_cache_group_ids(self, request: Any) -> tuple[int, ...]:
        return (0,)

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, Optional[dict[str, Any]]]:
        return self.scheduler.request_finished(request)

    request_finished_all_groups = request_finished

    def transfers(self, meta: Any, adapter: "VllmScheduler") -> list[tuple[str, str, str, int, Optional[int], int, bool]]:
        out: list[tuple[str, str, str, int, Optional[int], int, bool]] = []
        for kind, jobs in (("load", meta.load_jobs), ("store", meta.store_jobs)):
            for job, entry in jobs.items():
                gpu, cpu = (entry.dst_spec, entry.src_spec) if kind == "load" else (entry.src_spec, entry.dst_spec)
                first = int(gpu.block_indices[0]) if len(gpu.block_indices) else 0
                sync = bool(getattr(entry, "sync", False))     # sync loads: from 0.33
                if kind == "load" and not sync:
                    self.load_reqs[job] = entry.req_id
                for i, (g, c) in enumerate(zip(gpu.block_ids.tolist(), cpu.block_ids.tolist())):
                    tid = f"{kind}{job}.{i}"
                    self.job_tids.setdefault(job, set()).add(tid)
                    self.job_of[tid] = job
                    out.append((tid, kind, entry.req_id, adapter._block(g, f"the {kind} {tid}"), self.chunk(c), first + i,
                                sync))
        return out

    def chunk(self, chunk_id: int) -> int:
        """The host block of a chunk (one block a chunk, numbered from 0)."""
        if not 0 <= chunk_id < self.scheduler.manager._num_chunks:
            raise AssertionError(f"the CPUOffloadingManager named chunk {chunk_id}, not one of its "
                                 f"{self.scheduler.manager._num_chunks} chunks")
        return chunk_id

    def waits(self, meta: Any) -> list[str]:
        """The transfers of the step's jobs_to_flush not yet reported."""
        return sorted(tid for job in meta.jobs_to_flush or () for tid in self.job_tids.get(job, ()))

    def report(self, done: list[tuple[str, bool]], output_type: Any) -> Any:
        """As OffloadingConnectorWorker.get_finished (0.34): a job is
        completed once all its transfers are done, and failed (`failed_jobs`)
        if one of them failed; a failed async load's request is in
        `finished_recving` and `failed_recving`. Before 0.34 the worker
        asserts every transfer succeeded: no failure path, so a failed one
        is bad input."""
        common = _mods()["vllm.distributed.kv_transfer.kv_connector.v1.offloading.common"]
        completed, failed, finished, failed_recving = {}, set(), set(), set()
        for tid, ok in done:
            job = self.job_of.pop(tid)
            self.job_tids[job].discard(tid)
            if not ok:
                if "failed_jobs" not in inspect.signature(common.OffloadingWorkerMetadata).parameters:
                    raise SpecError("cowcheck.adapters.vllm_scheduler:offloading", "faults",
                                    f"the transfer {tid} failed, and vLLM {_engine.version}'s OffloadingConnector has "
                                    "no failure path (its worker asserts transfer_result.success; failed_jobs is 0.34's)")
                self.job_failed.add(job)
            if not self.job_tids[job]:
                del self.job_tids[job]
                completed[job] = 1
                request = self.load_reqs.pop(job, None)
                if request is not None:
                    finished.add(request)
                if job in self.job_failed:
                    self.job_failed.discard(job)
                    failed.add(job)
                    if request is not None:
                        failed_recving.add(request)
        worker = _call(common.OffloadingWorkerMetadata, dict(completed_jobs=completed, failed_jobs=failed)) \
            if completed else None      # failed_jobs: from 0.34
        return _call(output_type, dict(finished_recving=finished or None, failed_recving=failed_recving,
                                       kv_connector_worker_meta=worker))


# -- the adapter ------------------------------------------------------------------------

class VllmScheduler(V1Pool):
    """vLLM's Scheduler over P + 1 V1 blocks, with PDConnector; the pool's
    observers and token names are the allocator adapter's (V1Pool), over
    the scheduler's own KVCacheManager."""

    #: states are keyed by the exact pickle (see the module's docstring)
    snapshot = None

    def __init__(self, pool: int, block_size: int, source: Optional[str], *, batches: int = 1, defer: bool = True,
                 offload: Optional[str] = None, host_pool: int = 0):
        self.source = source
        self.B = block_size
        self.plans_in_flight = batches
        (load_offloading if offload == "offloading" else load)(source)
        mods = _mods()
        #: the config and KVCacheConfig, shared by every adapter of this shape and pickled by reference
        self.shape = Shape(pool, block_size, batches, bool(offload))
        config, kv_config = constants(self.shape)[:2]
        self.H = host_pool
        self.connector: Any = PDConnector(block_size)
        if offload == "offloading":
            self.connector = OffloadingConnector(offloading_connector_scheduler(pool, block_size, host_pool, batches))
        elif offload:
            # one byte a block: the host pool holds host_pool + 1 blocks (its own null block 0 renumbered away)
            manager = _call(mods["vllm.v1.simple_kv_offload.manager"].SimpleCPUOffloadScheduler, dict(
                vllm_config=config, kv_cache_config=kv_config, cpu_capacity_bytes=host_pool + 1,
                scheduler_block_size=block_size, hash_block_size=block_size, lazy_offload=offload == "lazy",
                num_cpu_blocks=host_pool + 1))
            self.connector = OffloadConnector(manager)
        config.kv_transfer_config.connector = self.connector      # what KVConnectorFactory hands the scheduler, once
        sched = mods["vllm.v1.core.sched.async_scheduler"].AsyncScheduler if batches > 1 else \
            mods["vllm.v1.core.sched.scheduler"].Scheduler
        self.sched = _construct(sched, mods["vllm.v1.core.sched.scheduler"].Scheduler, dict(vllm_config=config,
                                       kv_cache_config=kv_config, structured_output_manager=NoGrammar(), block_size=block_size,
                                       hash_block_size=block_size, log_stats=False))
        config.kv_transfer_config.connector = None
        if not defer:
            self.sched.defer_block_free = False
        self.manager = self.sched.kv_cache_manager
        #: every request added, by name (the scheduler forgets a freed one)
        self.added: dict[str, Any] = {}
        #: steps scheduled and not yet output; aborts that wait for the output (one batch in flight)
        self.outstanding = 0
        self.aborts: list[str] = []
        self.long_names: dict[int, str] = {}
        self.key_tokens: dict[bytes, tuple[int, ...]] = {}

    @property
    def requests(self) -> dict[str, Any]:  # type: ignore[override]
        """The requests the scheduler holds (V1Pool's observers read these)."""
        return self.sched.requests

    def code(self) -> dict[str, Optional[str]]:
        """As V1Pool's, but the default folder stays relative to the
        checkout (the shipped scenarios' counterexamples name no machine's path)."""
        code = super().code()
        return {**code, "source": str(DEFAULT)} if self.source == str(DEFAULT) else code

    def __reduce__(self) -> tuple[Any, ...]:
        return (restore, (load, VllmScheduler, self.source, dumps(self.__dict__, by_reference(self.shape))))

    # the contract
    def add(self, request: str, tokens: list[str], max_tokens: int, source: Optional[str], sink: Optional[str]) -> None:
        req = _request(request, [self._id(t) for t in tokens], self.B)
        req.sampling_params = StopParams(max_tokens=max_tokens + 1)
        req.max_tokens = max_tokens + 1
        params = {}
        if source is not None:
            params["do_remote_prefill"] = True
        if sink is not None:
            params["do_remote_decode"] = True
        req.kv_transfer_params = params or None
        self.added[request] = req
        self.sched.add_request(req)
        self._learn()

    def schedule(self) -> dict[str, Any]:
        out = self.sched.schedule()
        self.outstanding += 1
        kernels = []
        for rid, n in out.num_scheduled_tokens.items():
            req = self.sched.requests[rid]
            done = req.num_computed_tokens
            kernels.append((rid, done - n, done - 1))
        meta = out.kv_connector_metadata
        transfers = self.connector.transfers(meta, self) if meta is not None else []
        waits = self.connector.waits(meta) if isinstance(self.connector, OffloadingConnector) else []
        self._learn()
        return {"kernels": kernels, "copies": [], "transfers": transfers, "output": out, **({"waits": waits} if waits else {})}

    def output(self, plan: dict[str, Any], sampled: dict[str, str], done: list[tuple[str, bool]]) -> None:
        outputs = _mods()["vllm.v1.core.sched.scheduler"]  # its ModelRunnerOutput, KVConnectorOutput
        self.outstanding -= 1
        aborts, self.aborts = self.aborts, []
        if aborts:          # EngineCore.step: "process any aborts that happened during the model execution"
            self.sched.finish_requests(aborts, _mods()["vllm.v1.request"].RequestStatus.FINISHED_ABORTED)
        out = plan["output"]
        ids = list(out.num_scheduled_tokens)
        runner = _call(outputs.ModelRunnerOutput, dict(     # req_id_to_index: up to 0.33
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[self._id(sampled[r])] if r in sampled else [] for r in ids],
            kv_connector_output=self.connector.report(done, outputs.KVConnectorOutput)))
        self.sched.update_from_output(out, runner)
        self._learn()

    def abort(self, request: str) -> None:
        """EngineCore's abort: with one batch (EngineCore.step) an abort
        that arrives while the step runs waits for its output, and is
        processed just before update_from_output; with a batch queue
        (step_with_batch_queue) it is processed between engine steps, while
        a batch is in flight."""
        if self.plans_in_flight == 1 and self.outstanding:
            if request not in self.aborts:
                self.aborts.append(request)
            return
        self.sched.finish_requests(request, _mods()["vllm.v1.request"].RequestStatus.FINISHED_ABORTED)
        self._learn()

    def status(self, request: str) -> str:
        req = self.added[request]
        status = _mods()["vllm.v1.request"].RequestStatus
        if req.status == status.RUNNING:
            return "running"
        if req.status == status.FINISHED_ABORTED:
            return "aborted"
        return "finished" if status.is_finished(req.status) else "waiting"

    def table(self, request: str) -> list[int]:
        single = self.manager.coordinator.single_type_managers[0]
        if request not in single.req_to_blocks:
            return []
        return [self._block(b.block_id, f"request {request!r}'s table") for b in single.req_to_blocks[request]]

    # the host tier (SimpleCPUOffload's own BlockPool; its null block 0 renumbered away)
    def owner_of(self, block: int, candidates: list[str]) -> tuple[str, int]:
        """The request (of `candidates` first) whose table has V1 block
        `block`, and the entry: a store or load names one."""
        single = self.manager.coordinator.single_type_managers[0]
        for rid in [*candidates, *self.added]:
            ids = [b.block_id for b in single.req_to_blocks.get(rid, ())]
            if block in ids:
                return rid, ids.index(block)
        return next(iter(self.added)), 0

    def host(self, cpu_id: int) -> int:
        if not 1 <= cpu_id <= self.H:
            raise AssertionError(f"SimpleCPUOffload named host block {cpu_id}, not one of its pool's blocks 1 to {self.H}")
        return cpu_id - 1

    def _host_pool(self) -> Any:
        return self.connector.manager.cpu_block_pool

    def _pools(self) -> list[Any]:
        pools = super()._pools()
        return pools + [self._host_pool()] if type(self.connector) is OffloadConnector else pools

    def holds(self, block: int) -> int:
        """The connector's: the blocks of a finished request the scheduler
        keeps for its transfers (delay_free_blocks)."""
        single = self.manager.coordinator.single_type_managers[0]
        return sum(any(b.block_id == block + 1 for b in single.req_to_blocks.get(rid, ()))
                   for rid, req in self.sched.requests.items() if req.is_finished())



class VllmOffloadScheduler(VllmScheduler):
    """The Scheduler with SimpleCPUOffload: the host observers too."""

    def holds(self, block: int) -> int:
        """Besides a finished request's delayed blocks, the pins (`touch`)
        SimpleCPUOffload takes on a GPU block for each store that reads it,
        queued or in flight, until the store's completion releases them."""
        m = self.connector.manager
        stores = [*getattr(m, "_pending_finished_stores", ()), *m._store_event_to_blocks.values(),
                  *getattr(m, "_abandoned_store_event_to_blocks", {}).values()]   # from 0.30, from 0.24
        return super().holds(block) + sum(t.gpu_block_ids.count(block + 1) for t in stores)

    def host_refcount(self, h: int) -> int:
        return int(self._host_pool().blocks[h + 1].ref_cnt)

    def host_free_blocks(self) -> list[int]:
        return [self.host(b.block_id) for b in self._host_pool().free_block_queue.get_all_free_blocks()]

    def host_cached(self) -> dict[int, tuple[str, ...]]:
        return {self.host(bid): self._key_names(key) for key, bid in _cached_keys(self._host_pool())}

    def __reduce__(self) -> tuple[Any, ...]:
        return (restore, (load, VllmOffloadScheduler, self.source, dumps(self.__dict__, by_reference(self.shape))))


class HostChunks(NamedTuple):
    """The CPUOffloadingManager's chunks as `_cached_keys` reads a block
    pool's cache map (the form up to 0.10.2: {key: {id: block}}), so that
    the adapter keeps the tokens of the hashes the host tier keys, or will
    once their stores land."""
    cached_block_hash_to_block: dict[Any, dict[int, None]]


class VllmOffloadingScheduler(VllmScheduler):
    """The Scheduler with vLLM's OffloadingConnector: the host observers
    read the real CPUOffloadingManager's chunks (its LRU policy's map of
    offload keys to ChunkStatus). A chunk's `ref_cnt` is -1 while its store
    is in flight (a store's pin) and counts its loads after; a chunk with
    no store in flight and no load is free (a keyed one is evictable). The
    connector pins no GPU block: it stores a finished request's blocks
    after they are freed, and fences their reuse (jobs_to_flush)."""

    def _chunks(self) -> dict[int, tuple[Any, Any]]:
        """chunk id: (offload key, ChunkStatus)."""
        policy = self.connector.scheduler.manager._policy
        return {int(chunk.chunk_id): (key, chunk) for key, chunk in policy.chunks.items()}

    def _learn(self) -> None:
        """As VllmScheduler's, and the connector's stats drained, as an
        engine that logs stats drains them each step (`get_stats`): they
        only grow otherwise, and a state is the scheduler's pickle."""
        self.connector.scheduler.get_stats()
        super()._learn()

    def _pools(self) -> list[Any]:
        return super()._pools() + [HostChunks({key: {h: None} for h, (key, _) in self._chunks().items()})]

    def host_refcount(self, h: int) -> int:
        chunk = self._chunks().get(h)
        return 0 if chunk is None else 1 if chunk[1].ref_cnt < 0 else int(chunk[1].ref_cnt)

    def host_free_blocks(self) -> list[int]:
        chunks = self._chunks()
        return [h for h in range(self.H) if h not in chunks or chunks[h][1].ref_cnt == 0]

    def host_cached(self) -> dict[int, tuple[str, ...]]:
        return {h: self._key_names(key) for h, (key, chunk) in self._chunks().items() if chunk.ref_cnt >= 0}

    def __reduce__(self) -> tuple[Any, ...]:
        return (restore, (load_offloading, VllmOffloadingScheduler, self.source,
                          dumps(self.__dict__, by_reference(self.shape))))


def _construct(cls: Any, base: Any, known: dict[str, Any]) -> Any:
    """`cls(...)` with the parameters of `base`'s constructor that it has
    (AsyncScheduler takes *args, **kwargs and passes them to Scheduler)."""
    def shim(**kwargs: Any) -> Any:
        return cls(**kwargs)
    setattr(shim, "__signature__", inspect.signature(base))
    shim.__qualname__ = cls.__qualname__
    return _call(shim, known)


def _make(pool: int, block_size: int, host_pool: int, **kwargs: Any) -> VllmScheduler:
    if kwargs.get("offload") == "offloading":
        return VllmOffloadingScheduler(pool, block_size, folder(), host_pool=host_pool, **kwargs)
    if kwargs.get("offload"):
        return VllmOffloadScheduler(pool, block_size, folder(), host_pool=host_pool, **kwargs)
    return VllmScheduler(pool, block_size, folder(), **kwargs)


def scheduler(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """vLLM's Scheduler with the harness's P/D connector: `--scheduler cowcheck.adapters.vllm_v1:scheduler`."""
    return _make(pool, block_size, host_pool)


def async_scheduler(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """vLLM's AsyncScheduler (two plans in flight, `defer_block_free` on as vLLM sets it for a consumer)."""
    return _make(pool, block_size, host_pool, batches=2)


def async_scheduler_no_defer(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The AsyncScheduler with `defer_block_free` off: vLLM before 45357's deferred frees."""
    return _make(pool, block_size, host_pool, batches=2, defer=False)


def offload_eager(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The Scheduler with vLLM's SimpleCPUOffloadScheduler, eager mode (stores as blocks fill)."""
    return _make(pool, block_size, host_pool, offload="eager")


def offload_lazy(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The Scheduler with vLLM's SimpleCPUOffloadScheduler, lazy mode (stores blocks about to be evicted)."""
    return _make(pool, block_size, host_pool, offload="lazy")


def offload_eager_async(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The AsyncScheduler (two batches in flight) with SimpleCPUOffload, eager mode."""
    return _make(pool, block_size, host_pool, offload="eager", batches=2)


def offload_lazy_async(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The AsyncScheduler (two batches in flight) with SimpleCPUOffload, lazy mode."""
    return _make(pool, block_size, host_pool, offload="lazy", batches=2)


def offloading(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The Scheduler with vLLM's OffloadingConnector (OffloadingConnectorScheduler, the real CPUOffloadingManager)."""
    return _make(pool, block_size, host_pool, offload="offloading")


def offloading_async(pool: int, block_size: int, host_pool: int) -> VllmScheduler:
    """The AsyncScheduler (two batches in flight) with vLLM's OffloadingConnector."""
    return _make(pool, block_size, host_pool, offload="offloading", batches=2)
