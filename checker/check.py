"""One check of one scenario: explore it, judge every invariant, weigh the
expectations, and write the counterexamples. The command line and the tests
both go through `check`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from cowcheck.model.scenario import Scenario
from cowcheck.model.state import allocated
from cowcheck.model.ample import Ample
from cowcheck.model.compact import Compact
from cowcheck.model.symmetry import Symmetry
from cowcheck.model.system import ProtocolModel

from . import trace
from .explorer import Exploration, Explorer
from .invariants import DISCIPLINE, HARM, INVARIANTS, Invariant, validate_expect

UNSAFE = "unsafe"
UNDISCIPLINED = "safe but undisciplined"
DISCIPLINED = "safe and disciplined"


@dataclass
class Verdict:
    invariant: str
    kind: str
    holds: Optional[bool]          # None: not violated, but the run was partial
    length: Optional[int] = None
    path: Optional[str] = None     # the counterexample file
    witness: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"holds": self.holds, "kind": self.kind, "length": self.length, "counterexample": self.path}


@dataclass
class CheckResult:
    scenario: Scenario
    exploration: Exploration
    verdicts: dict[str, Verdict]
    explorer: Explorer
    peak_path: Optional[str] = None
    expectation_failures: list[str] = field(default_factory=list)
    engine: str = "explicit"

    @property
    def summary(self) -> str:
        broken = [v for v in self.verdicts.values() if v.holds is False]
        if any(v.kind == HARM for v in broken):
            line = UNSAFE
        elif broken:
            line = UNDISCIPLINED
        else:
            line = DISCIPLINED
        if not self.exploration.complete and line != UNSAFE:
            line += f" so far (partial: {self.exploration.stopped})"
        return line

    @property
    def expect_met(self) -> bool:
        return not self.expectation_failures

    def to_json(self) -> dict:
        s, x = self.scenario, self.exploration
        return {
            "engine": self.engine,
            "scenario": s.name,
            "source": s.source,
            "protocol": s.protocol.name,
            "device": s.device,
            "reuse": s.reuse,
            "states": x.states,
            "transitions": x.transitions,
            "depth": x.depth,
            "seconds": round(x.seconds, 3),
            "states_per_second": round(x.rate),
            "verdicts": {k: v.to_json() for k, v in self.verdicts.items()},
            "summary": self.summary,
            "peak_blocks": x.peak,
            "peak_trace": self.peak_path,
            "copies": list(x.cost_range) if x.cost_range else None,
            "steady_blocks": x.steady,
            "complete": x.complete,
            "reductions": list(x.reductions),
            "encoding": x.encoding,
            "fingerprints": x.fingerprints,
            "collision_probability": x.collision_probability,
            "bytes_per_state": round(x.bytes_per_state) if x.bytes_per_state is not None else None,
            "stopped": x.stopped,
            "expect": list(s.expect),
            "expect_met": self.expect_met,
            "expect_failures": self.expectation_failures,
        }


def judge_expectations(scenario: Scenario, verdicts: dict[str, Verdict], complete: bool) -> list[str]:
    failures = []
    for item in scenario.expect:
        if item.startswith("violates "):
            inv = item.split()[1]
            v = verdicts.get(inv)
            if v is None:
                failures.append(f"expected {inv} to break, but it was not checked (--invariant)")
            elif v.holds is not False:
                failures.append(f"expected {inv} to break, but it {'holds' if complete else 'did not break in the partial run'}")
            continue
        kinds = (HARM,) if item == "safe" else (HARM, DISCIPLINE)
        broken = [v.invariant for v in verdicts.values() if v.kind in kinds and v.holds is False]
        if broken:
            failures.append(f"expected \"{item}\", but {', '.join(broken)} broke")
        elif not complete:
            failures.append(f"expected \"{item}\", which a partial run cannot confirm")
    return failures


def check(scenario: Scenario, *, invariants: tuple[Invariant, ...] = INVARIANTS, out_dir: Optional[Path] = None,
          max_states: Optional[int] = None, max_depth: Optional[int] = None, first: bool = False,
          symmetry: bool = True, por: bool = False, compact: bool = False, fingerprints: bool = False,
          progress: Optional[Callable] = None) -> CheckResult:
    """Explore the scenario with the reductions asked for. Partial-order
    reduction applies only to exhaustive runs (without --max-depth, whose
    meaning it would change); when it finds violations, a second search
    without it, bounded by the lengths found and stopped once it has them all,
    supplies the true shortest lengths and traces (it is not limited by
    --max-states: its depth bound already limits it)."""
    validate_expect(scenario)
    model = ProtocolModel(scenario)
    orbits = Symmetry(scenario) if symmetry else None
    ample = Ample(model) if por and max_depth is None else None

    def explore(invariants, ample, max_states, **limits) -> Explorer:
        reductions = (orbits.describe() if orbits else []) + (ample.describe() if ample else [])
        explorer = Explorer(model, invariants, max_states=max_states, gauge=allocated, steady=model.is_steady,
                            cost=model.is_copy_launch, representative=orbits.representative if orbits else None,
                            ample=ample if ample and ample.enabled else None, reductions=tuple(reductions),
                            encode=Compact(scenario).encode if compact else None, fingerprints=fingerprints,
                            progress=progress, **limits)
        explorer.run()
        return explorer

    explorer = explore(invariants, ample, max_states, max_depth=max_depth, stop_at_first=first)
    x = explorer.result
    shortest = explorer
    if ample is not None and ample.enabled and x.violations:
        found = tuple(inv for inv in invariants if inv.id in x.violations)
        shortest = explore(found, None, None, max_depth=max(v.length for v in x.violations.values()),
                           stop_after=frozenset(inv.id for inv in found))
        x.violations = {inv.id: shortest.result.violations[inv.id] for inv in found}
    init = model.init_state()
    verdicts: dict[str, Verdict] = {}
    for inv in invariants:
        v = x.violations.get(inv.id)
        if v is None:
            verdicts[inv.id] = Verdict(inv.id, inv.kind, True if x.complete else None)
            if x.complete and out_dir is not None:  # a counterexample from an earlier version no longer applies
                (out_dir / trace.file_name(scenario, inv.id)).unlink(missing_ok=True)
            continue
        verdict = Verdict(inv.id, inv.kind, False, v.length, witness=v.witness)
        if out_dir is not None:
            steps, witness = shortest.trace_of(v)
            verdict.witness = witness
            data = trace.to_json(scenario, init, steps, invariant=inv.id, invariant_kind=inv.kind, witness=witness)
            verdict.path = str(trace.write(out_dir / trace.file_name(scenario, inv.id), data))
        verdicts[inv.id] = verdict
    result = CheckResult(scenario, x, verdicts, shortest)
    if out_dir is not None and x.peak_state is not None:
        data = trace.to_json(scenario, init, explorer.path_to(x.peak_state), peak=x.peak)
        result.peak_path = str(trace.write(out_dir / trace.file_name(scenario, trace.PEAK), data))
    result.expectation_failures = judge_expectations(scenario, verdicts, x.complete)
    return result
