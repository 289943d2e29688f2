"""A state is plain, immutable, hashable data (docs/semantics.md#state).

Named tuples rather than frozen dataclasses: the explorer hashes and compares
millions of them, and tuples do that in C."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple, Optional, Union, final

from cowcheck.model.scenario import Scenario
from cowcheck.model.structure import Op


class Status(StrEnum):
    """A branch's status. The model only ever stores these members, so hot
    code compares them by identity (`is`). A child is unborn until its
    parent's fork shares a table with it."""
    UNBORN = "unborn"
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class Block(NamedTuple):
    refcount: int
    holds: int
    slots: tuple[Optional[str], ...]  # B cells: a token, or None when empty
    #: in a cache scenario, the key the prefix cache maps to this block (the
    #: tokens of every position up to the block's end: a chained hash), or
    #: None. The cache is exactly the keyed blocks: only a key's block holds
    #: it (docs/semantics.md#prefix-caching)
    key: Optional[tuple[str, ...]] = None


class Branch(NamedTuple):
    status: Status
    pos: int                       # tokens in its sequence, counting launched writes
    done: int                      # operations of its (flattened) program completed
    op: Optional[Op]               # None between operations
    path: Optional[str]            # the append path chosen by decide
    step: int                      # index of the next step of the operation
    tail: Optional[int]            # locals, cleared at the end of each operation
    new: Optional[int]
    working: tuple[int, ...]       # the scheduler's block table
    published: tuple[int, ...]     # what the branch's next kernel launch uses
    writes: int                    # writes so far: the next writes token <name>{writes + 1}
    seq: tuple[str, ...]           # its sequence: the tokens of positions 0 .. pos-1
    rejected: Optional[int]        # a rollback's local, bound by verify
    #: cache scenarios: positions 0 .. verified-1 are not pending drafts
    verified: int = 0
    #: cache scenarios: an admission's local, bound by lookup (block ids)
    hits: tuple[int, ...] = ()
    #: transfer scenarios: the admission's locals host-hits (host blocks,
    #: bound by host-lookup) and loads (the GPU blocks of its loads and
    #: recvs, in entry order); cleared at the end of each operation
    host_hits: tuple[int, ...] = ()
    loads: tuple[int, ...] = ()


# final: so that `type(op) is Copy` narrows an InFlight to Kernel in its else
# branch too (the hot paths test the type that way, not with isinstance)
@final
class Copy(NamedTuple):
    src: int
    dst: int
    n: int                         # slots copied, from the start of the block


@final
class Kernel(NamedTuple):
    branch: int
    pos: int
    token: str
    snapshot: tuple[int, ...]      # the published table at launch
    expected: tuple[str, ...]      # the branch's sequence right after the write: what the kernel must read
    #: positions written, ending at pos: 1 for a write, the uncached part of
    #: the prompt for a prefill
    span: int = 1

    @property
    def written(self) -> range:
        return range(self.pos - self.span + 1, self.pos + 1)


class MoveKind(StrEnum):
    """A transfer's kind: stores and loads are local, recvs and sends remote."""
    STORE = "store"
    LOAD = "load"
    RECV = "recv"
    SEND = "send"

    @property
    def local(self) -> bool:
        return self is MoveKind.STORE or self is MoveKind.LOAD


@final
class Move(NamedTuple):
    """A transfer in flight (docs/semantics.md#transfers): `block` the GPU
    block it reads (store, send) or writes (load, recv), `host` the host
    block it writes (store) or reads (load), `entry` its entry in its
    owner's loads (load, recv) or table (send), `key` the key a store gives
    its host block, `tokens` a recv's tokens or a send's expected ones,
    `reported` a send whose lease expired."""
    kind: MoveKind
    owner: int
    block: int
    host: Optional[int] = None
    entry: int = 0
    key: Optional[tuple[str, ...]] = None
    tokens: tuple[str, ...] = ()
    reported: bool = False


InFlight = Union[Copy, Kernel, Move]


class HostBlock(NamedTuple):
    pins: int
    slots: tuple[Optional[str], ...]
    key: Optional[tuple[str, ...]] = None


class Report(NamedTuple):
    """A completed transfer the connector has not reported yet."""
    move: Move
    ok: bool


