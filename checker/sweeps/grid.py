"""A sweep's grids: the grid file's format (docs/how-to/sweeps.md) and its
validation, and a grid's expansion into cells in the documented order.

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

Every axis but `block_size` and `prompt` has a default; `program` may take
the place of `appends`, and `allocator` or `scheduler` that of `protocol`. A grid that
breaks these rules is refused whole (SpecError: its key and why); a cell
whose coordinates make no valid scenario is only that cell's error."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

from cowcheck.model.errors import SpecError
from cowcheck.model.harness import allocator_label
from cowcheck.model.protocol import Protocol, read_toml
from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.fields import MAXIMA
from cowcheck.model.scenario import ALLOCATOR_REUSE, CACHES, DEVICES, REUSES, TRANSFERS, scenario_from_dict

from cowcheck.sweeps.cells import INVALID, Cell, _error_data, cell_name, scenario_data

#: the axes, in the order cells are expanded (the last varies fastest).
#: `program` (branch programs: forks, speculation) takes the place of
#: `appends`: a grid gives one or the other, and the one left out is None.
#: `allocator` (code through the engine harness) or `scheduler` (code
#: through the scheduler harness: cache cells only) takes the place of
#: `protocol` in the same way.
#: `cache` ("none" or "prefix") makes cache scenarios, whose requests may
#: take their own prompts (`prompts`, one per request) and an `after`
#: (`after`, one per request: a request's name or "" for none).
#: `transfer` (a transfer model) and `host_pool` (host blocks: a host tier
#: makes a transfer scenario) are for cache grids; a cell without a cache
#: that sets either is that cell's error.
AXES = ("protocol", "allocator", "scheduler", "device", "transfer", "reuse", "cache", "block_size", "prompt", "prompts", "branches", "appends",
        "program", "after", "may_cancel", "pool", "host_pool")
DEFAULTS: dict[str, Any] = {"protocol": "cow", "allocator": None, "scheduler": None, "device": "async", "transfer": "nic", "reuse": "lifo", "cache": "none",
                            "prompts": None, "branches": 2, "appends": 1, "program": None, "after": None, "may_cancel": 0,
                            "pool": "default", "host_pool": 0}
#: the axes of code checked through a harness: each takes the place of `protocol`
CODE_AXES = ("allocator", "scheduler")
GRID_KEYS = ("name", "description") + AXES
BUDGET_KEYS = ("max_states", "seconds", "max_memory")
TOP_KEYS = ("grid", "budget")


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

    @property
    def size(self) -> int:
        """How many cells the grid has, without making them."""
        return math.prod(len(values) for values in self.axes.values())

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
    if axis in ("allocator", "scheduler"):
        if not isinstance(value, str) or ":" not in value:
            raise SpecError(source, key, f"must be \"module:factory\" or \"path/to/file.py:factory\" (relative to the grid file), got {value!r}")
        return value
    if axis in ("device", "transfer", "reuse", "cache"):
        allowed = {"device": DEVICES, "transfer": TRANSFERS, "reuse": REUSES, "cache": CACHES}[axis]
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
    if axis == "prompts":
        if not isinstance(value, list) or not value or not all(
                (type(p) is int and p >= 1) or (isinstance(p, list) and p and all(isinstance(t, str) and t for t in p)) for p in value):
            raise SpecError(source, key, "a prompts value gives each request its prompt: a list with, per request, a number of "
                            f"tokens (>= 1) or a list of token names; e.g. [3, [\"p0\", \"p1\", \"x2\"]]; got {value!r}")
        return value
    if axis == "after":
        if not isinstance(value, list) or not value or not all(isinstance(a, str) and (a == "" or a in tuple(BRANCH_NAMES)) for a in value):
            raise SpecError(source, key, "an after value gives each request the request it is admitted after: a list with, per "
                            f"request, a request's name or \"\" for none; e.g. [\"\", \"a\"]; got {value!r}")
        return value
    if axis == "pool":
        if value == "default":
            return value
        if type(value) is not int:
            raise SpecError(source, key, f"must be \"default\" or an integer from 0 to {MAXIMA['pool']}, got {value!r}")
        return integer(0, MAXIMA["pool"])
    if axis == "host_pool":
        return integer(0, MAXIMA["host_pool"])
    raise AssertionError(axis)


def grid_from_dict(data: Any, source: str, base: Path, name: str) -> Grid:
    """A grid file's data (its TOML, parsed) as a Grid, every key checked in
    the order the file is read: the tables and their keys, each axis (AXES
    order), the protocols, the budget, then the grid's name and description."""
    table = _grid_table(data, source)
    _check_axis_keys(table, source)
    axes = {axis: _axis(axis, table, source) for axis in AXES}
    for protocol in axes["protocol"]:          # a protocol that does not load is the grid's error, not a cell's
        if protocol is not None:
            _protocol(protocol, base, source)
    budget = _budget(data, source)
    gname, description = _name_and_description(table, source, name)
    return Grid(gname, source, base, axes, dict(budget), description)


