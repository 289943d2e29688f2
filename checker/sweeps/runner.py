"""Running a sweep's tasks: a task is one check as plain data (`task_for`),
checked by `run_cell` with `cowcheck.api.check`, and a `Runner` runs many,
serially in this process or on Dask (an embedded LocalCluster of processes,
or an existing cluster given by its scheduler's address).

A task is plain data (the scenario as the dict a file would hold, with the
protocol's whole definition inline) and so is its answer (the result's JSON
and its counterexamples' JSON): nothing of this process has to be pickled,
and a worker needs only cowcheck installed, not the grid's files."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario, scenario_from_dict

from cowcheck import interrupts
from cowcheck.engines.options import SearchOptions


# -- tasks -----------------------------------------------------------------------------
def task_for(scenario: Scenario, budget: dict[str, Any], invariants: Optional[list[str]] = None,
             first: bool = False, max_memory_mib: Optional[int] = None) -> dict[str, Any]:
    """One check as plain data: what a worker needs and nothing else."""
    definition = scenario.definition()
    name, source = definition.pop("name"), definition.pop("source")
    memory = budget.get("max_memory", max_memory_mib)
    return {"scenario": definition, "name": name, "source": source, "invariants": invariants, "first": first,
            "max_states": budget.get("max_states"), "seconds": budget.get("seconds"), "max_memory_mib": memory}


def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    """Check one scenario with `cowcheck.api.check`, the code `cowcheck
    check` runs. Returns the result's JSON and its counterexamples' JSON;
    bad input (a run-time protocol error) is an `error`, not an exception."""
    from cowcheck import api
    from cowcheck.engines.invariants import select
    seconds = task.get("seconds")
    try:
        scenario = scenario_from_dict(task["scenario"], task["source"], Path(task["source"]).parent, task["name"])
        options = SearchOptions(max_states=task.get("max_states"), first=task.get("first", False),
                                max_memory_mib=task.get("max_memory_mib"), max_seconds=seconds)
        result = api.check(scenario, invariants=select(task.get("invariants")), options=options)
    except SpecError as err:
        return {"error": str(err), "pid": os.getpid()}
    if result.interrupted:
        return {"interrupted": True, "pid": os.getpid()}
    data = result.to_json()
    if result.stop is not None:       # in the sweep's words: its bounds are the cell's budget
        data["stopped"] = result.stop.in_sweep(seconds)
    return {"result": data, "pid": os.getpid(),
            "counterexamples": {v.invariant: v.counterexample.to_json() for v in result.verdicts.values()
                                if v.counterexample is not None}}


# -- running tasks: serially or on Dask ---------------------------------------------------------
def default_workers() -> int:
    return os.cpu_count() or 1


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, if it is not running.
    The first spawn starts it, and around that it blocks SIGINT and then
    unblocks it in the thread that spawns: inside `interrupts.held`, that
    would lift the mask the worker processes are to inherit."""
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()


#: how long a cluster may have no worker before a run stops (NoWorkers), and
#: how often the count is asked
NO_WORKERS_SECONDS = 30.0
WORKER_POLL_SECONDS = 1.0


class NoWorkers(Exception):
    """The cluster has had no worker for a while: what is left would wait
    forever. The run stops with what finished."""

    def __init__(self, where: str, seconds: float):
        super().__init__(f"no worker left on {where} for {seconds:g} s; stopped with the cells that finished")
        self.where, self.seconds = where, seconds


class _Watch:
    """Watches a cluster's worker count while a run waits: Dask waits for a
    worker forever, so when the cluster has had none for `seconds` (all
    died, or were closed), `check` raises NoWorkers. The count is asked at
    most every WORKER_POLL_SECONDS."""

    def __init__(self, client: Any, where: str, seconds: float):
        self.client, self.where, self.seconds = client, where, seconds
        self.alone_since: Optional[float] = None
        self.asked = 0.0

    def seen(self) -> None:
        """Something finished: the cluster works."""
        self.alone_since = None

    def check(self) -> None:
        now = time.monotonic()
        if now - self.asked < WORKER_POLL_SECONDS:
            return
        self.asked = now
        if self.client.nthreads():
            self.alone_since = None
        elif self.alone_since is None:
            self.alone_since = now
        elif now - self.alone_since >= self.seconds:
            raise NoWorkers(self.where, self.seconds)


