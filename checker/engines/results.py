"""What a check returns: a verdict per invariant, the one-line summary, and
each engine's own figures (and only those: BMC has no state count, the
explorer no z3 seconds). Nothing here writes files; cowcheck.traces.output does.

The summary is a fixed vocabulary (docs/semantics.md#summaries); whether
the run was partial, and why it stopped (a cowcheck.engines.stop.Stop),
are fields of their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Optional

from cowcheck.engines.invariants import STANDS_IN, Kind
from cowcheck.engines.stop import Stop, StopKind, Stoppable
from cowcheck.model.code import Code
from cowcheck.model.scenario import Scenario

if TYPE_CHECKING:
    from cowcheck.engines.explorer import Exploration
    from cowcheck.engines.counterexample import Counterexample


#: the version of the JSON layout of a result (docs/reference/json.md; checker/schemas)
FORMAT = 1


class Outcome(StrEnum):
    HOLDS = "holds"
    VIOLATED = "violated"
    NOT_SEEN = "not seen"          # not broken, but the run was partial
    UNSUPPORTED = "unsupported"    # this engine cannot judge the invariant


class Summary(StrEnum):
    UNSAFE = "unsafe"
    UNDISCIPLINED = "safe but undisciplined"
    DISCIPLINED = "safe and disciplined"


#: the closing line's category of a partial run without harm (not a Summary:
#: the summary of a partial run is "so far")
PARTIAL = "partial"
#: what a partial run without harm says when a call of allocator code did
#: not return within its deadline: not "safe so far", a finding of its own
CALL_DID_NOT_RETURN = "partial: a call did not return"


class Engine(StrEnum):
    EXPLICIT = "explicit"
    FRONTIER = "frontier"
    BMC = "bmc"
    KIND = "kind"


@dataclass
class Verdict:
    invariant: str
    kind: Kind
    outcome: Outcome
    length: Optional[int] = None
    counterexample: Optional["Counterexample"] = None   # a shortest violation, when found
    witness: dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None     # where the counterexample was written, if it was
    note: Optional[str] = None     # why an invariant is unsupported

    @property
    def holds(self) -> Optional[bool]:
        """True, False, or None when not decided (partial run, unsupported)."""
        return {Outcome.HOLDS: True, Outcome.VIOLATED: False}.get(self.outcome)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"holds": self.holds, "outcome": str(self.outcome), "kind": str(self.kind),
                                "length": self.length, "counterexample": self.path}
        if self.note:
            data["note"] = self.note
        return data


def verdict_for(invariant_id: str, kind: Kind, violated: bool, complete: bool, **found: Any) -> Verdict:
    if violated:
        return Verdict(invariant_id, kind, Outcome.VIOLATED, **found)
    return Verdict(invariant_id, kind, Outcome.HOLDS if complete else Outcome.NOT_SEEN)


def summarize(verdicts: dict[str, Verdict]) -> Summary:
    broken = [v for v in verdicts.values() if v.outcome is Outcome.VIOLATED]
    if any(v.kind is Kind.HARM for v in broken):
        return Summary.UNSAFE
    return Summary.UNDISCIPLINED if broken else Summary.DISCIPLINED


def _stood_in(verdict: Verdict, verdicts: dict[str, Verdict]) -> bool:
    """Is an invariant that was not checked judged through the one that
    stands in for it (no-underflow through allocator-error, in the harness)?"""
    other = verdicts.get(STANDS_IN.get(verdict.invariant, ""))
    return other is not None and other.outcome is not Outcome.UNSUPPORTED


def judge_expectations(scenario: Scenario, verdicts: dict[str, Verdict], complete: bool) -> list[str]:
    """Why the scenario's `expect` is not met (empty: it is)."""
    failures = []
    for item in scenario.expect:
        if item.startswith("violates "):
            inv = item.split()[1]
            v = verdicts.get(inv)
            if v is None:
                failures.append(f"expected {inv} to break, but it was not checked (--invariant)")
            elif v.outcome is Outcome.UNSUPPORTED:
                failures.append(f"expected {inv} to break, but this engine cannot check it")
            elif v.outcome is not Outcome.VIOLATED:
                failures.append(f"expected {inv} to break, but it {'holds' if complete else 'did not break in the partial run'}")
            continue
        kinds = (Kind.HARM,) if item == "safe" else (Kind.HARM, Kind.DISCIPLINE)
        broken = [v.invariant for v in verdicts.values() if v.kind in kinds and v.outcome is Outcome.VIOLATED]
        unjudged = [v.invariant for v in verdicts.values()
                    if v.kind in kinds and v.outcome is Outcome.UNSUPPORTED and not _stood_in(v, verdicts)]
        if broken:
            failures.append(f"expected \"{item}\", but {', '.join(broken)} broke")
        elif unjudged:
            failures.append(f"expected \"{item}\", which this engine cannot confirm: it cannot check {', '.join(unjudged)}")
        elif not complete:
            failures.append(f"expected \"{item}\", which a partial run cannot confirm")
    return failures


