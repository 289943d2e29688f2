"""Fuzzing the actual engine (docs/how-to/fuzz.md, "On the actual engine"):
random engine scenarios (cowcheck.enginetest.scenario's format), each run
through the engine-test exploration (cowcheck.enginetest.explore: every
schedule of its submissions and cancels, shortest first) within a budget
of schedules, stopped at the first violation (or not, keep_going), the
first scenario that broke each invariant reduced one change at a time.

What the generator varies (B is 4, the least page the engine takes): prompts cut at a block boundary, one token
past it or one short; prompts that share an earlier one's prefix (cut the
same ways) or repeat it; `after` chains that warm the cache; submissions
spread over steps; forks (num_return_sequences 2 or 3); one cancel, of a
request or of a forked child, which the exploration lands at every step,
in flight and after the update; pools just big enough for the largest
request, so that cached blocks are evicted.

Scenario i of seed s is drawn from `"engine:<s>:<i>"` alone, as the other
kinds are (cowcheck.fuzzing.generators). Each scenario's exploration is a
task of the sweep's Runner (`engine_cell`: plain data in and out), run
serially in this process or on Dask as the other kinds' checks
(cowcheck.fuzzing.batches); each process that runs them builds the model
once."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union

from cowcheck.fuzzing.batches import batch_size, search
from cowcheck.fuzzing.draws import Draw, RandomDraw
from cowcheck.fuzzing.generators import Knobs
from cowcheck.fuzzing.report import Broken, Fuzz, Tried
from cowcheck.model.errors import SpecError

if TYPE_CHECKING:
    from cowcheck.enginetest.explore import EngineResult, Verdict
    from cowcheck.enginetest.run import Harness
    from cowcheck.enginetest.scenario import EngineScenario
    from cowcheck.sweeps.runner import Runner

KIND = "engine"
#: each scenario's exploration, unless told otherwise: this many schedules, shortest first
DEFAULT_MAX_SCHEDULES = 12
#: greedy reduction: rounds at most (each one change smaller)
GREEDY_ROUNDS = 20
#: the first token of request i's own tokens (distinct per request, below the model's 256)
_OWN = 10
_SPAN = 40
#: tokens per block: transformers' least page size (its continuous batching refuses a smaller one)
BLOCK = 4
#: an engine scenario's default pool (cowcheck.enginetest.scenario): a drawn pool below it is tight
ROOMY = 8


@dataclass(frozen=True)
class EngineDrawn:
    """A drawn engine scenario, its index and its TOML data."""
    index: int
    scenario: "EngineScenario"
    data: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class EngineShrunk:
    """The reduced scenario: its data, the verdict there, and the effort."""
    data: dict[str, Any]
    verdict: "Verdict"
    #: every invariant it breaks (its file expects them all)
    violated: tuple[str, ...]
    smaller: bool
    tried: int
    seconds: float

    def describe(self) -> str:
        return describe(self.data)


@dataclass
class EngineFinding(Broken):
    """An invariant a drawn engine scenario broke: the first such scenario,
    its shortest schedule, how many scenarios broke it, and the reduced one."""
    invariant: str
    drawn: EngineDrawn
    verdict: "Verdict"
    violated: tuple[str, ...]
    scenarios: int = 1
    shrunk: Optional[EngineShrunk] = None
    files: list[str] = field(default_factory=list)

    @property
    def length(self) -> int:
        return _length(self.verdict)

    def shrunk_to(self) -> tuple[str, str]:
        """The shrunk scenario in words and its schedule's length, for the report's table."""
        s = self.shrunk
        return ("(not shrunk)", "") if s is None else (s.describe(), str(_length(s.verdict)))

    def to_json(self) -> dict[str, Any]:
        s = self.shrunk
        return self.entry(self.drawn.data, self.length, None if s is None else {
            "scenario": s.data, "length": _length(s.verdict), "smaller": s.smaller, "tried": s.tried, "seconds": round(s.seconds, 3)})


def _length(verdict: "Verdict") -> int:
    """A broken verdict's shortest schedule's length."""
    return verdict.schedule.length() if verdict.schedule else 0


# -- the generator ---------------------------------------------------------------------------------

def _cut(draw: Draw, block: int, most: int) -> int:
    """A prompt length with pressure: a block boundary, one token past it,
    one short of it (at least 1, at most `most`)."""
    k = draw.integer(1, 2)
    return max(1, min(most, draw.choice((k * block, k * block + 1, k * block - 1))))


def _blocks(tokens: int, block: int) -> int:
    return -(-tokens // block)


def engine_data(draw: Draw, knobs: Knobs) -> dict[str, Any]:
    """One engine scenario's TOML data, from the choices of `draw`."""
    block = BLOCK
    most = 2 * block + 1
    n = draw.integer(2, 3) if knobs.forks and draw.boolean(0.5) else 1
    new = draw.integer(1, 3)
    requests: list[dict[str, Any]] = []
    for i in range(draw.integer(1, max(1, min(knobs.max_branches, 3)))):
        own = list(range(_OWN + _SPAN * i, _OWN + _SPAN * i + most))
        shape = draw.choice(("own", "shared", "same")) if requests else "own"
        if shape == "own":
            prompt = own[:_cut(draw, block, most)]
        else:
            base = draw.choice(requests)["prompt"]
            if shape == "same":
                prompt = list(base)
            else:
                prefix = base[:_cut(draw, block, len(base))]
                prompt = prefix + own[:draw.integer(0 if len(prefix) < len(base) else 1, block)]
        request: dict[str, Any] = {"name": "abc"[i], "prompt": prompt}
        if requests and draw.boolean(0.4):
            request["after"] = draw.choice(requests)["name"]
        if draw.boolean(0.4):
            request["submit_within"] = draw.integer(1, 2)
        requests.append(request)
    engine: dict[str, Any] = {"block_size": block, "max_new_tokens": new, "num_return_sequences": n}
    if knobs.cancels and draw.boolean(0.6):
        target = draw.choice(requests)["name"]
        engine["cancel"] = [f"{target}__child#{draw.integer(0, n - 2)}" if n > 1 and draw.boolean(0.6) else target]
    need = max(_blocks(len(r["prompt"]) + new, block) * n for r in requests)
    engine["pool"] = draw.integer(need, need + 1) if knobs.tight_pools and draw.boolean(0.4) \
        else max(ROOMY, sum(_blocks(len(r["prompt"]) + new, block) * n for r in requests))
    return {"engine": engine, "request": requests}


