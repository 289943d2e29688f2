"""Sweeps: a grid of scenarios (README "Sweeps"), expanded in a documented
order, each cell checked by `cowcheck.api.check` as one task, serially in
this process or on Dask (an embedded LocalCluster of processes, or an
existing cluster given by its scheduler's address).

A grid file is TOML with a top-level `[grid]` table (which is how `cowcheck
check` tells it from a scenario and skips it) and an optional `[budget]`:

    [grid]
    protocol = ["cow", "premature-decrement"]
    device = ["async", "stream"]
    block_size = 2
    prompt = { from = 2, to = 4 }
    branches = [2, 3]
    appends = [1, 2]
    may_cancel = [0, 1]
    [budget]
    max_states = 100000
    seconds = 30

A task is plain data (the scenario as the dict a file would hold, with the
protocol's whole definition inline) and so is its answer (the result's JSON
and its counterexamples' JSON): nothing of this process has to be pickled,
and a worker needs only cowcheck installed, not the grid's files."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol, read_toml
from cowcheck.model.scenario import BRANCH_NAMES, DEVICES, MAXIMA, REUSES, Scenario, scenario_from_dict

from . import interrupts
from .results import FORMAT, ExplicitResult, Kind, Outcome, Summary, Verdict

#: the axes, in the order cells are expanded (the last varies fastest).
#: `program` (branch programs: forks, speculation) takes the place of
#: `appends`: a grid gives one or the other, and the one left out is None.
#: `allocator` (code through the engine harness) takes the place of
#: `protocol` in the same way.
AXES = ("protocol", "allocator", "device", "reuse", "block_size", "prompt", "branches", "appends", "program", "may_cancel", "pool")
DEFAULTS: dict[str, Any] = {"protocol": "cow", "allocator": None, "device": "async", "reuse": "lifo", "branches": 2,
                            "appends": 1, "program": None, "may_cancel": 0, "pool": "default"}
GRID_KEYS = ("name", "description") + AXES
BUDGET_KEYS = ("max_states", "seconds", "max_memory")
TOP_KEYS = ("grid", "budget")
#: device models and reuse orders from the simplest to explain to the most permissive
DEVICE_RANK = {"stream": 0, "streams": 1, "async": 2}
REUSE_RANK = {"lifo": 0, "fifo": 1, "any": 2}
#: the verdict of a cell, besides the three summaries
INVALID, FAILED, PARTIAL = "invalid", "failed", "partial"
CHECKPOINT_SECONDS = 2.0


# -- grids ---------------------------------------------------------------------
@dataclass
class Grid:
    """A grid file, parsed: the values of each axis and the per-cell budget."""
    name: str
    source: str
    base: Path
    axes: dict[str, list[Any]]
    budget: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def coordinates(self) -> Iterator[dict[str, Any]]:
        """Every cell's coordinates, in the documented order: the product of
        the axes in AXES order, the last axis varying fastest, each axis's
        values in the order the file gives them (ranges ascending)."""
        for values in itertools.product(*(self.axes[axis] for axis in AXES)):
            yield dict(zip(AXES, values))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "description": self.description,
                "axes": self.axes, "budget": self.budget}


def _axis_values(raw: Any, source: str, key: str) -> list[Any]:
    """A value, a list of values, or (integer axes) a range table
    {from, to, step}, inclusive."""
    if isinstance(raw, dict):
        unknown = [k for k in raw if k not in ("from", "to", "step")]
        if unknown:
            raise SpecError(source, f"{key}.{unknown[0]}", "unknown key in a range; allowed: from, to, step")
        for k in ("from", "to"):
            if type(raw.get(k)) is not int:
                raise SpecError(source, f"{key}.{k}", f"a range needs integer 'from' and 'to', got {raw.get(k)!r}")
        step = raw.get("step", 1)
        if type(step) is not int or step < 1:
            raise SpecError(source, f"{key}.step", f"must be an integer >= 1, got {step!r}")
        if raw["from"] > raw["to"]:
            raise SpecError(source, key, f"empty range: from {raw['from']} is above to {raw['to']}")
        return list(range(raw["from"], raw["to"] + 1, step))
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise SpecError(source, key, "empty list; give at least one value")
    return list(values)


def _check_value(axis: str, value: Any, source: str, key: str) -> Any:
    def integer(minimum: int, maximum: int) -> int:
        if type(value) is not int or not minimum <= value <= maximum:
            raise SpecError(source, key, f"must be an integer from {minimum} to {maximum}, got {value!r}")
        return value
    if axis == "protocol":
        if not isinstance(value, str) or not value:
            raise SpecError(source, key, f"must be a built-in protocol name or a path to a protocol file, got {value!r}")
        return value
    if axis == "allocator":
        if not isinstance(value, str) or ":" not in value:
            raise SpecError(source, key, f"must be \"module:factory\" or \"path/to/file.py:factory\" (relative to the grid file), got {value!r}")
        return value
    if axis in ("device", "reuse"):
        allowed = DEVICES if axis == "device" else REUSES
        if value not in allowed:
            raise SpecError(source, key, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
        return value
    if axis == "block_size":
        return integer(1, MAXIMA["block_size"])
    if axis == "prompt":
        return integer(0, MAXIMA["prompt"])
    if axis == "branches":
        return integer(1, len(BRANCH_NAMES))
    if axis == "may_cancel":
        return integer(0, len(BRANCH_NAMES))
    if axis == "appends":
        if isinstance(value, list):
            if not value or any(type(v) is not int or not 0 <= v <= MAXIMA["appends"] for v in value):
                raise SpecError(source, key, f"a list of appends per branch must hold integers from 0 to {MAXIMA['appends']}, got {value!r}")
            return value
        return integer(0, MAXIMA["appends"])
    if axis == "program":
        ops_list = value if isinstance(value, list) and value and all(isinstance(v, list) for v in value) else [value]
        for ops in ops_list:
            if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
                raise SpecError(source, key, "a program is a list of operations (\"append\", \"fork <child>\", \"speculate <K>\"), "
                                f"or a list of such lists, one per branch; got {value!r}")
        return value
    if axis == "pool":
        if value == "default":
            return value
        if type(value) is not int:
            raise SpecError(source, key, f"must be \"default\" or an integer from 0 to {MAXIMA['pool']}, got {value!r}")
        return integer(0, MAXIMA["pool"])
    raise AssertionError(axis)


def grid_from_dict(data: Any, source: str, base: Path, name: str) -> Grid:
    if not isinstance(data, dict) or not isinstance(data.get("grid"), dict):
        raise SpecError(source, "grid", "missing; a grid file has a [grid] table")
    for key in data:
        if key not in TOP_KEYS:
            raise SpecError(source, key, f"unknown key; allowed: {', '.join(TOP_KEYS)} (a grid file has a [grid] table and an optional [budget])")
    table = data["grid"]
    for key in table:
        if key not in GRID_KEYS:
            raise SpecError(source, f"grid.{key}", f"unknown key; allowed: {', '.join(GRID_KEYS)}")
    for key in ("block_size", "prompt"):
        if key not in table:
            raise SpecError(source, f"grid.{key}", "missing; give a value, a list or a range {from, to}")
    if "allocator" in table and "protocol" in table:
        raise SpecError(source, "grid.allocator", "give either 'protocol' or 'allocator' (code through the engine harness), not both")
    if "program" in table and "appends" in table:
        raise SpecError(source, "grid.program", "give either 'appends' or 'program', not both (a program says what each branch appends)")
    axes: dict[str, list[Any]] = {}
    for axis in AXES:
        raw = table.get(axis, DEFAULTS.get(axis))
        if (axis == "appends" and "program" in table) or (axis == "protocol" and "allocator" in table):
            raw = None
        if raw is None:
            axes[axis] = [None]
            continue
        if axis == "appends" and isinstance(raw, list) and raw and all(isinstance(v, int) for v in raw):
            values = raw                       # a list of alternatives
        elif axis == "appends" and isinstance(raw, list) and raw and all(isinstance(v, list) for v in raw):
            values = raw                       # alternatives given per branch
        elif axis == "program":
            if not isinstance(raw, list) or not raw or not all(isinstance(v, list) for v in raw):
                raise SpecError(source, "grid.program", "must be a list of alternatives, each a program (a list of operations) "
                                "that every branch runs, or a list of programs, one per branch; e.g. [[\"speculate 2\", \"append\"]]")
            values = raw
        else:
            values = _axis_values(raw, source, f"grid.{axis}")
        if isinstance(raw, dict) and axis in ("protocol", "device", "reuse", "pool"):
            raise SpecError(source, f"grid.{axis}", "a range {from, to} is for integer axes; give a value or a list")
        checked = [_check_value(axis, v, source, f"grid.{axis}[{i}]" if isinstance(raw, list) else f"grid.{axis}")
                   for i, v in enumerate(values)]
        seen: list[Any] = []
        for i, v in enumerate(checked):
            if v in seen:
                raise SpecError(source, f"grid.{axis}[{i}]", f"{v!r} is listed twice")
            seen.append(v)
        axes[axis] = checked
    for protocol in axes["protocol"]:          # a protocol that does not load is the grid's error, not a cell's
        if protocol is not None:
            _protocol(protocol, base, source)
    budget = data.get("budget", {})
    if not isinstance(budget, dict):
        raise SpecError(source, "budget", "must be a table")
    for key, value in budget.items():
        if key not in BUDGET_KEYS:
            raise SpecError(source, f"budget.{key}", f"unknown key; allowed: {', '.join(BUDGET_KEYS)}")
        if key == "seconds":
            if type(value) not in (int, float) or not value > 0 or not math.isfinite(value):
                raise SpecError(source, "budget.seconds", f"must be a number of seconds above 0, got {value!r}")
        elif type(value) is not int or value < (1 if key == "max_states" else 0):
            raise SpecError(source, f"budget.{key}", f"must be an integer >= {1 if key == 'max_states' else 0}, got {value!r}")
    gname = table.get("name", name)
    description = table.get("description", "")
    if not isinstance(gname, str) or not gname:
        raise SpecError(source, "grid.name", "must be a non-empty string")
    if not isinstance(description, str):
        raise SpecError(source, "grid.description", "must be a string")
    return Grid(gname, source, base, axes, dict(budget), description)


def load_grid(path: Union[str, Path]) -> Grid:
    path = Path(path)
    return grid_from_dict(read_toml(path), str(path), path.parent, path.stem)


def is_grid_file(data: dict[str, Any]) -> bool:
    return "grid" in data


def grid_files(paths: Union[str, Path, list[Any], tuple[Any, ...]]) -> list[Path]:
    """Grid files named, or found (recursively) in folders."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: list[Path] = []
    for raw in items:
        path = Path(raw)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*.toml")) if is_grid_file(read_toml(p)))
        elif path.is_file():
            if path.suffix == ".toml" and not is_grid_file(read_toml(path)):
                raise SpecError(str(path), "grid", "not a grid file (no [grid] table); `cowcheck check` checks scenarios")
            out.append(path)
        else:
            raise SpecError(str(path), "", "file not found")
    if not out:
        raise SpecError(", ".join(str(p) for p in items), "", "no grid files found (a grid file has a [grid] table)")
    return out


