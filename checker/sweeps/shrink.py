"""Shrinking a counterexample (docs/how-to/shrinking.md): the smallest scenario
on which the same invariant still breaks, and its shortest counterexample.

Candidates are the scenarios the original dominates: a sub-multiset of its
branches, each with no more appends and may_cancel kept or dropped, B and L
no larger, a pool from the prompt's blocks up to the smaller of the
original's pool and the candidate's default pool (a pool beyond the default
changes nothing: every alloc finds a never-used block, so no run can tell
the difference), same protocol, device model and reuse order. They are
checked in increasing `cowcheck.sweeps.cells.size_key` order, in batches, through
the sweep's task machinery (the same `cowcheck.api.check`, serially or on
Dask); the first in that order that breaks the invariant is the smallest.
On it, the simpler device models and reuse orders (stream < streams <
async, lifo < fifo < any) are tried, and the simplest that also shows the
violation is kept."""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from cowcheck.model.errors import SpecError
from cowcheck.model.harness import allocator_file
from cowcheck.model.protocol import builtin_names, for_scenario, load_builtin
from cowcheck.model.branches import BRANCH_NAMES, BranchSpec, branch_definition
from cowcheck.model.device import Device
from cowcheck.model.scenario import TRANSFER_KEYS, Scenario, default_pool, harness_pool, load_scenario

from cowcheck import atomic

from cowcheck.engines import counterexample as trace
from cowcheck.sweeps.cells import REUSE_RANK, size_key
from cowcheck.sweeps.runner import Runner, task_for
from cowcheck.engines.counterexample import Counterexample

#: a candidate's budget when none is given
DEFAULT_BUDGET = {"max_states": 200_000, "seconds": 60}
#: candidates checked at most, when no other bound is given
DEFAULT_MAX_CANDIDATES = 5000


def _programs(branches: tuple[BranchSpec, ...]) -> list[tuple[BranchSpec, ...]]:
    """Every sub-multiset of the branches, each lowered (fewer appends,
    may_cancel dropped), as a canonical tuple (most appends first); with
    branch programs, every shorter program (`_shorter_programs`)."""
    if not all(b.plain for b in branches):
        return _shorter_programs(branches)
    choices = []
    for b in branches:
        lowered = [BranchSpec(a, c) for a in range(b.appends + 1) for c in ({False, b.may_cancel})]
        choices.append([None] + lowered)
    seen = set()
    out = []
    for pick in itertools.product(*choices):
        kept = tuple(sorted((p for p in pick if p is not None), key=lambda s: (-s.appends, s.may_cancel)))
        if kept and kept not in seen:
            seen.add(kept)
            out.append(kept)
    return out


def _shorter_programs(branches: tuple[BranchSpec, ...]) -> list[tuple[BranchSpec, ...]]:
    """Scenarios with branch programs, shortened: each operation kept or
    dropped (a `speculate K` also lowered to fewer drafts), a root dropped
    whole, `may_cancel` kept or dropped. Dropping a `fork c` drops c and
    its descendants; the branches left are renamed in file order, and the
    forks with them."""
    names = BRANCH_NAMES
    per_op: list[list[Optional[str]]] = []          # every operation's alternatives, branch by branch
    owner: list[int] = []
    for i, b in enumerate(branches):
        for text in b.program:
            word, *rest = text.split()
            lowered = [f"speculate {k}" for k in range(1, int(rest[0]))] if word == "speculate" else []
            per_op.append([text, *lowered, None])
            owner.append(i)
    keep_root = [[True, False] if b.parent is None else [True] for b in branches]
    cancel = [sorted({False, b.may_cancel}) for b in branches]
    seen: set[tuple[BranchSpec, ...]] = set()
    out = []
    for ops in itertools.product(*per_op):
        programs: list[list[str]] = [[] for _ in branches]
        for i, chosen in zip(owner, ops):
            if chosen is not None:
                programs[i].append(chosen)
        for roots in itertools.product(*keep_root):
            alive = [False] * len(branches)
            for i, b in enumerate(branches):        # a child lives when its parent lives and still forks it
                alive[i] = roots[i] if b.parent is None else False
            changed = True
            while changed:
                changed = False
                for i, b in enumerate(branches):
                    if not alive[i] and b.parent is not None and alive[b.parent] and f"fork {names[i]}" in programs[b.parent]:
                        alive[i] = changed = True
            kept = [i for i in range(len(branches)) if alive[i]]
            if not kept:
                continue
            rename = {names[old]: names[new] for new, old in enumerate(kept)}
            for cancels in itertools.product(*(cancel[i] for i in kept)):
                specs = []
                for (new, old), may_cancel in zip(enumerate(kept), cancels):
                    program = tuple(f"fork {rename[t.split()[1]]}" if t.startswith("fork ") else t
                                    for t in programs[old] if not t.startswith("fork ") or t.split()[1] in rename)
                    parent = branches[old].parent
                    spec = BranchSpec(0, may_cancel, program, None if parent is None else kept.index(parent)) if program \
                        else BranchSpec(0, may_cancel, parent=None if parent is None else kept.index(parent))
                    specs.append(spec)
                candidate = tuple(specs)
                if candidate not in seen:
                    seen.add(candidate)
                    out.append(candidate)
    return out


