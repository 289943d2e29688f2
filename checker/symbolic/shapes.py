"""Where a branch can be in its protocol program, and how it got there: the
*shapes* the strengthening lemmas (cowcheck.symbolic.lemmas) read.

`Programs` walks each branch's programs once, through the protocol's
Structure: every *node* a branch can be at (its status and program counter)
gets the *shapes* that lead there, each the list of steps the branch has
taken since its current operation began (for a cancellation, the abandoned
append's steps first, up to the place the structure lets a cancel start).
From a shape follow the facts the lemma families (cowcheck.symbolic.families)
state: how many tokens the operation wrote (so pos = L + done + writes),
which locals are bound and to what, how the working table grew and what is
published, what the branch has in flight, and the references and holds its
locals carry that its table does not show."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

import z3

from cowcheck.model.protocol import LOCALS, Step
from cowcheck.model.state import Status
from cowcheck.model.stepkinds import COPIES
from cowcheck.model.structure import Op
from cowcheck.model.system import STATUS_AFTER

from cowcheck.symbolic.bounds import places
from cowcheck.symbolic.state import STATUS_CODE, Sym

if TYPE_CHECKING:
    from cowcheck.symbolic.system import SymbolicSystem

EDITS = ("append", "replace")
COUNTER_OPS = ("incref", "decref", "hold", "release")


class Shape(NamedTuple):
    """How a branch got to a node: the steps since its operation began."""
    op: Optional[Op]        # None: between operations
    history: tuple[Step, ...]
    path: Optional[str]     # the append path whose decide began the history (tail bound there)
    carry: int              # kernels of the branch in flight when the history began
    ended: bool             # the operation has ended: locals cleared


class Node(NamedTuple):
    status: Status
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
    yet. `fifo` (the device orders a copy before a later kernel, as the
    stream device's one queue does): a wait-kernel, which sees every kernel
    of the branch completed, also sees completed every op launched before
    the last of them."""
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

    def __init__(self, system: SymbolicSystem):
        self.system = system
        self.structure = system.structure
        self.nodes: list[dict[Node, list[Shape]]] = [self._walk(j) for j in range(system.N)]

    def _carries(self, j: int) -> set[int]:
        """Kernels a branch can have in flight between operations."""
        out, now = {0}, {0}
        for _ in range(self.system.appends[j]):
            now = {kernels_pending(Shape(Op.APPEND, path.steps, path.name, c, False))
                   for path in self.system.protocol.paths.values() for c in now}
            out |= now
        return out

    def _walk(self, j: int) -> dict[Node, list[Shape]]:
        system, structure = self.system, self.structure
        nodes: dict[Node, list[Shape]] = {}

        def add(node: Node, shape: Shape) -> None:
            shapes = nodes.setdefault(node, [])
            if shape not in shapes:
                shapes.append(shape)

        def run(op: Op, prefix: tuple[Step, ...], path: Optional[str], carry: int) -> None:
            """A finish or cancel begun after `prefix`: after each step the
            branch is at the next place or, after the last, between operations."""
            program = structure.program(op)
            for place in places(structure, op):
                history = prefix + program[:place.step + 1]
                if structure.is_last(place):
                    add(Node(STATUS_AFTER[op], 0), Shape(op, history, path, carry, True))
                else:
                    add(Node(Status.RUNNING, system.pc_of[place._replace(step=place.step + 1)]),
                        Shape(op, history, path, carry, False))

        for c in sorted(self._carries(j)):
            add(Node(Status.RUNNING, 0), Shape(None, (), None, c, True))
            starts: list[tuple[tuple[Step, ...], Optional[str]]] = [((), None)]   # where a cancel may begin
            if system.appends[j]:
                for place in structure.places:
                    if place.op is Op.APPEND:
                        history = structure.program(Op.APPEND, place.path)[:place.step]
                        add(Node(Status.RUNNING, system.pc_of[place]), Shape(Op.APPEND, history, place.path, c, False))
                        if structure.cancellable(place):
                            starts.append((history, place.path))
            run(Op.FINISH, (), None, c)
            if system.scenario.branches[j].may_cancel:
                for prefix, name in starts:
                    run(Op.CANCEL, prefix, name, c)
        return nodes

    def where(self, s: Sym, j: int, node: Node) -> z3.BoolRef:
        """Branch j is at `node`."""
        b = s.br[j]
        return z3.And(b.status == STATUS_CODE[node.status], b.pc == node.pc)

    def label(self, node: Node) -> str:
        if node.pc == 0:
            return "idle" if node.status is Status.RUNNING else str(node.status)
        place = self.system.pcs[node.pc]
        assert place is not None
        return f"{place.op}{'/' + place.path if place.path else ''}[{place.step}]"