class Tier(NamedTuple):
    """A transfer scenario's host tier and connector: the host blocks, the
    host free list (front first) and the pending reports, in completion order."""
    host: tuple[HostBlock, ...]
    free: tuple[int, ...]
    reports: tuple[Report, ...] = ()


class State(NamedTuple):
    blocks: tuple[Block, ...]
    free: tuple[int, ...]          # the free list, front first
    branches: tuple[Branch, ...]
    queue: tuple[InFlight, ...]  # in-flight ops, in launch order
    #: the engine harness's snapshot of the allocator under check (part of
    #: the state's identity); None for a protocol file's model
    code: Any = None
    #: a transfer scenario's host tier and pending reports; None elsewhere
    tier: Optional[Tier] = None


#: a child before its parent's fork: no tables, nothing owned
UNBORN = Branch(Status.UNBORN, 0, 0, None, None, 0, None, None, (), (), 0, (), None, 0, (), (), ())
#: a request of a cache scenario before its admission: nothing owned, no sequence yet
WAITING = UNBORN._replace(status=Status.WAITING)


def born(pos: int, seq: tuple[str, ...], table: tuple[int, ...]) -> Branch:
    """A branch that starts running, between operations, its program ahead
    of it: a root at the prompt, or a child at its fork (both tables the
    given one; a child's write counter starts at 0 too)."""
    return Branch(Status.RUNNING, pos, 0, None, None, 0, None, None, table, table, 0, seq, None, 0, (), (), ())


def prompt(scenario: Scenario) -> tuple[str, ...]:
    return tuple(f"p{i}" for i in range(scenario.prompt))


def prompt_slots(scenario: Scenario, k: int) -> tuple[Optional[str], ...]:
    """The slots of the prompt's k-th block: its tokens, then empty cells."""
    B = scenario.block_size
    cells = prompt(scenario)[k * B:(k + 1) * B]
    return cells + (None,) * (B - len(cells))


def initial_state(scenario: Scenario) -> State:
    """The fork has happened: every root branch maps the prompt's blocks;
    children are unborn, with nothing. In a cache scenario nothing has
    happened: every block free (ascending), the cache empty, every request
    waiting."""
    if scenario.cache:
        empty = Block(0, 0, (None,) * scenario.block_size)
        tier = None
        if scenario.transfers:
            host = HostBlock(0, (None,) * scenario.block_size)
            tier = Tier((host,) * scenario.host_pool, tuple(range(scenario.host_pool)))
        return State((empty,) * scenario.pool, tuple(range(scenario.pool)), (WAITING,) * len(scenario.branches), (),
                     None, tier)
    n, prompt_blocks = len(scenario.roots), scenario.prompt_blocks
    blocks = [Block(n, 0, prompt_slots(scenario, b)) if b < prompt_blocks else Block(0, 0, (None,) * scenario.block_size)
              for b in range(scenario.pool)]
    root = born(scenario.prompt, prompt(scenario), tuple(range(prompt_blocks)))
    branches = tuple(root if spec.parent is None else UNBORN for spec in scenario.branches)
    return State(tuple(blocks), tuple(range(prompt_blocks, scenario.pool)), branches, ())


def is_final(state: State) -> bool:
    """Every request done, nothing in flight, no report pending."""
    if state.tier is not None and state.tier.reports:
        return False
    return not state.queue and all(b.status is Status.FINISHED or b.status is Status.CANCELLED for b in state.branches)


def is_quiescent(state: State) -> bool:
    """Nothing in flight and no branch inside an operation: the books
    (refcounts, tables) are settled; in a transfer scenario no report is
    pending either (the connector's books)."""
    if state.tier is not None and state.tier.reports:
        return False
    return not state.queue and all(br.op is None for br in state.branches)


def is_steady(state: State, operations: tuple[tuple[Any, ...], ...]) -> bool:
    """Every branch born, at the end of its program (finish not started),
    nothing in flight (and no report pending)."""
    if state.tier is not None and state.tier.reports:
        return False
    return not state.queue and all(br.status is Status.RUNNING and br.op is None and br.done == len(ops)
                                   for br, ops in zip(state.branches, operations))


def cancel_unborn(branches: list[Branch], descendants: tuple[int, ...]) -> None:
    """A cancelled branch's children it never forked (and theirs) are
    cancelled with it: they never owned anything."""
    for c in descendants:
        if branches[c].status is Status.UNBORN:
            branches[c] = branches[c]._replace(status=Status.CANCELLED)