def _requests(requests: tuple[BranchSpec, ...]) -> list[tuple[BranchSpec, ...]]:
    """A cache scenario's requests, shrunk: each kept or dropped, its prompt
    cut to any non-empty prefix (prefixes keep what prompts share), its
    program shortened as `_shorter_programs` does, `may_cancel` kept or
    dropped. The requests left are renamed in file order, with their tokens
    in the other prompts (a dropped request's tokens there become plain
    names, `d` and the old token) and their `after` (dropped with the
    request it names)."""
    names = BRANCH_NAMES
    alternatives = []
    for b in requests:
        prompt = b.prompt or ()
        shorter = _shorter_programs((replace(b, prompt=None, after=None),))
        alternatives.append([None] + [(prompt[:n], spec[0]) for n in range(1, len(prompt) + 1) for spec in shorter])
    seen: set[tuple[BranchSpec, ...]] = set()
    out = []
    for pick in itertools.product(*alternatives):
        kept = [i for i, p in enumerate(pick) if p is not None]
        if not kept:
            continue
        tokens = {f"{names[old]}{k}": f"{names[new]}{k}" for new, old in enumerate(kept)
                  for k in range(1, requests[old].appends + 1)}
        dropped = {f"{names[i]}{k}": f"d{names[i]}{k}" for i in range(len(requests)) if i not in kept
                   for k in range(1, requests[i].appends + 1)}
        rename = {**dropped, **tokens}
        specs = []
        for old in kept:
            prompt, spec = pick[old]    # type: ignore[misc]  # kept: not None
            after = requests[old].after
            specs.append(replace(spec, prompt=tuple(rename.get(t, t) for t in prompt),
                                 after=kept.index(after) if after in kept else None,
                                 source=requests[old].source, sink=requests[old].sink))
        candidate = tuple(specs)
        if candidate not in seen:
            seen.add(candidate)
            out.append(candidate)
    return out


