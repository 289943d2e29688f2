"""Transfers: KV that moves between the GPU pool, the host tier and a remote
engine (docs/semantics.md#transfers). The steps that launch them, what a
completion or failure does, and the connector's own acts (`report`,
`expire`). Each acts on a Draft (cowcheck.model.block), whose `host`,
`host_free` and `reports` hold the host tier of a transfer scenario.

In a cache scenario that is not a transfer scenario (no host tier, no P/D
request) every transfer step is allowed and launches nothing."""

from __future__ import annotations

from typing import Optional

from cowcheck.model import block as blockops
from cowcheck.model.action import Bound
from cowcheck.model.block import Draft, HostFreed, MoveDone, write_slots
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Step
from cowcheck.model.state import Branch, HostBlock, Move, MoveKind, Report, State
from cowcheck.model.structure import Op

#: the named tuples' fields as a tuple, without the call through their __new__
_new = tuple.__new__
Binds = tuple[tuple[str, Bound], ...]
#: the kinds a request waits for at wait-transfers (stores are not waited for: their holds protect their blocks)
WAITED = (MoveKind.LOAD, MoveKind.RECV, MoveKind.SEND)
STORES = ("store", "store-free", "store-keyed")


def waiting(state: State, index: int) -> bool:
    """Whether request `index` has a load, recv or send not yet reported
    (in flight and not expired, or completed with its report pending)."""
    tier = state.tier
    if tier is None:
        return False
    for op in state.queue:
        if type(op) is Move and op.owner == index and op.kind in WAITED and not op.reported:
            return True
    return any(r.move.owner == index and r.move.kind in WAITED for r in tier.reports)


def _entry(br: Branch, entry: int, step: Step, source: str) -> int:
    if entry >= len(br.working):
        raise SpecError(source, step.where, f"step {step.text!r} needs working-table entry {entry}, the working table "
                        f"{list(br.working)} has {len(br.working)}")
    return br.working[entry]


def _pin(d: Draft, h: int) -> None:
    if h in d.host_free:
        d.host_free.remove(h)
    old = d.host[h]
    d.host[h] = _new(HostBlock, (old.pins + 1,) + old[1:])


def _unpin(d: Draft, h: int) -> None:
    """Pins - 1; at 0 the host block is freed: keyed to the back of the host
    free list, unkeyed to the front (`lifo`'s rule, whatever `reuse` says)."""
    old = d.host[h]
    d.host[h] = _new(HostBlock, (old.pins - 1,) + old[1:])
    if old.pins == 1 and h not in d.host_free:
        if old.key is not None:
            d.host_free.append(h)
        else:
            d.host_free.insert(0, h)
        d.facts.append(HostFreed(h))


