"""Partial-order reduction: in some states one branch's enabled actions can be
explored alone (an ample set) without losing any verdict or measure.

Most actions are visible to some invariant or dependent on another actor's:
allocs and frees share the free list, counter steps share blocks,
completions change blocks others read, launches change the queue (whose
order the stream devices complete by), a decide reads counters other
branches change and leaves the quiescent states refcount-exact judges.
What remains are the steps that touch only the branch itself and blocks
nobody else can reach, and the launches where the queue is unordered:

- `wait-kernel` once enabled: only the branch's own `write` launches its
  kernels, and the branch is parked at the wait;
- `wait-copy Y`, `append X`, `publish` when every block they touch (Y; X;
  the blocks whose membership in the published table changes) is private
  to the branch: not free, not in another branch's tables or locals, not in
  any in-flight op. Nobody else can come to reach such a block while the
  branch stays put (a block is reached only through the free list, a table,
  a local or an op), so no other actor's action, now or later, reads or
  writes what these steps change, and no check of another actor
  (exclusive-write, no-use-after-free, faithful-output) can see them;
- `replace X Y` when Y is private and X is private or stays one of the
  branch's *uses* (its working table, or its published table below
  ceil(pos / B): what exclusive-write and no-use-after-free look at): the
  checks that see X see it in the branch's tables before and after;
- on the `async` device only, where the queue's order decides nothing
  (whatever is in flight may complete next, and no check reads the order),
  the launches:
  - `copy X Y` / `copy-block X Y` when Y is private, X is private or one of
    the branch's uses, and the branch has no kernel in flight. An in-flight
    copy from X is seen by exclusive-write (a kernel writing X) and
    no-use-after-free (freeing X); while the branch stays put those see X
    in its tables anyway. Its own older kernels are the exception (the check
    skips their own branch's tables), hence the last condition;
  - `write` when the published table reaches the position (no table miss,
    which would end the run there), every block of it is private or one of
    the branch's uses, and the branch has no kernel in flight. The kernel's
    snapshot is the published table, and the checks that would see the
    snapshot see the same blocks in the branch's tables.

Each of these changes only the branch's program position, locals and tables
in ways no invariant of another actor reads (a launch also adds an op to
the queue, which only its own branch waits on), disables nothing and cannot
be disabled. Two more exclusions keep that true: a branch with alternatives (one
between operations: decide, finish, cancel; a `may_cancel` branch at an
append's wait-kernel) is never reduced, and neither is any protocol with an
atomic path or an atomic [fork] or [rollback] (a branch entering one takes
the scheduler lock and so disables the others). The steps of branch
programs (`incref-all`, `share`, `rewind`, `trim`) and `verify` are never
in an ample set: they change counters, another branch's tables, or choose
among successors. A `wait-kernel` inside a fork or rollback qualifies like
an append's (no cancel can start there).

Cache scenarios (docs/semantics.md#prefix-caching). Which steps of prefix
caching are branch-local:

- a block is reached one more way there: through the cache, by another
  request's lookup and touch-hits. So *private* also asks that the block
  carry no key and lie in no other request's `hits`; with that, every step
  above keeps its argument (allocations clear keys, only a request's own
  cache-full keys its blocks, and a keyed block's key never changes while
  someone maps it: nothing private can become reachable while the branch
  stays put);
- `prefill` (a launch) qualifies on `async` as `write` does: its published
  table reaches the prompt's last position, each of its blocks is private
  or one of the request's uses (its hits are: touch-hits put them in its
  working table), no kernel of its own is in flight. It changes the
  request's pos, sequence and verified count, which only its own steps and
  the checks of its own facts read, and adds its kernel to the queue;
- `lookup` (reads every key), `touch-hits` (counters, free list, another's
  reach to a cached block), `alloc-prompt` (free list, evictions),
  `cache-full` and `cache-drafts` (keys, which lookups, dedupes and
  cache-immutable read; they produce Keyed facts) and `alloc-no-evict`
  touch what other requests read: never in an ample set. Nor is a waiting
  request's admission or cancellation (it starts an operation).

The scheduler lock of an atomic [admit] (prefix-cache and every built-in
cache protocol) is the one atomic operation reduced, and only where it is
the protocol's only one (`_admission_lock_only`). A request j that starts
its admission, or whose wait in it leads back to a locking step, takes the
lock and disables the ample step a of branch i until it gives the lock
back: a is not independent of that action in Peled's sense. Two facts make
the reduction sound all the same:

- the lock is always given back: the admission's steps up to its first
  wait are checked enabled, one after another, before it starts; while it
  holds the lock only the device acts besides it, and completions change
  no counter, free list or key, so those steps stay enabled; the locking
  steps after the wait are of kinds that never block (`NEVER_BLOCKS`).
  Hence no run ends, or sticks, with a lock held, and a, which no other
  actor's action disables otherwise, is taken on every maximal run from
  the state: no run is lost for want of a, and a is never appended to one
  (the terminal states are reached exactly);
- a does not take the lock itself (a step that leads from a wait into a
  locking step, such as prefix-cache's `wait-kernel` before its
  admission's `cache-full`, stays out of ample sets: it would order the
  cache-full before other requests' lookups), so the lock holder's actions
  stay enabled after a, and a commutes in effect with each of them. A run
  b1 .. bk a .. of the full graph, the b's holding and releasing the lock,
  is matched by a b1 .. bk ..: the same actions, a moved first.

A request holding the lock has no rival but the device, so its own local
steps there (`publish`, `prefill`) need independence from completions
only, which the conditions give. tests/test_model_reduce.py checks the
commutation on random cache scenarios (taking a as if the lock were free
where the other action took it), that a lock holder always has a move, and
that the reduced and unreduced searches agree.

So the ample set {the branch's enabled actions} meets Peled's conditions: C0
(non-empty), C1 (every action outside it, on any path from the state that
does not take it, is independent of it), C2 (invisible); C3 (the cycle
proviso) holds trivially because the state graph is acyclic. Any path of the
full graph is matched in the reduced graph by the same sequence of other
actions with some of these steps moved earlier or inserted; the states differ
only in branches that were parked at such steps (and, on async, in the
queue's order). Consequences, checked by
tests/test_model_reduce.py on every shipped scenario and on random ones:

- every invariant keeps its verdict, and every measure (peak, copies, steady
  blocks) its value: a quiescent, steady, final or stuck state has no branch
  parked at an enabled step of this kind, so it is reached exactly;
- shortest lengths may grow (a moved step can be an extra action before the
  violation), so the checker re-searches violations without this reduction
  (cowcheck.engines.explicit) to report true shortest lengths.

Device completions (`completions=True`, async device only) are the further
step, and they keep less: not every invariant's verdict, only whether *some*
violation is reachable. An in-flight op is *settled* when its owner is
parked waiting for it and nothing any other actor can do without breaking
an invariant depends on it:

- a copy X -> Y: a branch (without may_cancel) is parked at `wait-copy Y`;
  Y is private to it apart from this copy; X is one of its uses;
- a kernel: its branch (without may_cancel) is parked at `wait-kernel` with
  no other kernel in flight; each block it writes (a prefill's several) is
  private to it apart from this kernel (in a cache scenario: unkeyed, so
  no lookup can reach it and cache-immutable does not judge it); every
  block of its snapshot is one of its uses;

and every block the op reads (X; the snapshot) is *stable*: not free, not
the destination of an in-flight copy or of another branch's bound `new`,
and the protocol never copies into `tail`. Then whatever another actor does
to the op's blocks is a violation in either order: writing a block the
owner uses breaks exclusive-write (the owner is running and maps it),
freeing one breaks no-use-after-free, and no copy can write one. So along
any path on which nothing has been violated yet, every other action
commutes with the completion exactly, and the completion's own checks come
out the same; and the action that ends such a path with a violation still
violates after the completion (C1 and C2 up to the first violation). A
state with the op in flight and its owner parked is not quiescent, final or
stuck, before or after. Hence: the reduced graph reaches a violation iff
the full graph does, and when it reaches none, every measure is the full
graph's. It does not keep the rest (an order that breaks exclusive-write
first can go on to break faithful-output, and that order may be pruned),
so cowcheck.engines.explicit searches with completions first and, only if that
search finds a violation, searches again without them for every verdict.
The commutation test in tests/test_model_reduce.py checks these claims step
by step, and the agreement tests check the outcome.

Transfers (docs/semantics.md#transfers). In a transfer scenario a block
is reached three more ways: by a transfer in flight (its GPU block), by a
pending report (which releases the holds on it) and by another request's
`loads`. So *private* also asks that no transfer in flight and no pending
report name the block and that it lie in no other request's `loads`; with
that, every step above keeps its argument, since a transfer names only
blocks of its owner's table (load, recv, store, send) or of the free list
(store-free), which no other branch's private block is. Transfer
completions and failures are device actions, `report` and `expire` host
actions (enabled only while no request holds the scheduler lock); none of
them is ever explored alone, and:

- the steps that launch transfers (`load`, `recv`, `store`, `store-free`,
  `store-keyed`, `send`) and `host-lookup` are never in an ample set: they
  change the host tier (its free list, pins, evictions), the GPU free list
  (store-free) and blocks other requests reach, and their launch order is
  what the `stream` and `own-stream` lanes complete by;
- `wait-transfers` is, once enabled, like `wait-kernel`: it changes only
  the branch's step, only the branch's own steps launch what it waits for,
  and a report or an expiry only ever enables it. It stays out where it
  is a cancellation point (a `may_cancel` request) and where the step after
  it takes the scheduler lock (kv-connector's admission), as any wait does;
- launches (`write`, `prefill`, `copy`) count as unordered only where the
  device and transfer models together order nothing (`async` with `nic`):
  under `stream` and `own-stream-fenced` a kernel orders the local
  transfers launched after it. There a launch also needs that no transfer
  in flight name one of its blocks: a load's or recv's completion judges
  exclusive-write by the kernels and copies in flight, so launching one
  over its block would change that check (no later load or recv can come
  to write them: they write their owner's fresh blocks). A `prefill` also
  waits until its own loads and recvs are reported: a failed one's report
  cuts `loads`, which the prefill reads;
- settled completions: only copies and kernels (a transfer's completion is
  never settled), with *stable* also asking that no load or recv in flight
  write the block.

Whether a transfer's completion could be settled (a load into a block its
owner alone maps, with the owner parked at `wait-transfers`) was left out:
its report, not its completion, is what the owner waits for, so the
owner's wait would not pin down the completion's place among the others."""

