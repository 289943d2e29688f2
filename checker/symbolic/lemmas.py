"""Strengthening lemmas for k-induction: reachable-state invariants of the model.

k-induction starts its inductive step from an *arbitrary* state inside the
type constraints of SymbolicSystem.domain. Most such states are unreachable
(refcounts that disagree with the tables, free-list entries with references,
a kernel in flight for a branch that is not waiting for it, ...), and from
them almost every invariant breaks, so the step never closes. The lemmas here
describe what the model's bookkeeping makes true of every reachable state;
assumed in the step, they rule those states out.

Each lemma is a named function with a docstring saying why it holds. It
returns *parts* (one z3 predicate over a `Sym` per block, branch, queue slot
or program position), so that a part which does not hold for some protocol
can be dropped alone. Nothing here is trusted: cowcheck.symbolic.kind proves
the parts it keeps, jointly with the invariants, by k-induction (a base case
from the initial state, and an inductive step that assumes them) and drops
every part that fails either half. A lemma that is false for a buggy protocol
(the refcount equation under double-decrement, say) is therefore simply not
used there; it can never make a proof unsound.

Many lemmas depend on where a branch is in its protocol program: the nodes
and shapes of cowcheck.symbolic.shapes, and what each shape says, family by
family, in cowcheck.symbolic.families. This module is the catalogue: the
lemmas, in the order they are tried, and `Lemmas`, which makes their parts
for one scenario."""

from __future__ import annotations

from typing import Iterator, NamedTuple

import z3

from cowcheck.model.device import OpKind
from cowcheck.model.protocol import LOCALS
from cowcheck.model.state import Status

from cowcheck.symbolic.families import FAMILIES, Formulas, ShapeFamilies
from cowcheck.symbolic.shapes import Node, Programs, count, deltas, pending_copies
from cowcheck.symbolic.state import COPY_KIND, EMPTY, KERNEL_KIND, Sym
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.terms import Term, all_of, any_of, select


class Part(NamedTuple):
    """One piece of a lemma: a predicate over one symbolic state, and finer
    parts whose conjunction it is (tried one by one when it fails as a whole)."""
    lemma: str
    label: str
    formula: z3.BoolRef
    pieces: tuple = ()

    @property
    def key(self) -> str:
        return f"lemma:{self.lemma}:{self.label}"

    def flat(self) -> list["Part"]:
        """This part and all its pieces, at every level."""
        return [self] + [q for p in self.pieces for q in p.flat()]


