"""One check of one scenario with the explorer: explore it, judge every
invariant, weigh the expectations, and build a shortest counterexample for
each invariant that breaks. Writes nothing (cowcheck.traces.output does).

A check may run several searches of one space (`ExplicitResult.searches`
lists them; `choice` says why). Which ones depends on `SearchOptions.por`:

- off (`--no-por`): one search, with symmetry unless it is off;
- on (`--por`): partial-order reduction, staged as `_ordered` says;
- auto (the default, `_auto`): the search without partial-order reduction
  for its first few states (FIRST_STATES), which answers a space that
  small, and a protocol that breaks in them; else partial-order reduction
  with settled completions up to the first violation. If it finds none,
  that search is the answer: the reduction keeps every measure when
  nothing breaks (cowcheck.model.reduce.ample). If it finds one, the
  search without it goes on from where it paused and gives every figure,
  so a buggy protocol pays only for the reduced search up to its first
  violation, usually shallow. Where settled completions do not apply
  (`_partial_order` says why), auto is off.

Under auto every verdict, shortest length, measure and trace is the one
the search without partial-order reduction gives (tests/test_model_reduce.py
checks it on every shipped scenario and on random ones); only the state
and transition counts, and the time, may differ."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, TypeVar

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario
from cowcheck.model.code import Code
from cowcheck.model.state import State, allocated, host_allocated
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.compact import Compact
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.subject import system_for
from cowcheck.model.system import TransitionSystem

from cowcheck.adapters.deadline import DEFAULT_SECONDS, Deadline
from cowcheck.engines.explorer import Exploration, Explorer, Hung, NotRebuilt
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.invariants import INVARIANTS, Invariant, for_system, validate_expect
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import ExplicitResult, Outcome, Search, Verdict, verdict_for
from cowcheck.engines.counterexample import Counterexample
from cowcheck.engines.stop import PEAK_REACHED, StopKind

T = TypeVar("T")


def explore(scenario: Scenario, options: SearchOptions = SearchOptions(), *,
            invariants: tuple[Invariant, ...] = INVARIANTS, progress: Optional[Callable] = None,
            system: Optional[TransitionSystem] = None) -> ExplicitResult:
    """Explore the scenario with the reductions asked for, staged as the
    module docstring says. `system`: the transition system to explore
    (default: the scenario's, see cowcheck.model.subject.system_for).
    What it may do with the system, the system says (its capabilities,
    cowcheck.model.system.TransitionSystem): a system whose states the
    reductions cannot read gets none, and one that runs the user's code
    through an adapter (a harness) has a deadline on each call."""
    model = system or system_for(scenario)
    harness = model.adapter is not None
    if model.adapter is not None:
        model.guard = Deadline(deadline_for(scenario, options), model.adapter)
    invariants, unsupported = for_system(invariants, model)
    validate_expect(scenario, harness)
    searches = _Searches(scenario, model, options, progress)
    ample, unused = _partial_order(model, options)
    if options.por is False:
        staged = _without(searches, invariants, "--no-por")
    elif ample is not None and options.por:
        staged = _ordered(searches, invariants, ample)
    elif ample is not None and not unused:
        staged = _auto(searches, invariants, ample)
    else:
        staged = _without(searches, invariants, f"{'--por: not applied' if options.por else 'auto: without'} "
                                                f"partial-order reduction: {unused}")
    x = staged.main.result
    x.seconds = searches.seconds
    where = _hung(staged) if x.stop is not None and x.stop.kind is StopKind.CALL_DEADLINE else None
    return report(scenario, model, invariants, unsupported, x, staged.shortest, staged.peak, where,
                  searches=tuple(searches.done), partial_order=options.por_asked, choice=staged.why,
                  host_peak_searches=(staged.peak, staged.main))


def report(scenario: Scenario, model: TransitionSystem, invariants: tuple[Invariant, ...], unsupported: dict,
           x: Exploration, shortest: Any, peak_search: Any, where: Optional[tuple[Any, Hung]] = None, *,
           searches: tuple[Search, ...] = (), partial_order: str = "off", choice: str = "",
           host_peak_searches: tuple[Any, ...] = (), kind: type[ExplicitResult] = ExplicitResult) -> ExplicitResult:
    """A search's verdicts, counterexamples and figures as a result: `x`
    its figures, `shortest` what rebuilds each violation's trace
    (`trace_of`), `peak_search` the peak state's (`path_to`), `where` a
    call that did not return and the search it stopped. Any engine that
    rebuilds its traces on the model reports through it (the explorer,
    the frontier engine)."""
    harness = model.adapter is not None
    init = model.init_state()
    code = model.code
    verdicts = {}

    def rebuilt(trace: Callable[[], T]) -> T:
        """A trace rebuilt by re-running successors; allocator code that
        does not give the same states again is not deterministic."""
        try:
            return trace()
        except NotRebuilt as error:
            if not harness:
                raise
            raise SpecError(model.adapter or "allocator", "determinism", not_deterministic(error)) from None

    for inv in invariants:
        v = x.violations.get(inv.id)
        if v is None:
            verdicts[inv.id] = verdict_for(inv.id, Kind(inv.kind), False, x.complete)
            continue
        run, witness = rebuilt(lambda: shortest.trace_of(v))
        cx = Counterexample.from_run(scenario, init, run, invariant=inv.id, invariant_kind=inv.kind, witness=witness,
                                    judged_by=inv, allocator_code=code)
        verdicts[inv.id] = verdict_for(inv.id, Kind(inv.kind), True, x.complete, length=v.length,
                                       counterexample=cx, witness=witness)
    for inv_id, why in unsupported.items():
        verdicts[inv_id] = Verdict(inv_id, Kind(why[0]), Outcome.UNSUPPORTED, note=why[1])
    peak = None
    peak_state = peak_search.result.peak_state
    if peak_state is not None:
        peak = Counterexample.from_run(scenario, init, rebuilt(lambda: peak_search.path_to(peak_state)), peak=x.peak,
                                       allocator_code=code)
    host_peak = _host_peak_trace(scenario, host_peak_searches, x, lambda search, sid: rebuilt(lambda: search.path_to(sid)),
                                 init, code)
    hung = None
    if where is not None:
        search, call = where
        hung = Counterexample.from_run(scenario, init, rebuilt(lambda: search.path_to(call.state_id)), call=call.call,
                                       deadline=call.seconds, allocator_code=code)
    return kind(scenario, verdicts, x.complete, x.stop, x.seconds, allocator_code=code, exploration=x, peak_trace=peak,
                host_peak_trace=host_peak, deadline_trace=hung, searches=searches, partial_order=partial_order, choice=choice)


def _host_peak_trace(scenario: Scenario, searches: tuple[Any, ...], x: Exploration, path_to: Callable[[Any, int], list],
                     init: State, code: Optional[Code]) -> Optional[Counterexample]:
    """A scenario with a host tier: the trace to its host peak, from the
    first of `searches` that reached the host peak (the explorer passes
    the search that reports the peak's trace, then the one that reports
    the measures); None without a host tier."""
    if not scenario.transfers or not scenario.host_pool or x.host_peak is None:
        return None
    for search in searches:
        sid = search.result.host_peak_state
        if sid is not None and search.result.host_peak == x.host_peak:
            return Counterexample.from_run(scenario, init, path_to(search, sid), host_peak=x.host_peak, allocator_code=code)
    return None


def _hung(staged: _Staged) -> Optional[tuple[Explorer, Hung]]:
    """The search a call deadline stopped, and the call: the reported
    search's, or the one for the peak's trace that went on after it."""
    for search in (staged.main, staged.peak):
        if search.result.hung is not None:
            return search, search.result.hung
    return None


class _Searches:
    """The searches one check may run, all of one model with the same
    symmetry and encoding; each is recorded (`done`) once it has served its
    purpose, and the seconds of all of them are summed."""

    def __init__(self, scenario: Scenario, model: TransitionSystem, options: SearchOptions,
                 progress: Optional[Callable]):
        # only states the reductions can read are renamed, reordered and encoded
        reducible = model.reducible
        self.model, self.options, self.progress = model, options, progress
        self.cache = scenario.cache
        self.transfers = scenario.transfers
        self.orbits = Symmetry(scenario) if options.symmetry and reducible is not None else None
        if self.orbits is not None:
            assert reducible is not None
            self.model = model = reducible.up_to_block_ids()
        self.encode = Compact(scenario).encode if options.compact and reducible is not None and reducible.encodable \
            else None
        self.explored: list[Exploration] = []   # each search's result (not the search: what it stored may go)
        self.done: list[Search] = []

    def start(self, invariants: tuple[Invariant, ...], ample: Optional[Ample], limits: SearchOptions,
              stop_after: Optional[frozenset[str]] = None) -> Explorer:
        """A search under `limits`, not yet run (its `run` may pause, and
        `more` continues it)."""
        model, orbits = self.model, self.orbits
        reductions = (orbits.describe() if orbits else []) + (ample.describe() if ample else [])
        explorer = Explorer(model, invariants, limits, stop_after=stop_after, gauge=allocated, steady=model.is_steady,
                            cost=model.is_copy_launch, hits=model.hits if self.cache else None,
                            host_gauge=host_allocated if self.transfers else None,
                            moves=model.transfer_launches if self.transfers else None,
                            representative=orbits.representative if orbits else None,
                            mirror=orbits.unmirrored if orbits else None, ample=ample, reductions=tuple(reductions),
                            encode=self.encode, progress=self.progress)
        self.explored.append(explorer.result)
        return explorer

    def run(self, purpose: str, invariants: tuple[Invariant, ...], ample: Optional[Ample], limits: SearchOptions,
            stop_after: Optional[frozenset[str]] = None) -> Explorer:
        """One search under `limits`, run to its end and recorded as being for `purpose`."""
        explorer = self.start(invariants, ample, limits, stop_after)
        explorer.run()
        return self.record(purpose, explorer)

    def more(self, explorer: Explorer) -> Explorer:
        """A paused search, to be continued: its `max_seconds` is what is left."""
        explorer.options = replace(explorer.options, max_seconds=self.time_left())
        return explorer

    def record(self, purpose: str, explorer: Explorer) -> Explorer:
        self.done.append(Search.of(purpose, explorer.result))
        return explorer

    @property
    def seconds(self) -> float:
        return sum(x.seconds for x in self.explored)

    def time_left(self) -> Optional[float]:
        """`max_seconds` less what the searches so far took (at least a second)."""
        limit = self.options.max_seconds
        return None if limit is None else max(limit - self.seconds, 1.0)


@dataclass
class _Staged:
    """What a staging leaves for the verdicts: the search whose figures are
    reported (`main`), the one that holds each violation's shortest trace
    (`shortest`), the one whose peak state's trace is reported (`peak`), and
    what was chosen, and why."""
    main: Explorer
    shortest: Explorer
    peak: Explorer
    why: str


def _partial_order(model: TransitionSystem, options: SearchOptions) -> tuple[Optional[Ample], str]:
    """The partial-order reduction this check can use (None where it cannot
    apply), and why auto leaves it off ("" where auto uses it). Auto needs
    settled completions: without them, on the stream devices, the reduction
    saves a fifth of the states at most on the benchmarks, less than the
    search for the peak's trace and a buggy protocol's second search cost."""
    if options.max_depth is not None:
        return None, "--max-depth bounds the search, and the reduction needs an exhaustive one"
    if model.reducible is None:
        return None, model.irreducible
    model = model.reducible          # the protocol file's model, which the reduction reads
    ample = Ample(model, completions=True)
    if not ample.enabled:
        return None, "the protocol has atomic paths (a branch taking the scheduler lock disables the others)"
    if not ample.completions:
        where = "as the protocol copies into tail," if model.device.unordered else f"on the {model.device} device"
        return ample, f"{where} no completion is settled, and without that it saves little"
    return ample, ""


def _without(searches: _Searches, invariants: tuple[Invariant, ...], why: str) -> _Staged:
    """One search without partial-order reduction: every figure from it."""
    explorer = searches.run("verdicts", invariants, None, searches.options)
    return _Staged(explorer, explorer, explorer, why)


def _ordered(searches: _Searches, invariants: tuple[Invariant, ...], ample: Ample) -> _Staged:
    """`--por`: where settled completions apply, with them up to the first
    violation, and if that finds one, again with branch-local steps alone
    for every verdict (completions explored alone keep only whether some
    violation is reachable, cowcheck.model.reduce.ample); then, if anything
    broke, without the reduction up to the lengths found, for the true
    shortest lengths and traces (that search is not limited by
    --max-states: its depth bound already limits it). The peak's trace is
    the reduced search's: a trace to the peak, not always a shortest one."""
    options = searches.options
    settled = ample.completions and not options.first
    explorer = searches.run("first violation" if settled else "verdicts", invariants, ample,
                            replace(options, first=True) if settled else options)
    why = "--por"
    if settled and explorer.result.violations:
        explorer = searches.run("verdicts", invariants, Ample(ample.model),
                                replace(options, max_seconds=searches.time_left()))
        why += ": settled completions found a violation, so branch-local steps alone for every verdict"
    x = explorer.result
    shortest = explorer
    if x.violations:
        found = tuple(inv for inv in invariants if inv.id in x.violations)
        bound = max(v.length for v in x.violations.values())
        shortest = searches.run("shortest lengths", found, None, replace(options, max_states=None, max_depth=bound,
                                                                         first=False, por=False),
                                stop_after=frozenset(inv.id for inv in found))
        x.violations = {inv.id: shortest.result.violations[inv.id] for inv in found}
        why += "; the violations searched again without it for their shortest lengths"
    return _Staged(explorer, shortest, explorer, why)


#: the states the search without partial-order reduction stores before the
#: default starts the search with it (`_auto`). Under about this many, the
#: reduced search's fixed costs (its setup, the staging, a second trace
#: rebuilt) are a fifth of the check or more; past them, the states stored
#: are the start of the peak's trace search or of the search for every
#: figure, so little is lost when the reduced search answers.
FIRST_STATES = 64


def _auto(searches: _Searches, invariants: tuple[Invariant, ...], ample: Ample) -> _Staged:
    """The default, where settled completions apply. First the search
    without partial-order reduction, paused once it stores FIRST_STATES
    states: it answers a space that small by itself (there the reduced
    search, its setup and its staging cost more than they save), and a
    violation among them means a buggy protocol, whose every figure that
    search gives, so it goes on to its end. Otherwise partial-order
    reduction with settled completions up to the first violation. If there
    is none, that search answers (the reduction keeps every measure when
    nothing breaks), and the paused search goes on, storing states only
    (`Explorer.seek`), up to the first state at the peak: the state and the
    trace the search without the reduction reports. If there is one, or
    the reduced search stopped short (a bound), the paused search goes on to
    its end and gives every figure. The paused search is never run twice:
    whatever it stored before the reduced search is the start of either."""
    options = searches.options
    plain = searches.start(invariants, None, replace(options, por=False))
    first = plain.run(pause_at=FIRST_STATES)
    if not plain.paused:
        what = "the whole space is" if first.complete else f"it stopped ({first.stopped})"
        return _Staged(plain, plain, searches.record("verdicts", plain), "auto: without partial-order reduction: "
                       f"{what} within {FIRST_STATES} states, where the search with it would cost more than it saves")
    if first.violations:
        searches.more(plain).run()
        return _Staged(plain, plain, searches.record("verdicts", plain), "auto: without partial-order reduction: a "
                       f"violation ({next(iter(first.violations))}) within its first {FIRST_STATES} states, so every "
                       "figure from that search")
    reduced = searches.run("first violation", invariants, ample, replace(options, first=True))
    x = reduced.result
    if x.complete:
        assert x.peak is not None         # every search has the gauge
        peak = searches.more(plain).seek(x.peak)
        searches.record("peak trace", plain)
        if peak.stop != PEAK_REACHED:       # stopped short of the peak: its trace is not the shortest
            assert peak.stop is not None      # `seek` always stops
            x.complete, x.stop = False, replace(peak.stop, peak=True)
        return _Staged(reduced, reduced, plain, "auto: with partial-order reduction, no violation: every invariant "
                       "holds and every measure is exact (the peak's shortest trace: without it, up to the peak)")
    if x.stop is not None and x.stop.interrupted:     # the paused search gave nothing: only the interrupted one is reported
        return _Staged(reduced, reduced, reduced, "auto: interrupted in the search with partial-order reduction")
    if x.violations:
        broken = next(iter(x.violations))
        why = f"auto: with partial-order reduction, a violation ({broken}): every figure from the search without it"
    else:
        why = f"auto: with partial-order reduction, stopped ({x.stopped}): every figure from the search without it"
    searches.more(plain).run()
    searches.record("verdicts", plain)
    return _Staged(plain, plain, plain, why)


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