@dataclass
class Result(Stoppable):
    """What every engine reports for one scenario."""
    scenario: Scenario
    verdicts: dict[str, Verdict]
    complete: bool
    stop: Optional[Stop] = None          # why a partial run stopped
    seconds: float = 0.0
    expectation_failures: list[str] = field(default_factory=list)
    #: allocator code: which engine code the adapter ran (its release, and
    #: which tree of it), or None
    allocator_code: Optional[Code] = None

    engine = Engine.EXPLICIT

    def __post_init__(self) -> None:
        if not self.expectation_failures:
            self.expectation_failures = judge_expectations(self.scenario, self.verdicts, self.complete)

    @property
    def summary(self) -> Summary:
        return summarize(self.verdicts)

    @property
    def partial(self) -> bool:
        """Not every invariant is settled: a `safe` summary is only "so far"."""
        return not self.complete

    @property
    def hung(self) -> bool:
        """A call of allocator code did not return within its deadline, and
        no harm was found before: that call, not "safe so far", is what
        the run says."""
        return self.stop is not None and self.stop.kind is StopKind.CALL_DEADLINE and self.summary is not Summary.UNSAFE

    @property
    def headline(self) -> str:
        """The summary in a word or two (the closing table's verdict)."""
        return CALL_DID_NOT_RETURN if self.hung else str(self.summary)

    @property
    def summary_line(self) -> str:
        """The summary as the report prints it."""
        if self.hung:
            return f"{CALL_DID_NOT_RETURN} ({self.stopped})"
        if self.partial and self.summary is not Summary.UNSAFE:
            return f"{self.summary} so far (partial: {self.stopped})"
        return str(self.summary)

    @property
    def expect_met(self) -> bool:
        return not self.expectation_failures

    @property
    def undecided(self) -> bool:
        """A partial run with no harm found and no `expect` to judge it by
        (none given, or dropped by an override): it proves nothing, so it
        never counts as safe, nor as having met an absent `expect`. (With an
        `expect`, a partial run meets only "violates" items, by finding them.)"""
        return self.partial and self.summary is not Summary.UNSAFE and not self.scenario.expect

    @property
    def category(self) -> str:
        """Where the closing line counts it: its summary, or "partial" when
        the run stopped before it could say more than "safe so far"."""
        return PARTIAL if self.partial and self.summary is not Summary.UNSAFE else str(self.summary)

    @property
    def interrupted(self) -> bool:
        return self.stop is not None and self.stop.interrupted

    @property
    def counterexamples(self) -> list["Counterexample"]:
        return [v.counterexample for v in self.verdicts.values() if v.counterexample is not None]

    def violated(self) -> list[Verdict]:
        return [v for v in self.verdicts.values() if v.outcome is Outcome.VIOLATED]

    def engine_line(self) -> str:
        """The engine's own figures, in one line under the verdict table."""
        return f"engine {self.engine}"

    def to_json(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "format": FORMAT,
            "engine": str(self.engine),
            "scenario": s.name,
            "source": s.source,
            "protocol": s.subject,
            **({"allocator": s.allocator} if s.allocator is not None else {}),
            **({"scheduler": s.scheduler} if s.scheduler is not None else {}),
            **(self.allocator_code.fields() if self.allocator_code is not None else {}),
            "device": s.device,
            "reuse": None if s.code_ref is not None else s.reuse,    # allocator code takes free blocks in its own order
            "transfer": str(s.transfer) if s.transfers else None,      # the transfer model, where one is checked
            "seconds": round(self.seconds, 3),
            "verdicts": {k: v.to_json() for k, v in self.verdicts.items()},
            "summary": str(self.summary),
            "category": self.category,
            "complete": self.complete,
            "stopped": self.stopped,
            **self.figures(),
            "expect": list(s.expect),
            "expect_met": self.expect_met,
            "expect_failures": self.expectation_failures,
        }

    def figures(self) -> dict[str, Any]:
        """The engine's own keys in the JSON."""
        return {}


@dataclass(frozen=True)
class Search(Stoppable):
    """One search of a staged check (cowcheck.engines.explicit may run
    several): what it was for, what shrank it, what it explored and found."""
    purpose: str                   # "first violation", "verdicts", "shortest lengths" or "peak trace"
    reductions: tuple[str, ...]
    states: int
    transitions: int
    seconds: float
    stop: Optional[Stop]           # why it stopped short (for these searches, also on purpose)
    violations: tuple[str, ...]    # the invariants it found broken

    @classmethod
    def of(cls, purpose: str, x: "Exploration") -> "Search":
        return cls(purpose, x.reductions, x.states, x.transitions, x.seconds, x.stop, tuple(x.violations))

    def to_json(self) -> dict[str, Any]:
        return {"purpose": self.purpose, "reductions": list(self.reductions), "states": self.states,
                "transitions": self.transitions, "seconds": round(self.seconds, 3), "stopped": self.stopped,
                "violations": list(self.violations)}


