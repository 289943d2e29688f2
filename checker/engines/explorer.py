"""Breadth-first exploration of every reachable state.

One idea, though long: one search and what it keeps (the graph, for
traces and for the measures over complete runs), with the hooks the
reductions and the profile plug into.

The explorer knows transition systems, not KV caches: it takes a model with
`init_state()`, `successors(state)` and `is_final(state)`, a set of
invariants, and optional measure hooks (a gauge to maximize over states, a
predicate naming "steady" states, an action cost to minimize and maximize over
complete runs). It stores each state once with a parent link and rebuilds a
trace on demand; because the search is breadth-first, the first violation it
finds of each invariant is a shortest one.

Five options shrink what is stored or explored, none changing any verdict or
measure (and all but `ample` no shortest length either):

- `representative`: a map from a state to a member of its symmetry orbit
  (model.reduce.symmetry); each orbit is stored once. Traces are rebuilt
  concretely by walking from the real initial state, at each step taking a
  successor whose representative is the stored one.
- `encode`: the visited set holds each state's compact encoding
  (cowcheck.model.compact: fixed-width bytes) instead of a tree of tuples.
- `mirror`: a map from a state and its transitions to those left once the
  moves of actors that a symmetry of the state swaps with another actor
  are dropped (model.reduce.symmetry's `unmirrored`): they lead to the
  orbits the kept ones reach, so the states, depths and measures are the
  same, from fewer transitions.
- `ample`: a map from a state and its transitions to the ones to explore
  (model.reduce.ample's partial-order reduction). Verdicts and measures are kept;
  shortest lengths may grow, which the caller re-searches (cowcheck.engines.explicit).
  It is asked first, and the mirrored moves are computed only where it keeps
  every move: where it keeps one branch's, that branch mirrors no earlier
  one (a twin earlier in its class meets the same condition, the rule
  reading the state up to renaming, and would have been chosen first), and
  where it keeps one completion, no branch's move is left; so the moves
  explored are the ones the mirror, then the ample set, would leave.
- `fingerprints`: the visited set holds a 64-bit hash of each state instead
  of the state (TLC's fingerprints); two states with the same fingerprint
  would be merged, with probability about n(g-n)/2^64 for n states and g
  generated successors, which the report prints."""

from __future__ import annotations

import gc
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cowcheck.model.system import TransitionSystem

from cowcheck.model.harness import CallDeadline
from cowcheck.engines.invariants import Invariant, Judge
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.stop import PEAK_REACHED, Stop, StopKind, Stoppable, interrupted, past


@dataclass
class Violation:
    invariant: str
    length: int            # actions in the shortest trace
    state_id: int          # the state the trace ends in (for an action: the state before it)
    action: Any = None     # the violating action, for action-checked invariants
    after: Any = None      # the state after that action (None for a kernel-table-miss)
    witness: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Hung:
    """A call of the user's code that did not return within its deadline
    (`seconds`): the call as written and the state whose successors it was
    computing, `length` actions deep; its trace is `Explorer.path_to(state_id)`."""
    call: str
    seconds: float
    state_id: int
    length: int


