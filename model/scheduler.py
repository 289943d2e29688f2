"""The scheduler harness: scheduler *code* as a transition system
(docs/semantics.md#scheduler-harness).

The engine harness drives a block manager; the orders that decide whether
KV that moves is safe are the scheduler's and its connector's (when a
finished request's blocks go back, what an abort does while a recv is in
flight, when a stored block is keyed on the host). So a second adapter
kind drives a scheduler, and cowcheck plays the rest of the engine: the
worker (one kernel per scheduled request, the plan's copies and sync loads
first), the device (the scenario's `device` and `transfer` ordering
models, `faults`) and the remote engine (recvs and sends, `lease`).

The adapter (what `module:factory` returns, called with the pool size P,
B and the host pool H) answers `add(request, tokens, max_tokens, source,
sink)`, `schedule() -> plan`, `output(plan, sampled, done)`,
`abort(request)`, `table(request)` and `status(request)`; optionally the
observers of the engine harness (`refcount`, `holds`, `free_blocks`,
`cached`, `snapshot`, `version`, `code`) and the host observers
`host_refcount(h)`, `host_free_blocks()`, `host_cached()`; and the
attribute `plans_in_flight` (1 or 2). A plan has `kernels` [(request,
first, last)], `copies` [(src, dst)] and `transfers` [(id, kind, request,
block, host, index, sync)], as a mapping or as attributes, and
optionally `waits` [transfer id]: transfers in flight (an earlier plan's
or its own) that its kernels wait for, as they wait for its sync loads (a
worker that fences a step on earlier stores).

Each call is one host action: `add r`, `schedule`, `output` (for the
oldest outstanding plan, once its kernels have landed) and `abort r`. The
device then completes kernels, copies and transfers under the ordering
rules, into the pool of token contents and the host tier the harness keeps
itself, so every harm is judged on what the engine would have computed.

States pair the harness's state with the pickled scheduler and its
outstanding plans (`Scheduled`); no reduction reads them. Everything the
two harnesses share (loading the factory, the per-call deadline, the
observers of the GPU pool, the cache facts, the adapter's own frames of a
traceback) is the engine harness's, which this one extends.

One idea, though long: the engine loop around a scheduler, each call with
its checks of what the scheduler returned and the state it leads to."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional

from cowcheck.model import queue
from cowcheck.model.action import ENGINE, Action, Transition, completion, transfer_completion
from cowcheck.model.block import AllocatorRaised, Draft, HostFreed, OutputChecked, TableMiss
from cowcheck.model.errors import SpecError, error_text
from cowcheck.model.harness import CallDeadline, HarnessModel, Snapshot, load_factory
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import (WAITING, Block, Branch, Copy, HostBlock, Kernel, Move, MoveKind, State, Status, Tier,
                                  is_final, is_quiescent, read)
from cowcheck.model.structure import EngineOp, Op

#: the methods every scheduler adapter answers
REQUIRED = ("add", "schedule", "output", "abort", "table", "status")
#: what `status(request)` may answer, and the branch status each is
STATUSES = {"waiting": Status.WAITING, "running": Status.RUNNING, "finished": Status.FINISHED,
            "aborted": Status.CANCELLED}
#: the optional observers of the GPU pool, and of the host tier, with the
#: invariants each is needed for
NEEDS = {"refcount": ("refcount-write", "refcount-exact"), "free_blocks": ("no-leak", "no-use-after-free"),
         "cached": ("no-stale-key", "cache-immutable", "verified-only-cached")}
HOST_NEEDS = {"host_cached": ("host-key-content",), "host_free_blocks": ("no-leak",)}
HOST_OBSERVERS = ("host_refcount", "host_free_blocks", "host_cached")
#: the transfer kinds a plan may launch
KINDS = {kind.value: kind for kind in MoveKind}
#: a plan's parts (and the optional one: the in-flight transfers its kernels wait for)
PARTS = ("kernels", "copies", "transfers")
WAITS = "waits"


@dataclass(frozen=True)
class Books:
    """The harness's own books beside the scheduler's pickle, all part of a
    state's identity: `plans`, how many plans are outstanding (scheduled,
    their output not yet processed); `tags`, one per in-flight op of the
    state's queue, in its order: (the outstanding plan that launched it,
    counted from the oldest, or -1 once that plan's output is processed;
    its transfer id or None; whether the plan's kernels wait for it: a
    copy or a sync load); `done`, the transfer id of each pending report
    of the state's tier, in its order; `added`, which requests have
    arrived; `waits`, (outstanding plan, transfer id) for each transfer an
    earlier plan launched that this plan's kernels wait for (its `waits`
    part), until the transfer completes."""
    plans: int = 0
    tags: tuple[tuple[int, Hashable, bool], ...] = ()
    done: tuple[Hashable, ...] = ()
    added: tuple[bool, ...] = ()
    waits: tuple[tuple[int, Hashable], ...] = ()

    @property
    def flying(self) -> set[Hashable]:
        """The ids of the transfers in flight (a copy's tag has none)."""
        return {t[1] for t in self.tags if t[1] is not None}


@dataclass(frozen=True, eq=False)
class Scheduled(Snapshot):
    """A Snapshot of the scheduler and its outstanding plans (pickled
    together, so that a plan and the scheduler keep sharing what they
    share), with the harness's books."""
    books: Books = Books()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scheduled) and self.key == other.key and self.books == other.books

    def __hash__(self) -> int:
        return hash((self.key, self.books))


