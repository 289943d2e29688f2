"""What each protocol step does to the state (the step table, docs/semantics.md#steps).

`choices` says whether a step is enabled and with which free choice (the block
an `alloc` pops); `apply` performs it on a Draft and returns the branch as the
step leaves it. Advancing the branch's place in its program is the caller's
job (model.system), so every step here is just its row of the table."""

from __future__ import annotations

from itertools import permutations
from typing import NamedTuple, Optional, Union

from cowcheck.model import block as blockops, transfers
from cowcheck.model.action import Bound
from cowcheck.model.block import Allocated, Draft, Keyed, OutputChecked, TableMiss
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Step
from cowcheck.model.stepkinds import ALLOCS, CACHE_STEPS, COPIES, TRANSFER_STEPS, WAITS
from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.state import Branch, Copy, Kernel, State, born, read


#: the named tuples' fields as a tuple, without the call through their __new__
_new = tuple.__new__
_NO_VALUES: dict[str, int] = {}
#: a step's free choice: the block an alloc pops, the blocks an
#: alloc-prompt takes under `any` reuse, or None
Choice = Union[None, int, tuple[int, ...]]
#: an enabled step without a choice
_ENABLED: tuple[Choice, ...] = (None,)


class Request(NamedTuple):
    """What a step needs of its branch beyond the state: its name, and in a
    cache scenario its prompt (docs/semantics.md#prefix-caching)."""
    name: str
    cache: bool = False
    prompt: tuple[str, ...] = ()
    #: a P/D consumer (`source = "remote"`) and producer (`sink = "remote"`)
    source: bool = False
    sink: bool = False


def local(branch: Branch, name: str, step: Step, source: str) -> int:
    value = branch.tail if name == "tail" else branch.new
    if value is None:
        raise SpecError(source, step.where, f"step {step.text!r} uses '{name}' where none is bound"
                        + (" (tail is absent at a block boundary)" if name == "tail" else " (no alloc bound it)"))
    return value


