"""Every schedule of an engine scenario within its bounds, each run from
scratch, and the verdicts: per invariant, holds or the shortest schedule
that breaks it (cowcheck.enginetest.run).

The choices: each request's submission at each step up to its
`submit_within` (counted from its `after` request's end), and each cancel
never, or at each step the scenario's run without cancels takes, in flight
or after the update. Schedules run shortest first, so the first that
breaks an invariant is a shortest one. `max_schedules` bounds the search;
a result says when it stopped it."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from cowcheck.enginetest import engine, trace
from cowcheck.enginetest.run import AFTER_UPDATE, IN_FLIGHT, Harness, Outcome, Schedule, harness, run
from cowcheck.enginetest.scenario import INVARIANTS, EngineScenario, expect_lines
from cowcheck.enginetest.shadow import Violation

MAX_SCHEDULES = 1000

#: the `device` of an engine-test result (check --json's shape): the real engine on the CPU, no device model
DEVICE = "cpu"


@dataclass(frozen=True)
class Verdict:
    invariant: str
    holds: bool
    schedule: Optional[Schedule] = None
    step: int = -1
    detail: str = ""


@dataclass
class EngineResult:
    scenario: EngineScenario
    verdicts: list[Verdict]
    schedules: int
    distinct: int
    total: int
    bounded: bool
    seconds: float
    release: engine.Release
    #: per invariant broken, its shortest schedule, that schedule's outcome
    #: (steps, outputs, traceback) and the violation
    witnesses: dict[str, tuple[Schedule, Outcome, Violation]]

    def violated(self) -> set[str]:
        return {v.invariant for v in self.verdicts if not v.holds}

    def meets_expect(self) -> Optional[bool]:
        if self.scenario.expect is None:
            return None
        return self.violated() == set(self.scenario.expect) and not (self.bounded and self.violated() < self.scenario.expect)

    def to_json(self, written: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """The result in the shape of `check --json`'s (result.schema.json,
        engine "engine-test"), with the schedule counts and the release;
        `written`: the counterexample file of each broken invariant."""
        written = written or {}
        verdicts = {}
        for v in self.verdicts:
            verdicts[v.invariant] = {"holds": v.holds, "outcome": "holds" if v.holds else "violated",
                                     "kind": trace.invariant_kind(v.invariant),
                                     # as its counterexample's: the engine steps the schedule ran
                                     "length": None if v.holds else len(self.witnesses[v.invariant][1].steps),
                                     "counterexample": None if v.holds else written.get(v.invariant),
                                     **({} if v.holds or v.schedule is None else
                                        {"schedule": {"events": v.schedule.events(), "step": v.step, "message": v.detail}})}
        kinds = {trace.invariant_kind(i) for i in self.violated()}
        summary = ("unsafe" if "harm" in kinds else "safe but undisciplined" if kinds else "safe and disciplined")
        expect = expect_lines(self.scenario.expect) if self.scenario.expect is not None else []
        failures = [f"{i} holds, expected violated" for i in sorted((self.scenario.expect or set()) - self.violated())]
        failures += [f"{i} is violated, not expected" for i in sorted(self.violated() - set(self.scenario.expect or ()))
                     if self.scenario.expect is not None]
        return {
            "format": 1, "engine": "engine-test", "scenario": self.scenario.name,
            "source": self.scenario.source or "<scenario>", "protocol": "transformers continuous batching",
            "device": DEVICE, "reuse": None, "transfer": None, "seconds": round(self.seconds, 2),
            "verdicts": verdicts, "summary": summary,
            "category": "partial" if self.bounded and summary != "unsafe" else summary,
            "complete": not self.bounded, "stopped": f"--max-schedules {self.schedules}" if self.bounded else None,
            "expect": expect, "expect_met": self.meets_expect() is not False, "expect_failures": failures,
            "schedules": self.schedules, "distinct": self.distinct, "total_schedules": self.total,
            "release": {"transformers": self.release.transformers, "torch": self.release.torch, "source": self.release.source},
        }

    def counterexample(self, invariant: str) -> dict[str, Any]:
        """The shortest schedule that breaks `invariant` as its counterexample
        file has it (cowcheck.enginetest.trace)."""
        schedule, outcome, violation = self.witnesses[invariant]
        return trace.trace_json(self.scenario, invariant, schedule, violation, outcome, self.release)


def schedules(sc: EngineScenario, steps: int) -> list[Schedule]:
    """Every schedule, shortest first."""
    subs = [[(r.name, k) for k in range(r.submit_within + 1)] for r in sc.requests]
    cancel_choices = [[None] + [(rid, s, p) for s in range(steps) for p in (IN_FLIGHT, AFTER_UPDATE)] for rid in sc.cancels]
    out = [Schedule(tuple(s), tuple(c for c in cs if c is not None))
           for s in itertools.product(*subs) for cs in itertools.product(*cancel_choices)]
    return sorted(out, key=lambda x: (x.length(), x.events()))


def explore(sc: EngineScenario, h: Optional[Harness] = None, max_schedules: int = MAX_SCHEDULES,
            progress: Optional[Callable[[int, int], None]] = None) -> EngineResult:
    h = h or harness()
    start = time.monotonic()      # the exploration's time, not the import and the model's building
    _, _, release = engine.modules()
    base = run(h, sc, Schedule(tuple((r.name, 0) for r in sc.requests), ()))
    every = schedules(sc, max(1, len(base.steps)))
    chosen = every[:max_schedules]
    found: dict[str, tuple[Schedule, Outcome, Violation]] = {}
    seen: set[Any] = set()
    for i, schedule in enumerate(chosen):
        outcome = run(h, sc, schedule)
        seen.add(outcome.fingerprint)
        for v in outcome.violations:
            if v.invariant not in found:
                found[v.invariant] = (schedule, outcome, v)
        if progress:
            progress(i + 1, len(chosen))
    verdicts = [Verdict(inv, False, found[inv][0], found[inv][2].step, found[inv][2].detail) if inv in found
                else Verdict(inv, True) for inv in INVARIANTS]
    return EngineResult(sc, verdicts, len(chosen), len(seen), len(every), len(every) > len(chosen),
                        time.monotonic() - start, release, found)


def write_counterexamples(result: EngineResult, out_dir: Path) -> dict[str, str]:
    """Write each broken invariant's shortest schedule into `out_dir` as
    `<scenario>.<invariant>.json`; remove the scenario's engine files of
    invariants a complete run found to hold. The paths written, by invariant."""
    written = {inv: str(trace.write(result.counterexample(inv), Path(out_dir))) for inv in sorted(result.violated())}
    if not result.bounded:
        trace.remove_stale(Path(out_dir), result.scenario.name, [v.invariant for v in result.verdicts if v.holds])
    return written