@dataclass(frozen=True)
class Plan:
    """What one `schedule()` returned, checked: the kernels, copies and
    transfers, and the transfers in flight its kernels wait for."""
    kernels: tuple[tuple[int, int, int], ...]
    copies: tuple[tuple[int, int], ...]
    transfers: tuple[tuple[Hashable, MoveKind, int, int, Optional[int], int, bool], ...]
    waits: tuple[Hashable, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.kernels or self.copies or self.transfers)


class SchedulerModel(HarnessModel):
    """A scenario run with scheduler code through the scheduler harness."""

    irreducible = "scheduler code cannot be reduced"

    def __init__(self, scenario: Scenario, factory: Optional[Callable[..., Any]] = None):
        if not scenario.cache:
            raise SpecError(scenario.source, "scheduler", 'a scheduler admits requests with their own prompts: only a cache '
                            'scenario (cache = "prefix") has one')
        self.scenario = scenario
        self.B, self.P, self.H = scenario.block_size, scenario.pool, scenario.host_pool
        self.device = scenario.device
        self.orders = scenario.orders
        self.faults = frozenset(scenario.faults)
        self.lease = scenario.lease
        self.names, self.operations, self.descendants = scenario.names, scenario.operations, scenario.lineage
        self.cache = True
        self.prompts = tuple(scenario.prompt_of(i) for i in range(len(scenario.branches)))
        self.after_of = tuple(spec.after for spec in scenario.branches)
        self.drafts = tuple(spec.drafts for spec in scenario.branches)
        self.adapter = str(scenario.scheduler or getattr(factory, "__qualname__", "scheduler"))
        for i, spec in enumerate(scenario.branches):
            if spec.speculates:
                raise SpecError(scenario.source, f"branch[{i}].speculate", "the scheduler harness does not speculate: a "
                                "scheduler decides its drafts itself; give the request appends only")
        if factory is None:
            assert scenario.scheduler is not None, "a scheduler harness needs scheduler code"
            factory = load_factory(scenario.scheduler, Path(scenario.allocator_base or Path(scenario.source).parent),
                                   scenario.source, "scheduler")
        #: the factory, called with (P, B, H)
        self.make_adapter: Callable[..., Any] = factory
        #: the transfer scenario's host tier (none without host_pool, source or sink)
        self.tiered = scenario.transfers
        adapter = self._make()
        self.observes = {name: callable(getattr(adapter, name, None)) for name in (*NEEDS, "holds", *HOST_OBSERVERS)}
        if self.observes["holds"] and not self.observes["refcount"]:
            raise self._bad("holds", "holds(block) says how many of the references refcount(block) counts are the "
                            "scheduler's own (a connector's pins): the adapter needs refcount(block) too")
        self.coarse = callable(getattr(adapter, "snapshot", None))
        #: the last state successors() called schedule() on, and whether that gave a transition (is_final reuses it)
        self._scheduled: tuple[Optional[State], bool] = (None, False)
        self.waits, self.tagged = False, False
        self.told = {"copy_done": False, "kernel_done": False}
        self.in_flight = getattr(adapter, "plans_in_flight", 1)
        if self.in_flight not in (1, 2) or type(self.in_flight) is not int:
            raise self._bad("plans_in_flight", f"must be 1 (a scheduler that waits for each step's output) or 2 (async "
                            f"scheduling: the next step is scheduled before the last one's output), got {self.in_flight!r}")
        self.code = self._code(adapter)
        self.version = self.code.release if self.code is not None else None
        host = HOST_NEEDS if self.H else {}
        self.unsupported = {inv: f"not checked: the adapter has no {name}()"
                            for name, invs in {**NEEDS, **host}.items() if not self.observes[name] for inv in invs}

    # -- the adapter ----------------------------------------------------------
    def _make(self) -> Any:
        try:
            with self.guard(f"factory({self.P}, {self.B}, {self.H})"):
                adapter = self.make_adapter(self.P, self.B, self.H)
        except TypeError as err:
            raise self._bad("factory", f"must accept (pool, block_size, host_pool) and return the adapter ({err})") from None
        missing = [m for m in REQUIRED if not callable(getattr(adapter, m, None))]
        if missing:
            raise self._bad(missing[0], f"the adapter has no {missing[0]}(); a scheduler adapter answers "
                            f"{', '.join(REQUIRED)} (and optionally refcount, holds, free_blocks, cached, host_refcount, "
                            "host_free_blocks, host_cached, snapshot, plans_in_flight)")
        return adapter

    def _pack(self, adapter: Any, plans: tuple[Any, ...], books: Books) -> Scheduled:
        """The scheduler and its outstanding plans, pickled together."""
        try:
            blob = pickle.dumps((adapter, plans), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            raise self._bad("snapshot", f"the scheduler or a plan cannot be pickled, so states cannot be copied "
                            f"({type(err).__name__}: {err})") from None
        return Scheduled(self._key(adapter, blob), blob, books=books)

    @staticmethod
    def _unpack(state: State) -> tuple[Any, tuple[Any, ...]]:
        adapter, plans = pickle.loads(state.code.blob)
        return adapter, plans

    def _request(self, method: str, value: Any) -> int:
        if value not in self.names:
            raise self._bad(method, f"names request {value!r}, which the scenario lacks (its requests: {', '.join(self.names)})")
        return self.names.index(value)

    def _plan(self, raw: Any, books: Books, state: State, *, launching: bool = True) -> Plan:
        """The plan `schedule()` returned, checked against the section's
        shape (its `waits` only when `launching`: against the transfers in
        flight when it was returned)."""
        shape = ("must return a plan with kernels [(request, first, last)], copies [(src, dst)] and transfers "
                 "[(id, kind, request, block, host, index, sync)], as a mapping or as attributes")
        parts = {}
        for part in PARTS:
            value = raw.get(part, ()) if isinstance(raw, Mapping) else getattr(raw, part, None)
            if value is None and not isinstance(raw, Mapping):
                raise self._bad("schedule", f"{shape}; got {type(raw).__name__} without {part!r}")
            if not isinstance(value, (list, tuple)):
                raise self._bad("schedule", f"{shape}; its {part} is {type(value).__name__}")
            parts[part] = value
        kernels = []
        for entry in parts["kernels"]:
            if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                raise self._bad("schedule", f"{shape}; got the kernel {entry!r}")
            i = self._request("schedule", entry[0])
            first, last = entry[1], entry[2]
            top = len(self.prompts[i]) + self.scenario.branches[i].appends - 1
            if type(first) is not int or type(last) is not int or not 0 <= first <= last <= top:
                raise self._bad("schedule", f"the kernel {tuple(entry)!r}: first and last must be positions with 0 <= first <= "
                                f"last <= {top} (request {self.names[i]!r}'s prompt and appends)")
            kernels.append((i, first, last))
        copies = tuple(self._copies(list(parts["copies"]), "schedule"))
        seen = books.flying | set(books.done)
        transfers = []
        for entry in parts["transfers"]:
            if not isinstance(entry, (list, tuple)) or len(entry) != 7:
                raise self._bad("schedule", f"{shape}; got the transfer {entry!r}")
            tid, kind, request, block, host, index, sync = entry
            try:
                hash(tid)
            except TypeError:
                raise self._bad("schedule", f"a transfer id must be hashable, got {tid!r}") from None
            if tid in seen:
                raise self._bad("schedule", f"the transfer id {tid!r} is reused while its transfer is in flight or unreported")
            seen.add(tid)
            if kind not in KINDS:
                raise self._bad("schedule", f"the transfer {tid!r} has kind {kind!r}; allowed: {', '.join(KINDS)}")
            i = self._request("schedule", request)
            spec = self.scenario.branches[i]
            if kind == "recv" and spec.source is None:
                raise self._bad("schedule", f"the transfer {tid!r} is a recv for request {request!r}, which has no source = \"remote\"")
            if kind == "send" and spec.sink is None:
                raise self._bad("schedule", f"the transfer {tid!r} is a send for request {request!r}, which has no sink = \"remote\"")
            self._block_id("schedule", block, f"the transfer {tid!r}'s block")
            local = kind in ("load", "store")
            if local and (type(host) is not int or not 0 <= host < self.H):
                raise self._bad("schedule", f"the {kind} {tid!r}'s host block must be an integer from 0 to {self.H - 1} "
                                f"(the host pool), got {host!r}")
            if not local and host is not None:
                raise self._bad("schedule", f"the {kind} {tid!r} has host block {host!r}; only a load or a store has one")
            if type(index) is not int or index < 0 or (not local and index > (len(self.prompts[i]) + spec.appends) // self.B):
                raise self._bad("schedule", f"the {kind} {tid!r}'s index must be the request's table entry, got {index!r}")
            if type(sync) is not bool or (sync and kind != "load"):
                raise self._bad("schedule", f"the {kind} {tid!r}'s sync must be a boolean, true only for a load, got {sync!r}")
            transfers.append((tid, KINDS[kind], i, block, host, index, sync))
        waits = self._waits(raw, seen) if launching else ()
        return Plan(tuple(kernels), copies, tuple(transfers), waits)

    def _waits(self, raw: Any, known: set[Hashable]) -> tuple[Hashable, ...]:
        """The plan's optional `waits`: ids of transfers this plan or an
        earlier one launched and `output()` has not reported yet."""
        value = raw.get(WAITS, ()) if isinstance(raw, Mapping) else getattr(raw, WAITS, ())
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise self._bad("schedule", f"a plan's waits must list transfer ids, got {type(value).__name__}")
        waits = []
        for tid in value:
            try:
                ok = tid in known
            except TypeError:
                ok = False
            if not ok:
                raise self._bad("schedule", f"the plan waits for {tid!r}, which is no transfer in flight or unreported "
                                "(waits names transfers this plan or an earlier one launched, not yet reported to output)")
            if tid not in waits:
                waits.append(tid)
        return tuple(waits)

    # -- what the harness keeps -----------------------------------------------
    def _token(self, i: int, p: int) -> str:
        """Request i's token at position p: its prompt's, then its own (a1, a2, ...)."""
        prompt = self.prompts[i]
        return prompt[p] if p < len(prompt) else f"{self.names[i]}{p - len(prompt) + 1}"

    def _tokens(self, i: int, n: int) -> tuple[str, ...]:
        return tuple(self._token(i, p) for p in range(n))

    def _observe(self, adapter: Any, before: State, branches: list[Branch], d: Draft, tag: Any = None,
                 told: Optional[int] = None, *, plans: tuple[Any, ...] = (), books: Optional[Books] = None) -> State:
        """The state after a call: each added request's status and table,
        the pool and host tier the observers show, the harness's slots and
        queue; what the call freed becomes facts."""
        books = books if books is not None else before.code.books
        for i, br in enumerate(branches):
            if not books.added[i]:
                continue
            raw = adapter.status(self.names[i])
            if raw not in STATUSES:
                raise self._bad("status", f"must return one of {', '.join(STATUSES)}, got {raw!r} for request {self.names[i]!r}")
            status = STATUSES[raw]
            table: tuple[int, ...] = ()
            if status in (Status.WAITING, Status.RUNNING):
                table = self._table(adapter, self.names[i])
                if table:           # a request that owns blocks is judged as a running one (one in its admission)
                    status = Status.RUNNING
            branches[i] = br._replace(status=status, working=table, published=table)
        blocks, free = self._read_pool(adapter, before, d)
        tier = self._read_host(adapter, before, d)
        return State(tuple(blocks), free, tuple(branches), tuple(d.queue), self._pack(adapter, plans, books), tier)

    def _read_host(self, adapter: Any, before: State, d: Draft) -> Optional[Tier]:
        """The host tier after a call: pins, the free list and keys from the
        host observers (where the adapter lacks one: pins and the free list
        from the transfers in flight, no keys), slots the harness's own."""
        if not self.tiered:
            return None
        host = list(d.host)
        used = {op.host for op in d.queue if type(op) is Move and op.host is not None}
        pins = [adapter.host_refcount(h) if self.observes["host_refcount"] else int(h in used) for h in range(self.H)]
        for h, count in enumerate(pins):
            if type(count) is not int or count < 0:
                raise self._bad("host_refcount", f"must return a non-negative integer, got {count!r} for host block {h}")
        if self.observes["host_free_blocks"]:
            raw = adapter.host_free_blocks()
            if not isinstance(raw, (list, tuple)) or any(type(h) is not int or not 0 <= h < self.H for h in raw):
                raise self._bad("host_free_blocks", f"must return a list of host block ids from 0 to {self.H - 1}, got {raw!r}")
            free = tuple(raw)
            was = set(before.tier.free) if before.tier is not None else set()
            d.facts.extend(HostFreed(h) for h in free if h not in was)
        else:
            free = tuple(h for h in range(self.H) if h not in used)
        keys: dict[int, tuple[str, ...]] = {}
        if self.observes["host_cached"]:
            raw = adapter.host_cached()
            if not isinstance(raw, dict):
                raise self._bad("host_cached", f"must return a dict {{host block: tokens}}, got {type(raw).__name__}")
            for h, tokens in raw.items():
                if type(h) is not int or not 0 <= h < self.H:
                    raise self._bad("host_cached", f"every key must be a host block id from 0 to {self.H - 1}, got {h!r}")
                if not isinstance(tokens, (list, tuple)) or len(tokens) != self.B or not all(isinstance(t, str) for t in tokens):
                    raise self._bad("host_cached", f"must map each host block to the {self.B} token names its key names, "
                                    f"got {tokens!r} for host block {h}")
                keys[h] = tuple(tokens)
        for h in range(self.H):
            host[h] = HostBlock(pins[h], host[h].slots, keys.get(h))
        return Tier(tuple(host), free, tuple(d.reports))

    # -- the TransitionSystem interface ---------------------------------------
    def init_state(self) -> State:
        try:
            adapter = self._make()
            empty = State(tuple(Block(0, 0, (None,) * self.B) for _ in range(self.P)), (), (WAITING,) * len(self.names), (),
                          None, Tier((HostBlock(0, (None,) * self.B),) * self.H, tuple(range(self.H))) if self.tiered else None)
            with self.guard("observers before any call"):
                return self._observe(adapter, empty, list(empty.branches), Draft(empty, "lifo"),
                                     books=Books(added=(False,) * len(self.names)))
        except CallDeadline as late:
            raise self._bad(late.call.partition("(")[0], str(late)) from None

    def is_final(self, state: State) -> bool:
        """Every request added and ended, no plan outstanding, nothing in
        flight or unreported, and nothing left for the scheduler to
        launch: an engine keeps stepping while its scheduler has work
        queued (a finished producer's sends, an eager store of a finished
        request), so a state where `schedule()` would still launch a
        transfer is not the end, and no-leak is not judged there."""
        books = state.code.books
        if not (is_final(state) and not books.plans and all(books.added)):
            return False
        last, launched = self._scheduled
        if last is state:       # successors(state) has just called schedule() on it (the explorer asks that first)
            return not launched
        more: list[Transition] = []
        self._schedule(state, more)
        return not more

    def is_steady(self, state: State) -> bool:
        return False        # a scheduler finishes its requests itself: no steady state before the end

    def is_quiescent(self, state: State) -> bool:
        return is_quiescent(state) and not state.code.books.plans

    @staticmethod
    def is_copy_launch(action: Action) -> int:
        sources = dict(action.binds).get("copy_src")
        return len(sources) if action.op is EngineOp.SCHEDULE and isinstance(sources, tuple) else 0

    @staticmethod
    def hits(action: Action) -> int:
        return 0            # the scheduler's hits are not observed: its first kernel's first position is

    @staticmethod
    def transfer_launches(action: Action) -> int:
        launched = dict(action.binds).get("transfers")
        return len(launched) if action.op is EngineOp.SCHEDULE and isinstance(launched, tuple) else 0

    def where(self, br: Branch) -> str:
        if br.status is Status.WAITING:
            return "waiting (not added, or not scheduled)"
        return "owning blocks, between scheduler steps"

    def successors(self, state: State) -> list[Transition]:
        out: list[Transition] = []
        books: Books = state.code.books
        for i, br in enumerate(state.branches):
            if not books.added[i]:
                after = self.after_of[i]
                if after is None or (books.added[after] and state.branches[after].status in (Status.FINISHED, Status.CANCELLED)):
                    self._request_call(state, i, "add", out)
            elif self.scenario.branches[i].may_cancel and br.status in (Status.WAITING, Status.RUNNING):
                self._request_call(state, i, "abort", out)
        if books.plans < self.in_flight:
            before = len(out)
            self._schedule(state, out)
            self._scheduled = (state, len(out) > before)
        if books.plans and not any(type(op) is Kernel and tag[0] == 0 for op, tag in zip(state.queue, books.tags)):
            for expired in self._leases(state):
                self._output(state, expired, out)
        self._device(state, out)
        return out

    def _leases(self, state: State) -> Iterable[tuple[int, ...]]:
        """Under `lease`, each set of the queue's unreported sends (by
        producer) that the output also reports as done."""
        if not self.lease:
            return ((),)
        producers = sorted({op.owner for op in state.queue if type(op) is Move and op.kind is MoveKind.SEND and not op.reported})
        return (chosen for n in range(len(producers) + 1) for chosen in combinations(producers, n))

    def _device(self, state: State, out: list[Transition]) -> None:
        """The device's completions: what the ordering rules allow, a
        kernel only once its plan's copies and sync loads have landed."""
        tags, waits = state.code.books.tags, state.code.books.waits
        flying = state.code.books.flying
        for index in queue.ready(state, self.orders):
            op = state.queue[index]
            if type(op) is Kernel and (any(t[2] and t[0] == tags[index][0] for t in tags)
                                       or any(p == tags[index][0] and tid in flying for p, tid in waits)):
                continue        # the worker's wait: the plan's copies, sync loads and waited transfers first
            for ok in (True, False) if type(op) is Move and op.kind in self.faults else (True,):
                d = Draft(state, "lifo")
                queue.complete(d, index, self.B, ok)
                books = state.code.books
                done = books.done + ((tags[index][1],) if len(d.reports) > len(state.tier.reports if state.tier else ()) else ())
                books = Books(books.plans, tags[:index] + tags[index + 1:], done, books.added,
                              tuple(w for w in books.waits if w[1] != tags[index][1]))
                code = Scheduled(state.code.key, state.code.blob, books=books)
                after = d.freeze()._replace(code=code)
                action = transfer_completion(op, ok, self.names) if type(op) is Move else completion(op, self.B, self.names)
                out.append(Transition(action, after, tuple(d.facts)))

    def _own_tokens(self, j: int, br: Branch) -> tuple[str, ...]:
        """At least the prompt `add` gave: a request waiting on a recv or a
        host load runs no kernel yet (its `seq` is empty), but its local
        prefix hits already carry its own prompt's keys, which are no stale
        key."""
        prompt = self.prompts[j]
        return tuple(br.seq) if len(br.seq) >= len(prompt) else tuple(prompt)

    # -- the calls ----------------------------------------------------------------
    def _raised(self, out: list[Transition], d: Draft, actor: str, op: Any, step: str, branch: int, call: str,
                err: Exception) -> None:
        """A call that raised: its transition carries AllocatorRaised only."""
        raised, facts = self.raised(d, 0, branch, call, err)
        out.append(Transition(Action(actor, op, step, (("call", call), ("raised", raised))), None, facts))

    def _request_call(self, state: State, i: int, method: str, out: list[Transition]) -> None:
        """`add` or `abort` of request i: one host call."""
        adapter, plans = self._unpack(state)
        name, spec = self.names[i], self.scenario.branches[i]
        d = Draft(state, "lifo")
        books: Books = state.code.books
        op = Op.ADMIT if method == "add" else Op.CANCEL
        if method == "add":
            args: tuple[Any, ...] = (name, list(self.prompts[i]), spec.appends, spec.source, spec.sink)
            books = Books(books.plans, books.tags, books.done, books.added[:i] + (True,) + books.added[i + 1:], books.waits)
            # no drafts: every position the request will compute is verified (verified-only-cached judges drafts only)
            d.branches[i] = d.branches[i]._replace(verified=len(self.prompts[i]) + spec.appends)
        else:
            args = (name,)
        call = f"{method}({', '.join(map(repr, args))})"
        try:
            with self.guard(call):
                getattr(adapter, method)(*args)
                after = self._observe(adapter, state, d.branches, d, plans=plans, books=books)
                self._cache_facts(state, after, (i, 0), d)
        except SpecError:
            raise
        except Exception as err:
            self._raised(out, d, name, op, method, i, call, err)
            return
        out.append(Transition(Action(name, op, method, (("table", after.branches[i].working),)), after, tuple(d.facts)))

    def _schedule(self, state: State, out: list[Transition]) -> None:
        """One scheduler step: the plan's copies, its sync loads and the
        transfers of its own it waits for, one kernel per scheduled request
        (through its table read after the call), then its other transfers;
        the kernels also wait for the earlier transfers its `waits` names. A plan that launches nothing with no
        completion to deliver is no action."""
        adapter, plans = self._unpack(state)
        books: Books = state.code.books
        d = Draft(state, "lifo")
        call = "schedule()"
        binds: list[tuple[str, Any]] = []
        try:
            with self.guard(call):
                raw = adapter.schedule()
                plan = self._plan(raw, books, state)
                if plan.empty and not books.done:
                    return
                tables = {i: self._table(adapter, self.names[i]) for i, _, _ in plan.kernels}
                binds = [("kernels", tuple(f"{self.names[i]} {first}..{last}" for i, first, last in plan.kernels)),
                         ("copy_src", tuple(s for s, _ in plan.copies)), ("copy_dst", tuple(t for _, t in plan.copies)),
                         ("transfers", tuple(f"{kind} {tid} ({self.names[i]}, block {block}"
                                             + (f", host {host})" if host is not None else ")")
                                             for tid, kind, i, block, host, _, _ in plan.transfers))]
                if plan.waits:
                    binds.append(("waits", tuple(map(str, plan.waits))))
                for i, first, last in plan.kernels:
                    if len(tables[i]) <= last // self.B:
                        d.facts.append(TableMiss(i, max(first, len(tables[i]) * self.B)))
                        out.append(Transition(Action(ENGINE, EngineOp.SCHEDULE, "schedule", tuple(binds) + (("table", tables[i]),)),
                                              None, tuple(d.facts)))
                        return
                slot, tags = books.plans, list(books.tags)
                for src, dst in plan.copies:
                    d.queue.append(Copy(src, dst, self.B))
                    tags.append((slot, None, True))
                for entry in plan.transfers:
                    if entry[6] or entry[0] in plan.waits:
                        d.queue.append(self._move(entry, d))
                        tags.append((slot, entry[0], True))
                for i, first, last in plan.kernels:
                    expected = self._tokens(i, last + 1)
                    d.queue.append(Kernel(i, last, expected[-1], tables[i], expected, last - first + 1))
                    tags.append((slot, None, False))
                    br = d.branches[i]
                    if last + 1 > br.pos:
                        d.branches[i] = br._replace(pos=last + 1, seq=expected, writes=max(0, last + 1 - len(self.prompts[i])))
                for entry in plan.transfers:
                    if not (entry[6] or entry[0] in plan.waits):
                        d.queue.append(self._move(entry, d))
                        tags.append((slot, entry[0], False))
                flying = books.flying
                waits = books.waits + tuple((slot, tid) for tid in plan.waits if tid in flying)
                after = self._observe(adapter, state, d.branches, d, plans=plans + (raw,),
                                      books=Books(books.plans + 1, tuple(tags), books.done, books.added, waits))
                self._cache_facts(state, after, (-1, 0), d)
        except SpecError:
            raise
        except Exception as err:
            self._raised(out, d, ENGINE, EngineOp.SCHEDULE, "schedule", -1, call, err)
            return
        out.append(Transition(Action(ENGINE, EngineOp.SCHEDULE, "schedule", tuple(binds)), after, tuple(d.facts)))

    def _move(self, entry: tuple[Hashable, MoveKind, int, int, Optional[int], int, bool], d: Draft) -> Move:
        """A transfer of the plan as the device queue keeps it: a recv
        carries its request's prompt tokens of entry `index`, a send the
        producer's sequence there (the remote reader's reference)."""
        _, kind, i, block, host, index, _ = entry
        B = self.B
        if kind is MoveKind.RECV:
            return Move(kind, i, block, None, index, None, self.prompts[i][index * B:index * B + B])
        if kind is MoveKind.SEND:
            pos = d.branches[i].pos
            return Move(kind, i, block, None, index, None, self._tokens(i, pos)[index * B:min(index * B + B, pos)])
        return Move(kind, i, block, host, index)

    def _output(self, state: State, expired: tuple[int, ...], out: list[Transition]) -> None:
        """The oldest plan's step has run: its samples and every completion
        since the last output (and, under `lease`, the sends of the
        producers in `expired`, reported done while still in flight)."""
        adapter, plans = self._unpack(state)
        books: Books = state.code.books
        d = Draft(state, "lifo")
        raw = plans[0]
        plan = self._plan(raw, Books(), state, launching=False)
        sampled = {self.names[i]: self._token(i, last + 1) for i, _, last in plan.kernels
                   if last >= len(self.prompts[i]) - 1}
        done = [(tid, report.ok) for tid, report in zip(books.done, state.tier.reports if state.tier else ())]
        tags = list(books.tags)
        for k, op in enumerate(d.queue):
            if type(op) is Move and op.owner in expired and op.kind is MoveKind.SEND and not op.reported:
                d.queue[k] = op._replace(reported=True)
                done.append((tags[k][1], True))
        d.reports.clear()
        before_tables = {i: br.working for i, br in enumerate(state.branches)}
        call = f"output(<plan>, {sampled!r}, {done!r})"
        new_books = Books(books.plans - 1, tuple((t[0] - 1 if t[0] > 0 else -1, t[1], t[2]) for t in tags), (), books.added,
                          tuple((p - 1, tid) for p, tid in books.waits if p > 0))
        try:
            with self.guard(call):
                adapter.output(raw, sampled, done)
                after = self._observe(adapter, state, list(state.branches), d, plans=plans[1:], books=new_books)
                self._cache_facts(state, after, (-1, 0), d)
        except SpecError:
            raise
        except Exception as err:
            self._raised(out, d, ENGINE, EngineOp.OUTPUT, "output", -1, call, err)
            return
        finished = []
        for i, br in enumerate(state.branches):
            if br.status is Status.RUNNING and after.branches[i].status is Status.FINISHED:
                d.facts.append(OutputChecked(i, read(state.blocks, before_tables[i], br.pos, self.B), br.seq))
                finished.append(self.names[i])
        binds = (("sampled", tuple(f"{k}={v}" for k, v in sampled.items())), ("done", tuple(f"{t}:{'ok' if ok else 'failed'}" for t, ok in done)),
                 ("finished", tuple(finished)))
        out.append(Transition(Action(ENGINE, EngineOp.OUTPUT, "output", binds), after, tuple(d.facts)))


def scheduler_system(scenario: Scenario) -> SchedulerModel:
    """The scheduler harness for a scenario that names `scheduler`."""
    return SchedulerModel(scenario)