def candidates(scenario: Scenario) -> list[Scenario]:
    """The scenarios the original dominates (device model and reuse order
    held), smallest first by size_key. The original is among them."""
    if scenario.cache:
        return _cache_candidates(scenario)
    out = []
    protocol = scenario.protocol
    for programs in _programs(scenario.branches):
        for block_size in range(1, scenario.block_size + 1):
            for prompt in range(0, scenario.prompt + 1):
                blocks = -(-prompt // block_size)
                default = harness_pool(block_size, prompt, programs) if scenario.allocator is not None \
                    else default_pool(protocol, block_size, prompt, programs)
                for pool in range(blocks, min(scenario.pool, default) + 1):
                    out.append(Scenario(name=scenario.name, source=scenario.source, protocol=protocol,
                                        block_size=block_size, prompt=prompt, pool=pool, device=scenario.device,
                                        reuse=scenario.reuse, branches=programs, allocator=scenario.allocator,
                                        allocator_base=scenario.allocator_base))
    out.sort(key=size_key)
    return out


def _cache_candidates(scenario: Scenario) -> list[Scenario]:
    """A cache scenario's candidates: its requests shrunk (`_requests`), B
    no larger, a pool from the largest prompt's blocks up to the smaller of
    the original's and the candidate's default."""
    out = []
    for requests in _requests(scenario.branches):
        for block_size in range(1, scenario.block_size + 1):
            largest = max(-(-len(b.prompt or ()) // block_size) for b in requests)
            default = harness_pool(block_size, 0, requests, cache=True) if scenario.allocator is not None \
                else default_pool(scenario.protocol, block_size, 0, requests, cache=True)
            for pool in range(largest, min(scenario.pool, default) + 1):
                out.append(replace(scenario, block_size=block_size, pool=pool, branches=requests))
    out.sort(key=size_key)
    return out


def simpler_modes(scenario: Scenario) -> list[Scenario]:
    """The scenario under each simpler device model and reuse order."""
    modes = [(d, r) for d in Device for r in REUSE_RANK
             if d.rank <= scenario.device.rank and REUSE_RANK[r] <= REUSE_RANK[scenario.reuse]
             and (d, r) != (scenario.device, scenario.reuse)]
    modes.sort(key=lambda m: (m[0].rank, REUSE_RANK[m[1]]))
    return [replace(scenario, device=d, reuse=r) for d, r in modes]


@dataclass
class Shrunk:
    """What `cowcheck.shrink` returns."""
    original: Scenario
    invariant: str
    scenario: Scenario                     # the smallest found (the original when nothing smaller breaks)
    counterexample: Optional[Counterexample]
    original_length: Optional[int]
    tried: int = 0                         # candidates checked
    undecided: list[str] = field(default_factory=list)   # smaller candidates a budget stopped before a verdict
    exhausted: bool = True                 # False: max_candidates stopped the search before a violation
    seconds: float = 0.0
    paths: list[str] = field(default_factory=list)      # what write_shrunk wrote

    @property
    def smaller(self) -> bool:
        return size_key(self.scenario)[:6] < size_key(self.original)[:6] or \
            (self.scenario.device, self.scenario.reuse) != (self.original.device, self.original.reuse)

    def describe(self, scenario: Optional[Scenario] = None) -> str:
        s = scenario or self.scenario
        programs = ", ".join(b.label for b in s.branches)
        reuse = "" if s.allocator is not None else f" {s.reuse}"     # allocator code: its own order
        return (f"{s.subject} {s.device}{reuse} B={s.block_size} L={s.prompt_size} pool={s.pool} "
                f"branches={len(s.branches)} appends=[{programs}] (total {sum(b.appends for b in s.branches)})")

    def to_json(self) -> dict[str, Any]:
        from cowcheck.engines.results import FORMAT
        return {"format": FORMAT, "kind": "shrink", "invariant": self.invariant,
                "original": self.original.definition(), "original_length": self.original_length,
                "scenario": self.scenario.definition(), "length": self.counterexample.length if self.counterexample else None,
                "smaller": self.smaller, "tried": self.tried, "undecided": self.undecided, "exhausted": self.exhausted,
                "seconds": round(self.seconds, 3), "files": self.paths}


def _start(start: Union[Counterexample, str, Path, Scenario], invariant: Optional[str]) -> tuple[Scenario, str, Optional[int]]:
    from cowcheck.engines.invariants import BY_ID, IDS
    if isinstance(start, Scenario):
        if invariant is None:
            raise SpecError("shrink", "invariant", "name the invariant to shrink for")
        scenario, length = start, None
    else:
        cx = start if isinstance(start, Counterexample) else Counterexample.load(Path(start))
        where = cx.loaded_from or "counterexample"
        if cx.invariant is None:
            raise SpecError(where, "kind", f"a {cx.kind} trace; shrink needs a counterexample (an invariant's violation)")
        if invariant is not None and invariant != cx.invariant:
            raise SpecError(where, "invariant", f"the file is a counterexample of {cx.invariant}, not {invariant}")
        scenario, invariant, length = cx.scenario, cx.invariant, cx.length
    assert invariant is not None
    if invariant not in BY_ID:
        raise SpecError("shrink", "invariant", f"{invariant!r} is not a built-in invariant; allowed: {', '.join(IDS)}")
    return scenario, invariant, length


def shrink(start: Union[Counterexample, str, Path, Scenario], invariant: Optional[str] = None, *,
           workers: Optional[int] = None, scheduler: Optional[str] = None, budget: Optional[dict[str, Any]] = None,
           max_candidates: int = DEFAULT_MAX_CANDIDATES, runner: Optional[Runner] = None,
           progress: Optional[Callable[[int, int], None]] = None) -> Shrunk:
    """The smallest scenario (docs/how-to/shrinking.md) on which `invariant` still
    breaks, starting from a counterexample (an object or a file) or from a
    scenario and an invariant id, with its shortest counterexample. Each
    candidate is one `cowcheck.api.check` (that invariant alone, stopping at
    its first, hence shortest, violation) under `budget` (max_states,
    seconds, max_memory; default 200,000 states and 60 s), run serially
    (workers=0) or on Dask as in `cowcheck.sweep`. Writes nothing
    (`write_shrunk` does)."""
    original, invariant, length = _start(start, invariant)
    budget = dict(DEFAULT_BUDGET if budget is None else budget)
    began = time.perf_counter()
    own = runner is None
    runner = runner or Runner(workers, scheduler)
    result = Shrunk(original, invariant, original, None, length)
    try:
        pool = candidates(original)
        found = _first_breaking(pool[:max_candidates], invariant, budget, runner, result, progress)
        if found is None:
            result.exhausted = len(pool) <= max_candidates
            if not result.exhausted:
                return result
            raise SpecError(original.source, "", f"{invariant} does not break on the scenario itself within the budget "
                            f"({', '.join(f'{k} {v}' for k, v in budget.items())})")
        scenario, cx = found
        simpler = _first_breaking(simpler_modes(scenario), invariant, budget, runner, result, progress, undecided=False)
        if simpler is not None:
            scenario, cx = simpler
        result.scenario, result.counterexample = scenario, cx
    finally:
        result.seconds = time.perf_counter() - began
        if own:
            runner.close()
    return result


def _first_breaking(pool: list[Scenario], invariant: str, budget: dict[str, Any], runner: Runner, result: Shrunk,
                    progress: Optional[Callable[[int, int], None]], undecided: bool = True) -> Optional[tuple[Scenario, Counterexample]]:
    """The first scenario of `pool` (in its order) that breaks `invariant`,
    checking in batches that grow; those a budget stopped undecided are
    recorded."""
    batch = max(8, 4 * max(runner.workers, 1))
    at = 0
    while at < len(pool):
        chunk = pool[at:at + batch]
        answers: dict[int, dict[str, Any]] = {}
        tasks = [task_for(s, budget, invariants=[invariant], first=True, max_memory_mib=runner.memory_per_task) for s in chunk]

        def done(i: int, answer: dict[str, Any]) -> None:
            answers[i] = answer
            result.tried += 1
            if progress is not None:
                progress(result.tried, len(pool))

        runner.run(tasks, done)
        for i, scenario in enumerate(chunk):
            answer = answers[i]
            if "result" not in answer:
                reason = answer.get("error") or answer.get("failed")
                raise SpecError(scenario.source, "", f"candidate {_label(scenario)} could not be checked: {reason}")
            verdict = answer["result"]["verdicts"][invariant]
            if verdict["outcome"] == "violated":
                return scenario, trace.from_json(answer["counterexamples"][invariant])
            if not answer["result"]["complete"] and undecided:
                result.undecided.append(_label(scenario))
        at += len(chunk)
        batch = min(batch * 2, 512)
    return None


def _label(s: Scenario) -> str:
    return (f"B={s.block_size} L={s.prompt_size} pool={s.pool} {s.device} {s.reuse} appends="
            f"[{', '.join(b.label for b in s.branches)}]")


# -- writing the result ----------------------------------------------------------------
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def _code_from(ref: str, scenario: Scenario, folder: Path) -> str:
    """A scenario's allocator or scheduler reference, for a file in
    `folder`: a module stays as it is; a path (relative to the scenario's
    own folder) is given relative to `folder`, so the file finds the same
    code."""
    base = Path(scenario.allocator_base or Path(scenario.source).parent)
    path = allocator_file(ref, base)
    if path is None:
        return ref
    return f"{Path(os.path.relpath(path, Path(folder).resolve())).as_posix()}:{ref.rpartition(':')[2]}"


def scenario_toml(scenario: Scenario, description: str, expect: str, folder: Union[str, Path] = ".") -> str:
    """A scenario file for `scenario`, to be written in `folder` (its
    protocol by built-in name when it is one, else inline; its allocator
    or scheduler code by a reference that holds from there, and no
    `reuse`, which such code does not follow)."""
    name = scenario.protocol.name
    builtin = name in builtin_names() and for_scenario(load_builtin(name), scenario.cache, "").definition == scenario.protocol.definition
    code = scenario.allocator or scenario.scheduler
    if code is not None:
        key = "allocator" if scenario.allocator is not None else "scheduler"
        checked = f"{key} = {_toml_value(_code_from(code, scenario, Path(folder)))}"
    else:
        checked = f"protocol = {_toml_value(name) if builtin else _toml_value(scenario.protocol.definition)}"
    lines = [f"description = {_toml_value(description)}", f"expect = {_toml_value(expect)}", checked,
             f"block_size = {scenario.block_size}", f"prompt = {scenario.prompt}"]
    if scenario.cache:
        lines.append('cache = "prefix"')
        definition = scenario.definition()       # a transfer scenario's keys, where they differ from their defaults
        lines += [f"{key} = {_toml_value(definition[key])}" for key in TRANSFER_KEYS if key in definition]
    default = harness_pool(scenario.block_size, scenario.prompt, scenario.branches, scenario.cache) if code is not None \
        else default_pool(scenario.protocol, scenario.block_size, scenario.prompt, scenario.branches, scenario.cache)
    if scenario.pool != default:
        lines.append(f"pool = {scenario.pool}")
    lines.append(f"device = {_toml_value(scenario.device)}")
    if code is None:
        lines.append(f"reuse = {_toml_value(scenario.reuse)}")
    for b in scenario.branches:
        lines.append("[[branch]]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in branch_definition(b).items() if value is not False]
    return "\n".join(lines) + "\n"


def write_shrunk(shrunk: Shrunk, out_dir: Union[str, Path]) -> list[Path]:
    """Write the smallest scenario as `<name>.toml` and its shortest
    counterexample as `<name>.<invariant>.json` (what `cowcheck check` on the
    TOML names it: `<name>+<digest>` for engine code whose tree has one),
    where name is `<original>-shrunk-<invariant>`."""
    from cowcheck.traces.output import coded_name, file_for, safe_name
    if shrunk.counterexample is None:
        return []
    out_dir = Path(out_dir)
    stem = safe_name(f"{shrunk.original.name}-shrunk-{shrunk.invariant}")
    toml_path = out_dir / f"{stem}.toml"
    cx_path = file_for(out_dir, coded_name(stem, shrunk.counterexample.allocator_code), shrunk.invariant)
    where = f" in {shrunk.original_length} actions" if shrunk.original_length is not None else ""
    description = (f"Shrunk by `cowcheck shrink` from {shrunk.original.name} ({shrunk.describe(shrunk.original)}, "
                   f"{shrunk.invariant}{where}) to the smallest scenario that still breaks it "
                   f"({shrunk.counterexample.length} actions here).")
    atomic.write_text(toml_path, scenario_toml(shrunk.scenario, description, f"violates {shrunk.invariant}", out_dir))
    try:
        scenario = load_scenario(toml_path)      # as `check` will read it
    except SpecError:
        toml_path.unlink()                       # never leave a file that cowcheck cannot load
        raise
    cx = shrunk.counterexample
    renamed = replace(cx, scenario=scenario, origin=str(toml_path))
    renamed.write(cx_path)
    shrunk.paths = [str(toml_path), str(cx_path)]
    return [toml_path, cx_path]
