"""Scenarios drawn and checked in batches, one loop for every kind (the
actual engine's included): a batch is drawn from the seed, its tasks run
on the sweep's Runner (serially one at a time; on Dask in parallel), and
its answers are judged in index order, whatever order they came back in.
A run that stops at its first violation counts the scenarios up to it,
not those its batch checked after it, so the same seed gives the same
result with any number of workers."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, TypeVar

from cowcheck.fuzzing.report import Fuzz
from cowcheck.sweeps.runner import Runner, run_cell

#: a drawn scenario, of whatever kind
D = TypeVar("D")
Task = dict[str, Any]


def batch_size(runner: Runner) -> int:
    """Scenarios per batch: one serially (nothing is checked past a
    violation); on Dask enough to keep every worker busy."""
    return 1 if runner.serial else max(8, 2 * max(runner.workers, 1))


def search(result: Fuzz, runner: Runner, began: float, progress: Optional[Callable[[Fuzz], None]],
           draw: Callable[[int], tuple[D, Task]], judge: Callable[[Fuzz, list[D], dict[int, dict[str, Any]]], bool],
           cell: Callable[[Task], dict[str, Any]] = run_cell) -> None:
    """Draw scenario i and its task with `draw(i)`, batch after batch, run
    the tasks through `cell` on `runner`, and judge each batch's answers
    into `result` with `judge`, in index order, until it says stop (a violation, unless keep_going) or the budget of
    `result` ends."""
    batch = batch_size(runner)
    index = 0
    limit, seconds = result.budget["scenarios"], result.budget["seconds"]
    while (limit is None or index < limit) and (seconds is None or time.perf_counter() - began < seconds):
        size = batch if limit is None else min(batch, limit - index)
        pairs = [draw(i) for i in range(index, index + size)]
        answers: dict[int, dict[str, Any]] = {}
        try:
            runner.run([task for _, task in pairs], answers.__setitem__, cell=cell)
        finally:      # interrupted or not, what came back is judged, in index order
            stop = judge(result, [drawn for drawn, _ in pairs], answers)
            if progress is not None:
                progress(result)
        if stop:
            return
        index += size