@dataclass
class Exploration(Stoppable):
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = True
    stop: Optional[Stop] = None            # why a partial run stopped
    violations: dict[str, Violation] = field(default_factory=dict)
    hung: Optional[Hung] = None            # the call a call deadline stopped, and where
    peak: Optional[int] = None
    peak_state: Optional[int] = None
    cost_range: Optional[tuple[int, int]] = None   # (min, max) action cost over complete runs
    hits_range: Optional[tuple[int, int]] = None   # (min, max) cache hits over complete runs (cache scenarios)
    host_peak: Optional[int] = None                # the most host blocks allocated (transfer scenarios)
    host_peak_state: Optional[int] = None
    transfers_range: Optional[tuple[int, int]] = None   # (min, max) transfer launches over complete runs
    steady_values: tuple[int, ...] = ()            # the gauge's values over steady states
    reductions: tuple[str, ...] = ()               # what shrank the stored space
    encoding: Optional[str] = None                 # how visited states are stored, when not as tuples
    fingerprints: bool = False
    bytes_per_state: Optional[float] = None        # resident memory grown during the run, per state

    @property
    def collision_probability(self) -> Optional[float]:
        """TLC's estimate of a fingerprint collision: n(g-n)/2^64."""
        if not self.fingerprints:
            return None
        return self.states * max(self.transitions - self.states, 0) / 2.0 ** 64

    @property
    def steady(self) -> Optional[int]:
        """The gauge's maximum over steady states (what to reserve once settled)."""
        return max(self.steady_values) if self.steady_values else None

    @property
    def rate(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0


def available_memory() -> Optional[int]:
    """Bytes the machine has available now (None where /proc/meminfo cannot
    be read)."""
    try:
        with open("/proc/meminfo") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def default_max_memory() -> Optional[int]:
    """The memory bound when none is given: what this process holds now plus
    80% of what the machine has available, so a search stops with its
    results before the machine starts swapping or the kernel kills it."""
    available = available_memory()
    return None if available is None else _resident_bytes() + available * 4 // 5


def memory_bound(mib: Optional[int]) -> Optional[int]:
    """SearchOptions.max_memory_mib in bytes: None is the default bound, 0 none."""
    return default_max_memory() if mib is None else (mib << 20) or None


def _out_of_memory_in_c(err: SystemError) -> bool:
    """A SystemError that is a MemoryError lost inside C code: with no memory
    left, a C function can fail before it sets its exception, and CPython
    then raises "error return without exception set" or "<function>
    returned NULL without setting an exception" in its place."""
    message = str(err)
    return "without exception set" in message or "without setting an exception" in message


def _resident_bytes() -> int:
    """Resident memory now, in bytes; 0 where it cannot be read (no /proc,
    or no memory left to read it with, right after a MemoryError)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * 4096
    except (OSError, MemoryError):
        return 0


class Explorer:
    def __init__(self, model: TransitionSystem, invariants: tuple[Invariant, ...],
                 options: SearchOptions = SearchOptions(), *, stop_after: Optional[frozenset[str]] = None,
                 gauge: Optional[Callable] = None, steady: Optional[Callable] = None,
                 cost: Optional[Callable] = None, hits: Optional[Callable] = None, host_gauge: Optional[Callable] = None,
                 moves: Optional[Callable] = None, representative: Optional[Callable] = None,
                 mirror: Optional[Callable] = None, ample: Optional[Callable] = None,
                 reductions: tuple[str, ...] = (), encode: Optional[Callable] = None,
                 progress: Optional[Callable[["Explorer", int], None]] = None, profile: bool = False):
        """Search `model`, judging `invariants`, under the user's `options`
        (its limits; symmetry, partial-order reduction and the encoding
        arrive as the functions that implement them: `representative`,
        `mirror`, `ample`, `encode`). `stop_after`: stop once these
        invariants are all broken."""
        self.model = model
        self.invariants = invariants
        self.options = options
        self.max_memory = memory_bound(options.max_memory_mib)   # bytes of resident memory; None: no bound
        self.stop_after = stop_after
        self.peak_target: Optional[int] = None     # set by `seek`
        self.gauge = gauge
        self.steady = steady
        self.cost = cost
        self.hits = hits
        #: a transfer scenario's measures: the host tier's gauge, and the transfers an action launches
        self.host_gauge = host_gauge
        self.moves = moves
        self.representative = representative
        self.mirror = mirror
        self.ample = ample
        self.encode = encode
        self.fingerprints = fingerprints = options.fingerprints   # read per state by key()
        self.progress = progress
        self.judge = Judge(invariants)
        # the graph, kept for traces and the cost measure; a state's key is
        # its representative, as is, encoded (cowcheck.model.compact) or fingerprinted
        self.keys: list = []
        self.index: dict = {}
        self.parent = array("i")
        self.depth = array("i")
        self.edge_start = array("i")
        self.edge_dst = array("i")
        self.edge_cost = array("b")
        self.edge_hits = array("b")            # kept only with a `hits` measure
        self.edge_moves = array("b")           # kept only with a `moves` measure
        self.final = bytearray()
        # what a paused run continues from (`run(pause_at=...)`, `seek`)
        self.queue: deque = deque()
        self.steady_values: set[int] = set()
        self.memory_at_start: Optional[int] = None
        self.paused = False
        self.started = 0.0                     # when the current call began (for max_seconds)
        self.result = Exploration(reductions=reductions, fingerprints=fingerprints,
                                  encoding="fixed-width" if encode is not None else None)
        # seconds per part of the search (`cowcheck bench --profile`); None
        # unless asked for, and then the parts are timed by wrappers that
        # `_instrument` puts in place, so the loop itself is the same code
        self.times: Optional[dict[str, float]] = None
        if profile:
            self._instrument()

    @property
    def count(self) -> int:
        return len(self.keys)

    def key(self, state):
        """What the visited set holds for a state."""
        if self.representative is not None:
            state = self.representative(state)
        return self._stored(state)

    def _stored(self, rep):
        if self.encode is not None:
            rep = self.encode(rep)
        return hash(rep) if self.fingerprints else rep

    # -- profiling ------------------------------------------------------------
    #: the parts `times` splits a search into
    PARTS = ("successors", "invariants", "canonical form", "hashing and storage", "partial-order", "measures")

    def _instrument(self) -> None:
        """Time each part of the search with time.perf_counter around the
        calls: the model's successors and is_final, the judge, the
        representative, the visited set (encoding, hashing, look-up and
        insertion), the ample set and the measures. Whatever the loop spends
        outside them is the rest (`seconds` minus their sum)."""
        times = self.times = dict.fromkeys(self.PARTS, 0.0)
        clock = time.perf_counter

        def timed(part: str, fn: Callable) -> Callable:
            def call(*args, **kwargs):
                start = clock()
                try:
                    return fn(*args, **kwargs)
                finally:
                    times[part] += clock() - start
            return call

        self.model = _TimedModel(self.model, timed)  # type: ignore[assignment]  # a proxy with the same interface
        judge = self.judge
        self.judge = _TimedJudge(judge, times)  # type: ignore[assignment]
        if self.representative is not None:
            self.representative = timed("canonical form", self.representative)
        if self.mirror is not None:
            self.mirror = timed("canonical form", self.mirror)
        if self.ample is not None:
            self.ample = timed("partial-order", self.ample)
        for name in ("gauge", "steady", "cost", "hits", "host_gauge", "moves"):
            if getattr(self, name) is not None:
                setattr(self, name, timed("measures", getattr(self, name)))
        self._stored = timed("hashing and storage", self._stored)  # type: ignore[method-assign]
        self.index = _TimedIndex(times)
        add = self._add

        def timed_add(*args):
            start, measured = clock(), times["measures"]      # the gauge inside counts as a measure
            try:
                return add(*args)
            finally:
                times["hashing and storage"] += clock() - start - (times["measures"] - measured)
        self._add = timed_add  # type: ignore[method-assign]

    # -- search ---------------------------------------------------------------
    def _add(self, key, state, parent: int, depth: int) -> int:
        sid = len(self.keys)
        self.keys.append(key)
        self.index[key] = sid
        self.parent.append(parent)
        self.depth.append(depth)
        if self.gauge is not None:
            value = self.gauge(state)
            if self.result.peak is None or value > self.result.peak:
                self.result.peak, self.result.peak_state = value, sid
                if self.peak_target is not None and value >= self.peak_target:
                    raise _Stop(PEAK_REACHED)
        if self.host_gauge is not None:
            value = self.host_gauge(state)
            if self.result.host_peak is None or value > self.result.host_peak:
                self.result.host_peak, self.result.host_peak_state = value, sid
        return sid

    def _violate(self, inv_id: str, length: int, sid: int, action=None, after=None, witness=None) -> None:
        if inv_id not in self.result.violations:
            self.result.violations[inv_id] = Violation(inv_id, length, sid, action, after, witness or {})
            if self.options.first:
                raise _Stop(Stop(StopKind.FIRST_VIOLATION))
            if self.stop_after is not None and self.stop_after <= self.result.violations.keys():
                raise _Stop(Stop(StopKind.SOUGHT))

    def run(self, pause_at: Optional[int] = None) -> Exploration:
        """The search, judging every invariant and keeping every measure.
        With `pause_at`, it pauses (`paused`; not complete) before expanding
        another state once that many are stored; `run` again continues it
        where it paused, as if it had never stopped (the same states in the
        same order), and so does `seek`."""
        assert self.peak_target is None, "after `seek` the edges and measures are not kept: the search cannot go on"
        return self._searching(lambda: self._judged(pause_at))

    def seek(self, target: int) -> Exploration:
        """Continue the search (a paused one, or from the start) judging and
        measuring nothing, only storing states, until one whose gauge
        reaches `target` is stored (stopped PEAK_REACHED; at once if one is
        already). That state is `result.peak_state`, with its parent links:
        the first state at `target` that the whole search stores, and the
        trace to it that it would rebuild, since the states are stored in
        the same order from the same successors. What the staged check runs
        once it knows the peak (cowcheck.engines.explicit). It keeps no
        edges: `run` cannot follow it."""
        self.peak_target = target
        return self._searching(self._unjudged)

    def _searching(self, loop: Callable[[], None]) -> Exploration:
        """One call of `run` or `seek`: the first state stored if none is,
        then `loop`, stopped by whatever stops a search; then the result."""
        res = self.result
        if self.paused:                  # a pause is no stop: complete unless something else stopped it
            res.complete, self.paused = res.stop is None, False
        self.started = start = time.perf_counter()
        if self.memory_at_start is None:
            self.memory_at_start = _resident_bytes()
        try:
            if not self.keys:
                init = self.model.init_state()
                if self.representative is not None:
                    init = self.representative(init)
                self._add(self._stored(init), init, -1, 0)
                self.queue.append((0, init))
            elif self.progress is not None:      # going on: the progress names it at once, as its first state did
                self.progress(self, len(self.queue))
            loop()
        except _Paused:
            res.complete, self.paused = False, True
        except _Stop as stop:
            res.complete = False
            res.stop = res.stop or stop.why
        except (MemoryError, SystemError) as err:      # the last resort: give the queue's memory back and report
            if type(err) is SystemError and not _out_of_memory_in_c(err):
                raise
            self.queue.clear()
            res.complete, res.stop = False, Stop(StopKind.OUT_OF_MEMORY)
        except KeyboardInterrupt as interrupt:
            res.complete, res.stop = False, interrupted(interrupt)
        except CallDeadline as late:     # allocator code that did not return (cowcheck.adapters.deadline)
            res.complete, res.stop = False, past(late)
        finally:
            gc.unfreeze()        # back under the collector: what is garbage once the run ends is collected
        res.states = len(self.keys)
        res.seconds += time.perf_counter() - start
        res.bytes_per_state = max(_resident_bytes() - self.memory_at_start, 0) / max(res.states, 1)
        res.steady_values = tuple(sorted(self.steady_values))
        if res.complete and self.cost is not None:
            res.cost_range = self._cost_range(self.edge_cost)
        if res.complete and self.hits is not None:
            res.hits_range = self._cost_range(self.edge_hits)
        if res.complete and self.moves is not None:
            res.transfers_range = self._cost_range(self.edge_moves)
        return res

    def _checkpoint(self) -> None:
        """Every 4,096 states: the collector, the bounds, the progress."""
        # What is stored stays: the collector need not look at it
        # again (its full passes would walk every stored state).
        gc.freeze()
        if self.max_memory is not None and _resident_bytes() > self.max_memory:
            raise _Stop(Stop(StopKind.MEMORY, self.max_memory >> 20))
        max_seconds = self.options.max_seconds
        if max_seconds is not None and time.perf_counter() - self.started > max_seconds:
            raise _Stop(Stop(StopKind.SECONDS, max_seconds))
        if self.progress is not None:
            self.progress(self, len(self.queue))

    def _judged(self, pause_at: Optional[int]) -> None:
        """`run`'s loop: each state judged, measured, and its edges kept."""
        res = self.result
        model, index, queue = self.model, self.index, self.queue
        judge, found = self.judge, res.violations
        steady_values = self.steady_values
        # the loop runs once per transition: what it calls is bound once here
        representative, stored, mirror, ample = self.representative, self._stored, self.mirror, self.ample
        plain = self.encode is None and not self.fingerprints and self.times is None   # the key is the state
        steady, gauge, cost, hits, max_depth = self.steady, self.gauge, self.cost, self.hits, self.options.max_depth
        max_states = self.options.max_states
        deep = Stop(StopKind.DEPTH, max_depth)
        depths, finals, edge_start, edge_dst, edge_cost = self.depth, self.final, self.edge_start, self.edge_dst, self.edge_cost
        edge_hits, moves, edge_moves = self.edge_hits, self.moves, self.edge_moves
        state_checks, action_checks, violate = judge.state, judge.action, self._violate
        while queue:
            if pause_at is not None and len(self.keys) >= pause_at:
                raise _Paused()
            sid, state = queue.popleft()
            depth = depths[sid]
            if depth > res.depth:
                res.depth = depth
            trs = self._successors(state, sid, depth)
            final = model.is_final(state)
            finals.append(final)
            edge_start.append(len(edge_dst))
            for inv_id, witness in state_checks(model, state, final, not trs, found):
                violate(inv_id, depth, sid, witness=witness)
            if steady is not None and steady(state):
                assert gauge is not None  # a steady predicate comes with its gauge
                steady_values.add(gauge(state))
            if max_depth is not None and depth >= max_depth:
                if trs:
                    res.complete, res.stop = False, deep
                continue
            if ample is not None:       # the mirrored moves only where the ample set keeps every move (see above)
                kept = ample(state, trs)
                trs = mirror(state, trs) if mirror is not None and len(kept) == len(trs) else kept
            elif mirror is not None:
                trs = mirror(state, trs)
            for tr in trs:
                res.transitions += 1
                nxt = tr.state
                if tr.facts:
                    for inv_id, witness in action_checks(model, state, tr, found):
                        violate(inv_id, depth + 1, sid, tr.action, nxt, witness)
                if nxt is None:
                    continue
                if representative is not None:
                    nxt = representative(nxt)
                key = nxt if plain else stored(nxt)
                nid = index.get(key)
                if nid is None:
                    if max_states is not None and len(self.keys) >= max_states:
                        res.complete, res.stop = False, Stop(StopKind.STATES, max_states)
                        raise _Stop(res.stop)
                    nid = self._add(key, nxt, sid, depth + 1)
                    queue.append((nid, nxt))
                edge_dst.append(nid)
                edge_cost.append(cost(tr.action) if cost else 0)
                if hits is not None:
                    edge_hits.append(hits(tr.action))
                if moves is not None:
                    edge_moves.append(moves(tr.action))
            if not sid & 0xFFF:
                self._checkpoint()

    def _unjudged(self) -> None:
        """`seek`'s loop: `_judged` less the invariants, the measures and the
        edges (the states, their order, parents and depths are the same)."""
        res, target = self.result, self.peak_target
        if res.peak is not None and target is not None and res.peak >= target:
            raise _Stop(PEAK_REACHED)
        model, index, queue, depths = self.model, self.index, self.queue, self.depth
        representative, stored, mirror, add = self.representative, self._stored, self.mirror, self._add
        plain = self.encode is None and not self.fingerprints and self.times is None   # the key is the state
        while queue:
            sid, state = queue.popleft()
            depth = depths[sid]
            if depth > res.depth:
                res.depth = depth
            trs = self._successors(state, sid, depth)
            if mirror is not None:
                trs = mirror(state, trs)
            res.transitions += len(trs)
            for tr in trs:
                nxt = tr.state
                if nxt is None:
                    continue
                if representative is not None:
                    nxt = representative(nxt)
                key = nxt if plain else stored(nxt)
                if index.get(key) is None:
                    queue.append((add(key, nxt, sid, depth + 1), nxt))     # raises PEAK_REACHED at the target
            if not sid & 0xFFF:
                self._checkpoint()
        raise _Stop(Stop(StopKind.PEAK_NOT_REACHED))      # the target was not the peak of this search

    # -- measures -------------------------------------------------------------
    def _cost_range(self, cost: array) -> Optional[tuple[int, int]]:
        """The fewest and the most total `cost` (one entry per edge) over
        runs from the initial state to a final state. The state graph is
        acyclic (every action advances a branch's program or retires an
        in-flight op), so one pass in topological order (Kahn) settles both."""
        n = len(self.keys)
        starts, dst = self.edge_start, self.edge_dst
        indegree = array("i", bytes(4 * n))
        for d in dst:
            indegree[d] += 1
        BIG = 1 << 30
        low = array("i", [BIG]) * n
        high = array("i", [-1]) * n
        low[0] = high[0] = 0
        ready = [0]
        best_low, best_high = BIG, -1
        while ready:
            s = ready.pop()
            lo, hi = low[s], high[s]
            if self.final[s]:
                best_low, best_high = min(best_low, lo), max(best_high, hi)
            end = starts[s + 1] if s + 1 < n else len(dst)
            for e in range(starts[s], end):
                d, c = dst[e], cost[e]
                if lo + c < low[d]:
                    low[d] = lo + c
                if hi + c > high[d]:
                    high[d] = hi + c
                indegree[d] -= 1
                if indegree[d] == 0:
                    ready.append(d)
        return None if best_high < 0 else (best_low, best_high)

    # -- traces ---------------------------------------------------------------
    def _ids_to(self, sid: int) -> list[int]:
        ids = []
        while sid >= 0:
            ids.append(sid)
            sid = self.parent[sid]
        ids.reverse()
        return ids

    def _successors(self, state: Any, sid: int, depth: int) -> list:
        """The model's successors of state `sid`; a call of the user's code
        that does not return is kept with where it was made (`hung`), so
        its trace can be rebuilt."""
        try:
            return self.model.successors(state)
        except CallDeadline as late:
            self.result.hung = Hung(late.call, late.seconds, sid, depth)
            raise

    def path_to(self, sid: int) -> list[tuple[Any, Any]]:
        """[(action, state after it)] from the real initial state to a state
        whose key is `sid`'s: at each step, a successor with the stored key."""
        # no successor with the stored key: a fingerprint collision, or a model that is not deterministic
        return walk(self.model, [self.keys[nid] for nid in self._ids_to(sid)[1:]], lambda s, want: self.key(s) == want,
                    lambda step: f"cannot rebuild the trace at step {step}: no successor has the stored "
                                 f"{'fingerprint' if self.fingerprints else 'key'}; rerun without --fingerprints")

    def trace_of(self, violation: Violation) -> tuple[list[tuple[Any, Any]], dict]:
        """A concrete shortest trace for a violation and the witness judged on
        it (block and branch names as in the trace, not as stored)."""
        return trace_for(self.model, self.invariants, self.path_to(violation.state_id), violation)


def walk(model: TransitionSystem, wanted: list, same: Callable[[Any, Any], bool],
         failure: Callable[[int], str]) -> list[tuple[Any, Any]]:
    """[(action, state after it)] from the model's initial state, at each
    step the first successor that is the `same` as the next stored one
    (`wanted`); NotRebuilt, with `failure(step)` as its message, where none is."""
    state = model.init_state()
    out: list[tuple[Any, Any]] = []
    for want in wanted:
        offered = model.successors(state)
        tr = next((t for t in offered if t.state is not None and same(t.state, want)), None)
        if tr is None:
            raise NotRebuilt(failure(len(out) + 1), [action for action, _ in out], want, offered)
        assert tr.state is not None
        out.append((tr.action, tr.state))
        state = tr.state
    return out


def trace_for(model: TransitionSystem, invariants: tuple[Invariant, ...], path: list[tuple[Any, Any]],
              violation: Violation) -> tuple[list[tuple[Any, Any]], dict]:
    """A violation's trace from the path to its stored state (any engine's
    search that rebuilds paths on the model), and its witness: the state's,
    or the first action out of it that breaks the invariant."""
    state = path[-1][1] if path else model.init_state()
    judge = Judge(tuple(inv for inv in invariants if inv.id == violation.invariant))
    if violation.action is None:
        trs = model.successors(state)
        witness = next(w for _, w in judge.state(model, state, model.is_final(state), not trs))
        return path, witness
    for tr in model.successors(state):
        for _, witness in judge.action(model, state, tr):
            return path + [(tr.action, tr.state)], witness
    raise AssertionError(f"no action breaks {violation.invariant} from the stored state")


class NotRebuilt(RuntimeError):
    """Re-running successors along a stored path found no state with the
    stored key. It carries what a caller needs to say where: the actions
    rebuilt before (`done`), the stored key (`want`) and the transitions
    offered instead."""

    def __init__(self, message: str, done: list, want: Any, offered: list):
        super().__init__(message)
        self.done, self.want, self.offered = done, want, offered


class _Stop(Exception):
    """A search stopping short, and why (`why`)."""

    def __init__(self, why: Stop):
        super().__init__(str(why))
        self.why = why


class _Paused(Exception):
    """`run(pause_at=...)` pausing: not a stop, it continues where it paused."""


class _TimedModel:
    """The model as the profiled explorer sees it: successors and is_final
    timed, everything else passed through."""

    def __init__(self, model: TransitionSystem, timed: Callable[[str, Callable], Callable]):
        self._model = model
        self.successors = timed("successors", model.successors)
        self.is_final = timed("successors", model.is_final)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


class _TimedJudge:
    """The judge with each call timed (its generators run to the end inside
    the timing)."""

    def __init__(self, judge: Judge, times: dict[str, float]):
        self._judge, self._times = judge, times

    def state(self, *args) -> list:
        start = time.perf_counter()
        out = list(self._judge.state(*args))
        self._times["invariants"] += time.perf_counter() - start
        return out

    def action(self, *args) -> list:
        start = time.perf_counter()
        out = list(self._judge.action(*args))
        self._times["invariants"] += time.perf_counter() - start
        return out


class _TimedIndex(dict):
    """The visited set's index with its look-ups (hashing included) timed."""

    def __init__(self, times: dict[str, float]):
        super().__init__()
        self._times = times

    def get(self, key, default=None):
        start = time.perf_counter()
        try:
            return dict.get(self, key, default)
        finally:
            self._times["hashing and storage"] += time.perf_counter() - start
