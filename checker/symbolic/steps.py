"""What each protocol step and each device completion does to a symbolic
state: model.steps, model.block and model.queue, line by line, on z3 terms.

`take` runs one step: its handler (one per row of the step table, docs/semantics.md#steps,
in `HANDLERS`) edits a `StepRun`, then the branch advances to its next
place or, at the end of its operation, back between operations
(model.system's _step and _end). `complete` is the device's completion of
one queue slot.

The functions here see the system only through its `Layout`
(cowcheck.symbolic.layout: the sizes, the program counters, the few
lookups the handlers need), which SymbolicSystem builds once and passes in
place of itself, so that this module does not import cowcheck.symbolic.system.

With branch programs (Layout.programs) a branch also carries its
write counter and its sequence, and a kernel the sequence it must read:
`write` extends the sequence with the token `<name>{writes + 1}` and gives
the kernel a copy, `rewind` cuts it back, `share` hands it to the child.
A plain scenario has none of these fields (its sequences are the branches'
references), and its handlers are what they were before programs.

One idea, though long: one handler per protocol step, the z3 twin of
cowcheck.model.steps (the steps of prefix caching included), each a few
lines over the shared update helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import z3

from cowcheck.model.block import Allocated, CopyDone, Freed, KernelDone, Keyed, OutputChecked, TableMiss, Underflow
from cowcheck.model.protocol import Step
from cowcheck.model.state import Status
from cowcheck.model.structure import Op, Place
from cowcheck.model.system import PROGRAM_OPS, STATUS_AFTER

from cowcheck.symbolic.layout import Layout
from cowcheck.symbolic.state import COPY_KIND, EMPTY, KERNEL_KIND, NONE_READ, STATUS_CODE, Guarded, Queued, Sym, SymBranch, SymOp, symbolic
from cowcheck.symbolic.terms import Term, all_of, any_of, by_value, select

@dataclass
class Executed:
    """One action instance executed from a symbolic state."""
    guard: Term                              # enabled in the pre-state (a table-miss write counts)
    leads: Term                              # it has a successor (False only for a table-miss write)
    post: Sym
    facts: list[Guarded] = field(default_factory=list)


#: an instance's free choice under `any` reuse: the block an `alloc` takes,
#: the blocks (in order) an `alloc-prompt` takes, or None
Choice = Union[None, int, tuple[int, ...]]


# -- block operations (model.block) -------------------------------------------------
def set_block(layout: Layout, s: Sym, b: Term, rc: Optional[Term] = None, hd: Optional[Term] = None) -> None:
    """Set block b's counters. A symbolic b is a case split over every
    block; a constant one (an alloc under `any` reuse) touches only its own."""
    if z3.is_expr(b):
        targets = [(x, b == x) for x in range(layout.P)]
    else:
        targets = [(b, None)] if 0 <= b < layout.P else []
    for x, here in targets:
        if rc is not None:
            s.rc[x] = rc if here is None else z3.If(here, rc, s.rc[x])
        if hd is not None:
            s.hd[x] = hd if here is None else z3.If(here, hd, s.hd[x])


def push_free(layout: Layout, s: Sym, when: Term, b: Term, facts: list[Guarded]) -> None:
    """Back on the free list (model.block._push_free): in a cache scenario
    a keyed block goes to the back whatever the reuse order (but `any`)."""
    when = z3.And(when, z3.Not(layout.in_free(s, b)))
    back = [z3.If(s.flen == i, b, s.free[i]) for i in range(layout.P)]
    if layout.reuse == "lifo":
        pushed = [b] + s.free[:-1]
        if layout.cache:
            keyed = select(s.klen, b, 0) > 0
            pushed = [z3.If(keyed, x, y) for x, y in zip(back, pushed)]
    elif layout.reuse == "fifo":
        pushed = back
    else:
        pushed = sorted_insert(layout, s, b)
    s.free = [z3.If(when, new, old) for new, old in zip(pushed, s.free)]
    s.flen = z3.If(when, s.flen + 1, s.flen)
    facts.append(Guarded(when, symbolic(Freed, b)))


def sorted_insert(layout: Layout, s: Sym, b: Term) -> list:
    """The free list with b inserted in ascending order (`any` reuse keeps
    it sorted, model.block._push_free): entries below b stay, b takes the
    first place that is not below it, the rest move up one."""
    below = [z3.And(i < s.flen, x < b) for i, x in enumerate(s.free)]
    return [z3.If(below[i], s.free[i], b if i == 0 else z3.If(below[i - 1], b, s.free[i - 1])) for i in range(layout.P)]


def set_key(layout: Layout, s: Sym, b: Term, when: Term, length: Term, tokens: list) -> None:
    """Block b's key becomes `tokens` (length `length`, 0: no key) when `when`."""
    targets = [(x, b == x) for x in range(layout.P)] if z3.is_expr(b) else [(b, z3.BoolVal(True))] if 0 <= b < layout.P else []
    for x, here in targets:
        here = z3.And(when, here)
        s.klen[x] = z3.If(here, length, s.klen[x])
        s.key[x] = [z3.If(here, new, old) for new, old in zip(tokens, s.key[x])]


