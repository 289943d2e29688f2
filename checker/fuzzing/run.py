"""A fuzz run (docs/how-to/fuzz.md): scenarios drawn from a seed
(cowcheck.fuzzing.generators), checked in batches as the sweep's tasks
(cowcheck.sweeps.runner: serially, on an embedded Dask cluster or on an
existing one), each exhaustively within a budget; at the first violation
(or, with keep_going, at the end of the budget) the first scenario that
broke each invariant is reduced (cowcheck.fuzzing.greedy) and shrunk
(cowcheck.sweeps.shrink) to the smallest scenario that still breaks it.

Reproducible: scenario i depends only on the seed, the generators'
version, the kind, the subject and the knobs; batches are judged in index
order, and a run that stops at its first violation counts the scenarios up
to it, not those its batch checked after it. So the same seed finds the
same scenario, reports the same counts and writes the same files, with any
number of workers. A budget in seconds (of the run, or of each scenario's
check) is the exception: where it cuts depends on the machine."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from cowcheck.model.errors import SpecError
from cowcheck.model.harness import CACHE_REQUIRED, load_factory
from cowcheck.model.protocol import Protocol
from cowcheck.model.scenario import Scenario, scenario_from_dict

from cowcheck import api
from cowcheck.engines import counterexample as trace
from cowcheck.engines.invariants import ALLOCATOR_ERROR, BY_ID, CACHE_INVARIANTS, HOST_INVARIANTS, INVARIANTS
from cowcheck.fuzzing.batches import search
from cowcheck.fuzzing.generators import KINDS, Code, Drawn, Knobs, Subject, draw_scenario, kind_for
from cowcheck.fuzzing.greedy import neighbours
from cowcheck.sweeps.runner import NoWorkers, Runner, task_for
from cowcheck.sweeps.shrink import Shrunk, scenario_toml, shrink, write_shrunk
from cowcheck.fuzzing.report import Finding, Fuzz, Tried

#: each scenario's check, unless told otherwise
DEFAULT_CHECK_BUDGET = {"max_states": 20_000, "seconds": 10.0}
#: scenarios drawn at most, unless told otherwise
DEFAULT_SCENARIOS = 200
#: greedy reduction: rounds at most (each one change smaller)
GREEDY_ROUNDS = 40


def subject_kind(protocol: Optional[Union[Protocol, str, Path]], allocator: Optional[str],
                 kind: Optional[str], scheduler_code: Optional[str] = None) -> tuple[Subject, str, str]:
    """What is fuzzed (a protocol, or allocator or scheduler code), its
    label, and the scenario kind: given, or the protocol's own
    (generators.kind_for), or an allocator adapter's (cache when it answers
    admit, else fork), or transfer for scheduler code (P/D requests)."""
    if sum(x is not None for x in (protocol, allocator, scheduler_code)) != 1:
        raise SpecError("fuzz", "", "give one of --protocol (a protocol to fuzz), --allocator (allocator code) or "
                        "--scheduler-code (scheduler code)")
    if kind is not None and kind not in KINDS:
        raise SpecError("--kind", "", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    if protocol is not None:
        resolved = api.resolve_protocol(protocol)
        own = kind_for(resolved)
        if kind is not None and own != "fork" and kind == "fork":
            raise SpecError("--kind", "", f"protocol {resolved.name!r} runs in {own} scenarios only, not fork scenarios")
        return resolved, resolved.name, kind or own
    if scheduler_code is not None:
        if kind == "fork":
            raise SpecError("--kind", "", "a scheduler admits requests with their own prompts: scheduler code is fuzzed "
                            "with cache or transfer scenarios")
        load_factory(scheduler_code, Path.cwd(), "--scheduler-code", "scheduler")
        return Code(scheduler_code, "scheduler"), scheduler_code, kind or "transfer"
    assert allocator is not None
    if kind == "transfer":
        raise SpecError("--kind", "", "allocator code runs no transfers: transfer scenarios are fuzzed with --protocol "
                        "or --scheduler-code")
    if kind is None:
        factory = load_factory(allocator, Path.cwd(), "--allocator")
        try:
            adapter = factory(8, 2)
        except SpecError:
            raise
        except Exception as err:     # the user's code: one line, not a traceback
            raise SpecError("--allocator", "", f"{allocator}(8, 2) failed: {type(err).__name__}: {err}") from None
        kind = "cache" if all(callable(getattr(adapter, m, None)) for m in CACHE_REQUIRED) else "fork"
    return Code(allocator), allocator, kind


def judged(drawn: Drawn, selected: Optional[tuple[str, ...]] = None, skipped: tuple[str, ...] = ()) -> list[str]:
    """The invariants a drawn scenario is checked on: every one its kind
    has (allocator-error for code), less no-deadlock where the pool is
    tighter than the default (any protocol may wait for memory there), and
    only those `selected` when given, less those `skipped`."""
    s = drawn.scenario
    invariants = INVARIANTS + (CACHE_INVARIANTS if s.cache else ()) + (HOST_INVARIANTS if s.transfers else ()) \
        + ((ALLOCATOR_ERROR,) if s.allocator is not None else ())
    ids = [inv.id for inv in invariants if not (drawn.tight and inv.id == "no-deadlock")]
    return [i for i in ids if (selected is None or i in selected) and i not in skipped]


def fuzz(protocol: Union[Protocol, str, Path, None] = None, *, allocator: Optional[str] = None,
         scheduler_code: Optional[str] = None, kind: Optional[str] = None,
         seed: int = 0, scenarios: Optional[int] = DEFAULT_SCENARIOS, seconds: Optional[float] = None,
         check_budget: Optional[dict[str, Any]] = None, keep_going: bool = False, knobs: Knobs = Knobs(),
         invariants: Optional[tuple[str, ...]] = None, skip: tuple[str, ...] = (), do_shrink: bool = True, workers: Optional[int] = 0,
         scheduler: Optional[str] = None, runner: Optional[Runner] = None, engine_test: bool = False,
         progress: Optional[Callable[[Fuzz], None]] = None) -> Fuzz:
    """Draw scenarios of `kind` for a protocol (an object, a built-in name or
    a file), allocator code or scheduler code ("module:factory": through
    the engine or the scheduler harness; `scheduler` is the Dask
    scheduler's address, as in `cowcheck.sweep`), check each within
    `check_budget` (max_states, seconds; default DEFAULT_CHECK_BUDGET), and
    stop at the first violation, or with `keep_going` at the end of the
    budget: `scenarios` drawn, `seconds` spent (either may be None, not
    both). Then shrink the first scenario that broke each invariant (unless
    `do_shrink` is False). `invariants` judges only those, `skip` all but
    those (an engine's known findings, to look past them). workers=0 (the default) checks in this process;
    otherwise on Dask as `cowcheck.sweep` does. Writes nothing
    (`write_fuzz` does). A Ctrl-C ends the run with what was found, unshrunk
    (`interrupted`); a cluster left without workers likewise (`stopped`).

    `engine_test`: the actual engine instead (`cowcheck engine-test`'s
    transformers continuous batching: engine scenarios, each explored
    within `check_budget["max_schedules"]` schedules, serially or on Dask
    as the other kinds; needs torch and transformers where it runs)."""
    if engine_test:
        from cowcheck.fuzzing.engine import DEFAULT_MAX_SCHEDULES, KIND, judged as engine_judged
        engine_subject(protocol, allocator, scheduler_code, kind, here=(scheduler if runner is None else runner.scheduler) is None)
        label, kind = "the engine", KIND
        check_budget = {"max_schedules": int((check_budget or {}).get("max_schedules", DEFAULT_MAX_SCHEDULES))}
    else:
        subject, label, kind = subject_kind(protocol, allocator, kind, scheduler_code)
        check_budget = dict(DEFAULT_CHECK_BUDGET if check_budget is None else check_budget)
    if scenarios is None and seconds is None:
        raise SpecError("fuzz", "", "give a budget: a number of scenarios, seconds, or both")
    if engine_test:
        engine_judged(invariants, skip)
    else:
        for ident in (*(invariants or ()), *skip):
            if ident not in BY_ID:
                raise SpecError("--invariant", "", f"unknown invariant {ident!r}; allowed: {', '.join(BY_ID)}")
    budget = {"scenarios": scenarios, "seconds": seconds, "invariants": list(invariants) if invariants else None, "skip": list(skip)}
    own = runner is None
    runner = runner or Runner(workers, scheduler)
    result = Fuzz(label, kind, seed, knobs, budget, check_budget, keep_going, workers=runner.workers if runner.scheduler is None else 0,
                  scheduler=runner.scheduler)
    began = time.perf_counter()
    try:
        if engine_test:
            from cowcheck.fuzzing.engine import fuzz_engine
            fuzz_engine(result, runner, invariants=invariants, skip=skip, do_shrink=do_shrink, began=began, progress=progress)
        else:
            _search(result, subject, invariants, skip, runner, began, progress)
            if do_shrink and not result.interrupted and result.stopped is None:
                for finding in result.findings.values():
                    finding.shrunk = _shrunk(finding, runner)
    except KeyboardInterrupt:
        result.interrupted = True
    except NoWorkers as lost:
        result.stopped = str(lost)
    finally:
        result.seconds = time.perf_counter() - began
        if own:
            try:
                runner.close()
            except KeyboardInterrupt:
                result.interrupted = True
    return result


def engine_subject(protocol: Any, allocator: Optional[str], scheduler_code: Optional[str], kind: Optional[str],
                   here: bool = True) -> None:
    """SpecError unless the actual engine can be fuzzed as asked: nothing
    else given, no other kind, and torch and transformers importable
    `here` (serially or on an embedded cluster, whose workers share this
    environment; on an existing cluster each worker answers for itself,
    cowcheck.fuzzing.engine.engine_cell)."""
    from cowcheck.fuzzing.engine import KIND, unavailable
    if any(x is not None for x in (protocol, allocator, scheduler_code)):
        raise SpecError("--engine-test", "", "the actual engine is fuzzed alone: give --engine-test without --protocol, "
                        "--allocator or --scheduler-code")
    if kind is not None and kind != KIND:
        raise SpecError("--kind", "", f"the actual engine runs engine scenarios, not {kind} scenarios")
    why = unavailable() if here else None
    if why is not None:
        raise SpecError("--engine-test", "", why)


def _search(result: Fuzz, subject: Subject, invariants: Optional[tuple[str, ...]], skip: tuple[str, ...], runner: Runner, began: float,
            progress: Optional[Callable[[Fuzz], None]]) -> None:
    """Draw and check batches until a violation (unless keep_going) or the budget's end."""
    def draw(i: int) -> tuple[Drawn, dict[str, Any]]:
        d = draw_scenario(result.seed, i, result.kind, subject, result.knobs)
        return d, task_for(d.scenario, result.check_budget, invariants=judged(d, invariants, skip),
                           max_memory_mib=runner.memory_per_task)
    search(result, runner, began, progress, draw, _record)


def _record(result: Fuzz, drawn: list[Drawn], answers: dict[int, dict[str, Any]]) -> bool:
    """Record a batch's answers in index order; True when the run stops
    here (a violation, without keep_going): the scenarios after it are not
    counted, so the count does not depend on the batch size."""
    for i, d in enumerate(drawn):
        answer = answers.get(i)
        if answer is None:
            continue
        if "result" not in answer:
            error = answer.get("error") or answer.get("failed") or "no answer"
            result.tried.append(Tried(d.index, d.scenario.name, 0, 0.0, {}, False, d.tight, str(error)))
            continue
        data = answer["result"]
        broken = {k: v["length"] for k, v in data["verdicts"].items() if v["outcome"] == "violated"}
        result.tried.append(Tried(d.index, d.scenario.name, data.get("states", 0), data["seconds"], broken, data["complete"], d.tight))
        for inv in broken:
            if inv in result.findings:
                result.findings[inv].scenarios += 1
            else:
                cx = trace.from_json(answer["counterexamples"][inv])
                result.findings[inv] = Finding(inv, d, cx)
        if broken and not result.keep_going:
            return True
    return False


def _shrunk(finding: Finding, runner: Runner) -> Shrunk:
    """The finding reduced one change at a time, then shrunk exhaustively
    (no-deadlock only greedily, and never by a pool below the default,
    where every protocol may wait for memory)."""
    inv = finding.invariant
    budget = {"max_states": 200_000, "seconds": 60}
    deadlock = inv == "no-deadlock"
    data, scenario, tried, began = finding.drawn.data, finding.drawn.scenario, 0, time.perf_counter()
    cx = finding.counterexample
    for _ in range(GREEDY_ROUNDS):
        candidates = []
        for candidate in neighbours(data, keep_pool=deadlock):
            try:
                candidates.append((candidate, scenario_from_dict(candidate, scenario.source, Path("."), scenario.name)))
            except SpecError:
                continue
        answers: dict[int, dict[str, Any]] = {}
        runner.run([task_for(s, budget, invariants=[inv], first=True, max_memory_mib=runner.memory_per_task) for _, s in candidates],
                   lambda i, answer: answers.__setitem__(i, answer))
        tried += len(candidates)
        smaller = next((i for i in range(len(candidates)) if answers.get(i, {}).get("result", {}).get("verdicts", {})
                        .get(inv, {}).get("outcome") == "violated"), None)
        if smaller is None:
            break
        data, scenario = candidates[smaller]
        cx = trace.from_json(answers[smaller]["counterexamples"][inv])
    if deadlock:
        shrunk = Shrunk(finding.drawn.scenario, inv, scenario, cx, finding.counterexample.length)
    else:
        try:
            shrunk = shrink(scenario, inv, runner=runner, budget=budget)
        except SpecError:            # a candidate the check refused: the greedy result stands
            shrunk = Shrunk(finding.drawn.scenario, inv, scenario, cx, finding.counterexample.length)
    shrunk.original, shrunk.original_length = finding.drawn.scenario, finding.counterexample.length
    shrunk.tried += tried
    shrunk.seconds = time.perf_counter() - began
    return shrunk


def write_fuzz(result: Fuzz, out_dir: Union[str, Path]) -> list[Path]:
    """Per finding: the drawn scenario that first broke it (`<name>.toml`,
    named for the seed and its index) with its counterexample, and the
    shrunk one (`<name>-shrunk-<invariant>.toml`, as `cowcheck shrink`
    writes it) with its own."""
    from cowcheck.traces.output import file_for
    from cowcheck import atomic
    if result.kind == "engine":
        from cowcheck.fuzzing.engine import write_engine_fuzz
        return write_engine_fuzz(result, out_dir)
    out_dir = Path(out_dir)
    written: list[Path] = []
    for finding in result.findings.values():
        s = finding.drawn.scenario
        toml_path = out_dir / f"{s.name}.toml"
        description = (f"Drawn by `cowcheck fuzz` (seed {result.seed}, scenario {finding.drawn.index}, generator "
                       f"version {result.generator}) for {result.subject}: breaks {finding.invariant} in "
                       f"{finding.counterexample.length} actions.")
        atomic.write_text(toml_path, scenario_toml(s, description, f"violates {finding.invariant}", out_dir))
        loaded = api.as_scenario(toml_path)
        cx_path = file_for(out_dir, s.name, finding.invariant)
        replace(finding.counterexample, scenario=loaded, origin=str(toml_path)).write(cx_path)
        finding.files = [str(toml_path), str(cx_path)]
        if finding.shrunk is not None and finding.shrunk.counterexample is not None:
            finding.files += [str(p) for p in write_shrunk(finding.shrunk, out_dir)]
        written += [Path(p) for p in finding.files]
    return written


def scenario_at(protocol: Union[Protocol, str, Path, None] = None, *, allocator: Optional[str] = None,
                scheduler_code: Optional[str] = None, kind: Optional[str] = None, seed: int = 0, index: int = 0,
                knobs: Knobs = Knobs()) -> Scenario:
    """Scenario `index` of `seed`, as a fuzz run with these arguments draws it."""
    subject, _, kind = subject_kind(protocol, allocator, kind, scheduler_code)
    return draw_scenario(seed, index, kind, subject, knobs).scenario
