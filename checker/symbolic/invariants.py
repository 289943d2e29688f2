"""One z3 encoding per invariant of DESIGN.md, each next to its explicit
predicate in cowcheck.invariants, so a reader sees both together.

The encodings are judged the way cowcheck.invariants.Judge judges: an action
check is triggered by a fact of the action (the symbolic facts of
cowcheck.symbolic.encoding carry a condition: the fact happens only when it
holds), and returns a z3 formula that is true exactly when the explicit
predicate would return a witness. A state check gets the state and the
formulas `final` and `stuck`.

Signatures: action checks `(enc, pre, post, fact) -> BoolRef`, state checks
`(enc, sym, final, stuck) -> BoolRef` (True: violated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import z3

from cowcheck import invariants as explicit
from cowcheck.model.block import CopyDone as COPY_COMPLETE, Freed as FREED, KernelDone as KERNEL_COMPLETE
from cowcheck.model.block import OutputChecked as CHECK_OUTPUT, TableMiss as TABLE_MISS, Underflow as UNDERFLOW

from .encoding import COPY_KIND, KERNEL_KIND, Encoding, Sym, all_of, any_of, select


@dataclass(frozen=True)
class SymbolicInvariant:
    id: str
    on_facts: dict[str, Callable] = field(default_factory=dict)
    on_state: Optional[Callable] = None
    explicit: tuple = ()        # the explicit predicates this mirrors (cowcheck.invariants)


def member(table: list, length, b) -> z3.BoolRef:
    """b is one of the first `length` entries of a table."""
    return any_of(z3.And(t < length, x == b) for t, x in enumerate(table))


def _mismatch(enc: Encoding, branch, reads: list) -> z3.BoolRef:
    return any_of(z3.And(below, value != enc.expected(branch, i)) for i, (below, value) in enumerate(reads))


# -- faithful-output  (explicit: faithful_kernel, faithful_check) ---------------
def faithful_kernel(enc, pre, post, fact):
    _, cond, i, _, reads = fact
    return z3.And(cond, _mismatch(enc, pre.q[i].br, reads))


def faithful_check(enc, pre, post, fact):
    _, cond, j, reads = fact
    return z3.And(cond, _mismatch(enc, j, reads))


# -- no-underflow / kernel-table-miss  (explicit: underflow, table_miss) --------
def fact_happens(enc, pre, post, fact):
    """The fact itself is the violation."""
    return fact[1]


# -- kernel-complete discipline  (explicit: exclusive_write, refcount_write, copy_before_use)
def exclusive_write(enc, pre, post, fact):
    _, cond, i, target, _ = fact
    k = pre.q[i]
    seen_by_branch = any_of(
        z3.And(k.br != j, b.status == 0, z3.Or(member(b.wk, b.wlen, target), member(b.pb, b.plen, target)))
        for j, b in enumerate(pre.br))
    seen_by_queue = any_of(
        z3.And(m < pre.qlen, z3.Or(z3.And(o.kind == COPY_KIND, o.src == target),
                                   z3.And(o.kind == KERNEL_KIND, member(o.snap, o.slen, target))))
        for m, o in enumerate(pre.q) if m != i)
    return z3.And(cond, z3.Or(seen_by_branch, seen_by_queue))


def refcount_write(enc, pre, post, fact):
    _, cond, _, target, _ = fact
    return z3.And(cond, z3.Not(z3.And(select(pre.rc, target, 0) == 1, select(pre.hd, target, 0) == 0)))


def copy_before_use(enc, pre, post, fact):
    _, cond, i, _, _ = fact
    k = pre.q[i]
    return z3.And(cond, any_of(z3.And(m < pre.qlen, o.kind == COPY_KIND, member(k.snap, k.slen, o.dst))
                               for m, o in enumerate(pre.q)))


# -- no-use-after-free  (explicit: uaf_copy, uaf_kernel, uaf_freed, uaf_state) ----
def uaf_copy(enc, pre, post, fact):
    o = pre.q[fact[2]]
    return z3.And(fact[1], z3.Or(enc.in_free(pre, o.src), enc.in_free(pre, o.dst)))


def uaf_kernel(enc, pre, post, fact):
    _, cond, i, target, _ = fact
    k = pre.q[i]
    # snapshot[:pos // B + 1]: entries t with t * B <= pos (and t < its length)
    read = any_of(z3.And(t < k.slen, t * enc.B <= k.kpos, enc.in_free(pre, x)) for t, x in enumerate(k.snap))
    return z3.And(cond, z3.Or(enc.in_free(pre, target), read))


def uaf_freed(enc, pre, post, fact):
    _, cond, b = fact
    in_table = any_of(z3.Or(member(x.wk, x.wlen, b), member(x.pb, x.plen, b)) for x in post.br)
    in_queue = any_of(z3.And(m < post.qlen, z3.Or(z3.And(o.kind == COPY_KIND, z3.Or(o.src == b, o.dst == b)),
                                                  z3.And(o.kind == KERNEL_KIND, member(o.snap, o.slen, b))))
                      for m, o in enumerate(post.q))
    return z3.And(cond, z3.Or(in_table, in_queue))


def uaf_state(enc, s, final, stuck):
    return any_of(z3.And(t < length, enc.in_free(s, x))
                  for b in s.br for table, length in ((b.wk, b.wlen), (b.pb, b.plen)) for t, x in enumerate(table))


# -- state invariants  (explicit: refcount_exact, no_leak, no_deadlock) ---------
def refcount_exact(enc, s, final, stuck):
    quiet = z3.And(s.qlen == 0, all_of(b.pc == 0 for b in s.br))
    wrong = any_of(s.rc[x] != z3.Sum([z3.If(z3.And(b.status == 0, member(b.wk, b.wlen, x)), enc.num(1), enc.num(0)) for b in s.br])
                   for x in range(enc.P))
    return z3.And(quiet, wrong)


def no_leak(enc, s, final, stuck):
    return z3.And(final, any_of(z3.Or(z3.Not(enc.in_free(s, x)), s.rc[x] != 0, s.hd[x] != 0) for x in range(enc.P)))


def no_deadlock(enc, s, final, stuck):
    return z3.And(z3.Not(final), stuck)


ENCODINGS: dict[str, SymbolicInvariant] = {inv.id: inv for inv in (
    SymbolicInvariant("faithful-output", {KERNEL_COMPLETE: faithful_kernel, CHECK_OUTPUT: faithful_check},
                      explicit=(explicit.faithful_kernel, explicit.faithful_check)),
    SymbolicInvariant("no-underflow", {UNDERFLOW: fact_happens}, explicit=(explicit.underflow,)),
    SymbolicInvariant("no-leak", on_state=no_leak, explicit=(explicit.no_leak,)),
    SymbolicInvariant("no-deadlock", on_state=no_deadlock, explicit=(explicit.no_deadlock,)),
    SymbolicInvariant("kernel-table-miss", {TABLE_MISS: fact_happens}, explicit=(explicit.table_miss,)),
    SymbolicInvariant("exclusive-write", {KERNEL_COMPLETE: exclusive_write}, explicit=(explicit.exclusive_write,)),
    SymbolicInvariant("refcount-write", {KERNEL_COMPLETE: refcount_write}, explicit=(explicit.refcount_write,)),
    SymbolicInvariant("no-use-after-free", {COPY_COMPLETE: uaf_copy, KERNEL_COMPLETE: uaf_kernel, FREED: uaf_freed},
                      on_state=uaf_state, explicit=(explicit.uaf_copy, explicit.uaf_kernel, explicit.uaf_freed, explicit.uaf_state)),
    SymbolicInvariant("copy-before-use", {KERNEL_COMPLETE: copy_before_use}, explicit=(explicit.copy_before_use,)),
    SymbolicInvariant("refcount-exact", on_state=refcount_exact, explicit=(explicit.refcount_exact,)),
)}

#: invariant ids with no z3 encoding yet, and why (none: every invariant is encoded)
NOT_ENCODED: dict[str, str] = {}


class SymbolicJudge:
    """The formulas BMC and k-induction ask z3 about, for one state `s` and
    the executions of every action instance from it."""

    def __init__(self, enc: Encoding, s: Sym, executed: list):
        self.enc, self.s, self.executed = enc, s, executed
        self.enabled = any_of(x.guard for x in executed)
        self.final = z3.And(s.qlen == 0, all_of(b.status != 0 for b in s.br))

    def state(self, inv_id: str) -> z3.BoolRef:
        """The state breaks the invariant."""
        inv = ENCODINGS[inv_id]
        if inv.on_state is None:
            return z3.BoolVal(False)
        return inv.on_state(self.enc, self.s, self.final, z3.Not(self.enabled))

    def action(self, inv_id: str, which: Optional[int] = None) -> z3.BoolRef:
        """Some enabled action from the state (or action instance `which`) breaks it."""
        inv = ENCODINGS[inv_id]
        out = []
        for n, x in enumerate(self.executed):
            if which is not None and n != which:
                continue
            hits = [check(self.enc, self.s, x.post, fact) for fact in x.facts for kind, check in inv.on_facts.items()
                    if fact[0] == kind]
            if hits:
                out.append(z3.And(x.guard, any_of(hits)))
        return any_of(out)