def remove_free(layout: Layout, s: Sym, b: Term, when: Term) -> None:
    """Take block b off the free list, wherever it is, if it is on it and `when`."""
    at = [z3.And(when, i < s.flen, x == b) for i, x in enumerate(s.free)]
    gone = [any_of(at[:i + 1]) for i in range(layout.P)]       # b is at or before entry i
    after = s.free[1:] + [-1]
    s.free = [z3.If(g, a, x) for g, a, x in zip(gone, after, s.free)]
    s.flen = z3.If(any_of(at), s.flen - 1, s.flen)


def take_free(s: Sym, b: int) -> list:
    """The free list without block b (`any` reuse, sorted, b in it):
    entries below b stay, the others move down one."""
    after = s.free[1:] + [-1]
    return [z3.If(z3.And(i < s.flen, x < b), x, after[i]) for i, x in enumerate(s.free)]


def counter_down(layout: Layout, s: Sym, b: Term, which: str, facts: list[Guarded], when: Term = True) -> None:
    """decref (which='rc') or release (which='hd'), guarded by `when`."""
    mine, other = (s.rc, s.hd) if which == "rc" else (s.hd, s.rc)
    old, other_val = select(mine, b, 0), select(other, b, 0)
    facts.append(Guarded(z3.And(when, old == 0), symbolic(Underflow, b, "refcount" if which == "rc" else "holds")))
    ok = z3.And(when, old > 0)
    set_block(layout, s, b, **{which: z3.If(ok, old - 1, old)})
    push_free(layout, s, z3.And(ok, old == 1, other_val == 0), b, facts)


def push_op(layout: Layout, s: Sym, kind: int, src: Term = -1, dst: Term = -1, n: Term = -1, br: Term = -1,
            kpos: Term = -1, snap: Optional[list] = None, slen: Term = 0, kseq: Optional[list] = None,
            span: Term = 0) -> None:
    snap = snap or [-1] * layout.T
    kseq = kseq or [-1] * layout.KS
    for i, o in enumerate(s.q):
        at = s.qlen == i
        if layout.cache:
            o.span = z3.If(at, span, o.span)
        o.kind, o.src, o.dst, o.n = (z3.If(at, kind, o.kind), z3.If(at, src, o.src),
                                     z3.If(at, dst, o.dst), z3.If(at, n, o.n))
        o.br, o.kpos, o.slen = z3.If(at, br, o.br), z3.If(at, kpos, o.kpos), z3.If(at, slen, o.slen)
        o.snap = [z3.If(at, new, old) for new, old in zip(snap, o.snap)]
        o.kseq = [z3.If(at, new, old) for new, old in zip(kseq, o.kseq)]
    s.qlen = s.qlen + 1


def pop_op(layout: Layout, s: Sym, i: int) -> None:
    empty = SymOp(EMPTY, -1, -1, -1, -1, -1, [-1] * layout.T, 0, [-1] * layout.KS, 0 if layout.cache else None)
    s.q = s.q[:i] + s.q[i + 1:] + [empty]
    s.qlen = s.qlen - 1