_PROTOCOLS: dict[tuple[str, str], Protocol] = {}


def _protocol(ref: str, base: Path, source: str) -> Protocol:
    from .api import resolve_protocol
    key = (ref, str(base))
    if key not in _PROTOCOLS:
        try:
            _PROTOCOLS[key] = resolve_protocol(base / ref if ("/" in ref or ref.endswith(".toml")) else ref)
        except SpecError as err:
            raise SpecError(source, "grid.protocol", f"{ref!r}: {err}") from None
    return _PROTOCOLS[key]


# -- cells -------------------------------------------------------------------------
#: how a cell's name writes each operation of a program: append, fork c, speculate K
_OP_LETTERS = {"append": "A", "fork": "F", "speculate": "S"}


def _program_text(program: list[str]) -> str:
    """`["append", "fork c", "speculate 2"]` -> `AFcS2` (file-name safe)."""
    return "".join(_OP_LETTERS.get(op.split()[0], "?") + "".join(op.split()[1:]) for op in program) or "0"


def _appends_text(c: dict[str, Any]) -> str:
    """What each branch does, for a cell's name: `2x1`, `1+2`, `2xS2A`, `AFcA+A+A`."""
    program, appends, branches = c.get("program"), c["appends"], c["branches"]
    if program is not None:
        if all(isinstance(p, list) for p in program):
            return "+".join(_program_text(p) for p in program)
        return f"{branches}x{_program_text(program)}"
    return f"{branches}x{appends}" if isinstance(appends, int) else "+".join(str(a) for a in appends)


