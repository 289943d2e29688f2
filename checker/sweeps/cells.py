"""A sweep's cell: one point of a grid, the coordinates (one value per axis)
made into a scenario and named, and what its check found (its JSON, its
verdict, its counterexamples); and the order on scenarios by size, the
smallest first, that a sweep reports and shrinking searches in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol, for_scenario
from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.scenario import Scenario

from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import FORMAT, Outcome, Summary, Verdict

#: reuse orders from the simplest to explain to the most permissive (a device model's is its `rank`)
REUSE_RANK = {"lifo": 0, "fifo": 1, "any": 2}
#: the verdict of a cell, besides the three summaries
INVALID, FAILED, PARTIAL = "invalid", "failed", "partial"


# -- a cell's name and scenario, from its coordinates ----------------------------------
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


def _prompts_text(prompts: list[Any]) -> str:
    """Requests' prompts for a cell's name: `3+3`, `3+p0.p1.x2`."""
    return "+".join(str(p) if isinstance(p, int) else ".".join(p) for p in prompts)


def cell_name(grid: str, protocol_name: str, c: dict[str, Any]) -> str:
    prompt = f"L{c['prompt']}" if c.get("prompts") is None else f"P{_prompts_text(c['prompts'])}"
    reuse = f"-{c['reuse']}" if c.get("reuse") else ""      # none for allocator code: its own order
    name = (f"{grid}~{protocol_name}-{c['device']}{reuse}-B{c['block_size']}-{prompt}-"
            f"{_appends_text(c)}")
    if c.get("cache", "none") != "none":
        name += f"-{c['cache']}"
    if c.get("after") is not None:
        name += "-after" + "".join(a or "_" for a in c["after"])
    if c["may_cancel"]:
        name += f"-c{c['may_cancel']}"
    if c["pool"] != "default":
        name += f"-p{c['pool']}"
    if c.get("host_pool"):
        name += f"-h{c['host_pool']}"
    if c.get("transfer", "nic") != "nic":
        name += f"-{c['transfer']}"
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
    for axis, key in (("prompts", "prompt"), ("after", "after")):
        values = c.get(axis)
        if values is None:
            continue
        if len(values) != n:
            raise SpecError("", axis, f"{len(values)} values given for {n} requests")
        for b, value in zip(branch, values):
            if value != "":
                b[key] = value
    data: dict[str, Any] = {"block_size": c["block_size"], "prompt": c["prompt"], "device": c["device"], "branch": branch}
    if c.get("reuse"):
        data["reuse"] = c["reuse"]
    cache = c.get("cache", "none") != "none"
    if cache:
        data["cache"] = c["cache"]
    # the keys of transfers only off their defaults: outside a cache they are the cell's error
    if c.get("transfer", "nic") != "nic":
        data["transfer"] = c["transfer"]
    if c.get("host_pool"):
        data["host_pool"] = c["host_pool"]
    if c.get("allocator") is not None:
        data["allocator"] = c["allocator"]
    elif c.get("scheduler") is not None:
        data["scheduler"] = c["scheduler"]     # a cell without a cache is its error, as for any scenario
    elif cache:
        # inline, every table counts as given: the tables a cache scenario
        # (a transfer scenario: one with a host tier) takes from its default
        # protocol must be filled in first, as a file naming the protocol gets them
        data["protocol"] = for_scenario(protocol, True, protocol.source, bool(c.get("host_pool"))).definition
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


# -- a cell and what its check found ---------------------------------------------------
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
        from cowcheck.engines import counterexample as trace
        data = self.counterexamples.get(invariant)
        if data is None:
            path = self.data and self.data.get("verdicts", {}).get(invariant, {}).get("counterexample")
            if path:
                return trace.load(Path(path))
            return None
        return trace.from_json(data)


def _error_data(cell: Cell, message: str, verdict: str) -> dict[str, Any]:
    return {"format": FORMAT, "cell": cell.index, "grid": cell.grid, "coordinates": cell.coordinates,
            "scenario": cell.name, "verdict": verdict, "error": message}


# -- the order by size ------------------------------------------------------------------
def size_key(scenario: Scenario) -> tuple[Any, ...]:
    """The order on scenarios (docs/how-to/shrinking.md): lexicographic on total
    appends, branches, B, L (in a cache scenario the requests' prompt tokens
    together), pool, branches that may cancel, then the device model and the
    reuse order (simplest first: stream < streams < async, lifo < fifo <
    any); the protocol and the branch programs (prompts, `after`) break ties."""
    programs = tuple(sorted(((b.appends, b.may_cancel, b.program, -1 if b.parent is None else b.parent,
                              b.prompt or (), -1 if b.after is None else b.after)
                            for b in scenario.branches), reverse=True))
    return (sum(b.appends for b in scenario.branches), len(scenario.branches), scenario.block_size, scenario.prompt_size,
            scenario.pool, sum(b.may_cancel for b in scenario.branches), scenario.device.rank,
            REUSE_RANK[scenario.reuse], scenario.subject, programs)