def read(layout: Layout, s: Sym, table: list, tlen: Term, count: Term, maxcount: int) -> list:
    """Positions 0 .. maxcount-1 read through a table (model.state.read):
    (position is below count, value)."""
    out = []
    for i in range(maxcount):
        t, slot = divmod(i, layout.B)
        block = table[t] if t < len(table) else -1
        cell = select([s.slot[b][slot] for b in range(layout.P)], block, NONE_READ)
        out.append((i < count, z3.If(tlen > t, cell, layout.num(NONE_READ))))
    return out


# -- the steps (model.steps) ---------------------------------------------------------
@dataclass
class StepRun:
    """One step of branch j being executed: the state before, the state
    after as the handler builds it, and what the handler adds to the guard,
    to whether the action leads anywhere, and to its facts."""
    layout: Layout
    pre: Sym
    post: Sym
    j: int
    step: Step
    guard: Term
    choice: Choice            # under `any` reuse: the block an `alloc` takes, the blocks an `alloc-prompt` takes
    child: Optional[int] = None   # a fork's step: the branch it forks
    leads: Term = field(default_factory=lambda: z3.BoolVal(True))
    facts: list[Guarded] = field(default_factory=list)

    @property
    def branch(self) -> SymBranch:
        """The branch in the state after."""
        return self.post.br[self.j]

    def arg(self, i: int) -> Term:
        """The block the step's i-th local names (in the state after, as far as built)."""
        b = self.branch
        return b.tail if self.step.args[i] == "tail" else b.new

    @property
    def positions(self) -> range:
        """The positions the branch can be at."""
        return range(self.layout.L, self.layout.maxpos[self.j] + 1)


Handler = Callable[[StepRun], None]
HANDLERS: dict[str, Handler] = {}