def branch_texts(c: dict[str, Any]) -> str:
    """A program coordinate in words, for the grid page: `a: append, fork b; b: append`."""
    program = c["program"]
    programs = program if all(isinstance(p, list) for p in program) else [program] * c["branches"]
    return "; ".join(f"{BRANCH_NAMES[i]}: {', '.join(p) or 'nothing'}" for i, p in enumerate(programs))


def cell_name(grid: str, protocol_name: str, c: dict[str, Any]) -> str:
    name = (f"{grid}~{protocol_name}-{c['device']}-{c['reuse']}-B{c['block_size']}-L{c['prompt']}-"
            f"{_appends_text(c)}")
    if c["may_cancel"]:
        name += f"-c{c['may_cancel']}"
    if c["pool"] != "default":
        name += f"-p{c['pool']}"
    return name


def scenario_data(protocol: Protocol, c: dict[str, Any]) -> dict[str, Any]:
    """The cell as the dict a scenario file would hold (the protocol inline).
    Invalid coordinates raise SpecError (key and why)."""
    n, k, appends, program = c["branches"], c["may_cancel"], c["appends"], c.get("program")
    if k > n:
        raise SpecError("", "may_cancel", f"{k} branches may cancel, but the cell has {n}")
    if isinstance(appends, list) and len(appends) != n:
        raise SpecError("", "appends", f"{len(appends)} appends per branch given for {n} branches")
    if program is not None:
        branch = _program_branches(program, n)
    else:
        per_branch = appends if isinstance(appends, list) else [appends] * n
        branch = [{"appends": a} for a in per_branch]
    for i, b in enumerate(branch):
        b["may_cancel"] = i >= n - k
    data: dict[str, Any] = {"block_size": c["block_size"], "prompt": c["prompt"], "device": c["device"],
                            "reuse": c["reuse"], "branch": branch}
    if c.get("allocator") is not None:
        data["allocator"] = c["allocator"]
    else:
        data["protocol"] = protocol.definition
    if c["pool"] != "default":
        data["pool"] = c["pool"]
    return data