class Runner:
    """Runs tasks (run_cell's input, or another cell function's) and hands
    each answer to a callback as it arrives. workers=0: in this process, one after another; otherwise on
    Dask: an embedded LocalCluster of `workers` processes (one thread each),
    or, with `scheduler`, an existing cluster. Use as a context manager; the
    cluster is started on first use and closed on leaving."""

    def __init__(self, workers: Optional[int] = None, scheduler: Optional[str] = None, connect_timeout: float = 3.0,
                 no_workers_seconds: float = NO_WORKERS_SECONDS):
        self.workers = default_workers() if workers is None else workers
        self.no_workers_seconds = no_workers_seconds
        self.scheduler = scheduler
        self.connect_timeout = connect_timeout
        self.client: Any = None
        self.cluster: Any = None
        self.started = 0.0      # seconds spent starting or connecting

    @property
    def serial(self) -> bool:
        return self.scheduler is None and self.workers == 0

    @property
    def memory_per_task(self) -> Optional[int]:
        """A memory bound per check on the embedded cluster (its workers
        share the machine); elsewhere the check's own default."""
        if self.scheduler is not None or self.serial:
            return None
        from cowcheck.engines.explorer import available_memory
        available = available_memory()
        return None if available is None else max((available >> 20) * 4 // 5 // max(self.workers, 1), 256)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connect(self, needed: int) -> None:
        if self.serial or self.client is not None:
            return
        start = time.perf_counter()
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise SpecError("--workers", "", "Dask is not installed (pip install \"dask[distributed]\"); --workers 0 runs serially") from None
        for name in ("distributed", "distributed.client"):    # (after the import, which sets them) "couldn't gather,
            logging.getLogger(name).setLevel(logging.ERROR)   # rescheduling" is Dask's own retry
        if self.scheduler is not None:
            try:
                self.client = Client(self.scheduler, timeout=self.connect_timeout)
            except (OSError, TimeoutError, ValueError) as err:
                raise SpecError("--scheduler", "", f"cannot reach the Dask scheduler at {self.scheduler} "
                                f"within {self.connect_timeout:g} s ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no answer'})") from None
        else:
            import dask
            # The workers' statistical profiler samples the running task's
            # stack every 10 ms, holding the GIL: a third slower checks.
            dask.config.set({"distributed.worker.profile.enabled": False})
            # The workers are started with SIGINT blocked (the mask is
            # inherited across exec): Ctrl-C in a terminal reaches the whole
            # process group, and only this process should act on it; one
            # that comes while they start is delivered once they have.
            _start_resource_tracker()
            with interrupts.held(signal.SIGINT):
                self.cluster = LocalCluster(n_workers=max(1, min(self.workers, needed)), threads_per_worker=1,
                                            processes=True, dashboard_address=None, memory_limit=0,
                                            silence_logs=logging.CRITICAL, scheduler_port=0, host="127.0.0.1")
                self.client = Client(self.cluster)
        self.started = time.perf_counter() - start

    def run(self, tasks: list[dict[str, Any]], done: Callable[[int, dict[str, Any]], None],
            cell: Callable[[dict[str, Any]], dict[str, Any]] = run_cell) -> None:
        """Run every task through `cell` (a module-level function, plain data
        in and out: a worker imports it by name); call done(i, answer) as
        each answer arrives. A KeyboardInterrupt cancels what has not
        finished and propagates."""
        if not tasks:
            return
        if self.serial:
            for i, task in enumerate(tasks):
                answer = cell(task)
                if answer.get("interrupted"):
                    raise KeyboardInterrupt()
                done(i, answer)
            return
        self.connect(len(tasks))
        from distributed import as_completed
        futures = self.client.map(cell, tasks, pure=False, retries=2)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in self._finished(as_completed(futures)):
                i = index[future.key]
                if future.status == "error":
                    error = future.exception()
                    done(i, {"failed": f"{type(error).__name__}: {error}"})
                else:
                    done(i, self._result(future))
                future.release()
        except BaseException:
            # Dask's fetches of results still pending end failed, and asyncio
            # would print each ("Task exception was never retrieved")
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
            self.client.cancel(futures, force=True)
            raise

    def _finished(self, pending: Any) -> Iterator[Any]:
        """The futures of `pending` (an as_completed) as they finish, the
        cluster watched meanwhile (_Watch)."""
        watch = _Watch(self.client, self.scheduler or "the embedded cluster", self.no_workers_seconds)
        while pending.count():
            batch = pending.next_batch(block=False)
            for future in batch:
                watch.seen()
                yield future
            if not batch:
                watch.check()
                time.sleep(0.05)

    def _result(self, future: Any) -> Any:
        """A finished future's result. Its worker may die before it is
        fetched; Dask then computes it again, and waits for a worker to do
        so: so wait in slices, watching the cluster."""
        watch = _Watch(self.client, self.scheduler or "the embedded cluster", self.no_workers_seconds)
        while True:
            try:
                return future.result(timeout=WORKER_POLL_SECONDS)
            except TimeoutError:
                watch.check()

    def close(self) -> None:
        """Stop the client and an embedded cluster. Workers going away while
        a heartbeat is in flight make Dask log tracebacks that say nothing
        about the sweep (its failures come back through the futures), so its
        logs are silenced from here on."""
        for name in ("distributed", "distributed.client"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with interrupts.held(signal.SIGINT):
            try:
                if self.client is not None:
                    self.client.close()
                if self.cluster is not None:
                    self.cluster.close()
            except Exception:         # closing a cluster that is going away anyway
                pass
            finally:
                self.client = self.cluster = None