def _grid_table(data: Any, source: str) -> dict[str, Any]:
    """The [grid] table, with no unknown key in it or beside it."""
    if not isinstance(data, dict) or not isinstance(data.get("grid"), dict):
        if isinstance(data, dict) and "grid" in data:
            raise SpecError(source, "grid", f"must be a table ([grid]), got {data['grid']!r}")
        raise SpecError(source, "grid", "missing; a grid file has a [grid] table")
    for key in data:
        if key not in TOP_KEYS:
            raise SpecError(source, key, f"unknown key; allowed: {', '.join(TOP_KEYS)} (a grid file has a [grid] table and an optional [budget])")
    table = data["grid"]
    for key in table:
        if key not in GRID_KEYS:
            raise SpecError(source, f"grid.{key}", f"unknown key; allowed: {', '.join(GRID_KEYS)}")
    return table


def _check_axis_keys(table: dict[str, Any], source: str) -> None:
    """The axes a grid must give are there, and no two that take each
    other's place are both given."""
    for key in ("block_size", "prompt"):
        if key not in table:
            raise SpecError(source, f"grid.{key}", "missing; give a value, a list or a range {from, to}")
    code = [axis for axis in CODE_AXES if axis in table]
    if code and "protocol" in table:
        raise SpecError(source, f"grid.{code[0]}", f"give either 'protocol' or '{code[0]}' (code through a harness), not both")
    if len(code) > 1:
        raise SpecError(source, "grid.scheduler", "give either 'allocator' or 'scheduler', not both")
    if code and "reuse" in table:
        raise SpecError(source, "grid.reuse", ALLOCATOR_REUSE)
    if "program" in table and "appends" in table:
        raise SpecError(source, "grid.program", "give either 'appends' or 'program', not both (a program says what each branch appends)")


def _axis(axis: str, table: dict[str, Any], source: str) -> list[Any]:
    """One axis's values, each checked and none twice: the grid's, or the
    default; [None] for an axis with no default the grid leaves out, or
    whose place the other of its pair takes (`program` for `appends`,
    `allocator` or `scheduler` for `protocol`)."""
    raw = table.get(axis, DEFAULTS.get(axis))
    if (axis == "appends" and "program" in table) or (axis in ("protocol", "reuse") and any(a in table for a in CODE_AXES)):
        raw = None
    if raw is None:
        return [None]
    values = _listed_values(axis, raw, source)
    if isinstance(raw, dict) and axis in ("protocol", "device", "transfer", "reuse", "cache", "pool"):
        raise SpecError(source, f"grid.{axis}", "a range {from, to} is for integer axes; give a value or a list")
    checked = [_check_value(axis, v, source, f"grid.{axis}[{i}]" if isinstance(raw, list) else f"grid.{axis}")
               for i, v in enumerate(values)]
    _check_distinct(axis, checked, source)
    return checked