def _program_branches(program: list[Any], n: int) -> list[dict[str, Any]]:
    """Branch tables for a `program` coordinate: one program for every
    branch, or one per branch; a branch another's program forks is that
    branch's child (its `parent`)."""
    if all(isinstance(p, list) for p in program):
        if len(program) != n:
            raise SpecError("", "program", f"{len(program)} programs given for {n} branches")
        programs = [list(p) for p in program]
    else:
        programs = [list(program) for _ in range(n)]
    branch: list[dict[str, Any]] = [{"program": p} for p in programs]
    for i, p in enumerate(programs):
        for op in p:
            words = op.split() if isinstance(op, str) else []
            if len(words) == 2 and words[0] == "fork" and words[1] in BRANCH_NAMES[:n]:
                branch[BRANCH_NAMES.index(words[1])]["parent"] = BRANCH_NAMES[i]
    return branch


@dataclass
class Cell:
    """One cell of a sweep: where it sits in the grid and what its check
    found. `data` is what `--json` writes for it: Result.to_json() plus
    `cell`, `grid` and `coordinates` (or, for a cell that is itself invalid
    or whose task failed, `error` in place of the result)."""
    index: int
    grid: str
    coordinates: dict[str, Any]
    name: str
    scenario: Optional[Scenario] = None
    data: Optional[dict[str, Any]] = None          # None: not run (yet)
    counterexamples: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)   # invariant -> file JSON
    resumed: bool = False

    @property
    def error(self) -> Optional[str]:
        return None if self.data is None else self.data.get("error")

    @property
    def done(self) -> bool:
        return self.data is not None

    @property
    def verdict(self) -> str:
        """unsafe, safe but undisciplined, safe and disciplined, partial
        (a budget stopped it before anything broke), invalid, failed, or
        not run."""
        if self.data is None:
            return "not run"
        if "error" in self.data:
            return self.data.get("verdict", INVALID)
        summary = self.data["summary"]
        if not self.data["complete"] and summary != str(Summary.UNSAFE):
            return PARTIAL
        return str(summary)

    @property
    def summary(self) -> Optional[Summary]:
        return Summary(self.data["summary"]) if self.data and "summary" in self.data else None

    @property
    def verdicts(self) -> dict[str, Verdict]:
        """The verdicts as objects (counterexample files not loaded: `path`
        says where one was written)."""
        if not self.data or "verdicts" not in self.data:
            return {}
        return {inv: Verdict(inv, Kind(v["kind"]), Outcome(v["outcome"]), v["length"], path=v["counterexample"], note=v.get("note"))
                for inv, v in self.data["verdicts"].items()}

    def broken(self) -> dict[str, int]:
        """Invariant -> shortest length, for each invariant the cell breaks."""
        if not self.data or "verdicts" not in self.data:
            return {}
        return {inv: v["length"] for inv, v in self.data["verdicts"].items() if v["outcome"] == str(Outcome.VIOLATED)}

    def counterexample(self, invariant: str) -> Any:
        """The shortest counterexample of `invariant` as a Counterexample
        object (from this run's task; a resumed cell has only its file)."""
        from . import trace
        data = self.counterexamples.get(invariant)
        if data is None:
            path = self.data and self.data.get("verdicts", {}).get(invariant, {}).get("counterexample")
            if path:
                return trace.load(Path(path))
            return None
        return trace.from_json(data)