from __future__ import annotations

from typing import Iterable, Optional


from cowcheck.model.protocol import Step
from cowcheck.model.stepkinds import LAUNCHES, LOCAL_STEPS, NEVER_BLOCKS, TRANSFER_STEPS, WAITS
from cowcheck.model.state import Branch, Copy, InFlight, Kernel, Move, MoveKind, State, Status, published_uses
from cowcheck.model.structure import Op
from cowcheck.model.action import Transition, completion
from cowcheck.model.system import ProtocolModel


#: the transfers that write a GPU block (the others read theirs)
_WRITES_GPU = (MoveKind.LOAD, MoveKind.RECV)


class Ample:
    """Chooses the actions to explore from a state: one branch's enabled
    actions when the conditions above allow it, else everything."""

    def __init__(self, model: ProtocolModel, completions: bool = False):
        self.model = model
        structure = model.structure
        #: the only atomic operation is an admission whose lock is always released (see the docstring)
        self.admission_lock = structure.any_atomic and _admission_lock_only(model)
        self.enabled = not structure.any_atomic or self.admission_lock
        self._locking = frozenset(structure.locking_places)
        self.may_cancel = tuple(spec.may_cancel for spec in model.scenario.branches)
        #: a transfer scenario: its transfers and reports are read too (see "Transfers" above)
        self.transfers = model.scenario.transfers
        # the device and transfer models together: under own-stream-fenced or stream, kernels order local transfers
        unordered = model.orders.unordered
        local = LOCAL_STEPS | {"wait-transfers"} if self.transfers else LOCAL_STEPS
        self.local_steps = local.union(LAUNCHES) if unordered else local
        #: settled device completions explored alone too: keeps only whether some violation is reachable
        self.completions = completions and self.enabled and unordered \
            and model.structure.copy_destinations <= {"new"}

    def describe(self) -> list[str]:
        if not self.enabled:
            return []
        where = "async with nic" if self.transfers else "async"    # in a transfer scenario kernels may order transfers
        return [f"partial-order (branch-local steps, launches on {where}"
                + (", settled completions" if self.completions else "") + ", explored alone)"]

    def __call__(self, state: State, transitions: list[Transition]) -> list[Transition]:
        if not self.enabled or len(transitions) < 2:
            return transitions
        for i, br in enumerate(state.branches):
            if br.status is not Status.RUNNING or br.op is None:
                continue
            program = self.model.program(br)
            step = program[br.step]
            if step.op not in self.local_steps or (step.op == "wait-kernel" and br.op is Op.APPEND and self.may_cancel[i]) \
                    or (step.op == "wait-transfers" and self.may_cancel[i]):
                continue
            if self.admission_lock and br.step + 1 < len(program) \
                    and (br.op, br.path, br.step + 1) in self._locking and (br.op, br.path, br.step) not in self._locking:
                continue        # the step takes the scheduler lock: it disables every other branch
            if self._local(state, i, br, step):
                name = self.model.names[i]
                mine = [tr for tr in transitions if tr.action.actor == name]
                if mine:
                    return mine
        if self.completions:
            for op in state.queue:
                if self._settled(state, op):
                    done = completion(op, self.model.B, self.model.names)
                    for tr in transitions:      # (symmetry may have left out this one for its twin, also settled)
                        if tr.action == done:
                            return [tr]
        return transitions

    def _local(self, state: State, i: int, br: Branch, step: Step) -> bool:
        """Whether branch i's next step meets its condition in the module
        docstring."""
        op = step.op
        if op == "wait-kernel" or op == "wait-transfers":
            return True
        if op in TRANSFER_STEPS:    # launches into the shared host tier, the GPU free list or other requests' reach
            return False
        if op == "publish":
            return all(_private(state, i, b) for b in set(br.working) ^ set(br.published))
        if op in ("wait-copy", "append"):
            return _private(state, i, _bound(br, step.args[0]))
        B = self.model.B
        if op == "replace":     # x stays a use: through the published table, or a second entry in the working one
            x, y = (_bound(br, name) for name in step.args)
            return x in br.working and _private(state, i, y) and (
                x in published_uses(br, B) or br.working.count(x) > 1 or _private(state, i, x))
        if any(type(q) is Kernel and q.branch == i for q in state.queue):
            return False     # the exclusive-write check skips its own branch's tables, not its kernels
        uses = _uses(br, B)
        if op == "write":
            return len(br.published) > br.pos // B and all(b in uses or _private(state, i, b) for b in br.published) \
                and _untransferred(state, br.published)
        if op == "prefill":     # the positions past the hits, through the published table, like a write
            last = len(self.model.requests[i].prompt) - 1
            return len(br.published) > last // B and all(b in uses or _private(state, i, b) for b in br.published) \
                and _untransferred(state, br.published) and not (self.transfers and _filling(state, i))
        x, y = (_bound(br, name) for name in step.args)      # copy / copy-block
        return _private(state, i, y) and (x in uses or _private(state, i, x)) and _untransferred(state, (x, y))

    def _settled(self, state: State, op: InFlight) -> bool:
        """Whether an in-flight op meets the conditions for completions in
        the module docstring."""
        B, program = self.model.B, self.model.program
        if type(op) is Copy:
            owner = next((i for i, br in enumerate(state.branches) if br.status is Status.RUNNING and br.op is not None
                          and not self.may_cancel[i] and (step := program(br)[br.step]).op == "wait-copy"
                          and _bound(br, step.args[0]) == op.dst), None)
            if owner is None:
                return False
            br = state.branches[owner]
            return op.src in _uses(br, B) and _stable(state, owner, op.src, op) and _private(state, owner, op.dst, op)
        if type(op) is Move:
            return False        # a transfer's completion is never settled (see "Transfers" above)
        owner, br = op.branch, state.branches[op.branch]
        if br.status is not Status.RUNNING or br.op is None or self.may_cancel[owner] \
                or program(br)[br.step].op != "wait-kernel" \
                or any(type(q) is Kernel and q.branch == owner and q is not op for q in state.queue):
            return False
        uses = _uses(br, B)
        return all(b in uses and _stable(state, owner, b, op) for b in op.snapshot) \
            and all(_private(state, owner, b, op) for b in {op.snapshot[p // B] for p in op.written})


def _uses(br: Branch, block_size: int) -> set[int]:
    """The blocks exclusive-write and no-use-after-free see the branch use."""
    return set(br.working).union(published_uses(br, block_size))


def _stable(state: State, owner: int, b: int, op: InFlight) -> bool:
    """Nobody but a violation can change block b's slots: it is not free,
    no other in-flight copy writes it and no other branch's `new` names it
    (the caller has checked the protocol copies into `new` only)."""
    if b in state.free:
        return False
    if any(type(q) is Copy and q.dst == b and q is not op for q in state.queue):
        return False
    if any(type(q) is Move and q.block == b and q.kind in _WRITES_GPU for q in state.queue):
        return False        # a load or recv in flight writes it
    return all(j == owner or other.new != b for j, other in enumerate(state.branches))


def _bound(br: Branch, name: str) -> Optional[int]:
    """The block a step's argument names (None: the local is unbound)."""
    return br.tail if name == "tail" else br.new


def _admission_lock_only(model: ProtocolModel) -> bool:
    """Whether the protocol's only atomic operation is an [admit] (in a
    cache scenario) whose lock, once taken, is always given back: its steps
    up to the first wait are checked enabled before it starts (nothing but
    the device acts meanwhile, and completions change no counter, free
    list or key), and each locking step after that wait never blocks."""
    protocol = model.protocol
    if not model.cache or not protocol.atomic_admit or any(p.atomic for p in protocol.paths.values()) \
            or protocol.atomic_fork or protocol.atomic_rollback:
        return False
    waits = [k for k, step in enumerate(protocol.admit) if step.op in WAITS]
    return not waits or all(step.op in NEVER_BLOCKS or step.op in WAITS for step in protocol.admit[waits[0]:])


def _private(state: State, i: int, b: int | None, but: Optional[InFlight] = None) -> bool:
    """Only branch i (and the in-flight op `but`) can reach block b, and
    nobody can come to while i stays put. In a cache scenario a keyed
    block can be reached through the cache (another request's lookup),
    and a block in another request's hits by its touch-hits: neither is
    private."""
    if b is None or b in state.free or state.blocks[b].key is not None:
        return False     # None: an unbound local; the step will raise, let it do so unreduced
    for j, other in enumerate(state.branches):
        if j != i and (b == other.tail or b == other.new or b in other.working or b in other.published or b in other.hits
                       or b in other.loads):
            return False
    for op in state.queue:
        if op is but:
            continue
        if type(op) is Copy:
            if b == op.src or b == op.dst:
                return False
        elif type(op) is Kernel:
            if b in op.snapshot:
                return False
        elif b == op.block:
            return False
    tier = state.tier
    return tier is None or all(r.move.block != b for r in tier.reports)


def _untransferred(state: State, blocks: Iterable[Optional[int]]) -> bool:
    """No transfer in flight names any of `blocks` (a launch's): a load's or
    recv's completion judges exclusive-write by the kernels and copies in
    flight, so launching one over a transfer's block changes that check.
    No later transfer can come to name them while the branch stays put:
    loads and recvs write their owner's fresh blocks, and stores and sends
    read blocks whose completion checks do not look at the launch."""
    if state.tier is None:
        return True
    names = set(blocks)
    return not any(type(op) is Move and op.block in names for op in state.queue)


def _filling(state: State, i: int) -> bool:
    """Whether request i has a load or recv in flight or its report
    pending: a failed one's report cuts its `loads`, which its prefill reads."""
    tier = state.tier
    assert tier is not None
    return any(type(op) is Move and op.owner == i and op.kind in _WRITES_GPU for op in state.queue) \
        or any(r.move.owner == i and r.move.kind in _WRITES_GPU for r in tier.reports)
