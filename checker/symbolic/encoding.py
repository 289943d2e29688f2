"""The transition system of model.system, encoded for z3.

A symbolic state (`Sym`) has one z3 bit-vector per field of model.state.State
(signed, just wide enough for the scenario's largest value: bit-blasting these
small finite domains is far faster for z3 than integer arithmetic), sized
from the scenario: P blocks (refcount, holds, B slots), the free list as P
positions plus a length, per branch its status, pos, done, one program
counter for (op, path, step), the locals tail and new, and both tables as T
entries plus lengths; the device queue as Q slots in launch order. Absent
values are -1 (an empty slot, an unbound local, an unused table entry), and
every entry past a length is kept at its canonical empty value, so that two
encodings are equal exactly when the explicit states are (k-induction's
simple-path constraint relies on that).

The transition relation is built by *symbolically executing* each action
instance: `Encoding.execute` mirrors model.steps / model.block / model.device
line by line on a `Sym` whose fields are z3 expressions, and returns the
action's guard, its successor and its facts (the same kinds as model.block's),
so the invariants can be judged on facts exactly as cowcheck.invariants does.
`values` maps an explicit State onto the same fields, which is how the tests
compare the two engines state by state, and how a z3 model is checked
against the explicit model when a trace is decoded.

Supported: every step kind, decide with the protocol's rules (conditions
translated from their Python AST), atomic paths, cancellation, finish, the
three device models and the three reuse orders (`any`: one alloc instance
per block id, the free list kept sorted as model.block keeps it).

The sizes T (table entries) and Q (queue slots) come from
cowcheck.symbolic.bounds: tight bounds derived from the scenario, since
every unused slot costs fields in every state of an unrolling."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import z3

from cowcheck.model.block import CopyDone as COPY_COMPLETE, Freed as FREED, KernelDone as KERNEL_COMPLETE
from cowcheck.model.block import OutputChecked as CHECK_OUTPUT, TableMiss as TABLE_MISS, Underflow as UNDERFLOW
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import COPIES, WAITS, Step
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Copy, State, Status
from cowcheck.model.action import DEVICE, Transition, completion
from cowcheck.model.structure import Op
from cowcheck.model.system import STATUS_AFTER, ProtocolModel

from . import bounds

STATUS = {Status.RUNNING: 0, Status.FINISHED: 1, Status.CANCELLED: 2}
COPY_KIND, KERNEL_KIND, EMPTY = 0, 1, -1
NONE_READ = -2      # what a read past the end of a table yields: never a token


class Unsupported(SpecError):
    """The scenario uses something the symbolic engine does not encode (a
    SpecError, so the command line prints one line and exits 2)."""


# -- the symbolic state ---------------------------------------------------------
@dataclass
class SymBranch:
    status: object
    pos: object
    done: object
    pc: object          # 0 between operations, else Encoding.pcs index
    tail: object
    new: object
    wk: list            # working table, T entries
    wlen: object
    pb: list            # published table, T entries
    plen: object


@dataclass
class SymOp:
    kind: object        # COPY_KIND, KERNEL_KIND, EMPTY
    src: object
    dst: object
    n: object
    br: object
    kpos: object
    snap: list
    slen: object


@dataclass
class Sym:
    rc: list
    hd: list
    slot: list          # slot[b][s]
    free: list
    flen: object
    br: list[SymBranch]
    q: list[SymOp]
    qlen: object

    def copy(self) -> "Sym":
        return Sym(list(self.rc), list(self.hd), [list(s) for s in self.slot], list(self.free), self.flen,
                   [SymBranch(**{**b.__dict__, "wk": list(b.wk), "pb": list(b.pb)}) for b in self.br],
                   [SymOp(**{**o.__dict__, "snap": list(o.snap)}) for o in self.q], self.qlen)

    def flat(self) -> list:
        """Every field in one fixed order (the order of `Encoding.values`)."""
        out = list(self.rc) + list(self.hd) + [c for s in self.slot for c in s] + list(self.free) + [self.flen]
        for b in self.br:
            out += [b.status, b.pos, b.done, b.pc, b.tail, b.new, *b.wk, b.wlen, *b.pb, b.plen]
        for o in self.q:
            out += [o.kind, o.src, o.dst, o.n, o.br, o.kpos, *o.snap, o.slen]
        return out + [self.qlen]


# -- small helpers over z3 expressions ----------------------------------------
def _like(x, value):
    """A Python int as a constant of x's sort (z3 would make it an Int)."""
    return value if z3.is_expr(value) else z3.BitVecVal(value, x.size())