def size_key(scenario: Scenario) -> tuple[Any, ...]:
    """The order on scenarios (README "Shrinking"): lexicographic on total
    appends, branches, B, L, pool, branches that may cancel, then the device
    model and the reuse order (simplest first: stream < streams < async,
    lifo < fifo < any); the protocol and the branch programs break ties."""
    programs = tuple(sorted(((b.appends, b.may_cancel, b.program, -1 if b.parent is None else b.parent)
                            for b in scenario.branches), reverse=True))
    return (sum(b.appends for b in scenario.branches), len(scenario.branches), scenario.block_size, scenario.prompt,
            scenario.pool, sum(b.may_cancel for b in scenario.branches), DEVICE_RANK[scenario.device],
            REUSE_RANK[scenario.reuse], scenario.subject, programs)


def expand(grids: list[Grid]) -> list[Cell]:
    """Every cell of the grids, numbered in order; a cell whose coordinates
    make no valid scenario carries its error and is not run."""
    cells: list[Cell] = []
    names: dict[str, int] = {}
    for grid in grids:
        for coords in grid.coordinates():
            allocator = coords.get("allocator")
            protocol = _protocol(coords["protocol"] or "cow", grid.base, grid.source)
            name = cell_name(grid.name, allocator.rpartition(":")[2] if allocator else protocol.name, coords)
            cell = Cell(len(cells), grid.name, coords, name)
            if name in names:
                raise SpecError(grid.source, "grid.name", f"cell {name} is also cell {names[name]}: two grids of one sweep need different names")
            names[name] = cell.index
            try:
                cell.scenario = scenario_from_dict(scenario_data(protocol, coords), grid.source, grid.base, name)
            except SpecError as err:
                cell.data = _error_data(cell, f"invalid cell: {err.key + ': ' if err.key else ''}{err.message}", INVALID)
            cells.append(cell)
    return cells


def _error_data(cell: Cell, message: str, verdict: str) -> dict[str, Any]:
    return {"format": FORMAT, "cell": cell.index, "grid": cell.grid, "coordinates": cell.coordinates,
            "scenario": cell.name, "verdict": verdict, "error": message}


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
    from . import api
    from .invariants import select
    seconds = task.get("seconds")
    try:
        scenario = scenario_from_dict(task["scenario"], task["source"], Path(task["source"]).parent, task["name"])
        result = api.check(scenario, invariants=select(task.get("invariants")), max_states=task.get("max_states"),
                           first=task.get("first", False), max_memory_mib=task.get("max_memory_mib"),
                           max_seconds=seconds)
    except SpecError as err:
        return {"error": str(err), "pid": os.getpid()}
    if result.interrupted:
        return {"interrupted": True, "pid": os.getpid()}
    if result.stopped and result.stopped.startswith("max_seconds"):      # the budget's labels
        result.stopped = f"budget: {seconds:g} s"
    elif result.stopped and result.stopped.startswith("--max-states"):
        result.stopped = f"budget: {result.stopped.removeprefix('--')}"
    if isinstance(result, ExplicitResult) and result.exploration is not None:
        result.exploration.stopped = result.stopped
    return {"result": result.to_json(), "pid": os.getpid(),
            "counterexamples": {v.invariant: v.counterexample.to_json() for v in result.verdicts.values()
                                if v.counterexample is not None}}


# -- running tasks: serially or on Dask ---------------------------------------------------------
def default_workers() -> int:
    return os.cpu_count() or 1


