"""`cowcheck fuzz --engine-test` on Dask (issue 39, docs/how-to/fuzz.md,
"On the actual engine"): on a real local cluster, one of whose workers is
lost mid-run, the serial run's results for the same seed; a worker without
torch is one line, not a traceback."""

from __future__ import annotations

import os
import signal

import pytest

from cowcheck.enginetest import INSTALL, missing
from cowcheck.fuzzing import engine as engine_fuzz
from cowcheck.fuzzing.run import fuzz
from cowcheck.model.errors import SpecError
from cowcheck.sweeps.runner import Runner

needs_torch = pytest.mark.skipif(missing() is not None, reason=f"the engine-test mode needs torch and transformers: {INSTALL}")
#: seed 0's first scenarios: scenario 1 breaks allocator-error (tests/test_fuzz.py), the others nothing
SCENARIOS = 4


def _tried(result):
    return [(t.index, t.name, t.states, t.broken, t.complete, t.tight, t.error) for t in result.tried]


def _found(result):
    return {k: (f.drawn.index, f.length, f.verdict.schedule.events(), f.verdict.detail, f.violated, f.scenarios)
            for k, f in result.findings.items()}


class _KillAtFirstAnswer:
    """A Runner's `run` that, at the first answer, kills the other worker
    (SIGKILL), noting its pid and the tasks the scheduler had given it."""

    def __init__(self, runner: Runner):
        self.runner, self.run = runner, runner.run
        self.killed: list[tuple[int, list]] = []

    def __call__(self, tasks, done, **how):
        self.run(tasks, lambda i, answer: (done(i, answer), self.kill(answer["pid"])), **how)

    def kill(self, answered: int) -> None:
        if self.killed:
            return
        client = self.runner.client
        pids, busy = client.run(os.getpid), client.processing()
        other = next(w for w, pid in pids.items() if pid != answered)
        os.kill(pids[other], signal.SIGKILL)
        self.killed.append((pids[other], list(busy.get(other, ()))))


@needs_torch
@pytest.mark.slow
def test_on_a_real_local_dask_cluster_a_lost_worker_and_all_the_serial_run_finds():
    """Two workers, each importing torch and building the model on its
    first task (about 15 s on a loaded 2-core machine, so marked slow); at
    the first answer the other worker, busy with a scenario, is killed:
    its scenarios run again elsewhere, and the run ends with the serial
    run's scenarios, counts and findings, in the same order."""
    serial = fuzz(engine_test=True, seed=0, scenarios=SCENARIOS, keep_going=True, do_shrink=False)
    with Runner(workers=2) as runner:
        runner.run = killing = _KillAtFirstAnswer(runner)
        on_dask = fuzz(engine_test=True, seed=0, scenarios=SCENARIOS, keep_going=True, do_shrink=False, runner=runner)
    killed = killing.killed
    assert killed and killed[0][1], f"the killed worker had no scenario in flight: {killed}"
    assert on_dask.workers == 2 and on_dask.stopped is None and not on_dask.interrupted
    assert _tried(on_dask) == _tried(serial) and len(serial.tried) == SCENARIOS
    assert _found(on_dask) == _found(serial) and "allocator-error" in serial.findings
    assert on_dask.subject == serial.subject and on_dask.states == serial.states


def test_a_worker_without_torch_is_one_line(monkeypatch):
    """On an existing cluster the client needs no torch: each worker
    answers for itself. One without it (here a real in-process cluster's,
    told torch is missing) stops the run with one line naming the worker and what to install."""
    from distributed import LocalCluster
    line = f"the engine-test mode needs torch: {INSTALL}"
    monkeypatch.setattr(engine_fuzz, "unavailable", lambda: line)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with pytest.raises(SpecError) as raised:
            fuzz(engine_test=True, seed=0, scenarios=1, do_shrink=False, scheduler=cluster.scheduler_address)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "cannot run the engine" in message and message.endswith(line), message
