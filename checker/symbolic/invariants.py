"""One z3 encoding per invariant of docs/semantics.md#invariants, each next to its explicit
predicate in cowcheck.engines.invariants, so a reader sees both together.

The encodings are judged the way cowcheck.engines.invariants.Judge judges: an action
check is keyed by a fact type of model.block and triggered by each fact of
that type the action produces. Symbolic facts are `Guarded`: the same fact
types with z3 fields, and the condition under which the fact happens; a
check returns a z3 formula that is true, when the fact happens, exactly
when the explicit predicate would return a witness (True: the fact itself
is the violation). A state check gets the state and the formulas `final`
and `stuck`.

Signatures: action checks `(system, pre, post, fact) -> BoolRef`, state
checks `(system, sym, final, stuck) -> BoolRef` (True: violated).

An invariant with no encoding here (a custom one, say) cannot be judged by
the z3 engines: `encoded` sorts an engine's invariants into those it can
judge and those it reports as unsupported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import z3

from cowcheck.engines import invariants as explicit
from cowcheck.engines.invariants import Invariant
from cowcheck.model.block import Allocated, CopyDone, Freed, KernelDone, Keyed, OutputChecked, TableMiss, Underflow
from cowcheck.model.state import Status

from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import Outcome, Verdict

from cowcheck.symbolic.state import COPY_KIND, KERNEL_KIND, STATUS_CODE, Sym
from cowcheck.symbolic.steps import Executed
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.terms import Term, all_of, any_of, select

ActionCheck = Callable[[SymbolicSystem, Sym, Sym, Any], Term]
StateCheck = Callable[[SymbolicSystem, Sym, Term, Term], Term]

#: why an invariant gets no verdict from the z3 engines
NO_ENCODING = "no z3 encoding; use --engine explicit"


@dataclass(frozen=True)
class SymbolicInvariant:
    id: str
    on_facts: dict[type, ActionCheck] = field(default_factory=dict)
    on_state: Optional[StateCheck] = None
    explicit: tuple = ()        # the explicit predicates this mirrors (cowcheck.engines.invariants)


def member(table: list, length: Term, b: Term) -> Term:
    """b is one of the first `length` entries of a table."""
    return any_of(z3.And(t < length, x == b) for t, x in enumerate(table))


def published(system: SymbolicSystem, b) -> list:
    """For each entry of a branch's published table, (counts as a use, its
    block): below its length and, with branch programs, below
    ceil(pos / B) (cowcheck.engines.invariants.tables; t < ceil(pos / B) is
    t * B < pos). Without rollbacks a published entry past ceil(pos / B)
    is always in the working table too, so plain scenarios skip the test."""
    if not system.programs:
        return [(t < b.plen, x) for t, x in enumerate(b.pb)]
    return [(z3.And(t < b.plen, t * system.B < b.pos), x) for t, x in enumerate(b.pb)]


def in_tables(system: SymbolicSystem, b, x: Term) -> Term:
    """Block x is in a branch's tables, as uses: the working table whole,
    the published one as `published` says."""
    return z3.Or(member(b.wk, b.wlen, x), any_of(z3.And(use, y == x) for use, y in published(system, b)))


def _mismatch(reads: list, expected: list) -> Term:
    return any_of(z3.And(below, value != want) for (below, value), want in zip(reads, expected))


def _running(b) -> Term:
    return b.has(Status.RUNNING)


# -- faithful-output  (explicit: faithful_kernel, faithful_check) ---------------
def faithful_kernel(system, pre, post, fact):
    k = fact.kernel.op
    return _mismatch(fact.reads, [system.kernel_expected(k, i) for i in range(len(fact.reads))])


def faithful_check(system, pre, post, fact):
    return _mismatch(fact.reads, fact.expected)


# -- no-underflow / kernel-table-miss  (explicit: underflow, table_miss) --------
def fact_happens(system, pre, post, fact):
    """The fact itself is the violation."""
    return z3.BoolVal(True)


# -- kernel-complete discipline  (explicit: exclusive_write, refcount_write, copy_before_use)
def targets(system, k) -> list:
    """(whether the kernel writes it, block) for each block a kernel may
    write (cowcheck.engines.invariants._targets): its one target, or in a
    cache scenario the block of each position of its span."""
    return [(active, block) for active, _, block in system.layout.written(k)]


def exclusive_write(system, pre, post, fact):
    i, k = fact.kernel

    def seen(target):
        seen_by_branch = any_of(
            z3.And(k.br != j, _running(b), in_tables(system, b, target))
            for j, b in enumerate(pre.br))
        seen_by_queue = any_of(
            z3.And(m < pre.qlen, z3.Or(z3.And(o.kind == COPY_KIND, o.src == target),
                                       z3.And(o.kind == KERNEL_KIND, member(o.snap, o.slen, target))))
            for m, o in enumerate(pre.q) if m != i)
        return z3.Or(seen_by_branch, seen_by_queue)
    return any_of(z3.And(active, seen(target)) for active, target in targets(system, k))


def refcount_write(system, pre, post, fact):
    return any_of(z3.And(active, z3.Not(z3.And(select(pre.rc, target, 0) == 1, select(pre.hd, target, 0) == 0)))
                  for active, target in targets(system, fact.kernel.op))


def copy_before_use(system, pre, post, fact):
    k = fact.kernel.op
    return any_of(z3.And(m < pre.qlen, o.kind == COPY_KIND, member(k.snap, k.slen, o.dst)) for m, o in enumerate(pre.q))


# -- no-use-after-free  (explicit: uaf_copy, uaf_kernel, uaf_freed, uaf_state) ----
def uaf_copy(system, pre, post, fact):
    o = fact.copy.op
    return z3.Or(system.in_free(pre, o.src), system.in_free(pre, o.dst))


def uaf_kernel(system, pre, post, fact):
    k = fact.kernel.op
    written = any_of(z3.And(active, system.in_free(pre, target)) for active, target in targets(system, k))
    # snapshot[:pos // B + 1]: entries t with t * B <= pos (and t < its length)
    read = any_of(z3.And(t < k.slen, t * system.B <= k.kpos, system.in_free(pre, x)) for t, x in enumerate(k.snap))
    return z3.Or(written, read)


def uaf_freed(system, pre, post, fact):
    b = fact.block
    in_table = any_of(in_tables(system, x, b) for x in post.br)
    in_queue = any_of(z3.And(m < post.qlen, z3.Or(z3.And(o.kind == COPY_KIND, z3.Or(o.src == b, o.dst == b)),
                                                  z3.And(o.kind == KERNEL_KIND, member(o.snap, o.slen, b))))
                      for m, o in enumerate(post.q))
    return z3.Or(in_table, in_queue)


def uaf_state(system, s, final, stuck):
    uses = [(t < b.wlen, x) for b in s.br for t, x in enumerate(b.wk)] + [u for b in s.br for u in published(system, b)]
    return any_of(z3.And(use, system.in_free(s, x)) for use, x in uses)


# -- state invariants  (explicit: refcount_exact, no_leak, no_deadlock) ---------
def refcount_exact(system, s, final, stuck):
    quiet = z3.And(s.qlen == 0, all_of(b.pc == 0 for b in s.br))
    wrong = any_of(s.rc[x] != z3.Sum([z3.If(z3.And(_running(b), member(b.wk, b.wlen, x)), system.num(1), system.num(0))
                                      for b in s.br])
                   for x in range(system.P))
    return z3.And(quiet, wrong)


def no_leak(system, s, final, stuck):
    return z3.And(final, any_of(z3.Or(z3.Not(system.in_free(s, x)), s.rc[x] != 0, s.hd[x] != 0) for x in range(system.P)))


def no_deadlock(system, s, final, stuck):
    return z3.And(z3.Not(final), stuck)


# -- prefix caching  (explicit: no_stale_key, cache_immutable_kernel, cache_immutable_copy, verified_only_cached)
def _keyed(s: Sym, b: Term) -> Term:
    return select(s.klen, b, 0) > 0


def no_stale_key(system, pre, post, fact):
    return _keyed(post, fact.block)


def cache_immutable_kernel(system, pre, post, fact):
    k, layout = fact.kernel.op, system.layout
    return any_of(z3.And(active, _keyed(pre, block), layout.sequence(k.kseq, p) != layout.key_token(pre, block, p % system.B))
                  for active, p, block in layout.written(k))


def cache_immutable_copy(system, pre, post, fact):
    o, layout = fact.copy.op, system.layout
    source = [select([pre.slot[b][c] for b in range(system.P)], o.src, -1) for c in range(system.B)]
    return z3.And(_keyed(pre, o.dst), any_of(z3.And(o.n > c, source[c] != layout.key_token(pre, o.dst, c))
                                             for c in range(system.B)))


def verified_only_cached(system, pre, post, fact):
    return pre.br[fact.branch].verified < fact.length


ENCODINGS: dict[str, SymbolicInvariant] = {inv.id: inv for inv in (
    SymbolicInvariant("faithful-output", {KernelDone: faithful_kernel, OutputChecked: faithful_check},
                      explicit=(explicit.faithful_kernel, explicit.faithful_check)),
    SymbolicInvariant("no-underflow", {Underflow: fact_happens}, explicit=(explicit.underflow,)),
    SymbolicInvariant("no-leak", on_state=no_leak, explicit=(explicit.no_leak,)),
    SymbolicInvariant("no-deadlock", on_state=no_deadlock, explicit=(explicit.no_deadlock,)),
    SymbolicInvariant("kernel-table-miss", {TableMiss: fact_happens}, explicit=(explicit.table_miss,)),
    SymbolicInvariant("exclusive-write", {KernelDone: exclusive_write}, explicit=(explicit.exclusive_write,)),
    SymbolicInvariant("refcount-write", {KernelDone: refcount_write}, explicit=(explicit.refcount_write,)),
    SymbolicInvariant("no-use-after-free", {CopyDone: uaf_copy, KernelDone: uaf_kernel, Freed: uaf_freed},
                      on_state=uaf_state, explicit=(explicit.uaf_copy, explicit.uaf_kernel, explicit.uaf_freed, explicit.uaf_state)),
    SymbolicInvariant("copy-before-use", {KernelDone: copy_before_use}, explicit=(explicit.copy_before_use,)),
    SymbolicInvariant("refcount-exact", on_state=refcount_exact, explicit=(explicit.refcount_exact,)),
    # allocator code only: the z3 engines check protocol files (cowcheck.api
    # refuses allocator code for them), whose steps never raise, so no
    # symbolic action produces the fact (AllocatorRaised) that breaks it
    SymbolicInvariant("allocator-error", explicit=(explicit.allocator_error,)),
    # cache scenarios only (cowcheck.engines.invariants.for_system says which invariants a scenario has)
    SymbolicInvariant("no-stale-key", {Allocated: no_stale_key}, explicit=(explicit.no_stale_key,)),
    SymbolicInvariant("cache-immutable", {KernelDone: cache_immutable_kernel, CopyDone: cache_immutable_copy},
                      explicit=(explicit.cache_immutable_kernel, explicit.cache_immutable_copy)),
    SymbolicInvariant("verified-only-cached", {Keyed: verified_only_cached}, explicit=(explicit.verified_only_cached,)),
)}


def unsupported(inv: Invariant) -> Verdict:
    """The verdict of an invariant the z3 engines cannot judge."""
    return Verdict(inv.id, Kind(inv.kind), Outcome.UNSUPPORTED, note=NO_ENCODING)


def encoded(invariants: tuple[Invariant, ...]) -> tuple[tuple[Invariant, ...], tuple[Invariant, ...]]:
    """(the invariants with a z3 encoding, those without)."""
    return (tuple(inv for inv in invariants if inv.id in ENCODINGS),
            tuple(inv for inv in invariants if inv.id not in ENCODINGS))


class SymbolicJudge:
    """The formulas BMC and k-induction ask z3 about, for one state `s` and
    the executions of every action instance from it (encoded invariants only)."""

    def __init__(self, system: SymbolicSystem, s: Sym, executed: list[Executed]):
        self.system, self.s, self.executed = system, s, executed
        self.enabled = any_of(x.guard for x in executed)
        # final: every branch finished or cancelled (plain scenarios have no unborn ones)
        over = (lambda b: b.status != STATUS_CODE[Status.RUNNING]) if not system.programs else \
            (lambda b: z3.Or(b.has(Status.FINISHED), b.has(Status.CANCELLED)))
        self.final = z3.And(s.qlen == 0, all_of(over(b) for b in s.br))

    def state(self, inv_id: str) -> Term:
        """The state breaks the invariant."""
        inv = ENCODINGS[inv_id]
        if inv.on_state is None:
            return z3.BoolVal(False)
        return inv.on_state(self.system, self.s, self.final, z3.Not(self.enabled))

    def action(self, inv_id: str, which: Optional[int] = None) -> Term:
        """Some enabled action from the state (or action instance `which`) breaks it."""
        inv = ENCODINGS[inv_id]
        out = []
        for n, x in enumerate(self.executed):
            if which is not None and n != which:
                continue
            hits = []
            for guarded in x.facts:
                check = inv.on_facts.get(type(guarded.fact))
                if check is not None:
                    hit = check(self.system, self.s, x.post, guarded.fact)
                    hits.append(guarded.when if z3.is_true(hit) else z3.And(guarded.when, hit))
            if hits:
                out.append(z3.And(x.guard, any_of(hits)))
        return any_of(out)
