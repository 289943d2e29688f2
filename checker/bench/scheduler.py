"""`cowcheck bench`'s scheduler rows: vLLM's real V1 Scheduler through the
scheduler harness (cowcheck.adapters.vllm_scheduler), with each connector
(the harness's P/D connector, the real SimpleCPUOffloadScheduler) on the
transfer section's S1, S3 and S5 as the shipped sched-vllm-* files give
them: states per second of a full run, and where the time goes, from a
profile of a second run. A row whose scenario has no request of a
connector's kind measures the scheduler without transfers of that kind
(S1 with the P/D connector: no recv or send; S3 and S5 with SimpleCPUOffload,
given a host pool of 2: stores, but the remote request's KV is
recomputed). One idea: the scheduler harness's speed, apart from the main
table (which measures protocol files and allocator code)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, cast

from cowcheck.engines.results import ExplicitResult

#: the shipped scenario files of S1, S3 and S5 (specs/scenarios)
S1, S3, S5 = "sched-vllm-offload-eager-store", "sched-vllm-pd-consumer-abort", "sched-vllm-pd-producer-lease"
#: the connector configurations: (name, factory, host pool where the scenario has none)
PD = ("P/D connector", "cowcheck.adapters.vllm_v1:scheduler", 0)
OFFLOAD = ("SimpleCPUOffload eager", "cowcheck.adapters.vllm_scheduler:offload_eager", 2)
OFFLOAD_ASYNC = ("SimpleCPUOffload eager, AsyncScheduler", "cowcheck.adapters.vllm_scheduler:offload_eager_async", 2)
#: (section label, scenario file, connector): each connector on each scenario, S1's shipped configuration first
SCHEDULER_RUNS = (
    ("S1", S1, OFFLOAD_ASYNC), ("S1", S1, OFFLOAD), ("S1", S1, PD),
    ("S3", S3, PD), ("S3", S3, OFFLOAD),
    ("S5", S5, PD), ("S5", S5, OFFLOAD),
)
#: the files whose own time is the harness's bookkeeping
HARNESS_FILES = ("model/scheduler.py", "model/harness.py", "model/queue.py", "model/state.py", "model/block.py")
#: the scheduler adapter's files: the calls into them from the harness, with all they call (vLLM's code), are
#: the scheduler's own calls
ADAPTER_FILES = ("adapters/vllm_scheduler.py", "adapters/vllm_core.py")


def _shipped(stem: str) -> Path:
    """A shipped scenario file: specs/scenarios beside the installed package
    (an editable install from a checkout), else under the working folder."""
    import cowcheck.specs
    folders = [Path(p) / "scenarios" for p in cowcheck.specs.__path__] + [Path("specs") / "scenarios"]
    return next(f / f"{stem}.toml" for f in folders if (f / f"{stem}.toml").is_file())


def row_label(section: str, stem: str, connector: tuple[str, str, int]) -> str:
    """A row's label, which `bench --only` matches."""
    return f"scheduler {section} {stem.removeprefix('sched-vllm-')}, {connector[0]}"


def _shares(stats: dict[Any, Any]) -> dict[str, float]:
    """Where a scheduler-harness run's time goes, from its profile: the
    scheduler's own calls (every adapter method the harness calls, with
    what it calls, but its pickling), snapshots (pickling and unpickling
    the scheduler: `_pack`, `_unpack`), the harness's bookkeeping, the
    invariants, and the rest (search and hashing)."""
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in stats.items())
    snapshots = sum(ct for (path, _, name), (_, _, _, ct, _) in stats.items()
                    if path.endswith("model/scheduler.py") and name in ("_pack", "_unpack"))
    calls = sum(by[3] for (path, _, name), (_, _, _, _, callers) in stats.items()
                if path.endswith(ADAPTER_FILES) and name not in ("__reduce__", "snapshot")
                for (cpath, _, _), by in callers.items() if cpath.endswith(HARNESS_FILES))
    bookkeeping = sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if path.endswith(HARNESS_FILES))
    judging = sum(tt for (path, _, _), (_, _, tt, _, _) in stats.items() if path.endswith("invariants.py"))
    return {"scheduler calls": round(calls / total, 2), "snapshots (pickle)": round(snapshots / total, 2),
            "harness bookkeeping": round(bookkeeping / total, 2), "invariants": round(judging / total, 2),
            "search and hashing": round(max(0.0, 1 - (snapshots + calls + bookkeeping + judging) / total), 2)}


def measure_scheduler(args: tuple[str, str, tuple[str, str, int]], conn: Any) -> None:
    """One row, in a child process: a full run of the scenario with the
    connector's configuration (vLLM loaded by a first, unmeasured run),
    then a profiled one."""
    import cProfile
    import pstats

    from cowcheck import api
    from cowcheck.model.errors import SpecError
    section, stem, (connector, factory, host_pool) = args
    row: dict[str, Any] = {"benchmark": row_label(section, stem, (connector, factory, host_pool)), "scheduler": factory}
    scenario = api.as_scenario(_shipped(stem))
    scenario = dataclasses.replace(scenario, scheduler=factory, expect=(), host_pool=scenario.host_pool or host_pool)
    try:
        api.check(scenario, max_states=1)
    except SpecError as err:
        conn.send({**row, "skipped": str(err)})
        conn.close()
        return
    start, cpu = time.perf_counter(), time.process_time()
    result = cast(ExplicitResult, api.check(scenario))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    profile = cProfile.Profile()
    profile.runcall(api.check, scenario)
    stats = pstats.Stats(profile).stats        # type: ignore[attr-defined]  # pstats keeps its table here
    conn.send({**row, "states": result.x.states, "transitions": result.x.transitions, "seconds": round(seconds, 2),
               "cpu_seconds": round(cpu, 2), "states_per_second": round(result.x.states / seconds),
               "states_per_cpu_second": round(result.x.states / cpu), "summary": str(result.summary),
               "share": _shares(stats)})
    conn.close()