def step(d: Draft, index: int, br: Branch, step: Step, block_size: int, prompt: tuple[str, ...],
         source_remote: bool, sink_remote: bool, source: str) -> tuple[Branch, Binds]:
    """One transfer step of request `index` (its prompt, and whether it is a
    P/D consumer or producer)."""
    op, B = step.op, block_size
    if d.before.tier is None or op == "wait-transfers":
        return br, ()            # no host tier, no P/D request: nothing to launch; a wait gated by `choices`
    if op == "host-lookup":
        cached = {hb.key: h for h, hb in enumerate(d.host) if hb.key is not None}
        hits: list[int] = []
        for i in range(len(br.hits) + 1, (len(prompt) - 1) // B + 1):
            h = cached.get(prompt[:i * B])
            if h is None:
                break
            hits.append(h)
        return br._replace(host_hits=tuple(hits)), (("host_hits", tuple(hits)),)
    loads = list(br.loads)
    launched: list[int] = []
    if op == "load":
        for k, h in enumerate(br.host_hits):
            g = _entry(br, len(br.hits) + k, step, source)
            _pin(d, h)
            blockops.hold(d, g)
            d.queue.append(Move(MoveKind.LOAD, index, g, h, len(loads)))
            loads.append(g)
            launched.append(g)
        return br._replace(loads=tuple(loads)), (("blocks", tuple(launched)), ("hosts", br.host_hits))
    if op == "recv":
        if source_remote:
            for i in range(len(br.hits) + len(loads), (len(prompt) - 1) // B):
                g = _entry(br, i, step, source)
                d.queue.append(Move(MoveKind.RECV, index, g, None, len(loads), None, prompt[i * B:i * B + B]))
                loads.append(g)
                launched.append(g)
        return br._replace(loads=tuple(loads)), (("blocks", tuple(launched)),)
    if op == "send":
        if sink_remote:
            for i in range(-(-br.pos // B)):
                g = br.working[i]
                d.queue.append(Move(MoveKind.SEND, index, g, None, i, None, br.seq[i * B:min(i * B + B, br.pos)]))
                launched.append(g)
        return br, (("blocks", tuple(launched)),)
    assert op in STORES, f"step {op!r} is not a transfer step"
    return br, _store(d, index, br, op)


def _store(d: Draft, index: int, br: Branch, op: str) -> Binds:
    """`store`, `store-free` and `store-keyed`: each keyed block, once, whose
    key no host block has and no store in flight or pending report carries,
    stored into the host free list's front until that list is empty."""
    carried = {m.key for m in d.queue if type(m) is Move and m.kind is MoveKind.STORE}
    carried |= {r.move.key for r in d.reports if r.move.kind is MoveKind.STORE}
    host_keys = {hb.key for hb in d.host if hb.key is not None}
    candidates = list(dict.fromkeys(d.free if op == "store-free" else br.working))
    launched: list[int] = []
    hosts: list[int] = []
    evicted: list[int] = []
    for g in candidates:
        key = d.blocks[g].key
        if key is None or key in host_keys or key in carried:
            continue
        if not d.host_free:
            break
        h = d.host_free.pop(0)
        old = d.host[h]
        if old.key is not None:         # evicted: its key leaves the host cache
            host_keys.discard(old.key)
            evicted.append(h)
        d.host[h] = HostBlock(1, old.slots, key if op == "store-keyed" else None)
        if op == "store-free":
            d.free.remove(g)
        blockops.hold(d, g)
        d.queue.append(Move(MoveKind.STORE, index, g, h, 0, key))
        carried.add(key)
        if op == "store-keyed":
            host_keys.add(key)
        launched.append(g)
        hosts.append(h)
    binds: Binds = (("blocks", tuple(launched)), ("hosts", tuple(hosts)))
    if evicted:
        binds += (("evicted", tuple(evicted)),)
    return binds


def complete(d: Draft, move: Move, ok: bool, block_size: int) -> None:
    """A transfer leaves the queue: on success a store and a load read their
    source now, a recv writes its tokens, a send reads its block (the
    remote reader); a failure reads and writes nothing. Unless it is a send
    already reported by an expired lease, it joins the reports."""
    reads: tuple[Optional[str], ...] = ()
    if ok:
        kind = move.kind
        if kind is MoveKind.STORE:
            assert move.host is not None
            old = d.host[move.host]
            d.host[move.host] = _new(HostBlock, (old.pins, d.blocks[move.block].slots, old.key))
        elif kind is MoveKind.LOAD:
            assert move.host is not None
            write_slots(d, move.block, 0, d.host[move.host].slots)
        elif kind is MoveKind.RECV:
            write_slots(d, move.block, 0, move.tokens + (None,) * (block_size - len(move.tokens)))
        else:
            reads = d.blocks[move.block].slots[:len(move.tokens)]
    if not move.reported:
        d.reports.append(Report(move, ok))
    d.facts.append(MoveDone(move, ok, reads))


def report(d: Draft) -> Binds:
    """The connector reports every pending completion, in completion order."""
    done: list[int] = []
    for move, ok in d.reports:
        kind = move.kind
        if kind is MoveKind.STORE:
            assert move.host is not None
            hb = d.host[move.host]
            if ok and hb.key is None and all(other.key != move.key for other in d.host):
                d.host[move.host] = _new(HostBlock, (hb.pins, hb.slots, move.key))
            blockops.release(d, move.block)
            _unpin(d, move.host)
        elif kind is MoveKind.LOAD:
            assert move.host is not None
            _unpin(d, move.host)
            blockops.release(d, move.block)
        if not ok and kind in (MoveKind.LOAD, MoveKind.RECV):
            owner = d.branches[move.owner]
            if owner.op is Op.ADMIT and len(owner.loads) > move.entry:
                d.branches[move.owner] = owner._replace(loads=owner.loads[:move.entry])
        done.append(move.block)
    d.reports.clear()
    return (("blocks", tuple(done)),)


def expire(d: Draft, index: int) -> None:
    """Request `index`'s lease expires: each of its sends in flight is reported."""
    d.queue[:] = [op._replace(reported=True) if type(op) is Move and op.kind is MoveKind.SEND and op.owner == index
                  else op for op in d.queue]


def expirable(state: State, index: int) -> bool:
    return any(type(op) is Move and op.kind is MoveKind.SEND and op.owner == index and not op.reported
               for op in state.queue)