def prompt_allocs(br: Branch, prompt: tuple[str, ...], block_size: int) -> int:
    """The blocks an alloc-prompt takes: every prompt block its hits do not cover."""
    return -(-len(prompt) // block_size) - len(br.hits)


def choices(state: State, index: int, step: Step, reuse: str, source: str, request: Request = Request(""),
            twins: bool = False) -> tuple[Choice, ...]:
    """() when the step is not enabled; else the alternatives (None: no
    choice). `twins`: one choice of each set that differ only in which of
    some indistinguishable free blocks they take (cowcheck.model.block.twin_classes)."""
    op = step.op
    if op in ALLOCS:
        return blockops.free_choices(state, reuse, twins)
    if op == "alloc-prompt":
        n = prompt_allocs(state.branches[index], request.prompt, len(state.blocks[0].slots))
        if len(state.free) < n:
            return ()
        if reuse != "any":
            return _ENABLED
        # under `any` each block is a choice of its own, taken in turn
        return tuple(blockops.twin_orders(state, n)) if twins else tuple(permutations(state.free, n))
    if op == "wait-kernel":
        for q in state.queue:
            if type(q) is Kernel and q.branch == index:
                return ()
    elif op == "wait-copy":
        dst = local(state.branches[index], step.args[0], step, source)
        for q in state.queue:
            if type(q) is Copy and q.dst == dst:
                return ()
    elif op == "wait-transfers":
        if transfers.waiting(state, index):
            return ()
    return _ENABLED


def apply(d: Draft, index: int, br: Branch, step: Step, choice: Choice,
          block_size: int, request: Request, source: str, child: Optional[int] = None,
          draft: bool = False) -> tuple[Optional[Branch], tuple[tuple[str, Bound], ...]]:
    """Perform one step of branch `index` (`request`: its name, and its
    prompt in a cache scenario; `child`: the branch a fork operation forks;
    `draft`: the append is a speculative draft). Returns the branch after
    it (None when the step launched nothing and ends exploration: a
    kernel-table-miss) and the block ids its locals bound."""
    op, args = step.op, step.args
    name = request.name
    values = _NO_VALUES if op in ALLOCS or not args else {a: local(br, a, step, source) for a in args}
    binds: tuple[tuple[str, Bound], ...] = tuple(values.items()) if values else ()

    if op in ALLOCS:
        assert isinstance(choice, int)  # `choices` gives an alloc a free block
        evicted = blockops.alloc(d, choice, evict=op == "alloc")
        br = _new(Branch, br[:6] + ((choice, br.new) if args[0] == "tail" else (br.tail, choice)) + br[8:])
        binds = ((args[0], choice),)
        if request.cache:
            d.facts.append(Allocated(choice))
            if evicted:
                binds += (("evicted", choice),)
    elif op in CACHE_ONLY:
        return _cache_step(d, index, br, step, choice, block_size, request, source)
    elif op in ("incref", "decref", "hold", "release"):
        getattr(blockops, op)(d, values[args[0]])
    elif op in COPIES:
        n = br.pos % block_size if op == "copy" else block_size
        d.queue.append(Copy(values[args[0]], values[args[1]], n))
    elif op == "append":
        br = _new(Branch, br[:8] + (br.working + (values[args[0]],),) + br[9:])
    elif op == "replace":
        old, new = values[args[0]], values[args[1]]
        if old not in br.working:
            raise SpecError(source, step.where, f"step {step.text!r}: block {old} ({args[0]}) is not in the working table {list(br.working)}")
        at = br.working.index(old)
        br = _new(Branch, br[:8] + (br.working[:at] + (new,) + br.working[at + 1:],) + br[9:])
    elif op == "publish":
        br = _new(Branch, br[:9] + (br.working,) + br[10:])
    elif op == "write":
        if len(br.published) <= br.pos // block_size:
            d.facts.append(TableMiss(index, br.pos))
            return None, binds
        token = f"{name}{br.writes + 1}"
        seq = br.seq + (token,)
        d.queue.append(Kernel(index, br.pos, token, br.published, seq))
        # a draft's position stays unverified until its verify (cache scenarios keep the count)
        verified = br.pos + 1 if request.cache and not draft else br.verified
        br = _new(Branch, (br.status, br.pos + 1) + br[2:10] + (br.writes + 1, seq, br.rejected, verified) + br[14:])
        binds = (("token", token),)
    elif op == "decref-all":
        # a cache scenario frees a request's blocks last entry first, as V1
        # does, so that a chain's later blocks are evicted before its earlier ones
        for b in reversed(br.working) if request.cache else br.working:
            blockops.decref(d, b)
        br = _new(Branch, br[:8] + ((), ()) + br[10:])
    elif op == "incref-all":
        for b in br.working:
            blockops.incref(d, b)
    elif op == "share":
        assert child is not None, "share is only in [fork]"
        d.set_branch(child, born(br.pos, br.seq, br.working))
        binds = (("child", BRANCH_NAMES[child]), ("table", br.working))
    elif op == "rewind":
        assert br.rejected is not None, "rewind is only in [rollback], after verify"
        pos = br.pos - br.rejected
        br = br._replace(pos=pos, seq=br.seq[:pos], verified=min(br.verified, pos))
        binds = (("rejected", br.rejected), ("pos", pos))
    elif op == "trim":
        keep = -(-br.pos // block_size)
        dropped = br.working[keep:]
        for b in reversed(dropped):
            blockops.decref(d, b)
        br = br._replace(working=br.working[:keep])
        binds = (("dropped", dropped),)
    elif op == "check-output":
        d.facts.append(OutputChecked(index, read(tuple(d.blocks), br.working, br.pos, block_size), br.seq))
        binds = (("pos", br.pos), ("table", br.working))  # what was read, for a replay on a real pool
    else:
        # wait-copy and wait-kernel change nothing: `choices` already gated them
        assert op in WAITS, f"step {op!r} has no effect here"
    return br, binds


#: the steps of prefix caching that `_cache_step` performs (the allocs are `apply`'s)
CACHE_ONLY = tuple(op for op in CACHE_STEPS if op not in ALLOCS)


def _cache_step(d: Draft, index: int, br: Branch, step: Step, choice: Choice, block_size: int,
                request: Request, source: str) -> tuple[Optional[Branch], tuple[tuple[str, Bound], ...]]:
    """The steps of prefix caching (docs/semantics.md#prefix-caching). The
    cache is the keyed blocks: a key names one block at most."""
    op, prompt, B = step.op, request.prompt, block_size
    if op in TRANSFER_STEPS:
        return transfers.step(d, index, br, step, B, prompt, request.source, request.sink, source)
    if op == "lookup":
        cached = {blk.key: b for b, blk in enumerate(d.blocks) if blk.key is not None}
        hits: list[int] = []
        # the last prompt token is always recomputed (its logits are needed)
        for i in range(1, (len(prompt) - 1) // B + 1):
            block = cached.get(prompt[:i * B])
            if block is None:
                break
            hits.append(block)
        return br._replace(hits=tuple(hits)), (("hits", tuple(hits)),)
    if op == "touch-hits":
        for b in br.hits:
            if b in d.free:
                d.free.remove(b)
            blockops.incref(d, b)
        return br._replace(working=br.hits + br.working), (("hits", br.hits),)
    if op == "alloc-prompt":
        taken = choice if isinstance(choice, tuple) else tuple(d.free[:prompt_allocs(br, prompt, B)])
        evicted = []
        for b in taken:
            if blockops.alloc(d, b):
                evicted.append(b)
            d.facts.append(Allocated(b))
        binds: tuple[tuple[str, Bound], ...] = (("blocks", taken),)
        if evicted:
            binds += (("evicted", tuple(evicted)),)
        return br._replace(working=br.working + taken), binds
    if op == "prefill":
        # the blocks that arrived by load or recv are not recomputed
        start, last = (len(br.hits) + len(br.loads)) * B, len(prompt) - 1
        if len(br.published) <= last // B:
            d.facts.append(TableMiss(index, max(start, len(br.published) * B)))
            return None, (("from", start), ("to", last))
        d.queue.append(Kernel(index, last, prompt[last], br.published, prompt, last - start + 1))
        return br._replace(pos=len(prompt), seq=prompt, verified=len(prompt)), (("from", start), ("to", last))
    # cache-full keys verified positions only; cache-drafts (a bug) drafts too
    limit = br.verified if op == "cache-full" else br.pos
    cached_keys = {blk.key for blk in d.blocks if blk.key is not None}
    keyed: list[int] = []
    for i, b in enumerate(br.working):
        if (i + 1) * B > limit:
            break
        key = br.seq[:(i + 1) * B]
        if d.blocks[b].key is not None or key in cached_keys:
            continue            # keyed already, or a duplicate that stays unkeyed
        blockops.set_key(d, b, key)
        cached_keys.add(key)
        keyed.append(b)
        d.facts.append(Keyed(index, b, len(key)))
    return br, (("keyed", tuple(keyed)),)
