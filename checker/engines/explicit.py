"""One check of one scenario with the explorer: explore it, judge every
invariant, weigh the expectations, and build a shortest counterexample for
each invariant that breaks. Writes nothing (cowcheck.traces.output does)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, TypeVar

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import allocated
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.compact import Compact
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.harness import HarnessModel, system_for
from cowcheck.model.system import ProtocolModel, TransitionSystem

from cowcheck.adapters.deadline import DEFAULT_SECONDS, Deadline
from cowcheck.engines.explorer import Exploration, Explorer, NotRebuilt
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.invariants import INVARIANTS, Invariant, for_system, validate_expect
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import ExplicitResult, Outcome, Verdict, verdict_for
from cowcheck.engines.counterexample import Counterexample

T = TypeVar("T")


def explore(scenario: Scenario, options: SearchOptions = SearchOptions(), *,
            invariants: tuple[Invariant, ...] = INVARIANTS, progress: Optional[Callable] = None,
            system: Optional[TransitionSystem] = None) -> ExplicitResult:
    """Explore the scenario with the reductions asked for. Partial-order
    reduction applies only to exhaustive runs (without --max-depth, whose
    meaning it would change). It first explores settled device completions
    alone too, which keeps only whether some violation is reachable; if that
    search finds one, it searches again without them, for every verdict
    (cowcheck.model.reduce.ample). When it finds violations, a second search
    without it, bounded by the lengths found and stopped once it has them all,
    supplies the true shortest lengths and traces (it is not limited by
    --max-states: its depth bound already limits it). `system`: the
    transition system to explore (default: the scenario's, see
    cowcheck.model.harness.system_for). Allocator code through the harness
    gets no reduction: its states are opaque snapshots, whose block ids
    and branch names the checker cannot rename."""
    model = system or system_for(scenario)
    harness = isinstance(model, HarnessModel)
    if isinstance(model, HarnessModel):
        model.guard = Deadline(deadline_for(scenario, options), model.ref)
    invariants, unsupported = for_system(invariants, model)
    validate_expect(scenario, harness)
    # only a protocol file's states can be renamed, reordered and encoded
    reducible = model if isinstance(model, ProtocolModel) else None
    orbits = Symmetry(scenario) if options.symmetry and reducible else None
    ample = Ample(reducible, completions=True) if options.por and options.max_depth is None and reducible else None
    compact = options.compact and reducible is not None

    def search(invariants, ample, limits: SearchOptions, stop_after: Optional[frozenset[str]] = None) -> Explorer:
        reductions = (orbits.describe() if orbits else []) + (ample.describe() if ample else [])
        explorer = Explorer(model, invariants, limits, stop_after=stop_after, gauge=allocated, steady=model.is_steady,
                            cost=model.is_copy_launch, hits=model.hits if scenario.cache else None,
                            representative=orbits.representative if orbits else None,
                            mirror=orbits.unmirrored if orbits else None,
                            ample=ample if ample and ample.enabled else None, reductions=tuple(reductions),
                            encode=Compact(scenario).encode if compact else None, progress=progress)
        explorer.run()
        return explorer

    settled = ample if ample is not None and ample.completions else None
    explorer = search(invariants, ample, replace(options, first=options.first or settled is not None))
    if settled is not None and explorer.result.violations and not options.first:
        # completions explored alone keep only whether some violation is
        # reachable (cowcheck.model.reduce.ample): search again without them for
        # every verdict, in the time left
        spent = explorer.result.seconds
        ample = Ample(settled.model)
        left = None if options.max_seconds is None else max(options.max_seconds - spent, 1.0)
        explorer = search(invariants, ample, replace(options, max_seconds=left))
        explorer.result.seconds += spent
    x = explorer.result
    shortest = explorer
    if ample is not None and ample.enabled and x.violations:
        found = tuple(inv for inv in invariants if inv.id in x.violations)
        bound = max(v.length for v in x.violations.values())
        shortest = search(found, None, replace(options, max_states=None, max_depth=bound, first=False),
                          stop_after=frozenset(inv.id for inv in found))
        x.violations = {inv.id: shortest.result.violations[inv.id] for inv in found}
    init = model.init_state()
    verdicts = {}

    def rebuilt(trace: Callable[[], T]) -> T:
        """A trace rebuilt by re-running successors; allocator code that
        does not give the same states again is not deterministic."""
        try:
            return trace()
        except NotRebuilt as error:
            if not harness:
                raise
            raise SpecError(scenario.allocator or "allocator", "determinism", not_deterministic(error)) from None

    for inv in invariants:
        v = x.violations.get(inv.id)
        if v is None:
            verdicts[inv.id] = verdict_for(inv.id, Kind(inv.kind), False, x.complete)
            continue
        run, witness = rebuilt(lambda: shortest.trace_of(v))
        cx = Counterexample.from_run(scenario, init, run, invariant=inv.id, invariant_kind=inv.kind, witness=witness,
                                    judged_by=inv)
        verdicts[inv.id] = verdict_for(inv.id, Kind(inv.kind), True, x.complete, length=v.length,
                                       counterexample=cx, witness=witness)
    for inv_id, why in unsupported.items():
        verdicts[inv_id] = Verdict(inv_id, Kind(why[0]), Outcome.UNSUPPORTED, note=why[1])
    peak = None
    peak_state = x.peak_state
    if peak_state is not None:
        peak = Counterexample.from_run(scenario, init, rebuilt(lambda: explorer.path_to(peak_state)), peak=x.peak)
    return ExplicitResult(scenario, verdicts, x.complete, x.stopped, x.seconds, exploration=x, peak_trace=peak)


def deadline_for(scenario: Scenario, options: SearchOptions) -> float:
    """Seconds one adapter call may run: the command line's, the scenario's, or the default (0: none)."""
    for seconds in (options.call_deadline, scenario.call_deadline):
        if seconds is not None:
            return seconds
    return DEFAULT_SECONDS


#: a state's parts, as a sentence names what a call changed
PARTS = {"blocks": "refcounts or slots", "free": "free list", "branches": "tables", "queue": "device queue",
         "code": "allocator state (its pickle)"}


def not_deterministic(error: NotRebuilt) -> str:
    """Which call broke determinism, in one line: the step where a trace
    could not be rebuilt, the calls before it, and the call whose state now
    differs least from the stored one, with the parts that differ."""
    step = len(error.done) + 1
    after = f" (after {'; '.join(map(str, error.done))})" if error.done else " (the first action)"
    differing = [(t, [f for f in PARTS if getattr(t.state, f) != getattr(error.want, f)])
                 for t in error.offered if t.state is not None and hasattr(error.want, "_fields")]
    if differing:
        tr, parts = min(differing, key=lambda pair: len(pair[1]))
        who = "the device" if tr.action.actor == "device" else f"branch {tr.action.actor}"
        what = f"'{tr.action}' by {who} now gives another {', '.join(PARTS[f] for f in parts)}"
    else:
        what = "no call gives the stored state again"
    return (f"the allocator is not deterministic: rebuilding a trace, at step {step}{after}, {what} than the first "
            "time (state outside what pickle copies: a global, a random draw, the clock)")
