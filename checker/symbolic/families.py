"""The lemma families: what one shape (cowcheck.symbolic.shapes) says about
a branch at its node, family by family (FAMILIES says why each holds), as
z3 predicates over one symbolic state. `Formulas` holds the small formulas
over a symbolic state that the families and the lemmas share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import z3

from cowcheck.model.device import OpKind
from cowcheck.model.protocol import LOCALS
from cowcheck.model.structure import Op, Place

from cowcheck.symbolic.shapes import COUNTER_OPS, EDITS, Shape, binding, count, deltas, kernels_pending, owns, pending_copies, regular, after_last
from cowcheck.symbolic.state import COPY_KIND, EMPTY, KERNEL_KIND, Sym
from cowcheck.symbolic.terms import Term, all_of, any_of, select

if TYPE_CHECKING:
    from cowcheck.symbolic.system import SymbolicSystem


# -- formulas over one symbolic state -----------------------------------------------------
class Formulas:
    def __init__(self, system: SymbolicSystem, s: Sym):
        self.system, self.s = system, s

    def total(self, conds) -> Term:
        conds = list(conds)
        one, zero = self.system.num(1), self.system.num(0)
        return z3.Sum([z3.If(c, one, zero) for c in conds]) if conds else zero

    def live(self, m: int, kind: int) -> z3.BoolRef:
        return z3.And(m < self.s.qlen, self.s.q[m].kind == kind)

    def kernel_at(self, j, i) -> z3.BoolRef:
        """A kernel of branch j for position i is in flight."""
        return any_of(z3.And(self.live(m, KERNEL_KIND), o.br == j, o.kpos == i) for m, o in enumerate(self.s.q))

    def copy_into(self, block) -> z3.BoolRef:
        """A copy into `block` is in flight."""
        return any_of(z3.And(self.live(m, COPY_KIND), o.dst == block) for m, o in enumerate(self.s.q))

    def target(self, m: int):
        """The block queue slot m's kernel writes: snapshot[pos // B]."""
        system, o = self.system, self.s.q[m]
        out = -1
        for p in reversed(range(system.L, max(system.maxpos))):
            t = p // system.B
            out = z3.If(o.kpos == p, o.snap[t] if t < system.T else -1, out)
        return out

    def count_in(self, table: list, length: Term, block: Term) -> Term:
        return self.total(z3.And(t < length, x == block) for t, x in enumerate(table))

    def tables(self, j: int):
        b = self.s.br[j]
        return (("working", b.wk, b.wlen), ("published", b.pb, b.plen))


def inverse(edits: list, table: list, length: Term, local: Callable) -> tuple[list, Term, list]:
    """The table before `edits` (append X / replace X Y steps, in order) were
    applied, from the table after: (entries, length, what the edits left
    behind: each appended block at the end, each replacement present)."""
    left = []
    entries = list(table)
    for e in reversed(edits):
        if e.op == "append":
            x = local(e.args[0])
            left.append(z3.And(length >= 1, select(entries, length - 1, EMPTY) == x))
            entries = [z3.If(length - 1 == t, -1, v) for t, v in enumerate(entries)]
            length = length - 1
        else:
            x, y = local(e.args[0]), local(e.args[1])
            first = [z3.And(t < length, v == y, *[u != y for u in entries[:t]]) for t, v in enumerate(entries)]
            left.append(any_of(first))
            entries = [z3.If(f, x, v) for f, v in zip(first, entries)]
    return entries, length, left