def select(items: list, index, default=-1):
    """items[index] for a symbolic index: an ite chain (default out of range)."""
    if not z3.is_expr(index):
        return items[index] if 0 <= index < len(items) else default
    items = [_like(index, v) for v in items]
    out = _like(index, default)
    for i in reversed(range(len(items))):
        out = z3.If(index == i, items[i], out)
    return out


def by_value(x, domain, fn: Callable[[int], object]):
    """fn(x) for a symbolic x known to lie in `domain`: a case split, which
    keeps pos // B and pos % B free of non-linear arithmetic."""
    domain = list(domain)
    values = [_like(x, fn(v)) for v in domain]
    out = values[-1]
    for v, value in zip(reversed(domain[:-1]), reversed(values[:-1])):
        out = z3.If(x == v, value, out)
    return out


def any_of(items) -> z3.BoolRef:
    items = list(items)
    return z3.Or(items) if items else z3.BoolVal(False)


def all_of(items) -> z3.BoolRef:
    items = list(items)
    return z3.And(items) if items else z3.BoolVal(True)


class Instance(NamedTuple):
    """One action instance of the transition relation."""
    branch: Optional[int]   # None: a device completion
    op: str                 # append | finish | cancel | device
    kind: str               # decide | step | start (starts finish/cancel) | complete
    path: Optional[str]     # decide: the path the rule chooses; step: the path being run
    k: int                  # step index (decide: the rule index; complete: the queue index)
    pc: int                 # the program counter the instance runs from (-1: any of `starts_from`)
    label: str
    choice: Optional[int] = None   # an `alloc` under `any` reuse: the free block it takes


@dataclass
class Executed:
    guard: object                         # enabled in the pre-state (a table-miss write counts)
    leads: object                         # it has a successor (False only for a table-miss write)
    post: Sym
    facts: list = field(default_factory=list)   # (kind, condition, payload...)


