"""The invariants of docs/semantics.md#invariants, as named data in one place.

Each invariant has an id, a kind (harm: a failure the engine's user would see;
discipline: an ownership rule whose breach a device model may make harmless),
where it is checked, and its predicates. A predicate returns None when the
invariant holds, or a witness: a small dict that says what was expected and
what happened, for the counterexample file and `explain`.

Action predicates are triggered by the facts an action produced (see
model.block), so an action that frees nothing and completes nothing costs no
invariant work at all. State predicates see every distinct state once.

It is long and one idea: what counts as wrong, each invariant beside its
predicates, and the clauses transfers add beside the ones they extend
(docs/semantics.md#invariants-for-transfers), so one rule is read in one
place."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Iterator, Optional

from cowcheck.model.block import (Allocated, AllocatorRaised, CopyDone, Fact, Freed, HostFreed, KernelDone, Keyed, MoveDone,
                                  OutputChecked, TableMiss, Underflow)
from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Branch, Copy, Kernel, Move, MoveKind, State, Status, published_uses
from cowcheck.model.action import Transition
from cowcheck.model.system import TransitionSystem


class Kind(StrEnum):
    """Harm: a failure the engine's user would see. Discipline: an ownership
    rule whose breach a device model may make harmless."""
    HARM = "harm"
    DISCIPLINE = "discipline"



HARM, DISCIPLINE = Kind.HARM, Kind.DISCIPLINE

# (model, before, transition, fact) -> witness | None
ActionCheck = Callable[[TransitionSystem, State, Transition, Any], Optional[dict]]
# (model, state, final, stuck) -> witness | None
StateCheck = Callable[[TransitionSystem, State, bool, bool], Optional[dict]]


@dataclass(frozen=True)
class Invariant:
    id: str
    kind: Kind
    checked: str
    holds_when: str
    on_facts: dict[type, ActionCheck] = field(default_factory=dict)
    on_state: Optional[StateCheck] = None


# -- faithful-output --------------------------------------------------------
def _compare(model: TransitionSystem, branch: int, reads: tuple, expected: tuple, via: str, **extra) -> Optional[dict]:
    if reads == expected:
        return None
    position = next(p for p, (r, e) in enumerate(zip(reads, expected)) if r != e)
    return {"branch": model.names[branch], "position": position, "expected": expected[position],
            "read": reads[position], "via": via, "expected_sequence": list(expected), "read_sequence": list(reads), **extra}


def faithful_kernel(model, before, tr, fact):
    kernel, reads = fact
    return _compare(model, kernel.branch, reads, kernel.expected, "kernel", pos=kernel.pos, snapshot=list(kernel.snapshot))


def faithful_check(model, before, tr, fact):
    branch, reads, expected = fact
    return _compare(model, branch, reads, expected, "check-output", table=list(before.branches[branch].working))


def faithful_send(model, before, tr, fact):
    """The remote reader: a successful send reads what the producer's
    sequence had there when the send was launched."""
    move, ok, reads = fact
    if not ok or move.kind is not MoveKind.SEND:
        return None
    first = move.entry * model.B
    witness = _compare(model, move.owner, (None,) * first + reads, (None,) * first + move.tokens, "send",
                       block=move.block)
    if witness is not None:
        witness["message"] = (f"the remote reader of branch {model.names[move.owner]}'s send of block {move.block} read "
                              f"{witness['read']} at position {witness['position']}, expected {witness['expected']}")
    return witness


# -- no-underflow / kernel-table-miss -----------------------------------------
def underflow(model, before, tr, fact):
    block, counter = fact
    return {"block": block, "counter": counter, "message": f"{counter} of block {block} was already 0"}


def table_miss(model, before, tr, fact):
    branch, pos = fact
    table = before.branches[branch].published
    return {"branch": model.names[branch], "pos": pos, "published": list(table),
            "message": f"position {pos} needs table index {pos // model.B}, the published table has {len(table)} blocks"}


# -- which tables count as uses ----------------------------------------------
def tables(model: TransitionSystem, br: Branch) -> tuple[tuple[str, tuple[int, ...]], tuple[str, tuple[int, ...]]]:
    """A branch's tables as uses: the working table whole, the published
    one below ceil(pos / B) (cowcheck.model.state.published_uses)."""
    return ("working", br.working), ("published", published_uses(br, model.B))


# -- kernel-complete discipline --------------------------------------------
def _targets(model: TransitionSystem, kernel: Kernel) -> tuple[int, ...]:
    """The blocks a kernel writes: one for a write, each block of the
    uncached prompt for a prefill."""
    B, snapshot = model.B, kernel.snapshot
    if kernel.span == 1:
        return (snapshot[kernel.pos // B],)
    return tuple(dict.fromkeys(snapshot[p // B] for p in kernel.written))


def _others(queue: tuple, kernel: Kernel) -> list:
    """The in-flight ops other than the completing kernel."""
    out = list(queue)
    out.remove(kernel)
    return out


def exclusive_write(model, before, tr, fact):
    for target in _targets(model, fact.kernel):
        witness = _exclusive(model, before, fact.kernel, target)
        if witness is not None:
            return witness
    return None


def _exclusive(model, before, kernel, target):
    B = model.B
    for j, br in enumerate(before.branches):
        if j != kernel.branch and br.status is Status.RUNNING \
                and (target in br.working or target in published_uses(br, B)):
            for name, table in tables(model, br):
                if target in table:
                    return {"block": target, "message": f"block {target} is in branch {model.names[j]}'s {name} table {list(table)}"}
    reader = _queued_reader(model, _others(before.queue, kernel), target)
    return None if reader is None else {"block": target, "message": f"block {target} is {reader}"}


def _queued_reader(model, ops: list, target: int) -> Optional[str]:
    """Which of the in-flight `ops` still reads block `target`, in words
    (the source of a copy, store or send, or a block of a kernel's
    snapshot), or None: one wording for every invariant that asks."""
    for op in ops:
        if type(op) is Copy and op.src == target:
            return f"the source of an in-flight copy {op.src}->{op.dst}"
        if type(op) is Kernel and target in op.snapshot:
            return f"in the snapshot {list(op.snapshot)} of branch {model.names[op.branch]}'s in-flight kernel for position {op.pos}"
        if type(op) is Move and op.block == target and op.kind in _READERS:
            return f"the source of an in-flight {op.kind} of branch {model.names[op.owner]}"
    return None


#: the transfers that read their GPU block, and those that write it
_READERS = (MoveKind.STORE, MoveKind.SEND)
_WRITERS = (MoveKind.LOAD, MoveKind.RECV)


def exclusive_move(model, before, tr, fact):
    """A successful load or recv writes a block no one else uses: in no
    table of a running request but its owner's, no in-flight kernel's
    snapshot (the owner's included), the source of no in-flight copy,
    store or send."""
    move, ok, _ = fact
    if not ok or move.kind not in _WRITERS:
        return None
    target, B = move.block, model.B
    for j, br in enumerate(before.branches):
        if j != move.owner and br.status is Status.RUNNING:
            for name, table in tables(model, br):
                if target in table:
                    return {"block": target, "message": f"the {move.kind} into block {target} lands while it is in branch {model.names[j]}'s {name} table {list(table)}"}
    reader = _queued_reader(model, [op for op in before.queue if op != move], target)
    return None if reader is None else {"block": target, "message": f"the {move.kind} into block {target} lands while it is {reader}"}


def refcount_write(model, before, tr, fact):
    for target in _targets(model, fact.kernel):
        blk = before.blocks[target]
        if blk.refcount != 1 or blk.holds != 0:
            return {"block": target, "refcount": blk.refcount, "holds": blk.holds,
                    "message": f"block {target} written with refcount {blk.refcount} and holds {blk.holds} (needs 1 and 0)"}
    return None


def copy_before_use(model, before, tr, fact):
    kernel = fact.kernel
    for op in before.queue:
        if type(op) is Copy and op.dst in kernel.snapshot:
            return {"block": op.dst, "message": f"the copy {op.src}->{op.dst} into block {op.dst} of the kernel's snapshot {list(kernel.snapshot)} is still in flight"}
        if type(op) is Move and op.kind in _WRITERS and op.block in kernel.snapshot:
            return {"block": op.block, "message": f"the {op.kind} into block {op.block} of the kernel's snapshot {list(kernel.snapshot)} is still in flight"}
    return None


# -- no-use-after-free ------------------------------------------------------
def _free_touch(blocks, free: tuple, what: str) -> Optional[dict]:
    for b in blocks:
        if b in free:
            return {"block": b, "message": f"{what} touches block {b}, which is free"}
    return None


def uaf_copy(model, before, tr, fact):
    op = fact.copy
    return _free_touch((op.src, op.dst), before.free, f"the copy {op.src}->{op.dst}")


def uaf_kernel(model, before, tr, fact):
    kernel = fact.kernel
    blocks = _targets(model, kernel) + kernel.snapshot[:kernel.pos // model.B + 1]
    return _free_touch(blocks, before.free, f"branch {model.names[kernel.branch]}'s kernel for position {kernel.pos}")


def uaf_move(model, before, tr, fact):
    """(a) a transfer completes or fails on a free GPU or host block."""
    move = fact.move
    what = f"the {move.kind} of block {move.block}" + (f" and host block h{move.host}" if move.host is not None else "")
    witness = _free_touch((move.block,), before.free, what)
    if witness is None and move.host is not None and before.tier is not None and move.host in before.tier.free:
        witness = {"block": move.block, "host": move.host, "message": f"{what} touches host block h{move.host}, which is free"}
    return witness


def uaf_host_freed(model, before, tr, fact):
    """(c) a host block freed while a transfer in flight uses it."""
    for op in tr.state.queue:
        if type(op) is Move and op.host == fact.host:
            return {"host": fact.host, "message": f"host block h{fact.host} was freed while the {op.kind} of block {op.block} is in flight"}
    return None


def uaf_freed(model, before, tr, fact):
    block, after = fact.block, tr.state
    B = model.B
    for j, br in enumerate(after.branches):
        if block not in br.working and block not in published_uses(br, B):
            continue
        for name, table in tables(model, br):
            if block in table:
                return {"block": block, "message": f"block {block} was freed while branch {model.names[j]}'s {name} table {list(table)} maps it"}
    for op in after.queue:
        if type(op) is Copy and block in (op.src, op.dst):
            return {"block": block, "message": f"block {block} was freed while the copy {op.src}->{op.dst} is in flight"}
        if type(op) is Kernel and block in op.snapshot:
            return {"block": block, "message": f"block {block} was freed while branch {model.names[op.branch]}'s kernel for position {op.pos} (snapshot {list(op.snapshot)}) is in flight"}
        if type(op) is Move and op.block == block:
            return {"block": block, "message": f"block {block} was freed while branch {model.names[op.owner]}'s {op.kind} of it is in flight"}
    return None


def uaf_state(model, state, final, stuck):
    if not state.free:
        return None
    free = set(state.free)
    B = model.B
    for j, br in enumerate(state.branches):
        if free.isdisjoint(br.working) and free.isdisjoint(published_uses(br, B)):
            continue                # the common case, without naming the tables
        for name, table in tables(model, br):
            for b in table:
                if b in free:
                    return {"block": b, "message": f"branch {model.names[j]}'s {name} table {list(table)} maps block {b}, which is free"}
    return None


# -- state invariants ---------------------------------------------------------
def refcount_exact(model, state, final, stuck):
    if not model.is_quiescent(state):
        return None
    counts = [0] * len(state.blocks)
    for br in state.branches:
        if br.status is Status.RUNNING:
            for b in set(br.working):
                counts[b] += 1
    for b, (blk, want) in enumerate(zip(state.blocks, counts)):
        if blk.refcount != want:
            return {"block": b, "refcount": blk.refcount, "mapped_by": want,
                    "message": f"block {b} has refcount {blk.refcount} but {want} running branch table(s) map it"}
    return None


def no_leak(model, state, final, stuck):
    if not final:
        return None
    for b, blk in enumerate(state.blocks):
        if b not in state.free or blk.refcount or blk.holds:
            return {"block": b, "refcount": blk.refcount, "holds": blk.holds,
                    "message": f"at the end block {b} is {'free' if b in state.free else 'not free'} with refcount {blk.refcount} and holds {blk.holds}"}
    tier = state.tier
    for h, hb in enumerate(tier.host if tier is not None else ()):
        if h not in tier.free or hb.pins:
            return {"host": h, "pins": hb.pins,
                    "message": f"at the end host block h{h} is {'free' if h in tier.free else 'not free'} with pins {hb.pins}"}
    return None


def no_deadlock(model, state, final, stuck):
    if final or not stuck:
        return None
    waiting = []
    for j, br in enumerate(state.branches):
        if br.status is Status.RUNNING:
            waiting.append(f"{model.names[j]} {model.where(br)}")
    return {"message": f"no action is enabled: {len(state.free)} free block(s), {len(state.queue)} op(s) in flight; "
                       f"waiting: {', '.join(waiting) or 'nobody'}"}


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("faithful-output", HARM, "each kernel-complete (cancelled branches' kernels too), check-output and successful send",
              "every position read equals the branch's sequence (a kernel's: the one its branch had right after its write; "
              "a send's: the producer's when it was launched)",
              on_facts={KernelDone: faithful_kernel, OutputChecked: faithful_check, MoveDone: faithful_send}),
    Invariant("no-underflow", HARM, "each decref / release", "the counter was > 0 (a double free crashes a real engine)",
              on_facts={Underflow: underflow}),
    Invariant("no-leak", HARM, "final states", "every block is free, every refcount and hold 0", on_state=no_leak),
    Invariant("no-deadlock", HARM, "every non-final state",
              "some action is enabled (a full pool with everyone waiting is an out-of-memory deadlock)", on_state=no_deadlock),
    Invariant("kernel-table-miss", HARM, "each write", "the published table covers the position", on_facts={TableMiss: table_miss}),
    Invariant("exclusive-write", DISCIPLINE, "each kernel-complete, judged before the write",
              "the target block is not in another running branch's tables (published: below ceil(pos/B)), another in-flight kernel's snapshot, or the source of an in-flight copy, store or send "
              "(a load or recv: judged likewise as it lands)",
              on_facts={KernelDone: exclusive_write, MoveDone: exclusive_move}),
    Invariant("refcount-write", DISCIPLINE, "each kernel-complete", "the target's refcount is 1 and its holds 0",
              on_facts={KernelDone: refcount_write}),
    Invariant("no-use-after-free", DISCIPLINE, "every action and state",
              "nothing touches, maps or frees-while-in-use a free block",
              on_facts={CopyDone: uaf_copy, KernelDone: uaf_kernel, Freed: uaf_freed, MoveDone: uaf_move,
                        HostFreed: uaf_host_freed}, on_state=uaf_state),
    Invariant("copy-before-use", DISCIPLINE, "each kernel-complete", "no copy, load or recv into any block of its snapshot is in flight",
              on_facts={KernelDone: copy_before_use}),
    Invariant("refcount-exact", DISCIPLINE, "quiescent states (empty queue, no branch inside an operation, allocator code told of every completion)",
              "each block's refcount equals the number of running branches' working tables that map it", on_state=refcount_exact),
)

# -- prefix caching (docs/semantics.md#prefix-caching) -------------------------
def _key_text(key: tuple) -> str:
    return "(" + " ".join(key) + ")"


def no_stale_key(model, before, tr, fact):
    block = fact.block
    key = tr.state.blocks[block].key
    if key is None or key in fact.allowed:     # allowed: the new owner's own keys (allocator code)
        return None
    return {"block": block, "key": list(key),
            "message": f"block {block} was handed out while the cache still maps the key {_key_text(key)} to it"}


def _immutable(block: int, key: Optional[tuple], slot: int, token: Optional[str], B: int, what: str) -> Optional[dict]:
    if key is None:
        return None
    want = key[len(key) - B + slot]
    if token == want:
        return None
    shown = "_" if token is None else token
    return {"block": block, "slot": slot, "key": list(key), "expected": want, "written": token,
            "message": f"{what} writes {shown} into slot {slot} of block {block}, which the cache holds "
                       f"under the key {_key_text(key)} (that slot must keep {want})"}


def cache_immutable_kernel(model, before, tr, fact):
    kernel, B = fact.kernel, model.B
    for p in kernel.written:
        block = kernel.snapshot[p // B]
        witness = _immutable(block, before.blocks[block].key, p % B, kernel.expected[p], B,
                             f"branch {model.names[kernel.branch]}'s kernel for position {p}")
        if witness is not None:
            return witness
    return None


def cache_immutable_copy(model, before, tr, fact):
    op, B = fact.copy, model.B
    key, source = before.blocks[op.dst].key, before.blocks[op.src].slots
    for slot in range(op.n):
        witness = _immutable(op.dst, key, slot, source[slot], B, f"the copy {op.src}->{op.dst}")
        if witness is not None:
            return witness
    return None


def cache_immutable_move(model, before, tr, fact):
    """A successful load or recv into a keyed GPU block."""
    move, ok, _ = fact
    if not ok or move.kind not in _WRITERS:
        return None
    B = model.B
    cells = before.tier.host[move.host].slots if move.kind is MoveKind.LOAD else move.tokens
    for slot, token in enumerate(cells):
        witness = _immutable(move.block, before.blocks[move.block].key, slot, token, B,
                             f"the {move.kind} of branch {model.names[move.owner]}")
        if witness is not None:
            return witness
    return None


def verified_only_cached(model, before, tr, fact):
    verified = before.branches[fact.branch].verified if fact.verified is None else fact.verified
    if fact.length <= verified:
        return None
    return {"block": fact.block, "branch": model.names[fact.branch], "verified": verified, "covers": fact.length,
            "message": f"block {fact.block} was keyed with the first {fact.length} tokens of branch "
                       f"{model.names[fact.branch]}'s sequence, only {verified} of which are verified "
                       f"(position {verified} is a pending draft)"}


#: cache scenarios only (docs/semantics.md#prefix-caching)
CACHE_INVARIANTS: tuple[Invariant, ...] = (
    Invariant("no-stale-key", DISCIPLINE, "each alloc, alloc-no-evict and alloc-prompt",
              "the block handed out is not in the cache after the action", on_facts={Allocated: no_stale_key}),
    Invariant("cache-immutable", DISCIPLINE, "each kernel-complete and copy-complete",
              "every slot written in a keyed block gets the token its key has there",
              on_facts={KernelDone: cache_immutable_kernel, CopyDone: cache_immutable_copy, MoveDone: cache_immutable_move}),
    Invariant("verified-only-cached", DISCIPLINE, "each cache-full and cache-drafts",
              "every position a new key covers is verified (no pending draft)", on_facts={Keyed: verified_only_cached}),
)


def host_key_content(model, state, final, stuck):
    tier = state.tier
    if tier is None:
        return None
    storing = {op.host for op in state.queue if type(op) is Move and op.kind is MoveKind.STORE}
    B = model.B
    for h, hb in enumerate(tier.host):
        if hb.key is not None and h not in storing and hb.slots != hb.key[-B:]:
            shown = " ".join("_" if t is None else t for t in hb.slots)
            return {"host": h, "key": list(hb.key), "slots": list(hb.slots),
                    "message": f"host block h{h} is keyed {_key_text(hb.key)} but holds {shown}"}
    return None


#: scenarios with a host tier only (docs/semantics.md#transfers)
HOST_INVARIANTS: tuple[Invariant, ...] = (
    Invariant("host-key-content", DISCIPLINE, "every state",
              "every keyed host block into which no store is in flight holds the last B tokens of its key",
              on_state=host_key_content),
)


def allocator_error(model, before, tr, fact):
    # the scheduler harness's schedule() and output() are the engine's calls, of no one request
    out = {"branch": model.names[fact.branch] if fact.branch >= 0 else "engine", "call": fact.call, "error": fact.error,
           "message": f"{fact.call} raised {fact.error}"}
    if fact.frames:     # where in the allocator's own code, and the calls that led there
        out["at"] = fact.frames[-1].split(" in ")[0]
        out["message"] += f" at {out['at']}"
        out["traceback"] = list(fact.frames)
    return out


#: allocator code only (the engine harness): an exception other than
#: out-of-blocks, such as a refcount assertion, is a failure of its own
ALLOCATOR_ERROR = Invariant("allocator-error", HARM, "each host call (engine harness)",
                            "the allocator raises nothing but out-of-blocks", on_facts={AllocatorRaised: allocator_error})

BY_ID = {inv.id: inv for inv in INVARIANTS + CACHE_INVARIANTS + HOST_INVARIANTS + (ALLOCATOR_ERROR,)}
IDS = tuple(BY_ID)


#: what the engine harness never sees, whatever the adapter offers, and the
#: invariant that stands in for it: the harness reads the allocator's
#: refcounts after each call, never its decrements, so a double free shows
#: only as the allocator's own assertion (allocator-error)
HARNESS_BLIND = {"no-underflow": "not checked: the harness sees refcounts, not decrements; allocator-error stands in "
                                 "(the allocator's own assertion on a double free)"}
STANDS_IN = {"no-underflow": "allocator-error"}


def for_system(invariants: tuple[Invariant, ...], system: TransitionSystem) -> tuple[tuple[Invariant, ...], dict[str, tuple[str, str]]]:
    """The invariants a system is judged on, and those it cannot judge
    (id -> (kind, why)): a cache scenario adds the cache invariants (and
    only it has them) when all the built-in ones are asked for; code run
    through an adapter (a harness) adds allocator-error, never sees an
    underflow, and without an optional observer some more cannot be
    checked (the system's `unsupported`)."""
    scenario = system.scenario
    cache = scenario.cache
    # judged in every transfer scenario (vacuously where there is no host tier, so that `holds` can be met there)
    host = scenario.transfers
    everything = invariants == INVARIANTS       # nothing narrower asked for
    if everything and cache:
        invariants = INVARIANTS + CACHE_INVARIANTS + (HOST_INVARIANTS if host else ())
    unjudged: dict[str, tuple[str, str]] = {}
    if not cache:
        unjudged = {inv.id: (str(inv.kind), 'only a cache scenario (cache = "prefix") has a prefix cache')
                    for inv in invariants if inv in CACHE_INVARIANTS}
        invariants = tuple(inv for inv in invariants if inv not in CACHE_INVARIANTS)
    if not host:
        unjudged.update({inv.id: (str(inv.kind), "only a transfer scenario (host_pool > 0, or a request with source or sink) has host keys")
                         for inv in invariants if inv in HOST_INVARIANTS})
        invariants = tuple(inv for inv in invariants if inv not in HOST_INVARIANTS)
    if system.adapter is None:
        return invariants, unjudged
    unsupported = {**HARNESS_BLIND, **system.unsupported}
    if everything:
        invariants = invariants + (ALLOCATOR_ERROR,)
    kept = tuple(inv for inv in invariants if inv.id not in unsupported)
    return kept, {**unjudged, **{inv.id: (str(inv.kind), unsupported[inv.id]) for inv in invariants if inv.id in unsupported}}


def select(ids: tuple[str, ...] | list[str] | None, source: str = "--invariant") -> tuple[Invariant, ...]:
    if not ids:
        return INVARIANTS
    for i in ids:
        if i not in BY_ID:
            raise SpecError(source, "invariant", f"unknown invariant {i!r}; allowed: {', '.join(IDS)}")
    return tuple(inv for inv in INVARIANTS + CACHE_INVARIANTS + HOST_INVARIANTS + (ALLOCATOR_ERROR,) if inv.id in ids)


def validate_expect(scenario: Scenario, harness: bool = False) -> None:
    known = BY_ID if harness else {i: inv for i, inv in BY_ID.items() if inv is not ALLOCATOR_ERROR}
    for item in scenario.expect:
        if item.startswith("violates ") and item.split()[1] not in known:
            raise SpecError(scenario.source, "expect", f"unknown invariant {item.split()[1]!r}; allowed: {', '.join(IDS)}")


class Judge:
    """Evaluates a set of invariants on states and actions. Every engine (the
    breadth-first explorer, the depth-first cross-check, replay) judges
    through this one piece, so they cannot disagree on what a violation is."""

    def __init__(self, invariants: tuple[Invariant, ...]):
        self.invariants = invariants
        self.by_fact: dict[type, list[tuple[str, ActionCheck]]] = {}
        for inv in invariants:
            for kind, check in inv.on_facts.items():
                self.by_fact.setdefault(kind, []).append((inv.id, check))
        self.state_checks = [(inv.id, inv.on_state) for inv in invariants if inv.on_state]

    def state(self, model: TransitionSystem, state: State, final: bool, stuck: bool, skip=()):
        """(id, witness) for each invariant, not in `skip`, that `state` breaks."""
        for inv_id, check in self.state_checks:
            if inv_id not in skip:
                witness = check(model, state, final, stuck)
                if witness is not None:
                    yield inv_id, witness

    def action(self, model: TransitionSystem, before: State, tr: Transition, skip=()):
        """(id, witness) for each invariant, not in `skip`, that the action breaks."""
        for fact in tr.facts:
            for inv_id, check in self.by_fact.get(type(fact), ()):
                if inv_id not in skip:
                    witness = check(model, before, tr, fact)
                    if witness is not None:
                        yield inv_id, witness
