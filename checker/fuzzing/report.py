"""What a fuzz run reports (docs/how-to/fuzz.md, "The report"): each
scenario tried, each invariant's finding and the run's totals, as
`cowcheck.fuzz` returns them and `--json` writes them. Apart from the run
(cowcheck.fuzzing.run) so that the actual engine's fuzz
(cowcheck.fuzzing.engine), which the run calls, shares them without an
import circle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from cowcheck.engines.counterexample import Counterexample
from cowcheck.engines.invariants import BY_ID
from cowcheck.engines.results import FORMAT
from cowcheck.fuzzing.generators import GENERATOR_VERSION, Drawn, Knobs
from cowcheck.sweeps.shrink import Shrunk


@dataclass(frozen=True)
class Tried:
    """One scenario's check, as the report lists it."""
    index: int
    name: str
    states: int
    seconds: float
    broken: dict[str, int]            # invariant -> shortest length
    complete: bool
    tight: bool
    error: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "scenario": self.name, "states": self.states, "seconds": self.seconds,
                "broken": self.broken, "complete": self.complete, "tight_pool": self.tight, "error": self.error}


class Broken:
    """What a finding shares with the actual engine's
    (cowcheck.fuzzing.engine.EngineFinding): its invariant's kind, and its
    report entry around what differs (the scenario, the length, the shrunk
    form)."""
    invariant: str
    drawn: Any
    scenarios: int
    files: list[str]

    @property
    def kind(self) -> str:
        return str(BY_ID[self.invariant].kind)

    def entry(self, scenario: dict[str, Any], length: int, shrunk: Optional[dict[str, Any]]) -> dict[str, Any]:
        return {"invariant": self.invariant, "kind": self.kind, "index": self.drawn.index, "scenario": scenario,
                "length": length, "scenarios": self.scenarios, "shrunk": shrunk, "files": self.files}


@dataclass
class Finding(Broken):
    """An invariant some drawn scenario broke: the first (lowest index) such
    scenario, its counterexample, how many scenarios broke it, and what
    shrinking made of it."""
    invariant: str
    drawn: Drawn
    counterexample: Counterexample
    scenarios: int = 1
    shrunk: Optional[Shrunk] = None
    files: list[str] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.counterexample.length

    def shrunk_to(self) -> tuple[str, str]:
        """The shrunk scenario in words and its counterexample's length, for the report's table."""
        shrunk = self.shrunk
        if shrunk is None or shrunk.counterexample is None:
            return "(not shrunk)", ""
        return shrunk.describe(), str(shrunk.counterexample.length)

    def to_json(self) -> dict[str, Any]:
        shrunk = self.shrunk
        return self.entry(self.drawn.scenario.definition(), self.counterexample.length,
                          None if shrunk is None or shrunk.counterexample is None else {
                              "scenario": shrunk.scenario.definition(), "length": shrunk.counterexample.length,
                              "smaller": shrunk.smaller, "tried": shrunk.tried, "seconds": round(shrunk.seconds, 3)})


@dataclass
class Fuzz:
    """What `cowcheck.fuzz` returns."""
    subject: str
    kind: str
    seed: int
    knobs: Knobs
    budget: dict[str, Any]
    check_budget: dict[str, Any]
    keep_going: bool = False
    tried: list[Tried] = field(default_factory=list)
    #: per invariant; EngineFinding (cowcheck.fuzzing.engine) for the actual engine
    findings: dict[str, Finding] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False
    stopped: Optional[str] = None        # why the run stopped early, other than an interrupt (NoWorkers)
    workers: int = 0
    scheduler: Optional[str] = None
    generator: int = GENERATOR_VERSION

    @property
    def states(self) -> int:
        return sum(t.states for t in self.tried)

    @property
    def unsafe(self) -> bool:
        return any(f.kind == "harm" for f in self.findings.values())

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": "fuzz", "subject": self.subject, "scenario_kind": self.kind, "seed": self.seed,
                "generator": self.generator, "knobs": self.knobs.to_json(), "budget": self.budget,
                "check_budget": self.check_budget, "keep_going": self.keep_going,
                "tried": len(self.tried), "states": self.states, "undecided": sum(not t.complete for t in self.tried),
                "violations": sum(bool(t.broken) for t in self.tried), "seconds": round(self.seconds, 3),
                "interrupted": self.interrupted, "stopped": self.stopped, "unsafe": self.unsafe,
                "findings": [f.to_json() for f in self.findings.values()], "scenarios": [t.to_json() for t in self.tried]}
