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

import gc
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from cowcheck.enginetest import engine
from cowcheck.enginetest.run import AFTER_UPDATE, IN_FLIGHT, Harness, Outcome, Schedule, run
from cowcheck.enginetest.scenario import INVARIANTS, EngineScenario

MAX_SCHEDULES = 1000


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
    #: per invariant broken, the outcome of its shortest schedule (steps, traceback)
    witnesses: dict[str, Outcome]

    def violated(self) -> set[str]:
        return {v.invariant for v in self.verdicts if not v.holds}

    def meets_expect(self) -> Optional[bool]:
        if self.scenario.expect is None:
            return None
        return self.violated() == set(self.scenario.expect) and not (self.bounded and self.violated() < self.scenario.expect)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name, "mode": "engine-test", "release": self.release.line(),
            "expect": sorted(self.scenario.expect) if self.scenario.expect is not None else None,
            "meets_expect": self.meets_expect(),
            "schedules": self.schedules, "distinct": self.distinct, "total": self.total, "bounded": self.bounded,
            "seconds": round(self.seconds, 2),
            "invariants": {v.invariant: ({"verdict": "holds"} if v.holds else {
                "verdict": "violated", "length": v.schedule.length() if v.schedule else 0,
                "schedule": v.schedule.events() if v.schedule else [], "step": v.step, "detail": v.detail})
                for v in self.verdicts},
        }

    def counterexample(self, invariant: str) -> dict[str, Any]:
        """The shortest schedule that breaks `invariant`, with the engine's
        tables and ref counts per step, the outputs and any traceback."""
        v = next(v for v in self.verdicts if v.invariant == invariant)
        o = self.witnesses[invariant]
        return {"scenario": self.scenario.name, "invariant": invariant, "release": self.release.line(),
                "schedule": v.schedule.events() if v.schedule else [], "step": v.step, "detail": v.detail,
                "steps": o.steps, "outputs": o.outputs, "traceback": o.error}


def schedules(sc: EngineScenario, steps: int) -> list[Schedule]:
    """Every schedule, shortest first."""
    subs = [[(r.name, k) for k in range(r.submit_within + 1)] for r in sc.requests]
    cancel_choices = [[None] + [(rid, s, p) for s in range(steps) for p in (IN_FLIGHT, AFTER_UPDATE)] for rid in sc.cancels]
    out = [Schedule(tuple(s), tuple(c for c in cs if c is not None))
           for s in itertools.product(*subs) for cs in itertools.product(*cancel_choices)]
    return sorted(out, key=lambda x: (x.length(), x.events()))


def harness() -> Harness:
    torch, transformers, _ = engine.modules()
    return Harness(torch, transformers, engine.build_model(torch, transformers),
                   engine.build_model(torch, transformers, "eager"))


def explore(sc: EngineScenario, h: Optional[Harness] = None, max_schedules: int = MAX_SCHEDULES,
            progress: Optional[Callable[[int, int], None]] = None) -> EngineResult:
    start = time.monotonic()
    h = h or harness()
    _, _, release = engine.modules()
    # Each schedule's batch processor calls gc.collect() as it goes (its
    # __del__): a full pass over torch, transformers and the model, nine
    # tenths of a schedule's time. They stay: the collector need not look.
    gc.freeze()
    try:
        base = run(h, sc, Schedule(tuple((r.name, 0) for r in sc.requests), ()))
        every = schedules(sc, max(1, len(base.steps)))
        chosen = every[:max_schedules]
        found: dict[str, tuple[Schedule, Outcome, Any]] = {}
        seen: set[Any] = set()
        for i, schedule in enumerate(chosen):
            outcome = run(h, sc, schedule)
            seen.add(outcome.fingerprint)
            for v in outcome.violations:
                if v.invariant not in found:
                    found[v.invariant] = (schedule, outcome, v)
            if progress:
                progress(i + 1, len(chosen))
    finally:
        gc.unfreeze()        # back under the collector once the run ends
    verdicts = [Verdict(inv, False, found[inv][0], found[inv][2].step, found[inv][2].detail) if inv in found
                else Verdict(inv, True) for inv in INVARIANTS]
    return EngineResult(sc, verdicts, len(chosen), len(seen), len(every), len(every) > len(chosen),
                        time.monotonic() - start, release, {k: o for k, (_, o, _) in found.items()})


def write_counterexamples(result: EngineResult, out_dir: Path) -> list[Path]:
    import json
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for inv in sorted(result.violated()):
        path = out_dir / f"engine-{result.scenario.name}-{inv}.json"
        path.write_text(json.dumps(result.counterexample(inv), indent=1, sort_keys=True) + "\n")
        paths.append(path)
    return paths