class Runner:
    """Runs tasks (run_cell's input) and hands each answer to a callback as
    it arrives. workers=0: in this process, one after another; otherwise on
    Dask: an embedded LocalCluster of `workers` processes (one thread each),
    or, with `scheduler`, an existing cluster. Use as a context manager; the
    cluster is started on first use and closed on leaving."""

    def __init__(self, workers: Optional[int] = None, scheduler: Optional[str] = None, connect_timeout: float = 3.0):
        self.workers = default_workers() if workers is None else workers
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
        from .explorer import available_memory
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
        logging.getLogger("distributed").setLevel(logging.ERROR)
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise SpecError("--workers", "", "Dask is not installed (pip install \"dask[distributed]\"); --workers 0 runs serially") from None
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
            # The workers are started with SIGINT ignored (inherited across
            # exec): Ctrl-C in a terminal reaches the whole process group,
            # and only this process should act on it.
            with interrupts.held(signal.SIGINT):
                self.cluster = LocalCluster(n_workers=max(1, min(self.workers, needed)), threads_per_worker=1,
                                            processes=True, dashboard_address=None, memory_limit=0,
                                            silence_logs=logging.CRITICAL, scheduler_port=0, host="127.0.0.1")
                self.client = Client(self.cluster)
        self.started = time.perf_counter() - start

    def run(self, tasks: list[dict[str, Any]], done: Callable[[int, dict[str, Any]], None]) -> None:
        """Run every task; call done(i, answer) as each answer arrives. A
        KeyboardInterrupt cancels what has not finished and propagates."""
        if not tasks:
            return
        if self.serial:
            for i, task in enumerate(tasks):
                answer = run_cell(task)
                if answer.get("interrupted"):
                    raise KeyboardInterrupt()
                done(i, answer)
            return
        self.connect(len(tasks))
        from distributed import as_completed
        futures = self.client.map(run_cell, tasks, pure=False, retries=2)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in as_completed(futures):
                i = index[future.key]
                if future.status == "error":
                    error = future.exception()
                    done(i, {"failed": f"{type(error).__name__}: {error}"})
                else:
                    done(i, future.result())
                future.release()
        except BaseException:
            self.client.cancel(futures, force=True)
            raise

    def close(self) -> None:
        """Stop the client and an embedded cluster. Workers going away while
        a heartbeat is in flight make Dask log tracebacks that say nothing
        about the sweep (its failures come back through the futures), so its
        logs are silenced from here on."""
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
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


# -- a sweep -------------------------------------------------------------------------------
@dataclass
class Sweep:
    """What `cowcheck.sweep` returns: every cell (in grid order) with its
    result, the grids, and whether the run was interrupted."""
    grids: list[Grid]
    cells: list[Cell]
    interrupted: bool = False
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
        from .invariants import IDS
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
    from . import atomic
    atomic.write_text(path, json.dumps(result.to_json(), indent=1) + "\n")


def sweep(grids: Union[str, Path, Grid, list[Any]], *, workers: Optional[int] = None, scheduler: Optional[str] = None,
          json_path: Union[str, Path, None] = None, out: Union[str, Path, None] = None,
          progress: Optional[Callable[[Sweep, Cell], None]] = None, runner: Optional[Runner] = None) -> Sweep:
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
    `interrupted`, and holds (and `json_path` gets) what finished."""
    items = grids if isinstance(grids, list) else [grids]
    loaded: list[Grid] = []
    for item in items:
        if isinstance(item, Grid):
            loaded.append(item)
        else:
            loaded.extend(load_grid(p) for p in grid_files(item))
    cells = expand(loaded)
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
        if progress is not None:
            for cell in cells:
                if cell.data is not None:
                    progress(result, cell)
        if tasks:
            runner.run(tasks, done)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        result.seconds = time.perf_counter() - start
        result.startup_seconds = runner.started
        if own:
            runner.close()
    if json_file is not None:
        with interrupts.held(signal.SIGINT):
            write_json(result, json_file)
    return result


def write_counterexamples(cell: Cell, out_dir: Path) -> None:
    """Write a cell's counterexamples as `cowcheck check` names them
    (<scenario>.<invariant>.json) and record their paths in its JSON."""
    from . import trace
    from .output import file_for
    for inv, data in cell.counterexamples.items():
        path = file_for(out_dir, cell.name, inv)
        trace.write(path, data)
        assert cell.data is not None
        cell.data["verdicts"][inv]["counterexample"] = str(path)
