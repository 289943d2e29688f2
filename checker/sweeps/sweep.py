"""Sweeps: one or more grids of scenarios (docs/how-to/sweeps.md), expanded into
cells in a documented order (`cowcheck.sweeps.grid`), each cell checked by
`cowcheck.api.check` as one task (`cowcheck.sweeps.runner`: serially in this
process or on Dask), its result recorded in the cell as it arrives; with
`--json`, checkpoints of the results so far, from which a later run resumes."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from cowcheck.model.errors import SpecError

from cowcheck import interrupts
from cowcheck.engines.results import FORMAT
from cowcheck.sweeps.cells import FAILED, INVALID, Cell, _error_data, size_key
from cowcheck.sweeps.grid import Grid, expand, grid_files, load_grid
from cowcheck.sweeps.runner import NoWorkers, Runner, task_for

CHECKPOINT_SECONDS = 2.0


# -- a sweep -------------------------------------------------------------------------------
@dataclass
class Sweep:
    """What `cowcheck.sweep` returns: every cell (in grid order) with its
    result, the grids, and whether the run was interrupted."""
    grids: list[Grid]
    cells: list[Cell]
    interrupted: bool = False
    stopped: Optional[str] = None     # why the run stopped before its end, other than an interrupt (NoWorkers)
    seconds: float = 0.0
    workers: int = 0
    scheduler: Optional[str] = None
    startup_seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return all(c.done for c in self.cells)

    def violating(self) -> list[Cell]:
        return [c for c in self.cells if c.broken()]

    def by_invariant(self) -> dict[str, tuple[int, Cell]]:
        """Per invariant that some cell breaks: how many cells break it and
        the smallest of them (size_key; grid order breaks ties)."""
        out: dict[str, tuple[int, Cell]] = {}
        from cowcheck.engines.invariants import IDS
        for inv in IDS:
            breaking = [c for c in self.cells if inv in c.broken() and c.scenario is not None]
            if breaking:
                out[inv] = (len(breaking), min(breaking, key=lambda c: (size_key(c.scenario), c.index)))  # type: ignore[arg-type]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": "sweep", "complete": self.complete, "interrupted": self.interrupted,
                "grids": [g.describe() for g in self.grids],
                "cells": [c.data for c in self.cells if c.data is not None]}


def _cell_key(grid: str, coordinates: dict[str, Any]) -> str:
    return json.dumps([grid, coordinates], sort_keys=True)


def read_done(path: Path, grids: list[Grid]) -> dict[str, dict[str, Any]]:
    """The cells a previous run wrote to `path` that this one can keep: same
    grid name, coordinates and budget, checked (not invalid, failed or
    interrupted)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise SpecError(str(path), "", f"cannot resume from it ({type(err).__name__}); expected the --json of a sweep, or a new file name") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("kind") != "sweep" \
            or not isinstance(data.get("cells"), list) or not isinstance(data.get("grids"), list):
        raise SpecError(str(path), "kind", "not the --json of a sweep (format 1, kind \"sweep\"); refusing to overwrite it")
    budgets = {g.get("name"): g.get("budget") for g in data["grids"] if isinstance(g, dict)}
    done = {}
    for grid in grids:
        if budgets.get(grid.name) != grid.budget:
            continue
        for cell in data["cells"]:
            if isinstance(cell, dict) and cell.get("grid") == grid.name and "summary" in cell and "error" not in cell \
                    and isinstance(cell.get("coordinates"), dict):
                done[_cell_key(grid.name, cell["coordinates"])] = cell
    return done


def write_json(result: Sweep, path: Path) -> None:
    from cowcheck import atomic
    atomic.write_text(path, json.dumps(result.to_json(), indent=1) + "\n")