def draw_engine(seed: int, index: int, knobs: Knobs = Knobs()) -> EngineDrawn:
    """Engine scenario `index` of `seed`: the same on every call."""
    data = engine_data(RandomDraw(f"{KIND}:{seed}:{index}"), knobs)
    return EngineDrawn(index, _parsed(data, f"fuzz-{KIND}-s{seed}-{index}"), data)


def _parsed(data: dict[str, Any], name: str) -> "EngineScenario":
    from cowcheck.enginetest.scenario import parse
    return parse(data, name)


def describe(data: dict[str, Any]) -> str:
    """A scenario in one line: its engine settings and requests."""
    e = data["engine"]
    parts = [f"B {e['block_size']}, pool {e['pool']}, {e['max_new_tokens']} new"]
    if e.get("num_return_sequences", 1) > 1:
        parts.append(f"n {e['num_return_sequences']}")
    for r in data["request"]:
        extra = "".join([f" after {r['after']}" if r.get("after") else "",
                         f" within {r['submit_within']}" if r.get("submit_within") else ""])
        parts.append(f"{r['name']}: {len(r['prompt'])} tokens{extra}")
    if e.get("cancel"):
        parts.append(f"cancel {', '.join(e['cancel'])}")
    return "; ".join(parts)


# -- one change smaller --------------------------------------------------------------------------