class ShapeFamilies:
    """What one shape says about branch j, family by family."""

    def __init__(self, system: SymbolicSystem, f: Formulas, j: int, shape: Shape):
        self.system, self.f, self.j, self.shape = system, f, j, shape
        self.b = b = f.s.br[j]
        self.w = count(shape.history, "write")
        # the positions the operation can have begun at (pos0 = pos - writes)
        self.starts = range(self.system.L, self.system.maxpos[j] + 1 - self.w)
        self.local = (lambda name: b.tail if name == "tail" else b.new)

    def at_start(self, fn: Callable[[int], Term]) -> Term:
        """fn(pos0) for the (concrete) position the operation began at."""
        return all_of(z3.Implies(self.b.pos == p + self.w, fn(p)) for p in self.starts)

    def start_table(self):
        """The working table when the operation began (None: not known)."""
        if not regular(self.shape) or count(self.shape.history, "decref-all"):
            return None
        edits = [s for s in self.shape.history if s.op in EDITS]
        return inverse(edits, self.b.wk, self.b.wlen, self.local)

    def discriminator(self) -> z3.BoolRef:
        return self.b.pos == self.system.L + self.b.done + self.w

    # -- one method per family --------------------------------------------------------
    def position(self) -> z3.BoolRef:
        system, b, op = self.system, self.b, self.shape.op
        parts = [self.discriminator()]
        if op is Op.APPEND:
            parts.append(b.done < system.appends[self.j])
        if op is Op.FINISH:
            parts.append(b.done == system.appends[self.j])
        return all_of(parts)

    def tables(self) -> z3.BoolRef:
        system, b, h = self.system, self.b, self.shape.history
        if not regular(self.shape):
            return z3.BoolVal(True)
        parts = []
        if count(h, "decref-all"):
            if any(s.op in EDITS for s in after_last(h, ("decref-all",))):
                return z3.BoolVal(True)
            parts += [b.wlen == 0]
        else:
            w0, len0, left = self.start_table()
            parts += left
            parts.append(self.at_start(lambda p: len0 == -(-p // system.B)))
            parts += [z3.Implies(t2 < len0, w0[t] != w0[t2]) for t2 in range(len(w0)) for t in range(t2)]
        since = [s for s in after_last(h, ("publish", "decref-all")) if s.op in EDITS]
        pub, plen, left = inverse(since, b.wk, b.wlen, self.local)
        parts += left + [b.plen == plen] + [x == y for x, y in zip(b.pb, pub)]
        return all_of(parts)

    def locals(self) -> z3.BoolRef:
        system, parts = self.system, []
        for name in LOCALS:
            x = self.local(name)
            how, _ = binding(self.shape, name)
            if how is None:
                parts.append(x == -1)
            elif how == "alloc":
                parts.append(z3.And(x >= 0, x < system.P))
            elif how == "decide":
                start = self.start_table()
                if start is None:
                    continue
                w0, len0, _ = start

                def tail_at(p, x=x, w0=w0, len0=len0):
                    idx = p // system.B
                    if p % system.B == 0 or idx >= system.T:
                        return x == -1
                    return x == z3.If(len0 > idx, w0[idx], -1)
                parts.append(self.at_start(tail_at))
        return all_of(parts)

    def kernels(self) -> z3.BoolRef:
        f, b, shape, j = self.f, self.b, self.shape, self.j
        mine = [z3.And(f.live(m, KERNEL_KIND), o.br == j) for m, o in enumerate(f.s.q)]
        pending = kernels_pending(shape)
        if pending == 0:
            return z3.Not(any_of(mine))
        parts = [f.total(mine) <= pending]
        exact = shape.carry == 0 or count(shape.history, "wait-kernel")
        if pending == 1 and exact:
            same = not any(s.op in ("publish", "decref-all") for s in after_last(shape.history, ("write",)))
            for m, o in enumerate(f.s.q):
                fact = [o.kpos == b.pos - 1]
                if same:
                    fact += [o.slen == b.plen] + [x == y for x, y in zip(o.snap, b.pb)]
                parts.append(z3.Implies(mine[m], z3.And(fact)))
        return all_of(parts)

    def copies(self) -> z3.BoolRef:
        system, f, j = self.system, self.f, self.j
        if not regular(self.shape):
            return z3.BoolVal(True)
        parts = []
        fifo = system.scenario.device.orders(OpKind.COPY, OpKind.KERNEL)     # a kernel sees earlier copies done
        for name in LOCALS:
            pending, into, behind = pending_copies(self.shape, name, fifo)
            if not owns(self.shape, name):
                continue     # a block the branch let go of may be anyone's now
            y = self.local(name)
            flying = [z3.And(f.live(m, COPY_KIND), o.dst == y) for m, o in enumerate(f.s.q)]
            parts.append(z3.Not(any_of(flying)) if pending == 0 else f.total(flying) <= pending)
            if not into:
                continue
            last = into[-1]
            x = self.local(last.args[0])
            if len(into) == 1 and pending == 1:
                whole = last.op != "copy"      # copy-block copies all B slots, copy the first `fill`
                for m, o in enumerate(f.s.q):
                    n = (lambda p, o=o, whole=whole: o.n == (system.B if whole else p % system.B))
                    parts.append(z3.Implies(flying[m], z3.And(o.src == x, self.at_start(n))))
            if fifo and behind:
                # launched before the branch's kernel: on one stream it is ahead of it in the queue
                for m in range(len(f.s.q)):
                    later = any_of(z3.And(f.live(m2, KERNEL_KIND), f.s.q[m2].br == j) for m2 in range(m + 1, len(f.s.q)))
                    parts.append(z3.Implies(flying[m], later))

            def content(p, x=x, y=y):
                idx, fill = divmod(p, system.B)
                flying = f.copy_into(y)
                return all_of(z3.Implies(z3.If(flying, x == z, y == z), f.s.slot[z][c] == system.expected(j, idx * system.B + c))
                              for c in range(fill) for z in range(system.P))
            parts.append(self.at_start(content))
        return all_of(parts)

    def rule(self) -> z3.BoolRef:
        system, shape, b = self.system, self.shape, self.b
        if shape.op is not Op.APPEND or shape.path is None:
            return z3.BoolVal(True)
        allowed = [p for p in self.starts if p < system.maxpos[self.j] and shape.path in system.paths_at(p)]
        parts = [any_of(b.pos == p + self.w for p in allowed)]
        # a locking path holds the scheduler from its decide until a place that does not lock
        locked = all(system.structure.locks(Place(Op.APPEND, shape.path, k)) for k in range(len(shape.history) + 1))
        touched = any(s.op == "decref-all" or (s.op in COUNTER_OPS and s.args[0] == "tail") for s in shape.history)
        if binding(shape, "tail")[0] == "decide" and (locked or not touched):
            f = self.f
            drc, dhd, _ = deltas(shape, "tail")
            rc, hd = select(f.s.rc, b.tail, 0) - drc, select(f.s.hd, b.tail, 0) - dhd
            rules = system.protocol.rules

            def chosen(p):
                if p % system.B == 0:
                    return z3.BoolVal(True)     # no tail: the rule did not read counters
                conds = [system.condition(r.when, z3.BoolVal(False), system.num(p % system.B), rc, hd) for r in rules]
                if locked:   # nobody else acted since: the first rule to match is still the first
                    return any_of(z3.And(c, *[z3.Not(e) for e in conds[:n]])
                                  for n, (r, c) in enumerate(zip(rules, conds)) if r.path == shape.path)
                return any_of(c for r, c in zip(rules, conds) if r.path == shape.path)
            parts.append(self.at_start(chosen))
        return all_of(parts)

    def _allocated(self):
        """The locals this shape bound with alloc, with their symbolic blocks."""
        return [(name, self.local(name)) for name in LOCALS if binding(self.shape, name)[0] == "alloc"]

    def owned(self) -> z3.BoolRef:
        f, parts = self.f, []
        for name, x in self._allocated():
            rc, hd, _ = deltas(self.shape, name)
            parts.append(z3.And(select(f.s.rc, x, 0) == rc, select(f.s.hd, x, 0) == hd))
        return all_of(parts)

    def exclusive(self) -> z3.BoolRef:
        f = self.f
        return all_of(z3.Not(z3.And(t < length, y == x)) for _, x in self._allocated()
                      for m in range(self.system.N) if m != self.j
                      for _, table, length in f.tables(m) for t, y in enumerate(table))


#: the per-shape families, with why each holds
FAMILIES = {
    "position": "Every append path has exactly one write and pos counts launched writes, so pos = L + done + the "
                "operation's writes; an append runs only while done < appends, finish only once done = appends.",
    "tables": "The working table covered ceil(pos0 / B) blocks when the operation began (one block per B positions "
              "written, each appended at its boundary) and changed since only by the operation's append and replace "
              "steps; the published table is the working table before the edits made since the last publish; a "
              "decref-all empties both.",
    "locals": "Locals are cleared at the end of each operation; decide binds tail to the block at pos // B of the "
              "working table it saw (none at a boundary) and new to nothing; alloc binds a block.",
    "kernels": "A branch's kernels in flight are the ones it launched since its last wait-kernel (which waits for all "
               "of them); with one, it is for pos - 1 and snapshotted the published table, unchanged since unless "
               "republished or cleared.",
    "copies": "Copies into a local's block in flight are the ones the branch launched since binding it and did not "
              "wait for; one in flight reads the other local with the slot count of its launch. The copied slots hold "
              "the branch's tokens: in the source while the copy is in flight, in the destination once it has landed.",
    "rule": "An append path runs only from the positions where its rule can be the first to match, and until a step "
            "touches tail's counters the counters the rule tested are unchanged (no other branch can reach them).",
    "owned": "A block a local got from alloc was free (refcount 0, no holds) and is reachable by no one else until "
             "the branch shares it: its counters are 1 and 0 plus the branch's own steps on it since.",
    "exclusive": "A block a local got from alloc was in no table (free blocks are unmapped) and no other branch can "
                 "add it to its table: no other branch's table maps it.",
}