def sweep(grids: Union[str, Path, Grid, list[Any]], *, workers: Optional[int] = None, scheduler: Optional[str] = None,
          json_path: Union[str, Path, None] = None, out: Union[str, Path, None] = None,
          progress: Optional[Callable[[Sweep, Cell], None]] = None, runner: Optional[Runner] = None,
          cells: Optional[list[Cell]] = None) -> Sweep:
    """Check every cell of one or more grids (files, folders of grid files,
    or Grid objects) and return a Sweep: each cell with its result (the
    JSON of `cowcheck.api.check`'s Result plus its coordinates).

    `workers`: Dask worker processes of an embedded LocalCluster (default:
    the machine's cores; 0: serially in this process); `scheduler`: the
    address of an existing Dask scheduler instead. `json_path`: resume from
    this file (cells already checked with the same budget are kept) and
    write every result to it, as the run goes and at the end. `out`: where
    the counterexample files go (None: none are written; each cell keeps
    them in memory). A Ctrl-C stops the sweep: the result says
    `interrupted`, and holds (and `json_path` gets) what finished; so does
    a cluster left with no worker (`stopped` says so). `cells`: the
    grids' cells, already made (`expand(grids)`, the command line's, which
    shows them being made)."""
    items = grids if isinstance(grids, list) else [grids]
    loaded: list[Grid] = []
    for item in items:
        if isinstance(item, Grid):
            loaded.append(item)
        else:
            loaded.extend(load_grid(p) for p in grid_files(item))
    cells = cells if cells is not None else expand(loaded)
    json_file = Path(json_path) if json_path is not None else None
    previous = read_done(json_file, loaded) if json_file is not None else {}
    for cell in cells:
        kept = previous.get(_cell_key(cell.grid, cell.coordinates))
        if kept is not None and cell.data is None:
            cell.data, cell.resumed = kept, True
    budget = {g.name: g.budget for g in loaded}
    own = runner is None
    runner = runner or Runner(workers, scheduler)
    result = Sweep(loaded, cells, workers=0 if runner.serial else runner.workers, scheduler=runner.scheduler)
    pending = [c for c in cells if c.data is None]
    tasks = [task_for(c.scenario, budget[c.grid], max_memory_mib=runner.memory_per_task) for c in pending]  # type: ignore[arg-type]
    out_dir = Path(out) if out is not None else None
    last = [time.perf_counter(), 0.0]     # when the last checkpoint was written, and what it cost
    start = time.perf_counter()

    def done(i: int, answer: dict[str, Any]) -> None:
        cell = pending[i]
        if "result" in answer:
            cell.data = {**answer["result"], "cell": cell.index, "grid": cell.grid, "coordinates": cell.coordinates}
            cell.counterexamples = answer.get("counterexamples", {})
            if out_dir is not None:
                write_counterexamples(cell, out_dir)
        elif "error" in answer:
            cell.data = _error_data(cell, answer["error"], INVALID)
        else:
            cell.data = _error_data(cell, f"the task failed: {answer.get('failed')}", FAILED)
        if progress is not None:
            progress(result, cell)
        # a checkpoint when the last one is long enough ago: at most every
        # CHECKPOINT_SECONDS, and then only if writing costs under a tenth of the time
        now = time.perf_counter()
        if json_file is not None and now - last[0] > min(CHECKPOINT_SECONDS, 10 * last[1]):
            write_json(result, json_file)
            last[0], last[1] = time.perf_counter(), time.perf_counter() - now

    try:
        try:
            if progress is not None:
                for cell in cells:
                    if cell.data is not None:
                        progress(result, cell)
            if tasks:
                runner.run(tasks, done)
        finally:
            result.seconds = time.perf_counter() - start
            result.startup_seconds = runner.started
            if own:
                runner.close()        # a Ctrl-C while it closes is delivered after
    except KeyboardInterrupt:
        result.interrupted = True
    except NoWorkers as lost:
        result.stopped = str(lost)
    if json_file is not None:
        try:
            with interrupts.held(signal.SIGINT):
                write_json(result, json_file)
        except KeyboardInterrupt:     # it came while writing: the file is whole
            result.interrupted = True
    return result


def write_counterexamples(cell: Cell, out_dir: Path) -> None:
    """Write a cell's counterexamples as `cowcheck check` names them
    (<scenario>.<invariant>.json) and record their paths in its JSON."""
    from cowcheck.engines import counterexample as trace
    from cowcheck.traces.output import file_for
    for inv, data in cell.counterexamples.items():
        path = file_for(out_dir, cell.name, inv)
        trace.write(path, data)
        assert cell.data is not None
        cell.data["verdicts"][inv]["counterexample"] = str(path)