def neighbours(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scenarios one change smaller than `data`, biggest changes first:
    a request dropped (what waits for it waits for nothing, a cancel of it
    is dropped), the cancel dropped, a forked child's cancel made its
    parent's (so that the fork may go next), a fork fewer, an `after` dropped, a
    submission spread a step less, a token fewer to generate, a prompt a
    token shorter, the pool at the largest request's need or a block
    smaller (never below that need: the engine would wait forever). B stays: the engine takes none smaller."""
    e, requests = data["engine"], data["request"]
    for r in requests:
        if len(requests) > 1:
            yield _dropped(data, r["name"])
    if e.get("cancel"):
        yield _with(data, "cancel", None)
    for c in e.get("cancel", []):
        parent = c.split("__child#")[0]
        if _child(c) >= 0 and parent not in e["cancel"]:
            yield _with(data, "cancel", [parent if x == c else x for x in e["cancel"]])
    n = e.get("num_return_sequences", 1)
    if n > 1:
        fewer = _with(data, "num_return_sequences", n - 1)
        kept = [c for c in e.get("cancel", []) if _child(c) < n - 2]
        yield _with(fewer, "cancel", kept or None)
    for i, r in enumerate(requests):
        if r.get("after"):
            yield _with(data, "after", None, i)
        if r.get("submit_within"):
            yield _with(data, "submit_within", r["submit_within"] - 1, i)
    if e["max_new_tokens"] > 1:
        yield _with(data, "max_new_tokens", e["max_new_tokens"] - 1)
    for i, r in enumerate(requests):
        if len(r["prompt"]) > 1:
            yield _with(data, "prompt", r["prompt"][:-1], i)
    need = max(_blocks(len(r["prompt"]) + e["max_new_tokens"], e["block_size"]) * n for r in requests)
    if e["pool"] > need:
        yield _with(data, "pool", need)
        if e["pool"] > need + 1:
            yield _with(data, "pool", e["pool"] - 1)


def _child(request_id: str) -> int:
    """The child index of a forked child's id (`a__child#0`), -1 for a request."""
    _, sep, k = request_id.partition("__child#")
    return int(k) if sep else -1


def _with(data: dict[str, Any], key: str, value: Any, request: Optional[int] = None) -> dict[str, Any]:
    """A copy of `data` with one key of the engine table (or of request
    `request`) set to `value`, or dropped where it is None."""
    copied: dict[str, Any] = json.loads(json.dumps(data))
    table = copied["engine"] if request is None else copied["request"][request]
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
    return copied


def _dropped(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of `data` without request `name`: what waits for it waits for
    what it waited for, and a cancel of it (or of its children) is dropped."""
    copied: dict[str, Any] = json.loads(json.dumps(data))
    gone = next(r for r in copied["request"] if r["name"] == name)
    copied["request"] = [r for r in copied["request"] if r["name"] != name]
    for r in copied["request"]:
        if r.get("after") == name:
            if gone.get("after"):
                r["after"] = gone["after"]
            else:
                r.pop("after")
    kept = [c for c in copied["engine"].get("cancel", []) if c.split("__child#")[0] != name]
    return _with(copied, "cancel", kept or None)


# -- the run ---------------------------------------------------------------------------------------

def judged(selected: Optional[tuple[str, ...]], skipped: tuple[str, ...]) -> list[str]:
    """The engine's invariants judged: those `selected` (all when None), less those `skipped`."""
    from cowcheck.enginetest.scenario import INVARIANTS
    for ident in (*(selected or ()), *skipped):
        if ident not in INVARIANTS:
            raise SpecError("--skip" if ident in skipped else "--invariant", "",
                            f"the engine judges no invariant {ident!r}; allowed: {', '.join(INVARIANTS)}")
    return [i for i in INVARIANTS if (selected is None or i in selected) and i not in skipped]


def unavailable() -> Optional[str]:
    """Why the engine cannot be fuzzed here (torch or transformers missing), in one line; None when it can."""
    from cowcheck.enginetest import missing
    return missing()


def explored(scenario: "EngineScenario", max_schedules: int) -> "EngineResult":
    """The engine-test exploration of one scenario, on the model this
    process built once (cowcheck.enginetest.run.harness keeps it)."""
    from cowcheck.enginetest.explore import explore, harness
    h = harness()
    with _quiet(h):
        return explore(scenario, h, max_schedules=max_schedules)


class _quiet:
    """transformers' warnings held to errors while the engine runs (it warns
    of a deprecated name once per schedule)."""

    def __init__(self, h: "Harness"):
        self.logging = h.transformers.logging

    def __enter__(self) -> None:
        self.level = self.logging.get_verbosity()
        self.logging.set_verbosity_error()

    def __exit__(self, *exc: Any) -> None:
        self.logging.set_verbosity(self.level)


def engine_task(data: dict[str, Any], name: str, max_schedules: int) -> dict[str, Any]:
    """One scenario's exploration as plain data (engine_cell's input)."""
    return {"scenario": data, "name": name, "max_schedules": max_schedules}


def engine_cell(task: dict[str, Any]) -> dict[str, Any]:
    """One scenario's exploration, as the sweep's Runner runs a task (in
    this process, or on a Dask worker, which imports torch and transformers
    and builds the model on its first task): its counts and verdicts as
    plain data. A process without torch or transformers answers why
    (`unavailable`, one line), not with a traceback."""
    why = unavailable()
    if why is not None:
        return {"unavailable": why, "host": socket.gethostname(), "pid": os.getpid()}
    checked = explored(_parsed(task["scenario"], task["name"]), task["max_schedules"])
    return {"pid": os.getpid(), "release": checked.release.line(), "schedules": checked.schedules,
            "seconds": checked.seconds, "bounded": checked.bounded, "violated": sorted(checked.violated()),
            "verdicts": [{"invariant": v.invariant, "holds": v.holds, "step": v.step, "detail": v.detail,
                          "schedule": None if v.schedule is None else
                          {"submits": v.schedule.submits, "cancels": v.schedule.cancels}} for v in checked.verdicts]}


def _verdicts(answer: dict[str, Any]) -> list["Verdict"]:
    """An engine_cell answer's verdicts, as the exploration gave them.
    SpecError where the process that ran it has no torch or transformers."""
    from cowcheck.enginetest.explore import Verdict
    from cowcheck.enginetest.run import Schedule
    if "unavailable" in answer:
        raise SpecError("--engine-test", "", f"a worker on {answer['host']} cannot run the engine: {answer['unavailable']}")
    return [Verdict(v["invariant"], v["holds"], None if v["schedule"] is None else Schedule(
        tuple((n, k) for n, k in v["schedule"]["submits"]), tuple((r, s, p) for r, s, p in v["schedule"]["cancels"])),
        v["step"], v["detail"]) for v in answer["verdicts"]]


def _broken(answer: Optional[dict[str, Any]], invariant: str) -> list["Verdict"]:
    """The verdict of an engine_cell answer that breaks `invariant`: one,
    or none (where it holds, or the task failed or never answered)."""
    if answer is None or "failed" in answer:
        return []
    return [v for v in _verdicts(answer) if v.invariant == invariant and not v.holds]


def fuzz_engine(result: Fuzz, runner: "Runner", *, invariants: Optional[tuple[str, ...]], skip: tuple[str, ...],
                do_shrink: bool, began: float, progress: Optional[Callable[[Fuzz], None]] = None) -> None:
    """Draw engine scenarios into `result` in batches on `runner` until a
    violation of a judged invariant (unless keep_going) or the budget's
    end, then reduce the first scenario that broke each (unless not
    `do_shrink`)."""
    wanted = judged(invariants, skip)
    schedules = result.check_budget["max_schedules"]

    def draw(i: int) -> tuple[EngineDrawn, dict[str, Any]]:
        drawn = draw_engine(result.seed, i, result.knobs)
        return drawn, engine_task(drawn.data, drawn.scenario.name, schedules)

    def judge(result: Fuzz, drawn: list[EngineDrawn], answers: dict[int, dict[str, Any]]) -> bool:
        """Record a batch's answers in index order; True when the run stops
        there (a violation, without keep_going)."""
        for i, d in enumerate(drawn):
            answer = answers.get(i)
            if answer is None:
                continue
            tight = d.data["engine"]["pool"] < ROOMY
            if "failed" in answer:
                result.tried.append(Tried(d.index, d.scenario.name, 0, 0.0, {}, False, tight, str(answer["failed"])))
                continue
            broken = {v.invariant: v for v in _verdicts(answer) if not v.holds and v.invariant in wanted}
            result.subject = f"the engine ({answer['release']})"
            result.tried.append(Tried(d.index, d.scenario.name, answer["schedules"], round(answer["seconds"], 3),
                                      {k: _length(v) for k, v in broken.items()}, not answer["bounded"], tight))
            for inv, verdict in broken.items():
                if inv in result.findings:
                    result.findings[inv].scenarios += 1
                else:
                    result.findings[inv] = EngineFinding(inv, d, verdict, tuple(answer["violated"]))  # type: ignore[assignment]
            if broken and not result.keep_going:
                return True
        return False

    search(result, runner, began, progress, draw, judge, engine_cell)
    if do_shrink:
        for finding in result.findings.values():
            assert isinstance(finding, EngineFinding)
            finding.shrunk = shrunk(finding, runner, schedules)


def shrunk(finding: EngineFinding, runner: "Runner", max_schedules: int) -> EngineShrunk:
    """The finding reduced one change at a time (the first smaller
    neighbour that still breaks the invariant, until none does). The
    neighbours run in batches on `runner` (one at a time serially), and the
    first in order that breaks it is taken, with the count of those tried
    up to it: the same reduction and count with any number of workers."""
    began, tried = time.perf_counter(), 0
    data, verdict, violated = finding.drawn.data, finding.verdict, finding.violated
    name, batch = finding.drawn.scenario.name, batch_size(runner)
    for _ in range(GREEDY_ROUNDS):
        candidates = []
        for candidate in neighbours(data):
            try:
                _parsed(candidate, name)
            except SpecError:
                continue
            candidates.append(candidate)
        smaller = None
        for start in range(0, len(candidates), batch):
            part = candidates[start:start + batch]
            answers: dict[int, dict[str, Any]] = {}
            runner.run([engine_task(c, name, max_schedules) for c in part], answers.__setitem__, cell=engine_cell)
            hit = next(((i, v) for i in range(len(part)) for v in _broken(answers.get(i), finding.invariant)), None)
            tried += len(part) if hit is None else hit[0] + 1
            if hit is not None:
                smaller = (part[hit[0]], hit[1], tuple(answers[hit[0]]["violated"]))
                break
        if smaller is None:
            break
        data, verdict, violated = smaller
    return EngineShrunk(data, verdict, violated, data != finding.drawn.data, tried, time.perf_counter() - began)


# -- the files -------------------------------------------------------------------------------------

def engine_toml(data: dict[str, Any], description: str, expect: tuple[str, ...]) -> str:
    """An engine scenario file (specs/engine/'s format) of `data`."""
    lines = [f"description = {json.dumps(description)}", f"expect = {json.dumps([f'violates {i}' for i in expect])}", "[engine]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in data["engine"].items()]
    for r in data["request"]:
        lines += ["[[request]]"] + [f"{k} = {json.dumps(v)}" for k, v in r.items()]
    return "\n".join(lines) + "\n"


def _record(result: Fuzz, finding: EngineFinding, verdict: "Verdict", name: str) -> dict[str, Any]:
    """A finding's result file: where it was drawn and its shortest schedule."""
    return {"scenario": name, "invariant": finding.invariant, "engine": result.subject, "seed": result.seed,
            "index": finding.drawn.index, "generator": result.generator, "max_schedules": result.check_budget["max_schedules"],
            "schedule": verdict.schedule.events() if verdict.schedule else [], "length": _length(verdict),
            "step": verdict.step, "detail": verdict.detail}


def write_engine_fuzz(result: Fuzz, out_dir: Union[str, Path]) -> list[Path]:
    """Per finding: the drawn scenario (`fuzz-engine-s<seed>-<index>.toml`,
    expecting every invariant it broke, so `cowcheck engine-test
    --max-schedules N` meets it) with its result
    (`....<invariant>.json`), and the reduced one
    (`...-shrunk-<invariant>.toml`, expecting the invariant) with its own."""
    from cowcheck import atomic
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    budget = result.check_budget["max_schedules"]
    for finding in result.findings.values():
        assert isinstance(finding, EngineFinding)
        name = finding.drawn.scenario.name
        where = f"Drawn by `cowcheck fuzz --engine-test` (seed {result.seed}, scenario {finding.drawn.index}, generator " \
                f"version {result.generator}, {budget} schedules at most) on {result.subject}"
        files = [(out_dir / f"{name}.toml", engine_toml(finding.drawn.data, f"{where}: breaks {', '.join(finding.violated)}.",
                                                        finding.violated)),
                 (out_dir / f"{name}.{finding.invariant}.json", _record(result, finding, finding.verdict, name))]
        s = finding.shrunk
        if s is not None:
            small = f"{name}-shrunk-{finding.invariant}"
            files += [(out_dir / f"{small}.toml", engine_toml(s.data, f"{where}, reduced for {finding.invariant}: breaks "
                                                              f"{', '.join(s.violated)}.", s.violated)),
                      (out_dir / f"{small}.{finding.invariant}.json", _record(result, finding, s.verdict, small))]
        for path, content in files:
            atomic.write_text(path, content if isinstance(content, str) else json.dumps(content, indent=1, sort_keys=True) + "\n")
        finding.files = [str(p) for p, _ in files]
        written += [p for p, _ in files]
    return written