# -- the lemmas --------------------------------------------------------------------------
class Lemmas:
    """The lemma parts of one scenario, as predicates over any symbolic state."""

    def __init__(self, system: SymbolicSystem):
        self.system = system
        self.programs = Programs(system)    # built for every scenario; cache scenarios' lemmas do not use it
        self._shares: dict[tuple[int, int, int], Term] = {}

    def parts(self, s: Sym) -> list[Part]:
        f = Formulas(self.system, s)
        out: list[Part] = []

        def part(name, label, formula, pieces=()):
            formula = z3.simplify(formula)
            if z3.is_true(formula):
                return None
            pieces = tuple(x for x in (part(name, *p) for p in pieces) if x is not None)
            return Part(name, label, formula, pieces if len(pieces) > 1 else ())

        for lemma in self.catalogue():
            name = lemma.__name__.replace("_", "-")
            for item in lemma(self, f):
                made = part(name, *item)
                if made is not None:
                    out.append(made)
        return out

    def names(self) -> list[str]:
        return [lemma.__name__.replace("_", "-") for lemma in self.catalogue()]

    def catalogue(self) -> tuple:
        """The lemmas tried on this scenario. The shapes of
        cowcheck.symbolic.shapes walk a plain branch's appends only. With
        speculation alone some of the lemmas built on them still hold (a
        root that never forks keeps most of its bookkeeping), and Houdini
        keeps those; but with forks (unborn children, tables shared mid-run)
        nearly all of them fail, and trying them costs minutes for nothing:
        such scenarios get the lemmas that do not depend on where a branch
        is in its program, and `unborn`. Fewer lemmas can only leave more
        proofs open, never make one unsound (every part is proven before
        it is used)."""
        if self.system.cache:
            return CACHE_LEMMAS
        return PROGRAM_LEMMAS if any(b.parent is not None for b in self.system.scenario.branches) else LEMMAS

    # helpers shared by the lemmas
    def shape_families(self, f: Formulas, j: int) -> Iterator[tuple[Node, list[ShapeFamilies]]]:
        for node, shapes in self.programs.nodes[j].items():
            yield node, [ShapeFamilies(self.system, f, j, shape) for shape in shapes]

    def local_term(self, f: Formulas, j: int, name: str, which: int, block: Term) -> Term:
        """What branch j's local `name` adds to block's refcount (which=0) or
        holds (which=1) beyond its table, over every node and shape."""
        b = f.s.br[j]
        x = b.tail if name == "tail" else b.new
        value = self.system.num(0)
        for node, shaped in self.shape_families(f, j):
            for sf in reversed(shaped):
                rc, hd, tab = deltas(sf.shape, name)
                amount = rc - tab if which == 0 else hd
                if amount:
                    cond = z3.And(self.programs_where(f, j, node), sf.discriminator()) if len(shaped) > 1 else \
                        self.programs_where(f, j, node)
                    value = z3.If(z3.And(cond, x == block), self.system.num(amount), value)
        return value

    def share(self, f: Formulas, j: int, x: int) -> Term:
        """Branch j's share of block x's refcount: its working table's
        entries for x plus what its locals add."""
        b = f.s.br[j]
        key = (id(f), j, x)
        if key not in self._shares:
            self._shares[key] = z3.Sum([f.count_in(b.wk, b.wlen, x)] + [self.local_term(f, j, name, 0, x) for name in LOCALS])
        return self._shares[key]

    def programs_where(self, f: Formulas, j: int, node: Node) -> z3.BoolRef:
        return self.programs.where(f.s, j, node)