@dataclass
class ExplicitResult(Result):
    """The explorer's result: every measure, and the peak's trace (and the
    trace to a call that did not return, `deadline_trace`); which
    searches ran (`searches`), whether partial-order reduction was asked
    for (`partial_order`: auto, on, off) and what the check chose and why
    (`choice`)."""
    exploration: Optional["Exploration"] = None
    peak_trace: Optional["Counterexample"] = None
    peak_path: Optional[str] = None
    #: a scenario with a host tier: the shortest trace to its host peak, and where it was written
    host_peak_trace: Optional["Counterexample"] = None
    host_peak_path: Optional[str] = None
    #: the trace to the call a call deadline stopped (kind call-deadline),
    #: and where it was written
    deadline_trace: Optional["Counterexample"] = None
    deadline_path: Optional[str] = None
    searches: tuple[Search, ...] = ()
    partial_order: str = "auto"
    choice: str = ""

    engine = Engine.EXPLICIT

    @property
    def x(self) -> "Exploration":
        assert self.exploration is not None
        return self.exploration

    def figures(self) -> dict[str, Any]:
        x = self.x
        return {
            "states": x.states,
            "transitions": x.transitions,
            "depth": x.depth,
            "states_per_second": round(x.rate),
            "peak_blocks": x.peak,
            "peak_trace": self.peak_path,
            "copies": list(x.cost_range) if x.cost_range else None,
            "hits": list(x.hits_range) if x.hits_range else None,
            "host_peak": x.host_peak,
            "host_peak_trace": self.host_peak_path,
            "transfers": list(x.transfers_range) if x.transfers_range else None,
            "steady_blocks": x.steady,
            "reductions": list(x.reductions),
            "partial_order": self.partial_order,
            "choice": self.choice,
            "searches": [search.to_json() for search in self.searches],
            "encoding": x.encoding,
            "fingerprints": x.fingerprints,
            "collision_probability": x.collision_probability,
            "bytes_per_state": round(x.bytes_per_state) if x.bytes_per_state is not None else None,
            **self._call_deadline(),
        }

    def _call_deadline(self) -> dict[str, Any]:
        """The call a call deadline stopped, only when one did."""
        hung = self.deadline_trace
        if hung is None:
            return {}
        return {"call_deadline": {"call": hung.call, "deadline": hung.deadline, "length": hung.length,
                                  "counterexample": self.deadline_path}}


@dataclass
class FrontierResult(ExplicitResult):
    """The frontier engine's (cowcheck.engines.frontier): the explicit
    engine's figures, from a search over rows of integers."""
    engine = Engine.FRONTIER


@dataclass
class BmcResult(Result):
    """z3 bounded model checking: the bound, the deepest depth it decided,
    and z3's seconds per depth."""
    bound: int = 0
    reached: int = 0
    depth_seconds: list[float] = field(default_factory=list)

    engine = Engine.BMC

    def engine_line(self) -> str:
        per_depth = " ".join(f"{t:.2f}" for t in self.depth_seconds)
        return f"engine bmc  bound {self.bound}  z3 {sum(self.depth_seconds):.2f}s  per depth (s): {per_depth}"

    def figures(self) -> dict[str, Any]:
        return {"bound": self.bound, "depth": self.reached,
                "z3_seconds_per_depth": [round(t, 3) for t in self.depth_seconds],
                "z3_seconds": round(sum(self.depth_seconds), 3)}


@dataclass
class KindResult(Result):
    """k-induction: per invariant the k that closed its proof (None: not
    closed), z3's seconds per k apart from the closing BMC's, and the
    strengthening lemmas' fate: per lemma, parts proven and parts dropped."""
    bound: int = 0
    closed_at: dict[str, Optional[int]] = field(default_factory=dict)
    k_seconds: list[float] = field(default_factory=list)
    bmc_seconds: list[float] = field(default_factory=list)
    lemmas: dict[str, tuple[int, int]] = field(default_factory=dict)
    proven_parts: list[str] = field(default_factory=list)

    engine = Engine.KIND

    def engine_line(self) -> str:
        def shown(inv_id: str, k: Optional[int]) -> str:
            if k is not None:
                return f"{inv_id}={k}"
            return f"{inv_id}={'violated' if self.verdicts[inv_id].outcome is Outcome.VIOLATED else 'not closed'}"
        used = sum(p for p, _ in self.lemmas.values())
        total = sum(p + d for p, d in self.lemmas.values())
        line = (f"engine kind  bound {self.bound}  z3 {sum(self.k_seconds) + sum(self.bmc_seconds):.2f}s  per k (s): "
                + " ".join(f"{t:.2f}" for t in self.k_seconds))
        if self.bmc_seconds:
            line += f"  then bmc {sum(self.bmc_seconds):.2f}s"
        line += "  closed at k: " + ", ".join(shown(i, k) for i, k in self.closed_at.items())
        return line + f"  lemma parts proven: {used}/{total}"

    def figures(self) -> dict[str, Any]:
        return {"bound": self.bound, "closed_at": self.closed_at,
                "z3_seconds_per_k": [round(t, 3) for t in self.k_seconds],
                "z3_seconds_bmc": [round(t, 3) for t in self.bmc_seconds],
                "z3_seconds": round(sum(self.k_seconds) + sum(self.bmc_seconds), 3),
                "lemma_parts": {name: {"proven": p, "dropped": d} for name, (p, d) in self.lemmas.items()}}