class Encoding:
    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.model = ProtocolModel(scenario)
        self.protocol = p = scenario.protocol
        self.B, self.L, self.P = scenario.block_size, scenario.prompt, scenario.pool
        self.N = len(scenario.branches)
        self.appends = [b.appends for b in scenario.branches]
        paths = list(p.paths.values())
        # bounds that no run can exceed (cowcheck.symbolic.bounds says why)
        self.rules_at = [bounds.possible_rules(scenario, self.L + n, self.condition) for n in range(max(self.appends, default=0))]
        rules_at = self.rules_at.__getitem__
        self.T = max(1, max(bounds.table_bound(scenario, j, rules_at) for j in range(self.N)))
        self.Q = max(1, sum(bounds.branch_queue_bound(scenario, j, rules_at) for j in range(self.N)))
        self.earliest_own = [bounds.earliest(scenario, j, rules_at) for j in range(self.N)]
        self.maxpos = [self.L + a for a in self.appends]
        # token ids: the prompt's p_i is i, then each branch's own tokens
        self.token_ids: dict[str, int] = {}
        for j in range(self.N):
            for t in self.model.tokens[j]:
                self.token_ids.setdefault(t, len(self.token_ids))
        self.offset = [self.token_ids[self.model.tokens[j][self.L]] if self.appends[j] else 0 for j in range(self.N)]
        # program counters: 0 is "between operations"
        self.pcs: list[tuple] = [(None, None, 0)]
        for path in paths:
            self.pcs += [("append", path.name, k) for k in range(len(path.steps))]
        self.pcs += [("finish", None, k) for k in range(len(p.finish))]
        self.pcs += [("cancel", None, k) for k in range(len(p.cancel))]
        self.pc_of = {key: i for i, key in enumerate(self.pcs)}
        self.instances = self._instances()
        # B * T: an entry's first position (no-use-after-free compares it with
        # a kernel's); B and the conditions' integers: compared with fill
        largest = max(self.P, self.T, self.Q, len(self.token_ids), len(self.pcs), max(self.maxpos) + 1, self.N + 1,
                      self.B * self.T, *bounds.condition_integers(self.protocol))
        self.width = (2 * largest).bit_length() + 1   # signed, room for -3 .. 2 * largest

    def num(self, value: int):
        return z3.BitVecVal(value, self.width)

    # -- explicit <-> symbolic ------------------------------------------------
    def program(self, op: str, path: Optional[str]) -> tuple[Step, ...]:
        if op == "append":
            return self.protocol.paths[path].steps
        return self.protocol.finish if op == "finish" else self.protocol.cancel

    def token(self, j, pos):
        """Branch j's token at a (possibly symbolic) position."""
        return z3.If(pos < self.L, pos, self.offset[j] + pos - self.L) if z3.is_expr(pos) else (
            pos if pos < self.L else self.offset[j] + pos - self.L)

    def fresh(self, prefix: str) -> Sym:
        def v(name):
            return z3.BitVec(f"{prefix}{name}", self.width)

        T = self.T
        return Sym(
            rc=[v(f"rc{b}") for b in range(self.P)], hd=[v(f"hd{b}") for b in range(self.P)],
            slot=[[v(f"sl{b}_{s}") for s in range(self.B)] for b in range(self.P)],
            free=[v(f"fr{i}") for i in range(self.P)], flen=v("flen"),
            br=[SymBranch(v(f"b{j}st"), v(f"b{j}pos"), v(f"b{j}done"), v(f"b{j}pc"), v(f"b{j}tail"), v(f"b{j}new"),
                          [v(f"b{j}wk{t}") for t in range(T)], v(f"b{j}wlen"),
                          [v(f"b{j}pb{t}") for t in range(T)], v(f"b{j}plen")) for j in range(self.N)],
            q=[SymOp(v(f"q{i}kind"), v(f"q{i}src"), v(f"q{i}dst"), v(f"q{i}n"), v(f"q{i}br"), v(f"q{i}kpos"),
                     [v(f"q{i}snap{t}") for t in range(T)], v(f"q{i}slen")) for i in range(self.Q)],
            qlen=v("qlen"))

    def values(self, state: State) -> list[int]:
        """An explicit state as the integers of `Sym.flat`, in the same order."""
        T, none = self.T, (lambda x: -1 if x is None else x)
        pad = (lambda table: list(table) + [-1] * (T - len(table)))
        out = [b.refcount for b in state.blocks] + [b.holds for b in state.blocks]
        out += [-1 if c is None else self.token_ids[c] for b in state.blocks for c in b.slots]
        out += list(state.free) + [-1] * (self.P - len(state.free)) + [len(state.free)]
        for br in state.branches:
            pc = 0 if br.op is None else self.pc_of[(br.op, br.path if br.op == "append" else None, br.step)]
            out += [STATUS[br.status], br.pos, br.done, pc, none(br.tail), none(br.new),
                    *pad(br.working), len(br.working), *pad(br.published), len(br.published)]
        if len(state.queue) > self.Q:
            raise AssertionError(f"queue bound {self.Q} exceeded")
        for op in state.queue:
            if type(op) is Copy:
                out += [COPY_KIND, op.src, op.dst, op.n, -1, -1, *pad(()), 0]
            else:
                out += [KERNEL_KIND, -1, -1, -1, op.branch, op.pos, *pad(op.snapshot), len(op.snapshot)]
        out += [EMPTY, -1, -1, -1, -1, -1, *pad(()), 0] * (self.Q - len(state.queue))
        return out + [len(state.queue)]

    def equals(self, sym: Sym, state: State) -> z3.BoolRef:
        return all_of(x == v for x, v in zip(sym.flat(), self.values(state)))

    def substitution(self, sym: Sym, state: State) -> list:
        return [(x, self.num(v)) for x, v in zip(sym.flat(), self.values(state))]

    def same(self, a: Sym, b: Sym) -> z3.BoolRef:
        return all_of(x == y for x, y in zip(a.flat(), b.flat()))

    def domain(self, s: Sym) -> z3.BoolRef:
        """Type invariants every reachable state satisfies by construction (T
        and Q are upper bounds, a path has exactly one write, counters never
        go below 0). k-induction assumes them of arbitrary states; the tests
        check them on random reachable states."""
        def within(x, low, high):
            return z3.And(x >= low, x <= high)

        block = (lambda x: within(x, -1, self.P - 1))
        parts = [within(s.flen, 0, self.P), within(s.qlen, 0, self.Q)]
        parts += [z3.And(s.rc[b] >= 0, s.hd[b] >= 0) for b in range(self.P)]
        parts += [block(x) for x in s.free]
        for j, b in enumerate(s.br):
            parts += [within(b.status, 0, 2), within(b.pos, self.L, self.maxpos[j]), within(b.done, 0, self.appends[j]),
                      within(b.pc, 0, len(self.pcs) - 1), block(b.tail), block(b.new),
                      within(b.wlen, 0, self.T), within(b.plen, 0, self.T)] + [block(x) for x in b.wk + b.pb]
        for o in s.q:
            parts += [within(o.kind, -1, 1), block(o.src), block(o.dst), within(o.slen, 0, self.T)] + [block(x) for x in o.snap]
        return all_of(parts)

    def init(self, sym: Sym) -> z3.BoolRef:
        return self.equals(sym, self.model.init_state())

    # -- action instances -------------------------------------------------------
    def _instances(self) -> list[Instance]:
        out: list[Instance] = []
        p = self.protocol
        for j in range(self.N):
            name = self.model.names[j]
            if self.appends[j]:
                for r, rule in enumerate(p.rules):
                    out.append(Instance(j, "append", "decide", rule.path, r, 0, f"{name}: decide {rule.path}"))
            for path in p.paths.values():
                for k, step in enumerate(path.steps):
                    out += self._choices(Instance(j, "append", "step", path.name, k, self.pc_of[("append", path.name, k)],
                                                  f"{name} ({path.name}): {step.text}"), step)
            for op in ("finish", "cancel"):
                if op == "cancel" and not self.scenario.branches[j].may_cancel:
                    continue
                program = self.program(op, None)
                for k, step in enumerate(program[1:], 1):
                    out += self._choices(Instance(j, op, "step", None, k, self.pc_of[(op, None, k)], f"{name} ({op}): {step.text}"), step)
                out += self._choices(Instance(j, op, "start", None, 0, -1, f"{name} ({op}): {program[0].text}"), program[0])
        for i in range(self.Q):
            out.append(Instance(None, "device", "complete", None, i, -1, f"device: complete queue[{i}]"))
        return out

    def _choices(self, inst: Instance, step: Step) -> list[Instance]:
        """Under `any` reuse an `alloc` may take any free block, each a
        separate successor (model.block.free_choices): one instance per block
        id, enabled when that block is free. A constant block id keeps each
        instance's effect on the state small (it sets one refcount), where a
        symbolic choice would touch them all. Every other step: itself."""
        if step.op != "alloc" or self.scenario.reuse != "any":
            return [inst]
        return [inst._replace(choice=b, label=f"{inst.label} [block {b}]") for b in range(self.P)]

    def earliest(self, inst: Instance) -> Optional[int]:
        """The fewest actions any run from the initial state takes before
        this instance can fire (None: it never can), from the branches' own
        programs (cowcheck.symbolic.bounds.earliest). A completion of queue
        slot i needs i + 1 launches before it."""
        if inst.branch is None:
            first = [e.launch for e in self.earliest_own if e.launch is not None]
            return min(first) + inst.k + 1 if first else None
        own = self.earliest_own[inst.branch]
        if inst.kind == "decide":
            return own.decide.get(inst.k)
        return own.steps.get((inst.op, inst.path, inst.k))

    def starts_from(self, j: int, op: str) -> list[int]:
        """The program counters where branch j may start `op` (DESIGN.md: finish
        when all appends are done; cancel between operations and at an append's
        wait-kernel)."""
        if op == "finish":
            return [0]
        return [0] + [i for i, (o, path, k) in enumerate(self.pcs)
                      if o == "append" and self.protocol.paths[path].steps[k].op == "wait-kernel"]

    # -- scheduling -------------------------------------------------------------
    def locked(self, s: Sym, j: int) -> z3.BoolRef:
        """Branch j is inside the non-wait part of an atomic path."""
        pcs = [i for i, (op, path, k) in enumerate(self.pcs)
               if op == "append" and self.protocol.paths[path].atomic and self.protocol.paths[path].steps[k].op not in WAITS]
        return any_of(s.br[j].pc == i for i in pcs)

    def may_act(self, s: Sym, j: int) -> z3.BoolRef:
        return z3.And(s.br[j].status == 0, all_of(z3.Not(self.locked(s, i)) for i in range(self.N) if i != j))

    def ready(self, s: Sym, i: int) -> z3.BoolRef:
        """Queue slot i may complete under the scenario's device model."""
        if i == 0 or self.scenario.device == "async":
            return s.qlen > i
        if self.scenario.device == "stream":
            return z3.BoolVal(False)
        return z3.And(s.qlen > i, all_of(s.q[m].kind != s.q[i].kind for m in range(i)))

    # -- block operations (model.block) ---------------------------------------
    def in_free(self, s: Sym, b) -> z3.BoolRef:
        return any_of(z3.And(i < s.flen, s.free[i] == b) for i in range(self.P))

    def _set_block(self, s: Sym, b, rc=None, hd=None) -> None:
        """Set block b's counters. A symbolic b is a case split over every
        block; a constant one (an alloc under `any` reuse) touches only its own."""
        if z3.is_expr(b):
            targets = [(x, b == x) for x in range(self.P)]
        else:
            targets = [(b, None)] if 0 <= b < self.P else []
        for x, here in targets:
            if rc is not None:
                s.rc[x] = rc if here is None else z3.If(here, rc, s.rc[x])
            if hd is not None:
                s.hd[x] = hd if here is None else z3.If(here, hd, s.hd[x])

    def _push_free(self, s: Sym, when, b, facts: list) -> None:
        when = z3.And(when, z3.Not(self.in_free(s, b)))
        if self.scenario.reuse == "lifo":
            pushed = [b] + s.free[:-1]
        elif self.scenario.reuse == "fifo":
            pushed = [z3.If(s.flen == i, b, s.free[i]) for i in range(self.P)]
        else:
            pushed = self._sorted_insert(s, b)
        s.free = [z3.If(when, new, old) for new, old in zip(pushed, s.free)]
        s.flen = z3.If(when, s.flen + 1, s.flen)
        facts.append((FREED, when, b))

    def _sorted_insert(self, s: Sym, b) -> list:
        """The free list with b inserted in ascending order (`any` reuse keeps
        it sorted, model.block._push_free): entries below b stay, b takes the
        first place that is not below it, the rest move up one."""
        below = [z3.And(i < s.flen, x < b) for i, x in enumerate(s.free)]
        return [z3.If(below[i], s.free[i], b if i == 0 else z3.If(below[i - 1], b, s.free[i - 1])) for i in range(self.P)]

    def _take_free(self, s: Sym, b) -> list:
        """The free list without block b (`any` reuse, sorted, b in it):
        entries below b stay, the others move down one."""
        after = s.free[1:] + [-1]
        return [z3.If(z3.And(i < s.flen, x < b), x, after[i]) for i, x in enumerate(s.free)]

    def _alloc(self, s: Sym, choice: Optional[int]) -> tuple:
        """(enabled, the block taken, the free list after): the front under
        lifo and fifo, the given free block under `any`."""
        if choice is not None:
            return self.in_free(s, choice), choice, self._take_free(s, choice)
        return z3.And(s.flen > 0, self.P > 0), s.free[0] if self.P else -1, (s.free[1:] + [-1])[:self.P]

    def _counter_down(self, s: Sym, b, which: str, facts: list, when=True) -> None:
        """decref (which='rc') or release (which='hd'), guarded by `when`."""
        mine, other = (s.rc, s.hd) if which == "rc" else (s.hd, s.rc)
        old, other_val = select(mine, b, 0), select(other, b, 0)
        facts.append((UNDERFLOW, z3.And(when, old == 0), b))
        ok = z3.And(when, old > 0)
        self._set_block(s, b, **{which: z3.If(ok, old - 1, old)})
        self._push_free(s, z3.And(ok, old == 1, other_val == 0), b, facts)

    def _push_op(self, s: Sym, kind, src=-1, dst=-1, n=-1, br=-1, kpos=-1, snap=None, slen=0) -> None:
        snap = snap or [-1] * self.T
        for i, o in enumerate(s.q):
            at = s.qlen == i
            o.kind, o.src, o.dst, o.n = (z3.If(at, kind, o.kind), z3.If(at, src, o.src),
                                         z3.If(at, dst, o.dst), z3.If(at, n, o.n))
            o.br, o.kpos, o.slen = z3.If(at, br, o.br), z3.If(at, kpos, o.kpos), z3.If(at, slen, o.slen)
            o.snap = [z3.If(at, new, old) for new, old in zip(snap, o.snap)]
        s.qlen = s.qlen + 1

    def _pop_op(self, s: Sym, i: int) -> None:
        empty = SymOp(EMPTY, -1, -1, -1, -1, -1, [-1] * self.T, 0)
        s.q = s.q[:i] + s.q[i + 1:] + [empty]
        s.qlen = s.qlen - 1

    def read(self, s: Sym, table: list, tlen, count, maxcount: int) -> list:
        """Positions 0 .. maxcount-1 read through a table (model.state.read):
        (position is below count, value)."""
        out = []
        for i in range(maxcount):
            t, slot = divmod(i, self.B)
            block = table[t] if t < len(table) else -1
            cell = select([s.slot[b][slot] for b in range(self.P)], block, NONE_READ)
            out.append((i < count, z3.If(tlen > t, cell, NONE_READ)))
        return out

    # -- conditions ---------------------------------------------------------------
    def condition(self, text: str, boundary, fill, rc, hd) -> z3.BoolRef:
        """A rule condition (model.condition's grammar) as a z3 formula."""
        width = fill.size()   # the encoding's, or another (cowcheck.symbolic.bounds asks before it exists)

        def const(value: int):
            return z3.BitVecVal(value, width)

        env = {"boundary": boundary, "fill": fill, "B": const(self.B), "true": z3.BoolVal(True), "false": z3.BoolVal(False)}

        def num(x):
            return z3.If(x, const(1), const(0)) if z3.is_bool(x) else x

        def ev(node):
            if isinstance(node, ast.BoolOp):
                parts = [ev(v) for v in node.values]
                return z3.And(parts) if isinstance(node.op, ast.And) else z3.Or(parts)
            if isinstance(node, ast.UnaryOp):
                return z3.Not(ev(node.operand))
            if isinstance(node, ast.Compare):
                ops = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
                       ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}
                terms = [ev(node.left)] + [ev(c) for c in node.comparators]
                parts = []
                for op, a, b in zip(node.ops, terms, terms[1:]):
                    if not (z3.is_bool(a) and z3.is_bool(b)):
                        a, b = num(a), num(b)
                    parts.append(ops[type(op)](a, b))
                return all_of(parts)
            if isinstance(node, ast.Name):
                return env[node.id]
            if isinstance(node, ast.Constant):
                return const(node.value)
            if isinstance(node, ast.Call):
                return rc if node.func.id == "refcount" else hd
            raise Unsupported(self.scenario.source, "append.rules", f"condition {text!r} cannot be encoded")

        result = ev(ast.parse(text.strip(), mode="eval").body)
        return result if z3.is_bool(result) else result != 0

    # -- executing one action instance ---------------------------------------
    def execute(self, s: Sym, inst: Instance) -> Executed:
        if inst.branch is None:
            return self._complete(s, inst.k)
        j = inst.branch
        b = s.br[j]
        if inst.kind == "decide":
            return self._decide(s, j, inst)
        if inst.kind == "start":
            at = any_of(b.pc == pc for pc in self.starts_from(j, inst.op))
            all_done = b.done >= self.appends[j] if inst.op == "finish" else z3.BoolVal(True)
            guard = z3.And(self.may_act(s, j), at, all_done)
        else:
            guard = z3.And(self.may_act(s, j), b.pc == inst.pc)
        return self._step(s, j, inst.op, inst.path, inst.k, guard, inst.choice)

    def _decide(self, s: Sym, j: int, inst: Instance) -> Executed:
        b = s.br[j]
        dom = range(self.L, self.maxpos[j] + 1)
        fill = by_value(b.pos, dom, lambda p: p % self.B)
        boundary = fill == 0
        index_ok = by_value(b.pos, dom, lambda p: z3.And(z3.BoolVal(p % self.B != 0), b.wlen > p // self.B))
        tail = z3.If(index_ok, by_value(b.pos, dom, lambda p: b.wk[p // self.B] if p // self.B < self.T else -1), -1)
        conds = [self.condition(r.when.text, boundary, fill, select(s.rc, tail, 0), select(s.hd, tail, 0))
                 for r in self.protocol.rules]
        chosen = z3.And(conds[inst.k], *[z3.Not(c) for c in conds[:inst.k]])
        guard = z3.And(self.may_act(s, j), b.pc == 0, b.done < self.appends[j], chosen)
        post = s.copy()
        nb = post.br[j]
        nb.pc, nb.tail, nb.new = self.pc_of[("append", inst.path, 0)], tail, -1
        return Executed(guard, z3.BoolVal(True), post)

    def _step(self, s: Sym, j: int, opname: str, path: Optional[str], k: int, guard,
              choice: Optional[int] = None) -> Executed:
        """model.steps.choices + apply + model.system._advance for one step
        (`choice`: the block an `alloc` takes under `any` reuse)."""
        program = self.program(opname, path)
        step = program[k]
        op, args = step.op, step.args
        post = s.copy()
        b = post.br[j]
        facts: list = []
        leads = z3.BoolVal(True)
        local = (lambda name: b.tail if name == "tail" else b.new)
        dom = range(self.L, self.maxpos[j] + 1)
        if op == "alloc":
            enabled, chosen, post.free = self._alloc(s, choice)
            guard, post.flen = z3.And(guard, enabled), s.flen - 1
            self._set_block(post, chosen, rc=1)
            setattr(b, args[0], chosen)
        elif op == "incref":
            v = local(args[0])
            self._set_block(post, v, rc=select(s.rc, v, 0) + 1)
        elif op == "hold":
            v = local(args[0])
            self._set_block(post, v, hd=select(s.hd, v, 0) + 1)
        elif op in ("decref", "release"):
            self._counter_down(post, local(args[0]), "rc" if op == "decref" else "hd", facts)
        elif op in COPIES:
            n = by_value(b.pos, dom, lambda p: p % self.B) if op == "copy" else self.B
            self._push_op(post, COPY_KIND, src=local(args[0]), dst=local(args[1]), n=n)
        elif op == "wait-copy":
            dst = local(args[0])
            guard = z3.And(guard, z3.Not(any_of(z3.And(i < s.qlen, o.kind == COPY_KIND, o.dst == dst) for i, o in enumerate(s.q))))
        elif op == "wait-kernel":
            guard = z3.And(guard, z3.Not(any_of(z3.And(i < s.qlen, o.kind == KERNEL_KIND, o.br == j) for i, o in enumerate(s.q))))
        elif op == "append":
            v = local(args[0])
            b.wk = [z3.If(b.wlen == t, v, x) for t, x in enumerate(b.wk)]
            b.wlen = b.wlen + 1
        elif op == "replace":
            old, new = local(args[0]), local(args[1])
            first = [z3.And(t < b.wlen, x == old, *[y != old for y in b.wk[:t]]) for t, x in enumerate(b.wk)]
            guard = z3.And(guard, any_of(first))  # the explicit model raises a SpecError otherwise
            b.wk = [z3.If(f, new, x) for f, x in zip(first, b.wk)]
        elif op == "publish":
            b.pb, b.plen = list(b.wk), b.wlen
        elif op == "write":
            covered = by_value(b.pos, dom, lambda p: b.plen > p // self.B)
            facts.append((TABLE_MISS, z3.Not(covered), j))
            leads = covered
            self._push_op(post, KERNEL_KIND, br=j, kpos=b.pos, snap=list(b.pb), slen=b.plen)
            b.pos = b.pos + 1
        elif op == "decref-all":
            for t in range(self.T):
                self._counter_down(post, s.br[j].wk[t], "rc", facts, when=t < s.br[j].wlen)
            b.wk, b.pb, b.wlen, b.plen = [-1] * self.T, [-1] * self.T, 0, 0
        elif op == "check-output":
            reads = self.read(post, b.wk, b.wlen, b.pos, self.maxpos[j])
            facts.append((CHECK_OUTPUT, z3.BoolVal(True), j, reads))
        # advance (model.system._advance)
        if k + 1 < len(program):
            b.pc = self.pc_of[(opname, path, k + 1)]
        else:
            b.status = STATUS[STATUS_AFTER[Op(opname)]]
            b.done = b.done + 1 if opname == "append" else b.done
            b.pc, b.tail, b.new = 0, -1, -1
        return Executed(guard, leads, post, facts)

    def _complete(self, s: Sym, i: int) -> Executed:
        """model.device.complete for queue slot i."""
        o = s.q[i]
        post = s.copy()
        self._pop_op(post, i)
        is_copy = o.kind == COPY_KIND
        # a copy: the destination's first n slots take the source's, read now
        src_cells = [select([s.slot[b][c] for b in range(self.P)], o.src, -1) for c in range(self.B)]
        # a kernel: its token into snapshot[pos // B], slot pos % B
        kdom = range(self.L, max(max(self.maxpos), self.L + 1))
        target = by_value(o.kpos, kdom, lambda p: o.snap[p // self.B] if p // self.B < self.T else -1)
        kslot = by_value(o.kpos, kdom, lambda p: p % self.B)
        token = select([self.token(j, o.kpos) for j in range(self.N)], o.br, -1)
        for b in range(self.P):
            for c in range(self.B):
                by_copy = z3.And(o.dst == b, o.n > c)
                by_kernel = z3.And(target == b, kslot == c)
                post.slot[b][c] = z3.If(is_copy, z3.If(by_copy, src_cells[c], s.slot[b][c]),
                                        z3.If(by_kernel, token, s.slot[b][c]))
        reads = self.read(post, o.snap, o.slen, o.kpos + 1, max(self.maxpos))
        facts = [(COPY_COMPLETE, is_copy, i), (KERNEL_COMPLETE, z3.Not(is_copy), i, target, reads)]
        return Executed(self.ready(s, i), z3.BoolVal(True), post, facts)

    def expected(self, branch, i: int):
        """Position i of a (possibly symbolic) branch's reference sequence."""
        if isinstance(branch, int):
            tokens = self.model.tokens[branch]
            return self.token_ids[tokens[i]] if i < len(tokens) else NONE_READ - 1
        return select([self.expected(j, i) for j in range(self.N)], branch, NONE_READ - 1)

    # -- the explicit model's view of an instance ------------------------------
    def matches(self, inst: Instance, state: State, tr: Transition) -> bool:
        """Is the explicit transition `tr` from `state` this instance?"""
        a = tr.action
        if inst.branch is None:
            return (a.actor == DEVICE and inst.k < len(state.queue)
                    and completion(state.queue[inst.k], self.B, self.model.names) == a)
        if a.actor != self.model.names[inst.branch] or a.op != inst.op:
            return False
        br = state.branches[inst.branch]
        if inst.kind == "decide":
            return a.step == "decide" and self._rule_index(state, inst.branch) == inst.k
        if inst.choice is not None and dict(a.binds).get(self.program(inst.op, inst.path)[inst.k].args[0]) != inst.choice:
            return False
        if inst.kind == "start":
            return br.op != inst.op and a.step == self.program(inst.op, None)[0].text
        return br.op == inst.op and br.path == inst.path and br.step == inst.k and a.step != "decide"

    def _rule_index(self, state: State, j: int) -> int:
        br = state.branches[j]
        fill = br.pos % self.B
        index = br.pos // self.B
        tail = None if fill == 0 or index >= len(br.working) else br.working[index]
        rule = self.model.choose(state, tail, fill == 0, fill)
        return self.protocol.rules.index(rule)
