"""Strengthening lemmas for k-induction: reachable-state invariants of the model.

k-induction starts its inductive step from an *arbitrary* state inside the
type constraints of Encoding.domain. Most such states are unreachable
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

Many lemmas depend on where a branch is in its protocol program. `Programs`
walks the programs once: every *node* a branch can be at (its status and
program counter) gets the *shapes* that lead there, each the list of steps
the branch has taken since its current operation began (for a cancellation,
the abandoned append's steps first). From a shape follow the facts the
lemmas state: how many tokens the operation wrote (so pos = L + done +
writes), which locals are bound and to what, how the working table grew and
what is published, what the branch has in flight, and the references and
holds its locals carry that its table does not show."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import z3

from cowcheck.model.protocol import COPIES, WAITS, Step

from .encoding import COPY_KIND, EMPTY, KERNEL_KIND, Encoding, Sym, all_of, any_of, select

RUNNING, FINISHED, CANCELLED = 0, 1, 2        # Encoding's status values
LOCALS = ("tail", "new")
EDITS = ("append", "replace")
COUNTER_OPS = ("incref", "decref", "hold", "release")


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


class Shape(NamedTuple):
    """How a branch got to a node: the steps since its operation began."""
    op: str                 # idle (between operations) | append | finish | cancel
    history: tuple[Step, ...]
    path: Optional[str]     # the append path whose decide began the history (tail bound there)
    carry: int              # kernels of the branch in flight when the history began
    ended: bool             # the operation has ended: locals cleared


class Node(NamedTuple):
    status: int
    pc: int


# -- reading a shape ---------------------------------------------------------------
def count(history, op: str) -> int:
    return sum(s.op == op for s in history)


def kernels_pending(shape: Shape) -> int:
    """Kernels launched and not waited for (a `wait-kernel` waits for all)."""
    n = shape.carry
    for s in shape.history:
        n = n + 1 if s.op == "write" else 0 if s.op == "wait-kernel" else n
    return n


def after_last(history, ops) -> tuple:
    """The steps after the last one whose op is in `ops` (all when none is)."""
    last = max((i for i, s in enumerate(history) if s.op in ops), default=-1)
    return tuple(history[last + 1:])


def binding(shape: Shape, name: str) -> tuple[Optional[str], int]:
    """How the local `name` is bound now: 'decide' (tail, at the decide that
    began the history: index -1), 'alloc' (at that history index), None
    (unbound: -1), or 'irregular' (bound twice, or used while unbound: the
    shape's facts about it are then not stated)."""
    if shape.ended:
        return None, -1
    how, at = ("decide", -1) if name == "tail" and shape.path is not None else (None, -1)
    for i, s in enumerate(shape.history):
        if s.op == "alloc" and s.args[0] == name:
            if how is not None:
                return "irregular", i
            how, at = "alloc", i
        elif name in s.args and how is None:
            return "irregular", i
    return how, at


def regular(shape: Shape) -> bool:
    return all(binding(shape, x)[0] != "irregular" for x in LOCALS)


def deltas(shape: Shape, name: str) -> tuple[int, int, int]:
    """(refcount, holds, table entries) the local's block gained through the
    branch's steps since the local was bound: alloc and incref/decref,
    hold/release, append/replace. A decref-all drops a reference and a table
    entry together, so it changes neither difference."""
    how, at = binding(shape, name)
    if how not in ("decide", "alloc"):
        return 0, 0, 0
    rc = 1 if how == "alloc" else 0
    hd = tab = 0
    for s in shape.history[at + 1:]:
        if s.args[:1] == (name,):
            rc += {"incref": 1, "decref": -1}.get(s.op, 0)
            hd += {"hold": 1, "release": -1}.get(s.op, 0)
            tab += {"append": 1, "replace": -1}.get(s.op, 0)
        if s.op == "replace" and s.args[1] == name:
            tab += 1
    return rc, hd, tab


def owns(shape: Shape, name: str) -> bool:
    """The branch still holds a reference or a hold on its local's block
    (tail: the table entry it was found in, unless dropped since)."""
    how, _ = binding(shape, name)
    rc, hd, _ = deltas(shape, name)
    return how in ("decide", "alloc") and ((1 if how == "decide" else 0) + rc > 0 or hd > 0)


def pending_copies(shape: Shape, name: str, fifo: bool = False) -> tuple[int, list, bool]:
    """Copies into the local's block launched since it was bound and not
    waited for; every copy step into it since it was bound; and whether
    each pending one was launched before a kernel that is not waited for
    yet. `fifo` (the stream device: one queue, completions in launch order):
    a wait-kernel, which sees every kernel of the branch completed, also
    sees completed every op launched before the last of them."""
    how, at = binding(shape, name)
    if how not in ("decide", "alloc"):
        return 0, [], False
    pending, into = [], []      # pending: for each, a write followed it
    for s in shape.history[at + 1:]:
        if s.op in COPIES and s.args[1] == name:
            pending.append(False)
            into.append(s)
        elif s.op == "wait-copy" and s.args[0] == name:
            pending = []
        elif s.op == "write":
            pending = [True for _ in pending]
        elif s.op == "wait-kernel" and fifo:
            pending = [w for w in pending if not w]
    return len(pending), into, bool(pending) and all(pending)


# -- the program walk ------------------------------------------------------------------
class Programs:
    """Every node each branch can be at, with the shapes that lead there."""

    def __init__(self, enc: Encoding):
        self.enc = enc
        self.paths = list(enc.protocol.paths.values())
        self._possible: dict[int, set[str]] = {}
        self.nodes: list[dict[Node, list[Shape]]] = [self._walk(j) for j in range(enc.N)]

    def _carries(self, j: int) -> set[int]:
        """Kernels a branch can have in flight between operations."""
        out, now = {0}, {0}
        for _ in range(self.enc.appends[j]):
            now = {kernels_pending(Shape("append", path.steps, path.name, c, False)) for path in self.paths for c in now}
            out |= now
        return out

    def _walk(self, j: int) -> dict[Node, list[Shape]]:
        enc, p = self.enc, self.enc.protocol
        nodes: dict[Node, list[Shape]] = {}

        def add(status, pc, shape):
            shapes = nodes.setdefault(Node(status, pc), [])
            if shape not in shapes:
                shapes.append(shape)

        for c in sorted(self._carries(j)):
            add(RUNNING, 0, Shape("idle", (), None, c, True))
            starts = [((), None)]
            if enc.appends[j]:
                for path in self.paths:
                    for k in range(len(path.steps)):
                        add(RUNNING, enc.pc_of[("append", path.name, k)], Shape("append", path.steps[:k], path.name, c, False))
                        if path.steps[k].op == "wait-kernel":
                            starts.append((path.steps[:k], path.name))
            for k in range(1, len(p.finish)):
                add(RUNNING, enc.pc_of[("finish", None, k)], Shape("finish", p.finish[:k], None, c, False))
            add(FINISHED, 0, Shape("finish", p.finish, None, c, True))
            if enc.scenario.branches[j].may_cancel:
                for prefix, name in starts:
                    for k in range(1, len(p.cancel)):
                        add(RUNNING, enc.pc_of[("cancel", None, k)], Shape("cancel", prefix + p.cancel[:k], name, c, False))
                    add(CANCELLED, 0, Shape("cancel", prefix + p.cancel, name, c, True))
        return nodes

    def where(self, s: Sym, j: int, node: Node) -> z3.BoolRef:
        """Branch j is at `node`."""
        b = s.br[j]
        return z3.And(b.status == node.status, b.pc == node.pc)

    def possible(self, pos: int) -> set[str]:
        """The paths a decide at `pos` can choose: the rules whose condition
        can be the first true one for some refcount and holds of the tail."""
        if pos not in self._possible:
            enc = self.enc
            rc, hd = z3.BitVec("possible.rc", 16), z3.BitVec("possible.hd", 16)
            fill = z3.BitVecVal(pos % enc.B, 16)
            earlier, out = [], set()
            for rule in enc.protocol.rules:
                cond = enc.condition(rule.when.text, z3.BoolVal(pos % enc.B == 0), fill, rc, hd)
                solver = z3.Solver()
                solver.add(rc >= 0, hd >= 0, cond, *[z3.Not(c) for c in earlier])
                if solver.check() == z3.sat:
                    out.add(rule.path)
                earlier.append(cond)
            self._possible[pos] = out
        return self._possible[pos]


# -- formulas over one symbolic state -----------------------------------------------------
class Facts:
    def __init__(self, enc: Encoding, s: Sym):
        self.enc, self.s = enc, s

    def total(self, conds) -> object:
        conds = list(conds)
        one, zero = self.enc.num(1), self.enc.num(0)
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
        enc, o = self.enc, self.s.q[m]
        out = -1
        for p in reversed(range(enc.L, max(enc.maxpos))):
            t = p // enc.B
            out = z3.If(o.kpos == p, o.snap[t] if t < enc.T else -1, out)
        return out

    def count_in(self, table: list, length, block) -> object:
        return self.total(z3.And(t < length, x == block) for t, x in enumerate(table))

    def tables(self, j: int):
        b = self.s.br[j]
        return (("working", b.wk, b.wlen), ("published", b.pb, b.plen))


def inverse(edits: list, table: list, length, local: Callable) -> tuple[list, object, list]:
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


class ShapeFacts:
    """What one shape says about branch j, family by family."""

    def __init__(self, programs: Programs, f: Facts, j: int, shape: Shape):
        self.programs, self.enc, self.f, self.j, self.shape = programs, programs.enc, f, j, shape
        self.b = b = f.s.br[j]
        self.w = count(shape.history, "write")
        # the positions the operation can have begun at (pos0 = pos - writes)
        self.starts = range(self.enc.L, self.enc.maxpos[j] + 1 - self.w)
        self.local = (lambda name: b.tail if name == "tail" else b.new)

    def at_start(self, fn: Callable[[int], object]) -> z3.BoolRef:
        """fn(pos0) for the (concrete) position the operation began at."""
        return all_of(z3.Implies(self.b.pos == p + self.w, fn(p)) for p in self.starts)

    def start_table(self):
        """The working table when the operation began (None: not known)."""
        if not regular(self.shape) or count(self.shape.history, "decref-all"):
            return None
        edits = [s for s in self.shape.history if s.op in EDITS]
        return inverse(edits, self.b.wk, self.b.wlen, self.local)

    def discriminator(self) -> z3.BoolRef:
        return self.b.pos == self.enc.L + self.b.done + self.w

    # -- one method per family --------------------------------------------------------
    def position(self) -> z3.BoolRef:
        enc, b, op = self.enc, self.b, self.shape.op
        parts = [self.discriminator()]
        if op == "append":
            parts.append(b.done < enc.appends[self.j])
        if op == "finish":
            parts.append(b.done == enc.appends[self.j])
        return all_of(parts)

    def tables(self) -> z3.BoolRef:
        enc, b, h = self.enc, self.b, self.shape.history
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
            parts.append(self.at_start(lambda p: len0 == -(-p // enc.B)))
            parts += [z3.Implies(t2 < len0, w0[t] != w0[t2]) for t2 in range(len(w0)) for t in range(t2)]
        since = [s for s in after_last(h, ("publish", "decref-all")) if s.op in EDITS]
        pub, plen, left = inverse(since, b.wk, b.wlen, self.local)
        parts += left + [b.plen == plen] + [x == y for x, y in zip(b.pb, pub)]
        return all_of(parts)

    def locals(self) -> z3.BoolRef:
        enc, parts = self.enc, []
        for name in LOCALS:
            x = self.local(name)
            how, _ = binding(self.shape, name)
            if how is None:
                parts.append(x == -1)
            elif how == "alloc":
                parts.append(z3.And(x >= 0, x < enc.P))
            elif how == "decide":
                start = self.start_table()
                if start is None:
                    continue
                w0, len0, _ = start

                def tail_at(p, x=x, w0=w0, len0=len0):
                    idx = p // enc.B
                    if p % enc.B == 0 or idx >= enc.T:
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
        enc, f, j = self.enc, self.f, self.j
        if not regular(self.shape):
            return z3.BoolVal(True)
        parts = []
        fifo = enc.scenario.device == "stream"
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
                    n = (lambda p, o=o, whole=whole: o.n == (enc.B if whole else p % enc.B))
                    parts.append(z3.Implies(flying[m], z3.And(o.src == x, self.at_start(n))))
            if fifo and behind:
                # launched before the branch's kernel: on one stream it is ahead of it in the queue
                for m in range(len(f.s.q)):
                    later = any_of(z3.And(f.live(m2, KERNEL_KIND), f.s.q[m2].br == j) for m2 in range(m + 1, len(f.s.q)))
                    parts.append(z3.Implies(flying[m], later))

            def content(p, x=x, y=y):
                idx, fill = divmod(p, enc.B)
                flying = f.copy_into(y)
                return all_of(z3.Implies(z3.If(flying, x == z, y == z), f.s.slot[z][c] == enc.expected(j, idx * enc.B + c))
                              for c in range(fill) for z in range(enc.P))
            parts.append(self.at_start(content))
        return all_of(parts)

    def rule(self) -> z3.BoolRef:
        enc, shape, b = self.enc, self.shape, self.b
        if shape.op != "append":
            return z3.BoolVal(True)
        allowed = [p for p in self.starts if p < enc.maxpos[self.j] and shape.path in self.programs.possible(p)]
        parts = [any_of(b.pos == p + self.w for p in allowed)]
        path = enc.protocol.paths[shape.path]
        # an atomic path holds the scheduler from its decide until a wait step is next
        locked = path.atomic and all(s.op not in WAITS for s in path.steps[:len(shape.history) + 1])
        touched = any(s.op == "decref-all" or (s.op in COUNTER_OPS and s.args[0] == "tail") for s in shape.history)
        if binding(shape, "tail")[0] == "decide" and (locked or not touched):
            f = self.f
            drc, dhd, _ = deltas(shape, "tail")
            rc, hd = select(f.s.rc, b.tail, 0) - drc, select(f.s.hd, b.tail, 0) - dhd
            rules = enc.protocol.rules

            def chosen(p):
                if p % enc.B == 0:
                    return z3.BoolVal(True)     # no tail: the rule did not read counters
                conds = [enc.condition(r.when.text, z3.BoolVal(False), enc.num(p % enc.B), rc, hd) for r in rules]
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
                      for m in range(self.enc.N) if m != self.j
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


# -- the lemmas --------------------------------------------------------------------------
class Lemmas:
    """The lemma parts of one scenario, as predicates over any symbolic state."""

    def __init__(self, enc: Encoding):
        self.enc = enc
        self.programs = Programs(enc)
        self._shares: dict = {}

    def parts(self, s: Sym) -> list[Part]:
        f = Facts(self.enc, s)
        out: list[Part] = []

        def part(name, label, formula, pieces=()):
            formula = z3.simplify(formula)
            if z3.is_true(formula):
                return None
            pieces = tuple(x for x in (part(name, *p) for p in pieces) if x is not None)
            return Part(name, label, formula, pieces if len(pieces) > 1 else ())

        for lemma in LEMMAS:
            name = lemma.__name__.replace("_", "-")
            for item in lemma(self, f):
                made = part(name, *item)
                if made is not None:
                    out.append(made)
        return out

    def names(self) -> list[str]:
        return [lemma.__name__.replace("_", "-") for lemma in LEMMAS]

    # helpers shared by the lemmas
    def shape_facts(self, f: Facts, j: int):
        for node, shapes in self.programs.nodes[j].items():
            yield node, [ShapeFacts(self.programs, f, j, shape) for shape in shapes]

    def local_term(self, f: Facts, j: int, name: str, which: int, block) -> object:
        """What branch j's local `name` adds to block's refcount (which=0) or
        holds (which=1) beyond its table, over every node and shape."""
        b = f.s.br[j]
        x = b.tail if name == "tail" else b.new
        value = self.enc.num(0)
        for node, facts in self.shape_facts(f, j):
            for sf in reversed(facts):
                rc, hd, tab = deltas(sf.shape, name)
                amount = rc - tab if which == 0 else hd
                if amount:
                    cond = z3.And(self.programs_where(f, j, node), sf.discriminator()) if len(facts) > 1 else \
                        self.programs_where(f, j, node)
                    value = z3.If(z3.And(cond, x == block), self.enc.num(amount), value)
        return value

    def share(self, f: Facts, j: int, x: int):
        """Branch j's share of block x's refcount: its working table's
        entries for x plus what its locals add."""
        b = f.s.br[j]
        key = (id(f), j, x)
        if key not in self._shares:
            self._shares[key] = z3.Sum([f.count_in(b.wk, b.wlen, x)] + [self.local_term(f, j, name, 0, x) for name in LOCALS])
        return self._shares[key]

    def programs_where(self, f: Facts, j: int, node: Node) -> z3.BoolRef:
        return self.programs.where(f.s, j, node)


def node(lm: Lemmas, f: Facts):
    """A branch is only ever at a node of its program walk: between
    operations, at a step of an append path (if it has appends to make), of
    finish or (if it may be cancelled) of cancel, or done; finished and
    cancelled branches are between operations (the model resets them)."""
    for j in range(lm.enc.N):
        yield f"branch {j}", any_of(lm.programs.where(f.s, j, n) for n in lm.programs.nodes[j])


def shape(lm: Lemmas, f: Facts):
    """Per node of a branch, each family of FAMILIES holds for one of the
    shapes that lead to it (see FAMILIES for why each holds). One part per
    node, whose pieces are the families. A family is not split further into
    its conjuncts: on a buggy protocol that multiplied the candidates Houdini
    tries one by one, and the only family seen to fail in part, a fresh
    block's counters together with its absence from other tables, is two
    families instead (owned, exclusive), of which exclusive fails alone."""
    for j in range(lm.enc.N):
        for n, facts in lm.shape_facts(f, j):
            where = lm.programs.where(f.s, j, n)
            at = f"branch {j} at {_node_label(lm.enc, n)}"
            families = []
            for family in FAMILIES:
                options = [getattr(sf, family)() for sf in facts]
                if all(z3.is_true(o) for o in options):
                    continue
                if len(options) > 1:
                    options = [z3.And(sf.discriminator(), o) for sf, o in zip(facts, options)]
                families.append((f"{family} of {at}", z3.Implies(where, any_of(options))))
            if families:
                yield at, z3.And([x[1] for x in families]), families


def _node_label(enc: Encoding, n: Node) -> str:
    if n.pc == 0:
        return {RUNNING: "idle", FINISHED: "finished", CANCELLED: "cancelled"}[n.status]
    op, path, k = enc.pcs[n.pc]
    return f"{op}{'/' + path if path else ''}[{k}]"


def canonical(lm: Lemmas, f: Facts):
    """Entries past a length are kept at their empty value and entries below
    it are real: the free list holds block ids then -1; tables hold block ids
    then -1; queue slots past its length are empty, a copy names two blocks
    and at most B slots, a kernel names its branch, a position that branch
    can write, and a snapshot that covers it (a write that would miss
    launches nothing). The model's lists simply have no other entries."""
    enc, s = lm.enc, f.s
    yield "free list", all_of(z3.If(i < s.flen, z3.And(x >= 0, x < enc.P), x == -1) for i, x in enumerate(s.free))
    for j in range(enc.N):
        for name, table, length in f.tables(j):
            yield f"{name} table of branch {j}", all_of(z3.If(t < length, x >= 0, x == -1) for t, x in enumerate(table))
    for m, o in enumerate(s.q):
        empty = z3.And(o.kind == EMPTY, o.src == -1, o.dst == -1, o.n == -1, o.br == -1, o.kpos == -1, o.slen == 0,
                       *[x == -1 for x in o.snap])
        copy = z3.And(o.kind == COPY_KIND, o.src >= 0, o.dst >= 0, o.n >= 0, o.n <= enc.B, o.br == -1, o.kpos == -1,
                      o.slen == 0, *[x == -1 for x in o.snap])
        owner = any_of(z3.And(o.br == j, o.kpos >= enc.L, o.kpos < enc.maxpos[j]) for j in range(enc.N))
        covered = all_of(z3.Implies(o.kpos == p, o.slen > p // enc.B) for p in range(enc.L, max(enc.maxpos)))
        kernel = z3.And(o.kind == KERNEL_KIND, o.src == -1, o.dst == -1, o.n == -1, owner, covered,
                        *[z3.If(t < o.slen, x >= 0, x == -1) for t, x in enumerate(o.snap)])
        yield f"queue slot {m}", z3.If(m < s.qlen, z3.Or(copy, kernel), empty)


def free_distinct(lm: Lemmas, f: Facts):
    """A block is pushed on the free list only when it is not on it
    (model.block._push_free) and popped by alloc, so it is there at most once."""
    s = f.s
    yield "free list", all_of(z3.Implies(i2 < s.flen, s.free[i] != s.free[i2])
                              for i2 in range(lm.enc.P) for i in range(i2))


def free_iff_unowned(lm: Lemmas, f: Facts):
    """A block is freed exactly when a decref or release leaves refcount 0
    and holds 0, alloc takes it with refcount 1, and initially the free
    blocks are the ones with no references: so it is free iff both counters
    are 0 (for protocols that never incref or hold a free block)."""
    s = f.s
    for x in range(lm.enc.P):
        yield f"block {x}", lm.enc.in_free(s, x) == z3.And(s.rc[x] == 0, s.hd[x] == 0)


def refcount(lm: Lemmas, f: Facts):
    """A block's refcount is the number of entries mapping it in every
    branch's working table (a finished or cancelled branch's decref-all
    emptied its table together with its references) plus the references
    the branches' locals carry that their tables do not show: a block from
    alloc not yet appended or swapped in (+1), a tail replaced but not yet
    decref'd (+1), a tail decref'd before it was replaced (-1)."""
    enc, s = lm.enc, f.s
    for x in range(enc.P):
        yield f"block {x}", s.rc[x] == z3.Sum([lm.share(f, j, x) for j in range(enc.N)])


def share(lm: Lemmas, f: Facts):
    """Each branch holds at most one reference to a block (its table maps a
    block at most once, and its locals' extra references replace or precede
    that entry): its share of the refcount equation above is 0 or 1. Stated
    apart, so that a solver need not reason through the sum to see that a
    mapped block has references."""
    enc = lm.enc
    for j in range(enc.N):
        for x in range(enc.P):
            own = lm.share(f, j, x)
            yield f"branch {j}, block {x}", z3.Or(own == 0, own == 1)


def mapped_owned(lm: Lemmas, f: Facts):
    """A block that a table, an in-flight kernel's snapshot or an in-flight
    copy names has a reference or a hold: tables carry references, and a
    branch drops its last one only after unpublishing the block and
    waiting for the kernels and copies that use it."""
    enc, s = lm.enc, f.s
    for x in range(enc.P):
        seen = [z3.And(t < length, y == x) for j in range(enc.N) for _, table, length in f.tables(j) for t, y in enumerate(table)]
        for m, o in enumerate(s.q):
            seen.append(z3.And(f.live(m, COPY_KIND), z3.Or(o.src == x, o.dst == x)))
            seen += [z3.And(f.live(m, KERNEL_KIND), t < o.slen, y == x) for t, y in enumerate(o.snap)]
        yield f"block {x}", z3.Implies(any_of(seen), z3.Or(s.rc[x] >= 1, s.hd[x] >= 1))


def holds(lm: Lemmas, f: Facts):
    """Holds come only from hold and release steps on a branch's locals, and
    a branch releases what it held before its operation ends: so a block's
    holds are those of the branches' operations in progress."""
    enc, s = lm.enc, f.s
    for x in range(enc.P):
        total = [lm.local_term(f, j, name, 1, x) for j in range(enc.N) for name in LOCALS]
        yield f"block {x}", s.hd[x] == z3.Sum(total)


def table_distinct(lm: Lemmas, f: Facts):
    """A table never maps a block twice: append adds a block just taken from
    the free list (which no table maps), replace puts such a block in place
    of another, and published tables and snapshots are copies of these."""
    for j in range(lm.enc.N):
        for name, table, length in f.tables(j):
            yield f"{name} table of branch {j}", all_of(z3.Implies(t2 < length, table[t] != table[t2])
                                                       for t2 in range(len(table)) for t in range(t2))


def same_index(lm: Lemmas, f: Facts):
    """Two tables that map the same block map it at the same index: blocks
    are shared only by the fork (the prompt's, at their own index) and
    copied or appended blocks come off the free list, which no table maps;
    a replace puts the new block where the old one was."""
    enc = lm.enc
    tables = [(f"{name} table of branch {j}", table, length) for j in range(enc.N) for name, table, length in f.tables(j)]
    for n, (na, a, la) in enumerate(tables):
        for nb, b, lb in tables[n + 1:]:
            yield f"{na} / {nb}", all_of(z3.Not(z3.And(t < la, u < lb, a[t] == b[u]))
                                         for t in range(len(a)) for u in range(len(b)) if t != u)


def one_locked(lm: Lemmas, f: Facts):
    """At most one branch is inside the non-wait part of an atomic path:
    while one is, no other branch takes a step (DESIGN.md's scheduling)."""
    enc = lm.enc
    if not any(p.atomic for p in enc.protocol.paths.values()):
        return
    locked = [enc.locked(f.s, j) for j in range(enc.N)]
    yield "branches", all_of(z3.Not(z3.And(locked[i], locked[j])) for j in range(enc.N) for i in range(j))


def copy_owner(lm: Lemmas, f: Facts):
    """Every copy in flight was launched by a branch that has not waited for
    it yet and still has its destination bound: its `new` (or `tail`) at a
    node where a copy into that local can be in flight."""
    enc, s = lm.enc, f.s
    for m, o in enumerate(s.q):
        options = []
        for j in range(enc.N):
            b = s.br[j]
            for n, facts in lm.shape_facts(f, j):
                for name in LOCALS:
                    if any(pending_copies(sf.shape, name, enc.scenario.device == "stream")[0] for sf in facts):
                        options.append(z3.And(lm.programs.where(s, j, n), o.dst == (b.tail if name == "tail" else b.new)))
        yield f"queue slot {m}", z3.Implies(f.live(m, COPY_KIND), any_of(options))


def kernel_target(lm: Lemmas, f: Facts):
    """A kernel in flight writes a block only its branch references, once
    and with no holds: the branch launched it into a block it had just
    allocated or whose rule saw refcount 1 and no holds, and nobody else can
    reach such a block until the branch waits for the kernel."""
    s = f.s
    for m in range(len(s.q)):
        t = f.target(m)
        yield f"queue slot {m}", z3.Implies(f.live(m, KERNEL_KIND), z3.And(select(s.rc, t, 0) == 1, select(s.hd, t, 0) == 0))


def content(lm: Lemmas, f: Facts):
    """Every position a branch has written and whose kernel has completed
    reads, through its working and its published table, the branch's own
    token (prompt positions: the prompt's), except in a block a copy is
    still landing in: kernels only write blocks their branch owns alone,
    and copies only fill blocks nobody reads yet with tokens that were
    already right."""
    enc, s = lm.enc, f.s
    # stated block by block (no select over the pool): z3 proves it about twice as fast
    for j in range(enc.N):
        b = s.br[j]
        for name, table, length in f.tables(j):
            parts = []
            for i in range(enc.maxpos[j]):
                t, c = divmod(i, enc.B)
                if t >= len(table):
                    continue
                settled = z3.And(i < b.pos, t < length, z3.Not(f.kernel_at(j, i)))
                parts += [z3.Implies(z3.And(settled, table[t] == x, z3.Not(f.copy_into(x))), s.slot[x][c] == enc.expected(j, i))
                          for x in range(enc.P)]
            yield f"{name} table of branch {j}", all_of(parts)
    for m, o in enumerate(s.q):
        parts = []
        for i in range(max(enc.maxpos) - 1):
            t, c = divmod(i, enc.B)
            if t >= len(o.snap):
                continue
            settled = z3.And(i < o.kpos, t < o.slen)
            parts += [z3.Implies(z3.And(settled, o.snap[t] == x, z3.Not(f.copy_into(x))), s.slot[x][c] == enc.expected(o.br, i))
                      for x in range(enc.P)]
        yield f"snapshot of queue slot {m}", z3.Implies(f.live(m, KERNEL_KIND), all_of(parts))


def capacity(lm: Lemmas, f: Facts):
    """Every block off the free list was either a prompt block or taken by
    an alloc, and a branch makes at most max_allocs allocs per append it
    completed plus those of the operation in progress (or abandoned): a
    bound on the allocated blocks that keeps an alloc enabled when the pool
    is the default size."""
    enc, s = lm.enc, f.s
    most = enc.protocol.max_allocs
    total = []
    for j in range(enc.N):
        b = s.br[j]
        extra = enc.num(0)
        for n, facts in lm.shape_facts(f, j):
            for sf in reversed(facts):
                allocs = count(sf.shape.history, "alloc")
                if allocs:
                    cond = lm.programs.where(s, j, n)
                    if len(facts) > 1:
                        cond = z3.And(cond, sf.discriminator())
                    extra = z3.If(cond, enc.num(allocs), extra)
        total.append(b.done * most + extra)
    yield "pool", enc.P - s.flen <= enc.scenario.prompt_blocks + z3.Sum(total)


LEMMAS = (node, canonical, free_distinct, free_iff_unowned, refcount, share, mapped_owned, holds, table_distinct, same_index, one_locked, shape,
          copy_owner, kernel_target, content, capacity)