def published_uses(br: Branch, block_size: int) -> tuple[int, ...]:
    """The part of a branch's published table that counts as a use: below
    ceil(pos / B). Entries past that hold none of its sequence and no
    correct path launches through them (a rollback's `trim` frees a
    rejected draft's block one action before `publish` drops it). With the
    working table whole, these are the uses exclusive-write and
    no-use-after-free judge, and partial-order reduction relies on
    (docs/semantics.md#branch-programs)."""
    return br.published[:-(-br.pos // block_size)]


def allocated(state: State) -> int:
    return len(state.blocks) - len(state.free)


def host_allocated(state: State) -> int:
    """The host blocks off the host free list (the host peak's gauge)."""
    tier = state.tier
    return 0 if tier is None else len(tier.host) - len(tier.free)


def move_to_json(op: Move, name: Any) -> dict[str, Any]:
    """A transfer in flight as plain data."""
    out: dict[str, Any] = {"kind": str(op.kind), "branch": name(op.owner), "block": op.block, "host": op.host,
                           "index": op.entry}
    if op.key is not None:
        out["key"] = list(op.key)
    if op.tokens:
        out["tokens"] = list(op.tokens)
    if op.reported:
        out["reported"] = True
    return out


def read(blocks: tuple[Block, ...], table: tuple[int, ...], count: int, block_size: int) -> tuple[Optional[str], ...]:
    """Positions 0 .. count-1 read through a block table (None past its end)."""
    out: list[Optional[str]] = []
    for block in table[:-(-count // block_size)]:
        out += blocks[block].slots
    del out[count:]
    if len(out) < count:
        out += [None] * (count - len(out))
    return tuple(out)


def state_to_json(state: State, scenario: Scenario) -> dict[str, Any]:
    """The state as plain data (a counterexample's states). The fields of
    prefix caching appear only in cache scenarios."""
    name = scenario.branch_name
    out: dict[str, Any] = {
        "blocks": [
            {"id": i, "refcount": b.refcount, "holds": b.holds, "slots": list(b.slots), "free": i in state.free}
            for i, b in enumerate(state.blocks)
        ],
        "free": list(state.free),
        "branches": {
            name(i): {
                "status": br.status,
                "pos": br.pos,
                "done": br.done,
                "op": br.op,
                "path": br.path,
                "step": br.step,
                "tail": br.tail,
                "new": br.new,
                "working": list(br.working),
                "published": list(br.published),
                "writes": br.writes,
                "sequence": list(br.seq),
                "rejected": br.rejected,
            }
            for i, br in enumerate(state.branches)
        },
        "queue": [
            {"copy": {"src": op.src, "dst": op.dst, "n": op.n}} if type(op) is Copy
            else {"transfer": move_to_json(op, name)} if type(op) is Move
            else {"kernel": {"branch": name(op.branch), "pos": op.pos, "token": op.token, "snapshot": list(op.snapshot),
                             "expected": list(op.expected)}}
            for op in state.queue
        ],
    }
    if scenario.cache:
        for i, b in enumerate(state.blocks):
            out["blocks"][i]["key"] = None if b.key is None else list(b.key)
        out["cache"] = {" ".join(b.key): i for i, b in enumerate(state.blocks) if b.key is not None}
        for i, br in enumerate(state.branches):
            out["branches"][name(i)].update(verified=br.verified, hits=list(br.hits))
        for entry, op in zip(out["queue"], state.queue):
            if type(op) is Kernel and op.span > 1:
                entry["kernel"]["from"] = op.pos - op.span + 1
    tier = state.tier
    if tier is not None:       # a transfer scenario only: every other state reads as before
        out["host"] = [{"id": h, "pins": hb.pins, "slots": list(hb.slots), "key": None if hb.key is None else list(hb.key),
                        "free": h in tier.free} for h, hb in enumerate(tier.host)]
        out["host_free"] = list(tier.free)
        out["reports"] = [{**move_to_json(r.move, name), "ok": r.ok} for r in tier.reports]
        for i, br in enumerate(state.branches):
            out["branches"][name(i)].update(host_hits=list(br.host_hits), loads=list(br.loads))
    return out