def handles(*ops: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return register


@handles("host-lookup", "load", "recv", "store", "store-free", "send", "wait-transfers", "store-keyed")
def _transfer(r: StepRun) -> None:
    """Never run: the z3 engines refuse any scenario with transfer steps
    (cowcheck.symbolic.system.refusal)."""
    raise AssertionError("the z3 engines do not encode transfers; SymbolicSystem refuses them")


@handles("alloc", "alloc-no-evict")
def _alloc(r: StepRun) -> None:
    """The front of the free list under lifo and fifo, the given free block
    under `any`. In a cache scenario `alloc` evicts the block's key, and
    `alloc-no-evict` (a bug) keeps it."""
    layout, pre = r.layout, r.pre
    if r.choice is not None:
        assert isinstance(r.choice, int)
        enabled, chosen, r.post.free = layout.in_free(pre, r.choice), r.choice, take_free(pre, r.choice)
    else:
        enabled, chosen = z3.And(pre.flen > 0, layout.P > 0), pre.free[0] if layout.P else -1
        r.post.free = (pre.free[1:] + [-1])[:layout.P]
    r.guard, r.post.flen = z3.And(r.guard, enabled), pre.flen - 1
    set_block(layout, r.post, chosen, rc=1)
    setattr(r.branch, r.step.args[0], chosen)
    if layout.cache:
        if r.step.op == "alloc":
            set_key(layout, r.post, chosen, z3.BoolVal(True), 0, [-1] * layout.KL)
        r.facts.append(Guarded(z3.BoolVal(True), symbolic(Allocated, chosen)))


@handles("incref")
def _incref(r: StepRun) -> None:
    v = r.arg(0)
    set_block(r.layout, r.post, v, rc=select(r.pre.rc, v, 0) + 1)


@handles("hold")
def _hold(r: StepRun) -> None:
    v = r.arg(0)
    set_block(r.layout, r.post, v, hd=select(r.pre.hd, v, 0) + 1)


@handles("decref", "release")
def _down(r: StepRun) -> None:
    counter_down(r.layout, r.post, r.arg(0), "rc" if r.step.op == "decref" else "hd", r.facts)


@handles("copy", "copy-block")
def _copy(r: StepRun) -> None:
    B = r.layout.B
    n = by_value(r.branch.pos, r.positions, lambda p: p % B) if r.step.op == "copy" else B
    push_op(r.layout, r.post, COPY_KIND, src=r.arg(0), dst=r.arg(1), n=n)


@handles("wait-copy")
def _wait_copy(r: StepRun) -> None:
    dst, pre = r.arg(0), r.pre
    r.guard = z3.And(r.guard, z3.Not(any_of(z3.And(i < pre.qlen, o.kind == COPY_KIND, o.dst == dst) for i, o in enumerate(pre.q))))


@handles("wait-kernel")
def _wait_kernel(r: StepRun) -> None:
    pre = r.pre
    r.guard = z3.And(r.guard, z3.Not(any_of(z3.And(i < pre.qlen, o.kind == KERNEL_KIND, o.br == r.j) for i, o in enumerate(pre.q))))


@handles("append")
def _append(r: StepRun) -> None:
    b, v = r.branch, r.arg(0)
    b.wk = [z3.If(b.wlen == t, v, x) for t, x in enumerate(b.wk)]
    b.wlen = b.wlen + 1


@handles("replace")
def _replace(r: StepRun) -> None:
    b, old, new = r.branch, r.arg(0), r.arg(1)
    first = [z3.And(t < b.wlen, x == old, *[y != old for y in b.wk[:t]]) for t, x in enumerate(b.wk)]
    r.guard = z3.And(r.guard, any_of(first))  # the explicit model raises a SpecError otherwise
    b.wk = [z3.If(f, new, x) for f, x in zip(first, b.wk)]


@handles("publish")
def _publish(r: StepRun) -> None:
    b = r.branch
    b.pb, b.plen = list(b.wk), b.wlen


@handles("write")
def _write(r: StepRun) -> None:
    """Launch the kernel for pos (unless the published table misses it).
    With programs the token is the branch's next by its write counter, and
    the kernel remembers the sequence it extends (faithful-output's)."""
    layout, b, B = r.layout, r.branch, r.layout.B
    covered = by_value(b.pos, r.positions, lambda p: b.plen > p // B)
    r.facts.append(Guarded(z3.Not(covered), symbolic(TableMiss, r.j, b.pos)))
    r.leads = covered
    kseq = None
    if layout.programs:
        assert b.writes is not None     # programs: every branch has its write counter
        token = layout.offset[r.j] + b.writes
        b.seq = [z3.If(b.pos == layout.L + n, token, x) for n, x in enumerate(b.seq)]
        b.writes = b.writes + 1
        kseq = b.seq + [-1] * (layout.KS - len(b.seq))
    push_op(layout, r.post, KERNEL_KIND, br=r.j, kpos=b.pos, snap=list(b.pb), slen=b.plen, kseq=kseq, span=1)
    if layout.cache:      # a draft's position stays unverified until its verify
        drafts = layout.drafts[r.j]
        draft = by_value(b.done, range(len(drafts) + 1), lambda k: z3.BoolVal(k < len(drafts) and drafts[k]))
        b.verified = z3.If(draft, b.verified, b.pos + 1)
    b.pos = b.pos + 1


@handles("decref-all")
def _decref_all(r: StepRun) -> None:
    layout, before, b = r.layout, r.pre.br[r.j], r.branch
    # a cache scenario frees a request's blocks last entry first (as V1 does)
    for t in reversed(range(layout.T)) if layout.cache else range(layout.T):
        counter_down(layout, r.post, before.wk[t], "rc", r.facts, when=t < before.wlen)
    b.wk, b.pb, b.wlen, b.plen = [-1] * layout.T, [-1] * layout.T, 0, 0


@handles("check-output")
def _check_output(r: StepRun) -> None:
    layout, b = r.layout, r.branch
    reads = read(layout, r.post, b.wk, b.wlen, b.pos, layout.maxpos[r.j])
    expected = [layout.branch_expected(r.post, r.j, i) for i in range(layout.maxpos[r.j])]
    r.facts.append(Guarded(z3.BoolVal(True), symbolic(OutputChecked, r.j, reads, expected)))


@handles("incref-all")
def _incref_all(r: StepRun) -> None:
    """incref each working-table entry in table order, once per entry
    (each reads the counter the one before left: an entry twice counts twice)."""
    layout, post, b = r.layout, r.post, r.branch
    for t in range(layout.T):
        x = b.wk[t]
        set_block(layout, post, x, rc=z3.If(t < b.wlen, select(post.rc, x, 0) + 1, select(post.rc, x, 0)))


@handles("share")
def _share(r: StepRun) -> None:
    """The child is born with the parent's working table as both of its
    tables, the parent's pos and sequence, and a fresh program; no counter
    changes."""
    layout, b = r.layout, r.branch
    assert r.child is not None, "share runs only in a fork, which names its child"
    c = r.post.br[r.child]
    c.status, c.pos, c.done, c.pc, c.tail, c.new = STATUS_CODE[Status.RUNNING], b.pos, 0, 0, -1, -1
    c.wk, c.wlen, c.pb, c.plen = list(b.wk), b.wlen, list(b.wk), b.wlen
    c.writes, c.rejected = 0, -1
    c.seq = (b.seq + [-1] * len(c.seq))[:len(c.seq)]


@handles("rewind")
def _rewind(r: StepRun) -> None:
    """pos drops by `rejected`; the sequence's fields from the new pos on
    go back to empty (the slots keep their garbage)."""
    layout, b = r.layout, r.branch
    b.pos = b.pos - b.rejected
    b.seq = [z3.If(b.pos <= layout.L + n, -1, x) for n, x in enumerate(b.seq)]
    if layout.cache:
        b.verified = z3.If(b.verified < b.pos, b.verified, b.pos)


@handles("trim")
def _trim(r: StepRun) -> None:
    """From the end, decref and drop every working-table entry at index
    ceil(pos / B) or beyond (the order matters to the free list)."""
    layout, post, b = r.layout, r.post, r.branch
    before = list(b.wk)
    keep = by_value(b.pos, r.positions, lambda p: -(-p // layout.B))
    for t in reversed(range(layout.T)):
        counter_down(layout, post, before[t], "rc", r.facts, when=z3.And(t >= keep, t < b.wlen))
    b.wk = [z3.If(t >= keep, -1, x) for t, x in enumerate(before)]
    b.wlen = z3.If(b.wlen > keep, keep, b.wlen)


# -- prefix caching (model.steps._cache_step) ----------------------------------------
def _keys_equal(layout: Layout, s: Sym, x: int, length: int, tokens: list) -> Term:
    """Block x's key is the `length` tokens given."""
    return z3.And(s.klen[x] == length, *[s.key[x][n] == tokens[n] for n in range(length)])


@handles("lookup")
def _lookup(r: StepRun) -> None:
    """hits := the blocks keyed by the prompt's first i * B tokens, i = 1, 2, ...
    while each is cached, at most (L - 1) // B (a key names one block; of
    two, the explicit model's dict keeps the highest)."""
    layout, pre, b, B = r.layout, r.pre, r.branch, r.layout.B
    prompt = layout.prompts[r.j]
    hits, count, found_all = [], layout.num(0), z3.BoolVal(True)
    for i in range(1, layout.H[r.j] + 1):
        match = [_keys_equal(layout, pre, x, i * B, list(prompt[:i * B])) for x in range(layout.P)]
        block: Term = layout.num(-1)
        for x in range(layout.P):
            block = z3.If(match[x], x, block)
        found_all = z3.And(found_all, any_of(match))
        hits.append(z3.If(found_all, block, -1))
        count = z3.If(found_all, count + 1, count)
    b.hits, b.hlen = hits, count


@handles("touch-hits")
def _touch_hits(r: StepRun) -> None:
    """Each hit in order: off the free list if on it, refcount + 1; the
    hits become the first entries of the working table."""
    layout, post, b = r.layout, r.post, r.branch
    H, hlen = layout.H[r.j], b.hlen
    assert hlen is not None     # cache scenarios: every branch has its hits
    for t in range(H):
        active, x = t < hlen, b.hits[t]
        remove_free(layout, post, x, active)
        old = select(post.rc, x, 0)
        set_block(layout, post, x, rc=z3.If(active, old + 1, old))
    before, hits = list(b.wk), list(b.hits)

    def entry(t: int) -> Callable[[int], Term]:
        return lambda h: hits[t] if t < h else before[t - h]
    b.wk = [by_value(hlen, range(H + 1), entry(t)) for t in range(layout.T)]
    b.wlen = b.wlen + hlen


@handles("alloc-prompt")
def _alloc_prompt(r: StepRun) -> None:
    """ceil(L / B) - len(hits) blocks, evicting as alloc does, appended to
    the working table in order; enabled only when that many are free. Under
    `any` the instance's choice names them (one instance per ordered choice)."""
    layout, pre, post, b = r.layout, r.pre, r.post, r.branch
    blocks = -(-len(layout.prompts[r.j]) // layout.B)
    n = layout.num(blocks) - b.hlen
    if isinstance(r.choice, tuple):
        r.guard = z3.And(r.guard, n == len(r.choice), *[layout.in_free(pre, x) for x in r.choice])
        taken: list = [(z3.BoolVal(True), x) for x in r.choice]
        for x in r.choice:
            post.free, post.flen = take_free(post, x), post.flen - 1
        for k, x in enumerate(r.choice):
            b.wk = [z3.If(b.wlen + k == t, x, y) for t, y in enumerate(b.wk)]
        b.wlen = b.wlen + len(r.choice)
    else:
        r.guard = z3.And(r.guard, pre.flen >= n)
        most = min(blocks, layout.P)
        taken = [(k < n, pre.free[k]) for k in range(most)]
        def shifted(i: int) -> Callable[[int], Term]:
            return lambda m: pre.free[i + m] if i + m < layout.P else -1
        post.free = [by_value(n, range(most + 1), shifted(i)) for i in range(layout.P)]
        post.flen = pre.flen - n
        b.wk = [z3.If(z3.And(t >= b.wlen, t < b.wlen + n), select(pre.free, t - b.wlen, -1), y) for t, y in enumerate(b.wk)]
        b.wlen = b.wlen + n
    for active, x in taken:
        set_block(layout, post, x, rc=z3.If(active, 1, select(post.rc, x, 0)))
        set_key(layout, post, x, active, 0, [-1] * layout.KL)
        r.facts.append(Guarded(active, symbolic(Allocated, x)))


@handles("prefill")
def _prefill(r: StepRun) -> None:
    """One kernel writing the prompt at positions len(hits) * B .. L - 1
    through the published table; pos and verified := L, the sequence the
    prompt. A table too short is a kernel-table-miss."""
    layout, b, B = r.layout, r.branch, r.layout.B
    prompt = layout.prompts[r.j]
    last = len(prompt) - 1
    assert b.hlen is not None
    start = b.hlen * B
    covered = b.plen > last // B
    at = z3.If(start > b.plen * B, start, b.plen * B)
    r.facts.append(Guarded(z3.Not(covered), symbolic(TableMiss, r.j, at)))
    r.leads = covered
    seq = list(prompt) + [-1] * (len(b.seq) - len(prompt))
    push_op(layout, r.post, KERNEL_KIND, br=r.j, kpos=last, snap=list(b.pb), slen=b.plen,
            kseq=seq + [-1] * (layout.KS - len(seq)), span=last + 1 - start)
    b.pos, b.seq, b.verified = len(prompt), seq, len(prompt)


@handles("cache-full", "cache-drafts")
def _cache_full(r: StepRun) -> None:
    """For each working entry i with (i + 1) * B <= verified (cache-drafts:
    pos) and no key on its block: key it with the sequence's first
    (i + 1) * B tokens unless the cache has that key already."""
    layout, post, b, B = r.layout, r.post, r.branch, r.layout.B
    limit = b.verified if r.step.op == "cache-full" else b.pos
    assert limit is not None
    for i in range(layout.T):
        length = (i + 1) * B
        if length > len(b.seq):
            break
        x, tokens = b.wk[i], b.seq[:length]
        cached = any_of(_keys_equal(layout, post, y, length, tokens) for y in range(layout.P))
        new = z3.And(i < b.wlen, limit >= length, select(post.klen, x, 0) == 0, z3.Not(cached))
        set_key(layout, post, x, new, length, tokens + [-1] * (layout.KL - length))
        r.facts.append(Guarded(new, symbolic(Keyed, r.j, x, length)))


def take(layout: Layout, s: Sym, j: int, place: Place, guard: Term, choice: Choice = None,
         child: Optional[int] = None) -> Executed:
    """Branch j takes the step at `place` (model.steps.choices + apply) and
    advances (model.system._step and _end); `guard` says when it may,
    `child` is the branch a fork's `share` brings to life. An admission's
    first step makes a waiting request running."""
    run = StepRun(layout, s, s.copy(), j, layout.structure.step(place), guard, choice, child)
    if place.op is Op.ADMIT and place.step == 0:
        run.branch.status = STATUS_CODE[Status.RUNNING]
    HANDLERS[run.step.op](run)
    b = run.branch
    if not layout.structure.is_last(place):
        b.pc = layout.pc_of[place._replace(step=place.step + 1)]
    else:
        b.status = STATUS_CODE[STATUS_AFTER[place.op]]
        b.done = b.done + 1 if place.op in PROGRAM_OPS else b.done
        b.pc, b.tail, b.new = 0, -1, -1
        if layout.programs:
            b.rejected = -1
        if layout.cache:
            b.hlen, b.hits = 0, [-1] * len(b.hits)
        if place.op is Op.CANCEL:      # its unforked descendants never owned anything: cancelled with it
            unborn, cancelled = STATUS_CODE[Status.UNBORN], STATUS_CODE[Status.CANCELLED]
            for c in layout.descendants[j]:
                d = run.post.br[c]
                d.status = z3.If(d.status == unborn, cancelled, d.status)
    return Executed(run.guard, run.leads, run.post, run.facts)


# -- the device (model.queue) ----------------------------------------------------------
def complete(layout: Layout, s: Sym, i: int) -> Executed:
    """model.queue.complete for queue slot i."""
    o = s.q[i]
    post = s.copy()
    pop_op(layout, post, i)
    is_copy = o.kind == COPY_KIND
    # a copy: the destination's first n slots take the source's, read now
    src_cells = [select([s.slot[b][c] for b in range(layout.P)], o.src, -1) for c in range(layout.B)]
    # a kernel: its token into snapshot[pos // B], slot pos % B
    kdom = range(layout.L, max(max(layout.maxpos), layout.L + 1))
    target = layout.target(o)
    kslot = by_value(o.kpos, kdom, lambda p: p % layout.B)
    if layout.programs:   # the last token of the kernel's remembered sequence
        token = by_value(o.kpos, kdom, lambda p: layout.sequence(o.kseq, p))
    else:
        token = select([layout.token(j, o.kpos) for j in range(layout.N)], o.br, -1)
    written = layout.written(o) if layout.cache else []
    for b in range(layout.P):
        for c in range(layout.B):
            by_copy = z3.And(o.dst == b, o.n > c)
            if layout.cache:     # every position it writes (a later one over an earlier, as the model writes them)
                kernel_cell = s.slot[b][c]
                for active, p, block in written:
                    if p % layout.B == c:
                        kernel_cell = z3.If(z3.And(active, block == b), layout.sequence(o.kseq, p), kernel_cell)
            else:
                kernel_cell = z3.If(z3.And(target == b, kslot == c), token, s.slot[b][c])
            post.slot[b][c] = z3.If(is_copy, z3.If(by_copy, src_cells[c], s.slot[b][c]), kernel_cell)
    reads = read(layout, post, o.snap, o.slen, o.kpos + 1, max(layout.maxpos))
    facts = [Guarded(is_copy, symbolic(CopyDone, Queued(i, o))),
             Guarded(z3.Not(is_copy), symbolic(KernelDone, Queued(i, o), reads))]
    return Executed(layout.ready(s, i), z3.BoolVal(True), post, facts)
