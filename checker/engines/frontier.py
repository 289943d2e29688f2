"""The frontier engine: breadth-first search over states kept as rows of
small integers (cowcheck.engines.rows), a level at a time.

Each step kind is applied to every frontier row whose branch stands at it at
once (a few gathers and scatters), each device completion to every row where
it may complete, and the invariants are judged as masks over the rows. New
rows are told apart from stored ones by a 64-bit row hash, checked against
the stored row (a collision is an error, never a merge). The same code runs
on numpy or CuPy (`xp`, the array module cowcheck.traces.pool chooses).

It gives the explicit engine's figures without reductions: the same states,
transitions, depth, verdicts, shortest lengths, peak, copies, hits (prefix
caching) and steady count (tests/test_engines_frontier.py). Traces are
rebuilt by walking the explicit model from the initial state along the
stored parents, at each step taking the successor whose row is the stored
one, so counterexamples are the explicit model's own, replayable and
explainable as any other.
Its reductions are the explorer's, over rows: symmetry renames each new
row to a member of its orbit (cowcheck.engines.orbits), and partial-order
reduction keeps, per row, the moves of the actor the ample-set rule
chooses (cowcheck.engines.ample); `explore_frontier` stages them.

One idea, over 500 lines: the level loop, the step kinds as array
operations and the invariants as masks all work on the same row layout
and the same chunk of the frontier; split apart, each part would pass the
same dozen arrays to the next."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from dataclasses import replace
from itertools import permutations
from typing import Any, Callable, Optional

import numpy as np

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Block
from cowcheck.model.structure import Structure
from cowcheck.model.stepkinds import COPIES, WAITS
from cowcheck.model.system import ProtocolModel
from cowcheck.engines.explorer import Exploration, Violation, _resident_bytes, memory_bound, trace_for, walk
from cowcheck.engines.explicit import report
from cowcheck.engines.ample import ALL, RowAmple
from cowcheck.engines.hashtable import HashTable
from cowcheck.engines.orbits import RowOrbits
from cowcheck.engines.invariants import INVARIANTS, Invariant, for_system, validate_expect
from cowcheck.engines.results import FrontierResult, Search
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.rows import (CANCELLED, COPY, FINISHED, KERNEL, RUNNING, SNAP, UNBORN, WAITING, Layout, dtype_for,
                                   refusal)
from cowcheck.engines.stop import PEAK_REACHED, Stop, StopKind, interrupted

#: frontier rows expanded at once: bounds the memory of one batch of successors
CHUNK = 1 << 15
#: rows renamed to their representatives at once (cowcheck.engines.orbits): small enough to stay in cache
RENAMED = 2048
_MIX = np.uint64(0x9E3779B97F4A7C15)
#: the search for the peak's shortest trace after a reduced search may take this share of the reduced search's
#: time (at least a second); past it the peak's trace is the reduced search's (a trace to the peak, maybe longer)
SEEK = 0.05
#: the fewest copies to a state no edge has reached yet
_NONE = 1 << 30
#: the steps of prefix caching `Frontier._cache_step` applies (the allocs are `_apply`'s)
CACHE_ROWS = ("lookup", "touch-hits", "alloc-prompt", "prefill", "cache-full", "cache-drafts")


class _Found(Exception):
    """A bound stopped the search (`why`)."""

    def __init__(self, why: Stop):
        super().__init__(str(why))
        self.why = why


class _Successors:
    """One chunk's successors: rows, the row each came from, what its
    action costs (copies launched), and the violations found on the way."""

    def __init__(self, n: int, xp: Any):
        self.xp = xp
        self.rows: list = []
        self.src: list = []
        self.cost: list = []
        self.hits: list = []                    # prompt blocks served from the cache (touch-hits), per successor
        self.stuck = xp.ones(n, dtype=bool)     # no transition at all (not even a table miss)
        self.transitions = 0
        self.violations: dict[str, int] = {}    # invariant -> the index of a row whose action breaks it
        # whose moves these are (a branch i, or N + k for queue entry k's completion): the ample sets' actors
        self.actor = 0
        self.actors: list[int] = []
        self.missed: list[tuple[Any, int]] = []

    def add(self, src: Any, rows: Any, cost: int, hits: Any = 0) -> None:
        if len(src):
            self.rows.append(rows)
            self.src.append(src)
            self.cost.append(self.xp.full(len(src), cost, dtype=np.int8))
            self.hits.append(self.xp.broadcast_to(self.xp.asarray(hits, dtype=np.int8), (len(src),)))
            self.actors.append(self.actor)
            self.transitions += len(src)
            self.stuck[src] = False

    def attempted(self, src: Any) -> None:
        """Transitions that lead nowhere (a kernel-table-miss): counted, not stored."""
        if len(src):
            self.missed.append((src, self.actor))
        self.transitions += len(src)
        self.stuck[src] = False

    def movers(self, n: int, actors: int) -> Any:
        """(n, actors): which actors have a move in each row."""
        has = self.xp.zeros((n, actors), dtype=bool)
        for src, actor in list(zip(self.src, self.actors)) + self.missed:
            has[src, actor] = True
        return has

    def reduce(self, chosen: Any) -> None:
        """Keep, in each row, only the moves of its chosen actor (ALL: every move)."""
        xp = self.xp
        kept = 0
        for k, (src, actor) in enumerate(zip(self.src, self.actors)):
            keep = xp.nonzero((chosen[src] == ALL) | (chosen[src] == actor))[0]
            self.rows[k], self.src[k], self.cost[k] = self.rows[k][keep], src[keep], self.cost[k][keep]
            self.hits[k] = self.hits[k][keep]
            kept += len(keep)
        for src, actor in self.missed:
            kept += int(((chosen[src] == ALL) | (chosen[src] == actor)).sum())
        self.transitions = kept

    def violate(self, inv: str, mask: Any, src: Any) -> None:
        if inv not in self.violations and bool(mask.any()):
            self.violations[inv] = int(src[int(self.xp.argmax(mask))])


class Frontier:
    """One search of one protocol-file scenario (rows.refusal must be None)."""

    def __init__(self, model: ProtocolModel, invariants: tuple[Invariant, ...], options: SearchOptions = SearchOptions(),
                 xp: Any = np, progress: Optional[Callable[..., None]] = None, array: str = "numpy",
                 ample: Optional[RowAmple] = None, seek: Optional[int] = None):
        self.model, self.scenario = model, model.scenario
        # partial-order reduction (cowcheck.engines.ample): per row, the moves of the actor it chooses
        self.ample = ample
        # the search for the peak's trace: stop once a state reaches this many blocks
        self.seek = seek
        self.invariants, self.options, self.xp, self.progress = invariants, options, xp, progress
        self.wanted = frozenset(inv.id for inv in invariants)
        self.lay = lay = Layout.of(self.scenario)
        self.dtype = dtype_for(lay)
        per_word = 8 // np.dtype(self.dtype).itemsize
        self.width = -(-lay.width // per_word) * per_word      # whole 64-bit words, for the hash
        self.reuse = self.scenario.reuse
        self.device = self.scenario.device
        self.max_memory = memory_bound(options.max_memory_mib)
        self.cache = self.scenario.cache           # prefix caching: keys, hits, admissions (rows.Layout)
        # symmetry (--no-symmetry: off): each row renamed to a member of its orbit before it is stored
        self.orbits = RowOrbits.of(self.scenario, lay, xp) if options.symmetry else None
        rng = np.random.default_rng(0x5EED)
        self.coef = xp.asarray(rng.integers(1, 2 ** 63, size=self.width // per_word, dtype=np.uint64) * 2 + 1)
        self.count = 0
        self.rows: Any                             # the stored states' rows, parents, depths and copies (_allocate)
        self.parent: np.ndarray
        self.depths: np.ndarray
        self.copies: np.ndarray
        try:
            self._allocate(self._reserve(xp))
        except MemoryError:
            self._allocate(1024)
        self.forward = True                        # every edge so far leads past its chunk: copies measured on the way
        self.table = HashTable(xp)                 # row hash -> state id
        self.edges: list[tuple[Any, Any, Any]] = []
        self.edge_hits: list[np.ndarray] = []     # beside each edge batch, its hits (cache scenarios)
        self.final = np.zeros(0, dtype=bool)
        self.levels: list[int] = []                # the frontier's size per depth
        self.result = Exploration(encoding=f"frontier rows ({array})")
        self.started = 0.0
        self.memory_at_start = 0
        # the places of each program: (program, step index, the step)
        self.places = [(p, k, s) for p, program in enumerate(lay.programs) for k, s in enumerate(program)]
        # the cells that may hold a block: every working table, then every queue entry's snapshot; a copy's source and target
        queue = lay.QU + lay.QW * np.arange(lay.Q)
        self.held = xp.asarray(np.concatenate([np.arange(lay.wt(i), lay.wt(i) + lay.W) for i in range(lay.N)]
                                              + [q + SNAP + np.arange(lay.W) for q in queue]))
        self.copy_src, self.copy_dst = xp.asarray(queue + 1), xp.asarray(queue + 2)
        # each branch's status, pos, published length and published table; a table cell's index
        self.status, self.pos, self.plen = (xp.asarray([lay.br(i, f) for i in range(lay.N)]) for f in ("status", "pos", "plen"))
        self.published = xp.asarray(np.concatenate([np.arange(lay.pt(i), lay.pt(i) + lay.W) for i in range(lay.N)]))
        self.slot_of_table = xp.asarray(np.tile(np.arange(lay.W), lay.N))
        self.longest = max(len(program) for program in lay.programs)
        # per branch and operations done: the child its next operation forks, -1 an append, -2 none left
        self.next_fork = [xp.asarray(np.array(forks + (-2,), dtype=np.int64)) for forks in lay.forks]
        self.next_drafts = [xp.asarray(np.array(drafts + (0,), dtype=np.int64)) for drafts in lay.drafts]
        # each branch's sequence, position by position (the tokens its kernels write and read)
        self.tokens = xp.asarray(np.array([t + (0,) * (max(map(len, lay.tokens)) + 1 - len(t)) for t in lay.tokens], dtype=np.int64))
        self.lineage = self.scenario.lineage
        # the places (as program * longest + step) where a branch holds the scheduler lock
        programs = lay.numbers
        self.locking = xp.asarray([programs[place.op, place.path] * self.longest + place.step
                                   for place in Structure(self.scenario.protocol).locking_places
                                   if (place.op, place.path) in programs], dtype=np.int16)
        if self.cache:
            self._cache_tables()

    def _cache_tables(self) -> None:
        """What the steps of prefix caching read: per request its `after`,
        whether each operation is a draft's append, the keys of its
        prompt's blocks (lookup) and of its sequence's (cache-full, without
        speculation); the keys' codes and their blocks' tokens."""
        lay, xp, B = self.lay, self.xp, self.lay.B
        specs = self.scenario.branches
        self.after = [spec.after for spec in specs]
        self.is_draft = [xp.asarray(np.array(spec.drafts + (False,), dtype=bool)) for spec in specs]
        index = {k: n for n, k in enumerate(lay.keys)}
        self.prompt_keys = [[index[p[:(k + 1) * B]] for k in range((len(p) - 1) // B)] for p in lay.prompts]
        self.seq_keys = [[index[t[:(k + 1) * B]] if (k + 1) * B <= len(t) else -1 for k in range(lay.W)]
                         for t in lay.tokens]
        self.key_codes = xp.asarray(lay.key_codes)
        self.key_tails = xp.asarray(lay.key_tails if lay.keys else np.zeros((1, B), dtype=np.int64))    # read where keyed
        self.powers = xp.asarray(np.array([lay.V ** k for k in range(max(lay.S, 1))], dtype=np.int64))

    def _reserve(self, xp: Any) -> int:
        """How many states the arrays of rows, parents, depths and copies
        start with. On the host they are reserved once, a quarter of the
        machine's memory (or --max-memory), as virtual memory: a page is taken
        only when a row is written to it, and no growth copies the rows
        (growth page-faulted and copied a tenth of the engine's time). On a
        GPU they start small and grow."""
        if xp is not np:
            return 1024
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
        except (ValueError, OSError, AttributeError):
            memory = 0
        if self.max_memory is not None:
            memory = min(memory, self.max_memory)
        return max(1024, memory // (self.width * np.dtype(self.dtype).itemsize + 20))

    def _allocate(self, capacity: int) -> None:
        """The per-state arrays for `capacity` states, the stored ones kept."""
        n = self.count
        rows = self.xp.empty((capacity, self.width), dtype=self.dtype)
        parent, depths = np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int32)
        copies = np.empty((capacity, 2), dtype=np.int32)      # the fewest and most copies on a run to the state
        if n:
            rows[:n], parent[:n], depths[:n], copies[:n] = self.rows[:n], self.parent[:n], self.depths[:n], self.copies[:n]
        self.rows, self.parent, self.depths, self.copies = rows, parent, depths, copies

    # -- the search -----------------------------------------------------------
    def run(self) -> Exploration:
        xp, res, lay = self.xp, self.result, self.lay
        self.started = time.perf_counter()
        self.memory_at_start = _resident_bytes()
        init = xp.full((1, self.width), -1, dtype=self.dtype)
        init[0, :lay.width] = xp.asarray(lay.encode(self.model.init_state(), self.model.names))
        if self.orbits is not None:
            init = self.orbits.canonical(init)[0]
        self._insert(init, np.array([-1]), 0)
        start, end, depth = 0, 1, 0
        finals: list[np.ndarray] = []
        try:
            while start < end:
                self.levels.append(end - start)
                res.depth = max(res.depth, depth)
                for c0 in range(start, end, CHUNK):
                    c1 = min(c0 + CHUNK, end)
                    finals.append(self._chunk(c0, c1, depth))
                    self._checkpoint(depth, end - c1)
                start, end, depth = end, self.count, depth + 1
        except _Found as stop:
            res.complete, res.stop = False, res.stop or stop.why
        except MemoryError:
            res.complete, res.stop = False, Stop(StopKind.OUT_OF_MEMORY)
        except KeyboardInterrupt as interrupt:
            res.complete, res.stop = False, interrupted(interrupt)
        self.final = np.concatenate(finals) if finals else np.zeros(0, dtype=bool)
        res.states = self.count
        res.seconds = time.perf_counter() - self.started
        res.bytes_per_state = self.bytes / max(self.count, 1)
        if res.complete:
            res.cost_range = self._cost_range()
            if self.cache:
                res.hits_range = self._kahn(np.concatenate(self.edge_hits).astype(np.int64)) if self.edges else None
        return res

    @property
    def bytes(self) -> int:
        """What the search holds: the rows, the hash table, the parents and
        depths, and the edges kept for the copies measure."""
        edges = sum(a.nbytes + b.nbytes + c.nbytes for a, b, c in self.edges) + sum(h.nbytes for h in self.edge_hits)
        return self.count * (self.width * np.dtype(self.dtype).itemsize + 12) + self.table.nbytes + edges

    def _checkpoint(self, depth: int, queued: int) -> None:
        options, res = self.options, self.result
        if self.max_memory is not None and _resident_bytes() > self.max_memory:
            raise _Found(Stop(StopKind.MEMORY, self.max_memory >> 20))
        if options.max_seconds is not None and time.perf_counter() - self.started > options.max_seconds:
            raise _Found(Stop(StopKind.SECONDS, options.max_seconds))
        if options.first and res.violations:
            raise _Found(Stop(StopKind.FIRST_VIOLATION))
        if self.seek is not None and res.peak is not None and res.peak >= self.seek:
            raise _Found(PEAK_REACHED)
        if self.progress is not None:
            self.progress(self, queued)

    def _chunk(self, c0: int, c1: int, depth: int) -> np.ndarray:
        """Expand the stored states c0 .. c1-1 (all at `depth`): judge them,
        store their new successors, keep the edges. Returns which are final."""
        xp, res, lay = self.xp, self.result, self.lay
        F = self.rows[c0:c1]
        final, quiet, steady, alloc = self._predicates(F)
        out = _Successors(len(F), xp)
        holder = self._holder(F)
        mirrored = self.orbits.mirrored(F) if self.orbits is not None else None
        for i in range(lay.N):
            allowed = None if holder is None else (holder == -1) | (holder == i)
            if mirrored is not None:        # a branch whose moves mirror another's: left out (cowcheck.engines.orbits)
                allowed = ~mirrored[:, i] if allowed is None else allowed & ~mirrored[:, i]
            out.actor = i
            self._branch(F, i, out, allowed)
        self._device(F, out)
        if self.ample is not None:          # each row's ample set: the moves of one actor, or all
            out.reduce(self.ample.choose(F, out.movers(len(F), lay.N + lay.Q), self._free_map(F), self._uses(F)))
        # state invariants, in the explicit engine's order of judging
        checks = {"no-use-after-free": self._uaf_state(F), "no-leak": final & self._leaky(F),
                  "no-deadlock": ~final & out.stuck, "refcount-exact": self._inexact(F, quiet)}
        for inv, mask in checks.items():
            if inv in self.wanted and inv not in res.violations and bool(mask.any()):
                sid = c0 + int(xp.argmax(mask))
                self._violate(inv, depth, sid, None)
        for value in xp.unique(alloc[steady]).tolist():
            res.steady_values = tuple(sorted(set(res.steady_values) | {int(value)}))
        max_depth = self.options.max_depth
        if max_depth is not None and depth >= max_depth:
            if out.transitions:
                res.complete, res.stop = False, Stop(StopKind.DEPTH, max_depth)
            self.edges.append((np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)))
            self.edge_hits.append(np.zeros(0, np.int8))
            return _host(final)
        res.transitions += out.transitions
        for inv, row in out.violations.items():
            if inv in self.wanted and inv not in res.violations:
                self._violate(inv, depth + 1, c0 + row, "action")
        if out.rows:
            cand = xp.concatenate(out.rows)
            src = xp.concatenate(out.src) + c0
            cost = xp.concatenate(out.cost)
            if self.orbits is None:
                dst = self._dedup(cand, _host(src), depth + 1)
            else:
                first, inverse, hashes = self._distinct(cand)
                dst = self._renamed(cand[first], hashes[first], _host(src[first]), depth + 1)[_host(inverse)]
            self.edges.append((_host(src), dst, _host(cost)))
            self.edge_hits.append(_host(xp.concatenate(out.hits)) if self.cache else np.zeros(0, np.int8))
            self._measure(*self.edges[-1], c1)
        return _host(final)

    def _violate(self, inv: str, length: int, sid: int, action: Any) -> None:
        self.result.violations[inv] = Violation(inv, length, sid, action)

    # -- storage ----------------------------------------------------------------
    def _hash(self, rows: Any) -> Any:
        xp = self.xp
        words = _words(rows, xp)
        # each word mixed first: a sum of words times odd constants alone keeps two cells that differ in a
        # word's top byte apart only modulo 2**8 (rows of one orbit differing in two such cells met at 1 in 256)
        words = words ^ (words >> xp.uint64(32))
        words *= _MIX
        words ^= words >> xp.uint64(29)
        h = words @ self.coef            # wraps modulo 2**64; 2.5 times as fast as multiplying, then summing
        h ^= h >> xp.uint64(31)
        h *= _MIX
        return xp.maximum(h ^ (h >> xp.uint64(29)), xp.uint64(1))     # 0 marks the hash table's empty slots

    def _insert(self, rows: Any, parents: np.ndarray, depth: int, hashes: Any = None) -> np.ndarray:
        """Store new rows (distinct, none stored yet; `hashes`: theirs, when
        known); returns their ids."""
        xp, n = self.xp, len(rows)
        limit = self.options.max_states
        if limit is not None and self.count + n > limit:
            n = limit - self.count
            rows, parents = rows[:n], parents[:n]
            hashes = None if hashes is None else hashes[:n]
            self.result.complete, self.result.stop = False, Stop(StopKind.STATES, limit)
        while self.count + n > len(self.rows):
            self._allocate(4 * len(self.rows))     # four times: pages not written yet cost nothing
        ids = np.arange(self.count, self.count + n)
        self.rows[self.count:self.count + n] = rows
        self.parent[self.count:self.count + n] = parents
        self.depths[self.count:self.count + n] = depth
        self.copies[self.count:self.count + n] = (_NONE, -1) if self.count else 0
        self.count += n
        self.table.insert(self._hash(rows) if hashes is None else hashes, ids)
        self._gauge(rows, ids)
        if self.result.stop is not None and self.result.stop.kind is StopKind.STATES:
            raise _Found(self.result.stop)
        return ids

    def _gauge(self, rows: Any, ids: np.ndarray) -> None:
        """The peak: the most blocks allocated, and the first state (the
        shallowest) that reaches it."""
        if not len(ids):
            return
        alloc = self.lay.P - (rows[:, self.lay.FREE:self.lay.FREE + self.lay.P] != -1).sum(axis=1)
        best = int(alloc.max())
        res = self.result
        if res.peak is None or best > res.peak:
            res.peak, res.peak_state = best, int(ids[int(self.xp.argmax(alloc))])

    def _distinct(self, cand: Any) -> tuple[Any, Any, Any]:
        """The distinct candidates (the first of each, in order), which
        one each candidate is, and the candidates' hashes: the same row
        comes from several interleavings, and is renamed once."""
        xp = self.xp
        hashes = self._hash(cand)
        _, first, inverse = xp.unique(hashes, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        words = _words(cand, xp)
        if not bool((words == words[first[inverse]]).all()):
            raise RuntimeError("frontier engine: two different rows share a 64-bit hash; rerun with --engine explicit")
        order = xp.argsort(first)
        rank = xp.empty_like(order)
        rank[order] = xp.arange(len(order))
        return first[order], rank[inverse], hashes

    def _renamed(self, cand: Any, hashes: Any, src: np.ndarray, depth: int) -> np.ndarray:
        """`_dedup` of distinct candidates renamed to their representatives,
        but for the candidates that are a stored row as they are (a
        representative already): those are that row's state, and are not
        renamed (renaming is most of the search's time)."""
        xp = self.xp
        stored = self.table.lookup(hashes)
        known = xp.nonzero(stored >= 0)[0]
        if len(known) and not bool((_words(self.rows[stored[known]], xp) == _words(cand[known], xp)).all()):
            raise RuntimeError("frontier engine: a new row shares a stored row's 64-bit hash; rerun with --engine explicit")
        rest = xp.nonzero(stored < 0)[0]
        ids = _host(stored).astype(np.int64)
        if len(rest):
            ids[_host(rest)] = self._dedup(self._canonical(cand[rest]), src[_host(rest)], depth)
        return ids

    def _canonical(self, rows: Any) -> Any:
        """The rows renamed to their orbits' representatives, a batch of
        RENAMED at a time (small batches stay in the processor's cache)."""
        assert self.orbits is not None
        canonical = self.orbits.canonical
        return self.xp.concatenate([canonical(rows[k:k + RENAMED])[0] for k in range(0, len(rows), RENAMED)])

    def _dedup(self, cand: Any, src: np.ndarray, depth: int) -> np.ndarray:
        """Each candidate's state id: a stored one, or a new one stored now
        (the first candidate of each new row names its parent). Each row is
        compared with the row its hash names: a later candidate with the
        first of its hash, a first one with the stored row."""
        xp = self.xp
        hashes = self._hash(cand)
        uniq, first, inverse = xp.unique(hashes, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        words = _words(cand, xp)
        rep = first[inverse]
        later = xp.nonzero(rep != xp.arange(len(cand)))[0]
        if len(later) and not bool((words[later] == words[rep[later]]).all()):
            raise RuntimeError("frontier engine: two different rows share a 64-bit hash; rerun with --engine explicit")
        stored = self.table.lookup(uniq)
        old = stored >= 0
        if bool(old.any()):
            if not bool((_words(self.rows[stored[old]], xp) == words[first[old]]).all()):
                raise RuntimeError("frontier engine: a new row shares a stored row's 64-bit hash; rerun with --engine explicit")
        new = ~old
        firsts = first[new]
        keep = xp.argsort(firsts)          # new states in the order their first candidates came
        ids = self._insert(cand[firsts[keep]], src[_host(firsts[keep])], depth, uniq[new][keep])
        placed = xp.asarray(stored)
        slots = xp.nonzero(new)[0][keep]
        placed[slots] = xp.asarray(ids)
        return _host(placed[inverse])

    # -- the predicates of states -------------------------------------------------
    def _predicates(self, F: Any) -> tuple[Any, Any, Any, Any]:
        lay, xp = self.lay, self.xp
        kinds = self._kinds(F)
        empty = (kinds == -1).all(axis=1)
        final = empty.copy()
        quiet = empty.copy()
        steady = empty.copy()
        for i in range(lay.N):
            st, prog, done = F[:, lay.br(i, "status")], F[:, lay.br(i, "prog")], F[:, lay.br(i, "done")]
            final &= (st == FINISHED) | (st == CANCELLED)
            quiet &= prog == -1
            steady &= (st == RUNNING) & (prog == -1) & (done == len(lay.forks[i]))
        alloc = lay.P - (F[:, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1)
        return final, quiet, steady, alloc

    def _kinds(self, F: Any) -> Any:
        lay = self.lay
        return F[:, lay.QU:lay.QU + lay.Q * lay.QW:lay.QW]

    def _is_free(self, F: Any, blocks: Any) -> Any:
        lay = self.lay
        return (F[:, lay.FREE:lay.FREE + lay.P] == blocks[:, None]).any(axis=1)

    def _free_map(self, F: Any) -> Any:
        """(rows, P): whether each block is free."""
        lay, xp = self.lay, self.xp
        out = xp.zeros((len(F), lay.P + 1), dtype=bool)
        free = F[:, lay.FREE:lay.FREE + lay.P].astype(np.int64)
        out[xp.arange(len(F))[:, None], xp.where(free < 0, lay.P, free)] = True
        return out[:, :lay.P]

    def _uses(self, F: Any) -> Any:
        """Every branch's published table below ceil(pos / B), the rest -1:
        (rows, N * W), branch by branch."""
        lay, xp = self.lay, self.xp
        keep = xp.minimum(F[:, self.plen], -(-F[:, self.pos] // lay.B))
        return xp.where(self.slot_of_table[None, :] < xp.repeat(keep, lay.W, axis=1), F[:, self.published], -1)

    def _uaf_state(self, F: Any) -> Any:
        """no-use-after-free on the state: a free block in a table."""
        lay, xp = self.lay, self.xp
        free = xp.concatenate((self._free_map(F), xp.zeros((len(F), 1), dtype=bool)), axis=1)   # -1: the last column
        tables = xp.concatenate((F[:, self.held[:lay.N * lay.W]], self._uses(F)), axis=1).astype(np.int64)
        return free[xp.arange(len(F))[:, None], tables].any(axis=1)

    def _leaky(self, F: Any) -> Any:
        lay = self.lay
        return (((F[:, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1) != lay.P)
                | (F[:, lay.RC:lay.RC + lay.P] != 0).any(axis=1) | (F[:, lay.HO:lay.HO + lay.P] != 0).any(axis=1))

    def _inexact(self, F: Any, quiet: Any) -> Any:
        """refcount-exact broken, judged on the quiescent rows only."""
        lay, xp = self.lay, self.xp
        out = xp.zeros(len(F), dtype=bool)
        rows = xp.nonzero(quiet)[0]
        if not len(rows):
            return out
        F = F[rows]
        counts = xp.zeros((len(F), lay.P), dtype=np.int32)
        blocks = xp.arange(lay.P)
        for i in range(lay.N):
            table = F[:, lay.wt(i):lay.wt(i) + lay.W]
            maps = (table[:, :, None] == blocks[None, None, :]).any(axis=1)
            counts += maps & (F[:, lay.br(i, "status")] == RUNNING)[:, None]
        out[rows] = (counts != F[:, lay.RC:lay.RC + lay.P]).any(axis=1)
        return out

    # -- branch actions -----------------------------------------------------------
    def _holder(self, F: Any) -> Optional[Any]:
        """Per row, the branch holding the scheduler lock (at a step of an
        atomic path that is not a wait), -1 where none does; None: the
        protocol has no atomic path. The model's `exclusive`, over rows."""
        if not len(self.locking):
            return None
        lay, xp = self.lay, self.xp
        holder = xp.full(len(F), -1, dtype=np.int64)
        for i in reversed(range(lay.N)):       # the first branch that holds it, as the model reads them
            prog = F[:, lay.br(i, "prog")]
            at = xp.where(prog >= 0, prog.astype(np.int16) * self.longest + F[:, lay.br(i, "step")], -1)
            holder = xp.where(xp.isin(at, self.locking), i, holder)
        return holder

    def _branch(self, F: Any, i: int, out: _Successors, allowed: Optional[Any]) -> None:
        """Branch i's actions in every row (`allowed`: the rows where no other
        branch holds the scheduler lock; None: all)."""
        lay, xp = self.lay, self.xp
        st, prog, step = F[:, lay.br(i, "status")], F[:, lay.br(i, "prog")], F[:, lay.br(i, "step")]
        done = F[:, lay.br(i, "done")]
        running = st == RUNNING if allowed is None else (st == RUNNING) & allowed
        idle = running & (prog == -1)
        may_cancel = self.scenario.branches[i].may_cancel
        if self.cache:          # a waiting request: its admission, or a cancel; inside an operation it acts as a running one
            waiting = (st == WAITING) & (prog == -1) if allowed is None else (st == WAITING) & (prog == -1) & allowed
            if bool(waiting.any()):
                self._admit(F, i, waiting, out)
                if may_cancel:
                    self._step(F, i, waiting, lay.cancel, 0, out, start=True)
            running = running | ((st == WAITING) & (prog >= 0) & (True if allowed is None else allowed))
        # between operations: the next one of its program (an append's decide, a fork, a rollback's verify), else finish
        at = xp.minimum(done.astype(np.int64), len(lay.forks[i]))
        forks, drafts = self.next_fork[i][at], self.next_drafts[i][at]
        self._decide(F, i, idle & (forks == -1) & (drafts == 0), out)
        if bool((forks >= 0).any()):
            self._step(F, i, idle & (forks >= 0), lay.fork, 0, out, start=True)
        if bool((drafts > 0).any()):
            self._verify(F, i, idle & (drafts > 0), drafts, out)
        self._step(F, i, idle & (done == len(lay.forks[i])), lay.finish, 0, out, start=True)
        if may_cancel:
            self._step(F, i, idle, lay.cancel, 0, out, start=True)
        # each running row's place (program, step) as one number; only the places some row is at
        at = xp.where(running & (prog >= 0), prog.astype(np.int16) * self.longest + step, -1)
        present = _host(xp.bincount((at + 1).astype(np.int64), minlength=1))
        for p, k, s in self.places:
            code = p * self.longest + k
            if code + 1 >= len(present) or not present[code + 1]:
                continue
            here = at == code
            self._step(F, i, here, p, k, out)
            if may_cancel and p < lay.cancel and s.op == "wait-kernel":
                self._step(F, i, here, lay.cancel, 0, out, start=True)

    def _admit(self, F: Any, i: int, mask: Any, out: _Successors) -> None:
        """A waiting request's admission starts once its `after` request is
        done; an atomic one only where its steps up to its first wait can
        all run now, one after another (the model's `_admit`)."""
        lay, xp = self.lay, self.xp
        after = self.after[i]
        if after is not None:
            status = F[:, lay.br(after, "status")]
            mask = mask & ((status == FINISHED) | (status == CANCELLED))
        if self.scenario.protocol.atomic_admit:
            rows = xp.nonzero(mask)[0]
            mask = mask.copy()
            mask[rows] = self._admissible(F[rows], i)
        self._step(F, i, mask, lay.admit, 0, out, start=True)

    def _admissible(self, R: Any, i: int) -> Any:
        """Per row, whether the admission's steps up to its first wait are
        each enabled in turn (each applied with its first choice)."""
        lay, xp = self.lay, self.xp
        ok = xp.ones(len(R), dtype=bool)
        going = xp.arange(len(R))          # the rows still being tried
        R = R.copy()
        for step in lay.programs[lay.admit]:
            if step.op in WAITS or not len(going):
                break
            enabled = self._enabled(R, i, step)
            if enabled is not None:
                ok[going[~enabled]] = False
                R, going = R[enabled], going[enabled]
            scratch = _Successors(len(R), xp)
            keep = self._apply(R, i, step, scratch, xp.arange(len(R)), [])
            if keep is not None:        # a kernel-table-miss: the admission starts, and its prefill reports it
                R, going = R[keep], going[keep]
        return ok

    def _enabled(self, R: Any, i: int, step: Any) -> Optional[Any]:
        """Per row, whether the step is enabled (None: in every row)."""
        lay, xp = self.lay, self.xp
        op = step.op
        kinds = self._kinds(R)
        if op in ("alloc", "alloc-no-evict"):
            return R[:, lay.FREE] != -1
        if op == "alloc-prompt":
            return (R[:, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1) >= self._prompt_allocs(R, i)
        if op == "wait-kernel":
            return ~((kinds == KERNEL) & (R[:, lay.QU + 1:lay.QU + lay.Q * lay.QW:lay.QW] == i)).any(axis=1)
        if op == "wait-copy":
            dst = self._local(R, i, step.args[0], step)
            return ~((kinds == COPY) & (R[:, lay.QU + 2:lay.QU + lay.Q * lay.QW:lay.QW] == dst[:, None])).any(axis=1)
        return None

    def _prompt_allocs(self, R: Any, i: int) -> Any:
        """The blocks an alloc-prompt takes: every prompt block the hits do not cover."""
        lay = self.lay
        hits = (R[:, lay.hits(i):lay.hits(i) + lay.H] != -1).sum(axis=1)
        return -(-len(lay.prompts[i]) // lay.B) - hits.astype(np.int64)

    def _decide(self, F: Any, i: int, mask: Any, out: _Successors) -> None:
        """The rules as a look-up table over what their conditions read:
        boundary, fill, and the tail's refcount and holds."""
        lay, xp = self.lay, self.xp
        src = xp.nonzero(mask)[0]
        if not len(src):
            return
        R = F[src]
        ar = xp.arange(len(R))
        pos, wlen = R[:, lay.br(i, "pos")].astype(np.int64), R[:, lay.br(i, "wlen")]
        fill, idx = pos % lay.B, pos // lay.B
        present = (fill != 0) & (idx < wlen)
        tail = xp.where(present, R[ar, lay.wt(i) + xp.minimum(idx, lay.W - 1)], -1).astype(np.int64)
        safe = xp.maximum(tail, 0)
        rc = xp.where(present, R[ar, lay.RC + safe], 0).astype(np.int64)
        ho = xp.where(present, R[ar, lay.HO + safe], 0).astype(np.int64)
        key = ((fill * 2 + present) * 256 + rc) * 256 + ho
        combos, inverse = xp.unique(key, return_inverse=True)
        table = []
        for combo in combos.tolist():
            h, rest = combo % 256, combo // 256
            r, rest = rest % 256, rest // 256
            has, f = rest % 2, rest // 2
            state = SimpleNamespace(blocks={0: Block(r, h, ())})
            rule = self.model.choose(state, 0 if has else None, f == 0, f)  # type: ignore[arg-type]
            table.append(-1 if rule is None else lay.paths.index(rule.path))
        path = xp.asarray(np.array(table, dtype=np.int64))[inverse.reshape(-1)]
        ok = path >= 0
        R, src, path, tail = R[ok], src[ok], path[ok], tail[ok]
        R[:, lay.br(i, "prog")] = path
        R[:, lay.br(i, "step")] = 0
        R[:, lay.br(i, "tail")] = tail
        R[:, lay.br(i, "new")] = -1
        out.add(src, R, 0)

    def _verify(self, F: Any, i: int, mask: Any, drafts: Any, out: _Successors) -> None:
        """A rollback's first action, in every row of `mask`: the verifier
        accepts j of the k drafts, each j its own successor, binding
        `rejected` (an empty [rollback] ends the operation here)."""
        lay, xp = self.lay, self.xp
        for k in sorted(set(_host(drafts[mask]).tolist())):
            src = xp.nonzero(mask & (drafts == k))[0]
            for accepted in range(k + 1):
                R = F[src]
                R[:, lay.br(i, "prog")] = lay.rollback
                R[:, lay.br(i, "step")] = 0
                R[:, lay.rejected(i)] = k - accepted
                if self.cache:      # the accepted drafts are verified now
                    R[:, lay.verified(i)] = R[:, lay.br(i, "pos")] - (k - accepted)
                if not lay.programs[lay.rollback]:
                    self._end(R, i, lay.rollback)
                out.add(src, R, 0)

    def _end(self, R: Any, i: int, p: int) -> None:
        """Branch i's program p is done in rows R: locals cleared, and the
        program moved on (or the branch finished or cancelled)."""
        lay, xp = self.lay, self.xp
        R[:, lay.br(i, "status")] = CANCELLED if p == lay.cancel else FINISHED if p == lay.finish else RUNNING
        if p < lay.cancel or p in (lay.fork, lay.rollback):
            R[:, lay.br(i, "done")] += 1
        if p == lay.cancel:         # the children it never forked (and theirs) are cancelled with it
            for c in self.lineage[i]:
                status = R[:, lay.br(c, "status")]
                R[:, lay.br(c, "status")] = xp.where(status == UNBORN, CANCELLED, status)
        for field in ("prog", "tail", "new"):
            R[:, lay.br(i, field)] = -1
        R[:, lay.br(i, "step")] = 0
        if lay.S:
            R[:, lay.rejected(i)] = -1
        if lay.H:
            R[:, lay.hits(i):lay.hits(i) + lay.H] = -1

    def _local(self, R: Any, i: int, name: str, step: Any) -> Any:
        values = R[:, self.lay.br(i, name)].astype(np.int64)
        if bool((values < 0).any()):
            raise SpecError(self.model.source, step.where, f"step {step.text!r} uses '{name}' where none is bound"
                            + (" (tail is absent at a block boundary)" if name == "tail" else " (no alloc bound it)"))
        return values

    def _step(self, F: Any, i: int, mask: Any, p: int, k: int, out: _Successors, start: bool = False) -> None:
        """Branch i takes step k of program p in every row of `mask`
        (`start`: the step starts the program: finish or cancel)."""
        lay, xp = self.lay, self.xp
        src = xp.nonzero(mask)[0]
        if not len(src):
            return
        step = lay.programs[p][k]
        R = F[src]
        if start:
            R[:, lay.br(i, "prog")] = p
            R[:, lay.br(i, "step")] = 0
            if p == lay.admit:
                R[:, lay.br(i, "status")] = RUNNING
        op = step.op
        ok = self._enabled(R, i, step)
        if ok is not None:
            R, src = R[ok], src[ok]
            if not len(src):
                return
        choices: list[tuple[Any, Any, Any]]
        if op in ("alloc", "alloc-no-evict") and self.reuse == "any":       # every free block a choice, each its own successor
            choices = [(f, R[m], src[m]) for f in range(lay.P) for m in [R[:, lay.FREE + f] != -1] if bool(m.any())]
        elif op == "alloc-prompt" and self.reuse == "any":      # each order of free blocks a choice
            need = self._prompt_allocs(R, i)
            count = (R[:, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1)
            choices = [(order, R[m], src[m]) for n in sorted(set(_host(need).tolist()))
                       for order in permutations(range(lay.P), n) for m in [(need == n) & (count > max(order, default=-1))]
                       if bool(m.any())]
        else:
            choices = [(0, R, src)]
        hits = (R[:, lay.hits(i):lay.hits(i) + lay.H] != -1).sum(axis=1).astype(np.int8) if op == "touch-hits" else None
        for at, R, src in choices:
            freed: list[tuple[Any, Any]] = []
            counted = hits if hits is not None else 0
            keep = self._apply(R, i, step, out, src, freed, at)
            if keep is not None:            # a write: it frees nothing
                out.attempted(src[~keep])
                R, src = R[keep], src[keep]
            if k + 1 < len(lay.programs[p]):
                R[:, lay.br(i, "step")] = k + 1
            else:
                self._end(R, i, p)
            for rows, blocks in freed:
                out.violate("no-use-after-free", self._in_use(R[rows], blocks), src[rows])
            out.add(src, R, int(op in COPIES), counted)

    def _apply(self, R: Any, i: int, step: Any, out: _Successors, src: Any, freed: list, at: int = 0) -> Optional[Any]:
        """The step's effect on rows R (in place; an alloc takes the free
        list's entry `at`). Returns the rows that lead somewhere (None: all
        of them); `freed` gets the blocks freed."""
        lay, xp = self.lay, self.xp
        op, n = step.op, len(R)
        ar = xp.arange(n)
        pos = R[:, lay.br(i, "pos")].astype(np.int64)
        if op in ("alloc", "alloc-no-evict"):
            b = R[:, lay.FREE + at].astype(np.int64)
            R[:, lay.FREE + at:lay.FREE + lay.P - 1] = R[:, lay.FREE + at + 1:lay.FREE + lay.P].copy()
            R[:, lay.FREE + lay.P - 1] = -1
            R[ar, lay.RC + b] = 1
            R[:, lay.br(i, step.args[0])] = b
            if self.cache:
                if op == "alloc":       # evicts: the key leaves the cache with the block
                    R[ar, lay.KEY + b] = -1
                out.violate("no-stale-key", R[ar, lay.KEY + b] != -1, src)
        elif op in CACHE_ROWS:
            return self._cache_step(R, i, step, out, src, at)
        elif op in ("incref", "hold"):
            b = self._local(R, i, step.args[0], step)
            R[ar, (lay.RC if op == "incref" else lay.HO) + b] += 1
        elif op in ("decref", "release"):
            b = self._local(R, i, step.args[0], step)
            self._decrement(R, ar, b, op == "decref", out, src, freed)
        elif op in COPIES:
            x, y = self._local(R, i, step.args[0], step), self._local(R, i, step.args[1], step)
            count = pos % lay.B if op == "copy" else xp.full(n, lay.B)
            self._launch(R, (COPY, x, y, count), None)
        elif op == "append":
            x = self._local(R, i, step.args[0], step)
            wlen = R[:, lay.br(i, "wlen")].astype(np.int64)
            if bool((wlen >= lay.W).any()):
                raise AssertionError("frontier engine: a working table outgrew the row layout")
            R[ar, lay.wt(i) + wlen] = x
            R[:, lay.br(i, "wlen")] += 1
        elif op == "replace":
            x, y = self._local(R, i, step.args[0], step), self._local(R, i, step.args[1], step)
            table = R[:, lay.wt(i):lay.wt(i) + lay.W]
            found = table == x[:, None]
            if not bool(found.any(axis=1).all()):
                r = int(xp.argmin(found.any(axis=1)))
                working = [int(v) for v in table[r].tolist() if v >= 0]
                raise SpecError(self.model.source, step.where, f"step {step.text!r}: block {int(x[r])} ({step.args[0]}) "
                                f"is not in the working table {working}")
            R[ar, lay.wt(i) + xp.argmax(found, axis=1)] = y
        elif op == "publish":
            R[:, lay.pt(i):lay.pt(i) + lay.W] = R[:, lay.wt(i):lay.wt(i) + lay.W]
            R[:, lay.br(i, "plen")] = R[:, lay.br(i, "wlen")]
        elif op == "write":
            keep = R[:, lay.br(i, "plen")] > pos // lay.B
            out.violate("kernel-table-miss", ~keep, src)
            if self.cache:          # a draft's position stays unverified until its verify
                draft = self.is_draft[i][R[:, lay.br(i, "done")].astype(np.int64)]
                R[:, lay.verified(i)] = xp.where(draft, R[:, lay.verified(i)], pos + 1)
            expected = None
            if lay.S:               # the token `<name><writes + 1>` at pos: what the kernel must read, with the rest
                R[ar, lay.seq(i) + pos] = 1 + lay.L + i * lay.T + R[:, lay.writes(i)].astype(np.int64)
                R[:, lay.writes(i)] += 1
                expected = R[:, lay.seq(i):lay.seq(i) + lay.S]
            self._launch(R, (KERNEL, xp.full(n, i), pos, 0), R[:, lay.pt(i):lay.pt(i) + lay.W],
                         expected)
            R[:, lay.br(i, "pos")] += 1
            return keep
        elif op == "rewind":
            pos = pos - R[:, lay.rejected(i)].astype(np.int64)
            R[:, lay.br(i, "pos")] = pos
            if self.cache:
                R[:, lay.verified(i)] = xp.minimum(R[:, lay.verified(i)], pos)
            cells = xp.arange(lay.S)[None, :]
            R[:, lay.seq(i):lay.seq(i) + lay.S] = xp.where(cells < pos[:, None], R[:, lay.seq(i):lay.seq(i) + lay.S], -1)
        elif op == "trim":
            keep = -(-pos // lay.B)
            wlen = R[:, lay.br(i, "wlen")].astype(np.int64)
            table = R[:, lay.wt(i):lay.wt(i) + lay.W].astype(np.int64).copy()
            for t in reversed(range(lay.W)):        # the dropped entries, last first
                rows = xp.nonzero((t >= keep) & (t < wlen))[0]
                if len(rows):
                    self._decrement(R, rows, table[rows, t], True, out, src, freed)
            cells = xp.arange(lay.W)[None, :]
            R[:, lay.wt(i):lay.wt(i) + lay.W] = xp.where(cells < keep[:, None], table, -1)
            R[:, lay.br(i, "wlen")] = xp.minimum(wlen, keep)
        elif op == "decref-all":
            table = R[:, lay.wt(i):lay.wt(i) + lay.W].astype(np.int64).copy()
            # a cache scenario frees the last entry first, as V1 does (a chain's later blocks evicted first)
            for t in reversed(range(lay.W)) if self.cache else range(lay.W):
                rows = xp.nonzero(table[:, t] >= 0)[0]
                if len(rows):
                    self._decrement(R, rows, table[rows, t], True, out, src, freed)
            R[:, lay.wt(i):lay.wt(i) + 2 * lay.W] = -1
            R[:, lay.br(i, "wlen")] = 0
            R[:, lay.br(i, "plen")] = 0
        elif op == "incref-all":
            table = R[:, lay.wt(i):lay.wt(i) + lay.W].astype(np.int64)
            for t in range(lay.W):
                rows = xp.nonzero(table[:, t] >= 0)[0]
                R[rows, lay.RC + table[rows, t]] += 1
        elif op == "share":
            child = self.next_fork[i][R[:, lay.br(i, "done")].astype(np.int64)]
            for c in sorted(set(_host(child).tolist())):
                rows = xp.nonzero(child == c)[0]
                born = R[rows]
                born[:, lay.br(c, "status"):lay.br(c, "status") + lay.BW] = -1
                for field, value in (("status", RUNNING), ("pos", born[:, lay.br(i, "pos")]), ("done", 0),
                                     ("wlen", born[:, lay.br(i, "wlen")]), ("plen", born[:, lay.br(i, "wlen")])):
                    born[:, lay.br(c, field)] = value
                born[:, lay.wt(c):lay.wt(c) + lay.W] = born[:, lay.wt(i):lay.wt(i) + lay.W]
                born[:, lay.pt(c):lay.pt(c) + lay.W] = born[:, lay.wt(i):lay.wt(i) + lay.W]
                born[:, lay.br(c, "step")] = 0
                if lay.S:           # its write counter from 0, its sequence its parent's
                    born[:, lay.writes(c)] = 0
                    born[:, lay.seq(c):lay.seq(c) + lay.S] = born[:, lay.seq(i):lay.seq(i) + lay.S]
                R[rows] = born
        elif op == "check-output":
            table = R[:, lay.wt(i):lay.wt(i) + lay.W].astype(np.int64)
            wlen = R[:, lay.br(i, "wlen")]
            bad = xp.zeros(n, dtype=bool)
            for q in range(int(pos.max()) if n else 0):
                idx = q // lay.B
                valid = (q < pos) & (idx < wlen)
                blk = xp.maximum(table[:, min(idx, lay.W - 1)], 0)
                read = xp.where(valid, R[ar, lay.SL + blk * lay.B + q % lay.B], 0)
                bad |= (q < pos) & (read != (R[:, lay.seq(i) + q] if lay.S else self.tokens[i, q]))
            out.violate("faithful-output", bad, src)
        return None

    def _cache_step(self, R: Any, i: int, step: Any, out: _Successors, src: Any, at: Any) -> Optional[Any]:
        """The steps of prefix caching (docs/semantics.md#prefix-caching) in
        rows R, in place; `at`: an alloc-prompt's free-list places under
        `any` reuse (else it takes the front). Returns the rows that lead
        somewhere (None: all of them)."""
        lay, xp, B = self.lay, self.xp, self.lay.B
        op, n = step.op, len(R)
        ar = xp.arange(n)
        keys = R[:, lay.KEY:lay.KEY + lay.P]
        hits = R[:, lay.hits(i):lay.hits(i) + lay.H]
        wlen = R[:, lay.br(i, "wlen")].astype(np.int64)
        if op == "lookup":          # the last prompt token is always recomputed: at most (L - 1) // B hits
            going = xp.ones(n, dtype=bool)
            found = xp.full((n, lay.H), -1, dtype=np.int64)
            for k, key in enumerate(self.prompt_keys[i]):
                match = keys == key
                going &= match.any(axis=1)
                found[:, k] = xp.where(going, xp.argmax(match, axis=1), -1)
            R[:, lay.hits(i):lay.hits(i) + lay.H] = found
        elif op == "touch-hits":    # off the free list, refcount + 1; the hits before the working table
            for k in range(lay.H):
                rows = xp.nonzero(hits[:, k] >= 0)[0]
                b = hits[rows, k].astype(np.int64)
                self._unlist(R, rows, R[rows, lay.FREE:lay.FREE + lay.P] == b[:, None])
                R[rows, lay.RC + b] += 1
            both = xp.concatenate((hits, R[:, lay.wt(i):lay.wt(i) + lay.W]), axis=1)
            order = xp.argsort((both == -1).astype(np.int8), axis=1, kind="stable")
            table = xp.take_along_axis(both, order, axis=1)
            if bool((table[:, lay.W:] != -1).any()):
                raise AssertionError("frontier engine: a working table outgrew the row layout")
            R[:, lay.wt(i):lay.wt(i) + lay.W] = table[:, :lay.W]
            R[:, lay.br(i, "wlen")] = wlen + (hits != -1).sum(axis=1)
        elif op == "alloc-prompt":      # as many allocs, each evicting, into the working table in order
            need = self._prompt_allocs(R, i)
            places = xp.asarray(np.array(at, dtype=np.int64)) if isinstance(at, tuple) else None
            most = len(at) if isinstance(at, tuple) else int(need.max()) if n else 0
            taken = xp.full((n, max(most, 1)), -1, dtype=np.int64)
            drop = xp.zeros((n, lay.P), dtype=bool)
            for k in range(most):
                place = places[k] if places is not None else k
                rows = xp.nonzero(k < need)[0]
                taken[rows, k] = R[rows, lay.FREE + place]
                drop[rows, place] = True
            self._unlist(R, ar, drop)
            for k in range(most):
                rows = xp.nonzero(taken[:, k] >= 0)[0]
                b = taken[rows, k]
                R[rows, lay.RC + b] = 1
                R[rows, lay.KEY + b] = -1
                if bool((wlen[rows] + k >= lay.W).any()):
                    raise AssertionError("frontier engine: a working table outgrew the row layout")
                R[rows, lay.wt(i) + wlen[rows] + k] = b
            R[:, lay.br(i, "wlen")] = wlen + (taken >= 0).sum(axis=1)
        elif op == "prefill":       # one kernel writing the uncached part of the prompt, then reading it whole
            prompt = len(lay.prompts[i])
            keep = R[:, lay.br(i, "plen")] > (prompt - 1) // B
            out.violate("kernel-table-miss", ~keep, src)
            start = (hits != -1).sum(axis=1).astype(np.int64) * B
            expected = None
            if lay.S:
                R[:, lay.seq(i):lay.seq(i) + lay.S] = -1
                R[:, lay.seq(i):lay.seq(i) + prompt] = xp.asarray(np.array(lay.prompts[i]))
                expected = R[:, lay.seq(i):lay.seq(i) + lay.S]
            self._launch(R, (KERNEL, xp.full(n, i), xp.full(n, prompt - 1), prompt - 1 - start),
                         R[:, lay.pt(i):lay.pt(i) + lay.W], expected)
            R[:, lay.br(i, "pos")] = prompt
            R[:, lay.verified(i)] = prompt
            return keep
        else:                   # cache-full (verified positions) or cache-drafts (a bug: drafts too)
            limit = R[:, lay.verified(i) if op == "cache-full" else lay.br(i, "pos")].astype(np.int64)
            verified = R[:, lay.verified(i)].astype(np.int64)
            for k in range(lay.W):
                rows = xp.nonzero(((k + 1) * B <= limit) & (k < wlen))[0]
                if not len(rows):
                    break
                key = self._key_at(R[rows], i, k)
                b = R[rows, lay.wt(i) + k].astype(np.int64)
                new = (R[rows, lay.KEY + b] == -1) & ~(R[rows, lay.KEY:lay.KEY + lay.P] == key[:, None]).any(axis=1)
                rows, b, key = rows[new], b[new], key[new]
                R[rows, lay.KEY + b] = key
                out.violate("verified-only-cached", (k + 1) * B > verified[rows], src[rows])
        return None

    def _key_at(self, R: Any, i: int, k: int) -> Any:
        """The key of request i's first (k + 1) * B tokens, per row: fixed
        by the programs, or with speculation read off its sequence."""
        xp, lay = self.xp, self.lay
        if not lay.S:
            return xp.full(len(R), self.seq_keys[i][k], dtype=np.int64)
        m = (k + 1) * lay.B
        code = (R[:, lay.seq(i):lay.seq(i) + m].astype(np.int64) * self.powers[:m]).sum(axis=1)
        key = xp.searchsorted(self.key_codes, code)
        if bool((self.key_codes[xp.minimum(key, len(lay.keys) - 1)] != code).any()):
            raise AssertionError("frontier engine: a key is not in the row layout")
        return key

    def _unlist(self, R: Any, rows: Any, drop: Any) -> None:
        """Take the free-list places `drop` (rows, P) off the list in `rows`, the rest kept in order."""
        lay, xp = self.lay, self.xp
        cells = xp.where(drop, -1, R[rows, lay.FREE:lay.FREE + lay.P])
        order = xp.argsort((cells == -1).astype(np.int8), axis=1, kind="stable")
        R[rows, lay.FREE:lay.FREE + lay.P] = xp.take_along_axis(cells, order, axis=1)

    def _decrement(self, R: Any, rows: Any, b: Any, refcount: bool, out: _Successors, src: Any, freed: list) -> None:
        """decref (refcount) or release (holds) of block b[k] in row rows[k]:
        an underflow at 0; the block freed at 0 with the other counter 0."""
        lay, xp = self.lay, self.xp
        this, other = (lay.RC, lay.HO) if refcount else (lay.HO, lay.RC)
        value = R[rows, this + b]
        under = value == 0
        out.violate("no-underflow", under, src[rows])
        rows, b, value = rows[~under], b[~under], value[~under]
        R[rows, this + b] = value - 1
        gone = (value == 1) & (R[rows, other + b] == 0)
        rows, b = rows[gone], b[gone]
        if not len(rows):
            return
        listed = (R[rows, lay.FREE:lay.FREE + lay.P] == b[:, None]).any(axis=1)
        rows, b = rows[~listed], b[~listed]
        if not len(rows):
            return
        if self.reuse == "lifo" and self.cache:       # a keyed block goes to the back: evicted last, oldest first
            keyed = R[rows, lay.KEY + b] != -1
            front, back = rows[~keyed], rows[keyed]
            R[front, lay.FREE + 1:lay.FREE + lay.P] = R[front, lay.FREE:lay.FREE + lay.P - 1]
            R[front, lay.FREE] = b[~keyed]
            length = (R[back, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1)
            R[back, lay.FREE + length] = b[keyed]
        elif self.reuse == "lifo":
            R[rows, lay.FREE + 1:lay.FREE + lay.P] = R[rows, lay.FREE:lay.FREE + lay.P - 1]
            R[rows, lay.FREE] = b
        elif self.reuse == "any":       # kept ascending: the order is irrelevant, and canonical
            cells = R[rows, lay.FREE:lay.FREE + lay.P]
            place = ((cells < b[:, None]) & (cells != -1)).sum(axis=1)[:, None]
            slot = xp.arange(lay.P)[None, :]
            before = xp.concatenate((cells[:, :1], cells[:, :-1]), axis=1)
            R[rows, lay.FREE:lay.FREE + lay.P] = xp.where(slot < place, cells, xp.where(slot == place, b[:, None], before))
        else:
            length = (R[rows, lay.FREE:lay.FREE + lay.P] != -1).sum(axis=1)
            R[rows, lay.FREE + length] = b
        freed.append((rows, b))

    def _launch(self, R: Any, cells: tuple, snapshot: Optional[Any], expected: Optional[Any] = None) -> None:
        """Put an op at the end of each row's queue (a kernel: with the
        table it reads and, with speculation, the sequence it must read)."""
        lay, xp = self.lay, self.xp
        ar = xp.arange(len(R))
        at = (self._kinds(R) != -1).sum(axis=1).astype(np.int64)
        if bool((at >= lay.Q).any()):
            raise AssertionError("frontier engine: the device queue outgrew the row layout")
        base = lay.QU + at * lay.QW
        for c, value in enumerate(cells):
            R[ar, base + c] = value
        if snapshot is not None:
            for t in range(lay.W):
                R[ar, base + SNAP + t] = snapshot[:, t]
        if expected is not None:
            for t in range(lay.S):
                R[ar, base + SNAP + lay.W + t] = expected[:, t]

    def _in_use(self, R: Any, blocks: Any) -> Any:
        """no-use-after-free's "freed while in use", on the state after the
        action: in a table of any branch, or used by an op in flight."""
        lay = self.lay
        b = blocks[:, None]
        bad = (R[:, self.held] == b).any(axis=1)
        bad |= (self._uses(R) == b).any(axis=1)
        copying = (R[:, self.copy_src] == b) | (R[:, self.copy_dst] == b)
        return bad | (copying & (self._kinds(R) == COPY)).any(axis=1)

    # -- device completions ---------------------------------------------------------
    def _device(self, F: Any, out: _Successors) -> None:
        lay, xp = self.lay, self.xp
        kinds = self._kinds(F)
        occupied = kinds != -1
        if self.device.unordered:
            ready = occupied
        elif self.device == "stream":
            ready = occupied & (xp.arange(lay.Q) == 0)[None, :]
        else:      # streams: the oldest copy and the oldest kernel
            ready = occupied & (xp.cumsum(kinds == COPY, axis=1) * (kinds == COPY) <= 1) \
                & (xp.cumsum(kinds == KERNEL, axis=1) * (kinds == KERNEL) <= 1)
        for k in range(lay.Q):
            out.actor = lay.N + k
            copy = xp.nonzero(ready[:, k] & (kinds[:, k] == COPY))[0]
            if len(copy):
                self._copy_done(F[copy], k, copy, out)
            kernel = xp.nonzero(ready[:, k] & (kinds[:, k] == KERNEL))[0]
            if len(kernel):
                self._kernel_done(F[kernel], k, kernel, out)

    def _retire(self, R: Any, k: int) -> None:
        """Take op k out of each row's queue."""
        lay = self.lay
        a, end = lay.QU + k * lay.QW, lay.QU + lay.Q * lay.QW
        R[:, a:end - lay.QW] = R[:, a + lay.QW:end].copy()
        R[:, end - lay.QW:end] = -1

    def _copy_done(self, R: Any, k: int, src: Any, out: _Successors) -> None:
        lay, xp = self.lay, self.xp
        base, ar = lay.QU + k * lay.QW, xp.arange(len(R))
        s, d, n = (R[:, base + c].astype(np.int64) for c in (1, 2, 3))
        out.violate("no-use-after-free", self._is_free(R, s) | self._is_free(R, d), src)
        if self.cache:          # cache-immutable: a keyed target's slots keep its key's tokens
            key = R[ar, lay.KEY + d].astype(np.int64)
            want = self.key_tails[xp.maximum(key, 0)]
            cells = R[ar[:, None], lay.SL + s[:, None] * lay.B + xp.arange(lay.B)[None, :]]
            out.violate("cache-immutable", (key >= 0) & ((cells != want) & (xp.arange(lay.B)[None, :] < n[:, None])).any(axis=1),
                        src)
        for slot in range(lay.B):
            cells = R[ar, lay.SL + s * lay.B + slot]
            m = slot < n
            R[ar[m], lay.SL + d[m] * lay.B + slot] = cells[m]
        self._retire(R, k)
        out.add(src, R, 0)

    def _kernel_done(self, R: Any, k: int, src: Any, out: _Successors) -> None:
        lay, xp = self.lay, self.xp
        base, ar, B = lay.QU + k * lay.QW, xp.arange(len(R)), lay.B
        j, pos, more = (R[:, base + c].astype(np.int64) for c in (1, 2, 3))
        snap = R[:, base + SNAP:base + SNAP + lay.W].astype(np.int64).copy()
        target = snap[ar, pos // B]
        # judged before the write: exclusive-write, refcount-write, copy-before-use, no-use-after-free (a prefill:
        # every block it writes, its positions pos - more .. pos)
        n, N, W = len(R), lay.N, lay.W
        kinds = self._kinds(R)
        is_copy, others = kinds == COPY, xp.arange(lay.Q) != k
        snapshots = R[:, self.held[lay.N * lay.W:]].reshape(len(R), lay.Q, lay.W)
        running = R[:, self.status] == RUNNING
        exclusive = xp.zeros(n, dtype=bool)
        shared = xp.zeros(n, dtype=bool)
        immutable = xp.zeros(n, dtype=bool)
        for back in range(int(more.max()) + 1 if n else 0):
            writes = back <= more
            p = xp.maximum(pos - back, 0)
            blk = snap[ar, p // B]
            t = blk[:, None]
            seen = ((R[:, self.held[:N * W]] == t) | (self._uses(R) == t)).reshape(n, N, W).any(axis=2)
            hit = (seen & (j[:, None] != xp.arange(N)[None, :]) & running).any(axis=1)
            hit |= (is_copy & others & (R[:, self.copy_src] == t)).any(axis=1)
            hit |= ((kinds == KERNEL) & others & (snapshots == t[:, :, None]).any(axis=2)).any(axis=1)
            exclusive |= writes & hit
            shared |= writes & ((R[ar, lay.RC + blk] != 1) | (R[ar, lay.HO + blk] != 0))
            if self.cache:      # cache-immutable: a keyed block's slots keep its key's tokens
                key = R[ar, lay.KEY + blk].astype(np.int64)
                token = (R[ar, base + SNAP + lay.W + p] if lay.S else self.tokens[j, p]).astype(np.int64)
                immutable |= writes & (key >= 0) & (self.key_tails[xp.maximum(key, 0), p % B] != token)
        before = (is_copy & (R[:, self.copy_dst][:, :, None] == snap[:, None, :]).any(axis=2)).any(axis=1)
        out.violate("exclusive-write", exclusive, src)
        out.violate("refcount-write", shared, src)
        out.violate("copy-before-use", before, src)
        if self.cache:
            out.violate("cache-immutable", immutable, src)
        free = self._free_map(R)
        touched = free[ar, target]
        for q in range(lay.W):
            touched |= (q <= pos // B) & free[ar, xp.maximum(snap[:, q], 0)] & (snap[:, q] >= 0)
        out.violate("no-use-after-free", touched, src)
        # the write, then the attention read of positions 0 .. pos (the sequence it must read: the
        # kernel's own with speculation, else the branch's, fixed by the programs)
        start = base + SNAP + lay.W
        expected = R[:, start:start + lay.S].astype(np.int64).copy() if lay.S else self.tokens[j]
        for back in reversed(range(int(more.max()) + 1 if n else 0)):      # the positions it writes, in order
            rows = xp.nonzero(back <= more)[0]
            p = pos[rows] - back
            R[rows, lay.SL + snap[rows, p // B] * B + p % B] = expected[rows, p]
        self._retire(R, k)
        bad = xp.zeros(len(R), dtype=bool)
        for p in range(int(pos.max()) + 1):
            m = p <= pos
            blk = xp.maximum(snap[:, min(p // B, lay.W - 1)], 0)
            read = R[ar, lay.SL + blk * B + p % B]
            bad |= m & (read != expected[:, p])
        out.violate("faithful-output", bad, src)
        out.add(src, R, 0)

    # -- measures ---------------------------------------------------------------------
    def _measure(self, src: np.ndarray, dst: np.ndarray, cost: np.ndarray, c1: int) -> None:
        """The fewest and most copies to each successor of a chunk, while
        every edge leads past the chunk it starts in: then every edge into a
        state comes from an earlier chunk, and a chunk's own figures are
        final when it is expanded (the stored order is a topological one)."""
        if not self.forward or not len(dst):
            return
        if bool((dst < c1).any()):
            self.forward = False        # Kahn's order over the edges, at the end
            return
        order = np.argsort(dst, kind="stable")
        s, d, c = src[order], dst[order], cost[order].astype(np.int32)
        heads = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        to = d[heads]
        self.copies[to, 0] = np.minimum(self.copies[to, 0], np.minimum.reduceat(self.copies[s, 0] + c, heads))
        self.copies[to, 1] = np.maximum(self.copies[to, 1], np.maximum.reduceat(self.copies[s, 1] + c, heads))

    def _cost_range(self) -> Optional[tuple[int, int]]:
        """The fewest and most copies over complete runs: measured on the
        way (_measure), else Kahn's order over the stored graph (acyclic), a
        wave of ready states at a time."""
        if not self.edges:
            return (0, 0) if self.count and bool(self.final[:1].any()) else None
        if self.forward:
            finals = self.final[:self.count]
            if not finals.any():
                return None
            return int(self.copies[:self.count, 0][finals].min()), int(self.copies[:self.count, 1][finals].max())
        return self._kahn(np.concatenate([e[2] for e in self.edges]).astype(np.int64))

    def _kahn(self, cost: np.ndarray) -> Optional[tuple[int, int]]:
        """The fewest and most of a measure (`cost`: per stored edge, in
        the order of `edges`) over complete runs, in Kahn's order over the
        stored graph (acyclic), a wave of ready states at a time."""
        src = np.concatenate([e[0] for e in self.edges])
        dst = np.concatenate([e[1] for e in self.edges])
        n = self.count
        order = np.argsort(src, kind="stable")
        src, dst, cost = src[order], dst[order], cost[order]
        starts = np.searchsorted(src, np.arange(n + 1))
        indegree = np.bincount(dst, minlength=n)
        big = 1 << 30
        low, high = np.full(n, big, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        low[0] = high[0] = 0
        ready = np.array([0])
        while len(ready):
            lengths = starts[ready + 1] - starts[ready]
            edges = np.repeat(starts[ready] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            s, d, c = src[edges], dst[edges], cost[edges]
            if not len(d):
                break
            order = np.argsort(d, kind="stable")
            s, d, c = s[order], d[order], c[order]
            heads = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
            targets = d[heads]
            low[targets] = np.minimum(low[targets], np.minimum.reduceat(low[s] + c, heads))
            high[targets] = np.maximum(high[targets], np.maximum.reduceat(high[s] + c, heads))
            indegree[targets] -= np.diff(np.r_[heads, len(d)])
            ready = targets[indegree[targets] == 0]
        finals = self.final[:n]
        if not finals.any():
            return None
        return int(low[finals].min()), int(high[finals].max())

    # -- traces -------------------------------------------------------------------------
    def _ids_to(self, sid: int) -> list[int]:
        ids = []
        while sid >= 0:
            ids.append(sid)
            sid = int(self.parent[sid])
        return ids[::-1]

    def path_to(self, sid: int) -> list[tuple[Any, Any]]:
        """[(action, state after it)] from the initial state to state `sid`,
        walking the explicit model: at each step the successor whose row is
        the stored one."""
        model, lay = self.model, self.lay
        wanted = [_host(self.rows[nid])[:lay.width] for nid in self._ids_to(sid)[1:]]
        if self.orbits is None:
            return walk(model, wanted, lambda s, want: np.array_equal(lay.encode(s, model.names), want),
                        lambda step: f"frontier engine: no explicit successor has the stored row at step {step}")
        # with symmetry the stored rows are renamed: carry the renaming that maps the state walked to its row
        orbits = self.orbits.on(np)
        carried = [orbits.canonical(lay.encode(model.init_state(), model.names)[None, :])[1]]

        def same(state: Any, want: np.ndarray) -> bool:
            row, renaming = orbits.canonical(orbits.apply(lay.encode(state, model.names)[None, :], carried[-1]))
            if not np.array_equal(row[0], want):
                return False
            carried.append(carried[-1].then(renaming))
            return True
        return walk(model, wanted, same, lambda step: f"frontier engine: no explicit successor has the stored row "
                    f"(up to symmetry) at step {step}")

    def trace_of(self, violation: Violation) -> tuple[list[tuple[Any, Any]], dict]:
        return trace_for(self.model, self.invariants, self.path_to(violation.state_id), violation)


def _words(rows: Any, xp: Any) -> Any:
    """Rows as 64-bit words (the row width is whole words)."""
    return xp.ascontiguousarray(rows).view(xp.uint64)


def _host(a: Any) -> np.ndarray:
    """An array on the host (CuPy's .get(); numpy's as is)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def explore_frontier(scenario: Scenario, options: SearchOptions = SearchOptions(), *,
                     invariants: tuple[Invariant, ...] = INVARIANTS, progress: Optional[Callable[..., None]] = None,
                     xp: Any = np, array: str = "numpy") -> FrontierResult:
    """Check a scenario with the frontier engine. A scenario it does not
    cover is refused in one line (bad input, exit 2), naming what it lacks.

    Its reductions: symmetry (rows renamed, cowcheck.engines.orbits) unless
    --no-symmetry, and partial-order reduction as row masks
    (cowcheck.engines.ample), staged as the explicit engine's default is:
    the search with it, up to its first violation; where it finds none,
    every verdict and measure is its own, and a search without it, up to
    the first state at the peak, gives the peak's shortest trace; where it
    finds one or stops short, the search without it gives every figure.
    Partial-order reduction is used where the explicit engine's default
    uses it (settled completions apply), or wherever it applies with
    --por; never with --no-por or --max-depth."""
    why = refusal(scenario)
    if why is not None:
        raise SpecError(scenario.source, "engine", f"{why}: the frontier engine does not cover it; check it with "
                        "--engine explicit")
    model = ProtocolModel(scenario)
    invariants, unsupported = for_system(invariants, model)
    validate_expect(scenario, False)
    ample = None
    if options.por is not False and options.max_depth is None:
        ample = RowAmple.of(model, Layout.of(scenario), xp, completions=True)
        if ample is not None and not (ample.completions or options.por):
            ample = None        # auto: as the explicit engine's, only where settled completions apply

    def search(purpose: str, limits: SearchOptions, reduce: Optional[RowAmple] = None,
               seek: Optional[int] = None) -> Frontier:
        frontier = Frontier(model, invariants, limits, xp, progress, array, reduce, seek)
        x = frontier.run()
        x.reductions = tuple(frontier.orbits.describe if frontier.orbits is not None else ()) \
            + tuple(reduce.describe() if reduce is not None else ())
        searches.append(Search.of(purpose, x))
        return frontier

    searches: list[Search] = []
    started = time.perf_counter()
    reduced = search("first violation", replace(options, first=True), ample) if ample is not None else None
    if reduced is not None and reduced.result.complete and not reduced.result.violations:
        main, peak = reduced, reduced
        x = reduced.result
        why = "with partial-order reduction, no violation: every invariant holds and every measure is exact"
        if x.peak is not None:
            limits = _left(options, started)
            budget = min(max(SEEK * x.seconds, 1.0), limits.max_seconds or float("inf"))
            peak = search("peak trace", replace(limits, max_seconds=budget), seek=x.peak)
            if peak.result.peak == x.peak:
                why += " (the peak's shortest trace: without it, up to the peak)"
            else:       # past its budget: the reduced search's trace reaches the peak, not always by a shortest run
                peak = reduced
                why += f" (the peak's trace: with it; the search without it did not reach the peak in {budget:.0f} s)"
    elif reduced is not None and reduced.result.stop is not None and reduced.result.stop.interrupted:
        main = peak = reduced       # interrupted: no second search, the reduced one is reported as it stands
        x = reduced.result
        why = "interrupted in the search with partial-order reduction"
    else:
        main = peak = search("verdicts", _left(options, started))
        x = main.result
        if reduced is None:
            why = "one search"
        elif reduced.result.violations:
            why = f"with partial-order reduction, a violation ({next(iter(reduced.result.violations))}): every " \
                  "figure from the search without it"
        else:
            why = f"with partial-order reduction, stopped ({reduced.result.stopped}): every figure from the search " \
                  "without it"
    x.seconds = time.perf_counter() - started
    what = "with " + " and ".join(main.result.reductions) if main.result.reductions else "without reductions"
    if main.orbits is not None:
        what += " (rows renamed to an approximate canonical form)"
    result = report(scenario, model, invariants, unsupported, x, main, peak, searches=tuple(searches),
                    partial_order=options.por_asked, choice=f"frontier: {why}; {what}", kind=FrontierResult)
    assert isinstance(result, FrontierResult)
    return result


def _left(options: SearchOptions, started: float) -> SearchOptions:
    """`options` with what is left of --max-seconds (at least a second)."""
    if options.max_seconds is None:
        return options
    return replace(options, max_seconds=max(options.max_seconds - (time.perf_counter() - started), 1.0))