def _listed_values(axis: str, raw: Any, source: str) -> list[Any]:
    """The values an axis gives, before each is checked. A value of
    `appends` or `program` may itself be a list, so their lists are read
    here; any other axis's by _axis_values."""
    if axis == "appends" and isinstance(raw, list) and raw and all(isinstance(v, int) for v in raw):
        return raw                             # a list of alternatives
    if axis == "appends" and isinstance(raw, list) and raw and all(isinstance(v, list) for v in raw):
        return raw                             # alternatives given per branch
    if axis in ("prompts", "after"):
        if not isinstance(raw, list) or not raw or not all(isinstance(v, list) for v in raw):
            example = '[[3, 3], [3, ["p0", "p1", "x2"]]]' if axis == "prompts" else '[["", "a"]]'
            raise SpecError(source, f"grid.{axis}", f"must be a list of alternatives, each a list with one entry per request; e.g. {example}")
        return raw
    if axis == "program":
        if not isinstance(raw, list) or not raw or not all(isinstance(v, list) for v in raw):
            raise SpecError(source, "grid.program", "must be a list of alternatives, each a program (a list of operations) "
                            "that every branch runs, or a list of programs, one per branch; e.g. [[\"speculate 2\", \"append\"]]")
        return raw
    return _axis_values(raw, source, f"grid.{axis}")


def _check_distinct(axis: str, values: list[Any], source: str) -> None:
    """No value listed twice on one axis (it would make the same cells twice)."""
    seen: list[Any] = []
    for i, v in enumerate(values):
        if v in seen:
            raise SpecError(source, f"grid.{axis}[{i}]", f"{v!r} is listed twice")
        seen.append(v)


def _budget(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The [budget] table (empty when there is none), each key checked."""
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
    return budget


def _name_and_description(table: dict[str, Any], source: str, name: str) -> tuple[str, str]:
    """The grid's name (by default `name`, the file's stem) and description."""
    gname = table.get("name", name)
    description = table.get("description", "")
    if not isinstance(gname, str) or not gname:
        raise SpecError(source, "grid.name", "must be a non-empty string")
    if not isinstance(description, str):
        raise SpecError(source, "grid.description", "must be a string")
    return gname, description


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
    from cowcheck.api import resolve_protocol
    key = (ref, str(base))
    if key not in _PROTOCOLS:
        try:
            _PROTOCOLS[key] = resolve_protocol(base / ref if ("/" in ref or ref.endswith(".toml")) else ref)
        except SpecError as err:
            raise SpecError(source, "grid.protocol", f"{ref!r}: {err}") from None
    return _PROTOCOLS[key]


# -- the cells of grids ------------------------------------------------------------
#: the most cells one sweep takes (docs/how-to/sweeps.md): every cell is
#: made, held in memory and listed before anything runs, and a grid of 10^8
#: cells would fill the memory long before it finished
MAX_CELLS = 100_000


def check_size(grids: list[Grid]) -> int:
    """The cells of the grids, counted without making them; more than
    MAX_CELLS is bad input, naming the largest grid."""
    total = sum(grid.size for grid in grids)
    if total > MAX_CELLS:
        largest = max(grids, key=lambda g: g.size)
        raise SpecError(largest.source, "grid", f"{total:,} cells; a sweep takes at most {MAX_CELLS:,}: "
                        "give an axis fewer values, or split the grid")
    return total


def expand(grids: list[Grid], made: Optional[Callable[[int], None]] = None) -> list[Cell]:
    """Every cell of the grids, numbered in order; a cell whose coordinates
    make no valid scenario carries its error and is not run. More than
    MAX_CELLS is refused before any is made (check_size). `made` is told
    how many cells are made so far, every MADE_EVERY cells and at the end
    (the command line's progress bar)."""
    check_size(grids)
    cells: list[Cell] = []
    names: dict[str, int] = {}
    for grid in grids:
        for coords in grid.coordinates():
            code = coords.get("allocator") or coords.get("scheduler")
            protocol = _protocol(coords["protocol"] or "cow", grid.base, grid.source)
            name = cell_name(grid.name, allocator_label(code) if code else protocol.name, coords)
            cell = Cell(len(cells), grid.name, coords, name)
            if name in names:
                raise SpecError(grid.source, "grid.name", f"cell {name} is also cell {names[name]}: two grids of one sweep need different names")
            names[name] = cell.index
            try:
                cell.scenario = scenario_from_dict(scenario_data(protocol, coords), grid.source, grid.base, name)
            except SpecError as err:
                cell.data = _error_data(cell, f"invalid cell: {err.key + ': ' if err.key else ''}{err.message}", INVALID)
            cells.append(cell)
            if made is not None and not len(cells) % MADE_EVERY:
                made(len(cells))
    if made is not None:
        made(len(cells))
    return cells


#: how often `expand` reports the cells it has made
MADE_EVERY = 100