def node(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A branch is only ever at a node of its program walk: between
    operations, at a step of an append path (if it has appends to make), of
    finish or (if it may be cancelled) of cancel, or done; finished and
    cancelled branches are between operations (the model resets them)."""
    for j in range(lm.system.N):
        yield f"branch {j}", any_of(lm.programs.where(f.s, j, n) for n in lm.programs.nodes[j])


def shape(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Per node of a branch, each family of FAMILIES holds for one of the
    shapes that lead to it (see FAMILIES for why each holds). One part per
    node, whose pieces are the families. A family is not split further into
    its conjuncts: on a buggy protocol that multiplied the candidates Houdini
    tries one by one, and the only family seen to fail in part, a fresh
    block's counters together with its absence from other tables, is two
    families instead (owned, exclusive), of which exclusive fails alone."""
    for j in range(lm.system.N):
        for n, shaped in lm.shape_families(f, j):
            where = lm.programs.where(f.s, j, n)
            at = f"branch {j} at {lm.programs.label(n)}"
            families = []
            for family in FAMILIES:
                options = [getattr(sf, family)() for sf in shaped]
                if all(z3.is_true(o) for o in options):
                    continue
                if len(options) > 1:
                    options = [z3.And(sf.discriminator(), o) for sf, o in zip(shaped, options)]
                families.append((f"{family} of {at}", z3.Implies(where, any_of(options))))
            if families:
                yield at, z3.And([x[1] for x in families]), families


def canonical(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Entries past a length are kept at their empty value and entries below
    it are real: the free list holds block ids then -1; tables hold block ids
    then -1; queue slots past its length are empty, a copy names two blocks
    and at most B slots, a kernel names its branch, a position that branch
    can write, and a snapshot that covers it (a write that would miss
    launches nothing). The model's lists simply have no other entries."""
    system, s = lm.system, f.s
    yield "free list", all_of(z3.If(i < s.flen, z3.And(x >= 0, x < system.P), x == -1) for i, x in enumerate(s.free))
    for j in range(system.N):
        for name, table, length in f.tables(j):
            yield f"{name} table of branch {j}", all_of(z3.If(t < length, x >= 0, x == -1) for t, x in enumerate(table))
    for m, o in enumerate(s.q):
        empty = z3.And(o.kind == EMPTY, o.src == -1, o.dst == -1, o.n == -1, o.br == -1, o.kpos == -1, o.slen == 0,
                       *[x == -1 for x in o.snap])
        copy = z3.And(o.kind == COPY_KIND, o.src >= 0, o.dst >= 0, o.n >= 0, o.n <= system.B, o.br == -1, o.kpos == -1,
                      o.slen == 0, *[x == -1 for x in o.snap])
        owner = any_of(z3.And(o.br == j, o.kpos >= system.L, o.kpos < system.maxpos[j]) for j in range(system.N))
        covered = all_of(z3.Implies(o.kpos == p, o.slen > p // system.B) for p in range(system.L, max(system.maxpos)))
        kernel = z3.And(o.kind == KERNEL_KIND, o.src == -1, o.dst == -1, o.n == -1, owner, covered,
                        *[z3.If(t < o.slen, x >= 0, x == -1) for t, x in enumerate(o.snap)])
        yield f"queue slot {m}", z3.If(m < s.qlen, z3.Or(copy, kernel), empty)


def free_distinct(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A block is pushed on the free list only when it is not on it
    (model.block._push_free) and popped by alloc, so it is there at most once."""
    s = f.s
    yield "free list", all_of(z3.Implies(i2 < s.flen, s.free[i] != s.free[i2])
                              for i2 in range(lm.system.P) for i in range(i2))


def free_iff_unowned(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A block is freed exactly when a decref or release leaves refcount 0
    and holds 0, alloc takes it with refcount 1, and initially the free
    blocks are the ones with no references: so it is free iff both counters
    are 0 (for protocols that never incref or hold a free block)."""
    s = f.s
    for x in range(lm.system.P):
        yield f"block {x}", lm.system.in_free(s, x) == z3.And(s.rc[x] == 0, s.hd[x] == 0)


def refcount(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A block's refcount is the number of entries mapping it in every
    branch's working table (a finished or cancelled branch's decref-all
    emptied its table together with its references) plus the references
    the branches' locals carry that their tables do not show: a block from
    alloc not yet appended or swapped in (+1), a tail replaced but not yet
    decref'd (+1), a tail decref'd before it was replaced (-1)."""
    system, s = lm.system, f.s
    for x in range(system.P):
        yield f"block {x}", s.rc[x] == z3.Sum([lm.share(f, j, x) for j in range(system.N)])


def share(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Each branch holds at most one reference to a block (its table maps a
    block at most once, and its locals' extra references replace or precede
    that entry): its share of the refcount equation above is 0 or 1. Stated
    apart, so that a solver need not reason through the sum to see that a
    mapped block has references."""
    system = lm.system
    for j in range(system.N):
        for x in range(system.P):
            own = lm.share(f, j, x)
            yield f"branch {j}, block {x}", z3.Or(own == 0, own == 1)


def mapped_owned(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A block that a table, an in-flight kernel's snapshot or an in-flight
    copy names has a reference or a hold: tables carry references, and a
    branch drops its last one only after unpublishing the block and
    waiting for the kernels and copies that use it."""
    system, s = lm.system, f.s
    for x in range(system.P):
        seen = [z3.And(t < length, y == x) for j in range(system.N) for _, table, length in f.tables(j) for t, y in enumerate(table)]
        for m, o in enumerate(s.q):
            seen.append(z3.And(f.live(m, COPY_KIND), z3.Or(o.src == x, o.dst == x)))
            seen += [z3.And(f.live(m, KERNEL_KIND), t < o.slen, y == x) for t, y in enumerate(o.snap)]
        yield f"block {x}", z3.Implies(any_of(seen), z3.Or(s.rc[x] >= 1, s.hd[x] >= 1))


def holds(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Holds come only from hold and release steps on a branch's locals, and
    a branch releases what it held before its operation ends: so a block's
    holds are those of the branches' operations in progress."""
    system, s = lm.system, f.s
    for x in range(system.P):
        total = [lm.local_term(f, j, name, 1, x) for j in range(system.N) for name in LOCALS]
        yield f"block {x}", s.hd[x] == z3.Sum(total)


def table_distinct(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A table never maps a block twice: append adds a block just taken from
    the free list (which no table maps), replace puts such a block in place
    of another, and published tables and snapshots are copies of these."""
    for j in range(lm.system.N):
        for name, table, length in f.tables(j):
            yield f"{name} table of branch {j}", all_of(z3.Implies(t2 < length, table[t] != table[t2])
                                                       for t2 in range(len(table)) for t in range(t2))


def same_index(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Two tables that map the same block map it at the same index: blocks
    are shared only by the fork (the prompt's, at their own index) and
    copied or appended blocks come off the free list, which no table maps;
    a replace puts the new block where the old one was."""
    system = lm.system
    tables = [(f"{name} table of branch {j}", table, length) for j in range(system.N) for name, table, length in f.tables(j)]
    for n, (na, a, la) in enumerate(tables):
        for nb, b, lb in tables[n + 1:]:
            yield f"{na} / {nb}", all_of(z3.Not(z3.And(t < la, u < lb, a[t] == b[u]))
                                         for t in range(len(a)) for u in range(len(b)) if t != u)


def one_locked(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """At most one branch holds the scheduler lock (is at a place of the
    structure that locks: inside the non-wait part of an atomic path): while
    one does, no other branch takes a step (docs/semantics.md#scheduling)."""
    system = lm.system
    if not system.structure.locking_places:
        return
    locked = [system.locked(f.s, j) for j in range(system.N)]
    yield "branches", all_of(z3.Not(z3.And(locked[i], locked[j])) for j in range(system.N) for i in range(j))


def copy_owner(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Every copy in flight was launched by a branch that has not waited for
    it yet and still has its destination bound: its `new` (or `tail`) at a
    node where a copy into that local can be in flight."""
    system, s = lm.system, f.s
    for m, o in enumerate(s.q):
        options = []
        for j in range(system.N):
            b = s.br[j]
            for n, shaped in lm.shape_families(f, j):
                for name in LOCALS:
                    if any(pending_copies(sf.shape, name, system.scenario.device.orders(OpKind.COPY, OpKind.KERNEL))[0] for sf in shaped):
                        options.append(z3.And(lm.programs.where(s, j, n), o.dst == (b.tail if name == "tail" else b.new)))
        yield f"queue slot {m}", z3.Implies(f.live(m, COPY_KIND), any_of(options))


def kernel_target(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A kernel in flight writes a block only its branch references, once
    and with no holds: the branch launched it into a block it had just
    allocated or whose rule saw refcount 1 and no holds, and nobody else can
    reach such a block until the branch waits for the kernel."""
    s = f.s
    for m in range(len(s.q)):
        t = f.target(m)
        yield f"queue slot {m}", z3.Implies(f.live(m, KERNEL_KIND), z3.And(select(s.rc, t, 0) == 1, select(s.hd, t, 0) == 0))


def content(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Every position a branch has written and whose kernel has completed
    reads, through its working and its published table, the branch's own
    token (prompt positions: the prompt's), except in a block a copy is
    still landing in: kernels only write blocks their branch owns alone,
    and copies only fill blocks nobody reads yet with tokens that were
    already right."""
    system, s = lm.system, f.s
    # stated block by block (no select over the pool): z3 proves it about twice as fast
    for j in range(system.N):
        b = s.br[j]
        for name, table, length in f.tables(j):
            parts = []
            for i in range(system.maxpos[j]):
                t, c = divmod(i, system.B)
                if t >= len(table):
                    continue
                settled = z3.And(i < b.pos, t < length, z3.Not(f.kernel_at(j, i)))
                parts += [z3.Implies(z3.And(settled, table[t] == x, z3.Not(f.copy_into(x))), s.slot[x][c] == system.expected(j, i))
                          for x in range(system.P)]
            yield f"{name} table of branch {j}", all_of(parts)
    for m, o in enumerate(s.q):
        parts = []
        for i in range(max(system.maxpos) - 1):
            t, c = divmod(i, system.B)
            if t >= len(o.snap):
                continue
            settled = z3.And(i < o.kpos, t < o.slen)
            parts += [z3.Implies(z3.And(settled, o.snap[t] == x, z3.Not(f.copy_into(x))), s.slot[x][c] == system.expected(o.br, i))
                      for x in range(system.P)]
        yield f"snapshot of queue slot {m}", z3.Implies(f.live(m, KERNEL_KIND), all_of(parts))


def capacity(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """Every block off the free list was either a prompt block or taken by
    an alloc, and a branch makes at most max_allocs allocs per append it
    completed plus those of the operation in progress (or abandoned): a
    bound on the allocated blocks that keeps an alloc enabled when the pool
    is the default size."""
    system, s = lm.system, f.s
    most = system.protocol.max_allocs
    total = []
    for j in range(system.N):
        b = s.br[j]
        extra = system.num(0)
        for n, shaped in lm.shape_families(f, j):
            for sf in reversed(shaped):
                allocs = count(sf.shape.history, "alloc")
                if allocs:
                    cond = lm.programs.where(s, j, n)
                    if len(shaped) > 1:
                        cond = z3.And(cond, sf.discriminator())
                    extra = z3.If(cond, system.num(allocs), extra)
        total.append(b.done * most + extra)
    yield "pool", system.P - s.flen <= system.scenario.prompt_blocks + z3.Sum(total)


def unborn(lm: Lemmas, f: Formulas) -> Iterator[tuple]:
    """A child is unborn until its parent's `share` sets all of its fields,
    and nothing else touches an unborn branch but a cancel of an ancestor
    (which only changes its status): until then it has no tables, pos 0,
    no operation done or begun, no write, no locals and an empty sequence,
    and no kernel of it is in flight (it never launched one)."""
    system, s = lm.system, f.s
    for j in range(system.N):
        if system.scenario.branches[j].parent is None:
            continue
        b = s.br[j]
        blank = [b.pos == 0, b.done == 0, b.pc == 0, b.tail == -1, b.new == -1, b.wlen == 0, b.plen == 0,
                 *[x == -1 for x in b.wk + b.pb]]
        if b.writes is not None:
            blank += [b.writes == 0, b.rejected == -1, *[x == -1 for x in b.seq]]
        blank += [z3.Not(z3.And(f.live(m, KERNEL_KIND), o.br == j)) for m, o in enumerate(s.q)]
        yield f"branch {j}", z3.Implies(b.has(Status.UNBORN), z3.And(blank))


LEMMAS = (node, canonical, free_distinct, free_iff_unowned, refcount, share, mapped_owned, holds, table_distinct, same_index, one_locked, shape,
          copy_owner, kernel_target, content, capacity)
#: the lemmas that hold whatever a branch's program (see Lemmas.catalogue)
PROGRAM_LEMMAS = (unborn, canonical, free_distinct, free_iff_unowned, mapped_owned, table_distinct, same_index, one_locked,
                  kernel_target)
#: cache scenarios: the lemmas that do not depend on where a request is in
#: its program (cowcheck.symbolic.shapes does not walk admissions), so most
#: invariants of cache scenarios stay "not closed"; never a wrong proof
CACHE_LEMMAS = (canonical, free_distinct, free_iff_unowned, mapped_owned, one_locked)
