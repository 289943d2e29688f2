"""Partial-order reduction: in some states one branch's enabled actions can be
explored alone (an ample set) without losing any verdict or measure.

Most actions are visible to some invariant or dependent on another actor's:
allocs and frees share the free list, counter steps share blocks,
completions change blocks others read, launches change the queue (whose
order the stream devices complete by), a decide reads counters other
branches change and leaves the quiescent states refcount-exact judges.
What remains are the steps that touch only the branch itself and blocks
nobody else can reach, and the launches where the queue is unordered:

- `wait-kernel` once enabled: only the branch's own `write` launches its
  kernels, and the branch is parked at the wait;
- `wait-copy Y`, `append X`, `publish` when every block they touch (Y; X;
  the blocks whose membership in the published table changes) is private
  to the branch: not free, not in another branch's tables or locals, not in
  any in-flight op. Nobody else can come to reach such a block while the
  branch stays put (a block is reached only through the free list, a table,
  a local or an op), so no other actor's action, now or later, reads or
  writes what these steps change, and no check of another actor
  (exclusive-write, no-use-after-free, faithful-output) can see them;
- `replace X Y` when Y is private and X is private or stays one of the
  branch's *uses* (its working table, or its published table below
  ceil(pos / B): what exclusive-write and no-use-after-free look at): the
  checks that see X see it in the branch's tables before and after;
- on the `async` device only, where the queue's order decides nothing
  (whatever is in flight may complete next, and no check reads the order),
  the launches:
  - `copy X Y` / `copy-block X Y` when Y is private, X is private or one of
    the branch's uses, and the branch has no kernel in flight. An in-flight
    copy from X is seen by exclusive-write (a kernel writing X) and
    no-use-after-free (freeing X); while the branch stays put those see X
    in its tables anyway. Its own older kernels are the exception (the check
    skips their own branch's tables), hence the last condition;
  - `write` when the published table reaches the position (no table miss,
    which would end the run there), every block of it is private or one of
    the branch's uses, and the branch has no kernel in flight. The kernel's
    snapshot is the published table, and the checks that would see the
    snapshot see the same blocks in the branch's tables.

Each of these changes only the branch's program position, locals and tables
in ways no invariant of another actor reads (a launch also adds an op to
the queue, which only its own branch waits on), disables nothing and cannot
be disabled. Two more exclusions keep that true: a branch with alternatives (one
between operations: decide, finish, cancel; a `may_cancel` branch at an
append's wait-kernel) is never reduced, and neither is any protocol with an
atomic path or an atomic [fork] or [rollback] (a branch entering one takes
the scheduler lock and so disables the others). The steps of branch
programs (`incref-all`, `share`, `rewind`, `trim`) and `verify` are never
in an ample set: they change counters, another branch's tables, or choose
among successors. A `wait-kernel` inside a fork or rollback qualifies like
an append's (no cancel can start there).

So the ample set {the branch's enabled actions} meets Peled's conditions: C0
(non-empty), C1 (every action outside it, on any path from the state that
does not take it, is independent of it), C2 (invisible); C3 (the cycle
proviso) holds trivially because the state graph is acyclic. Any path of the
full graph is matched in the reduced graph by the same sequence of other
actions with some of these steps moved earlier or inserted; the states differ
only in branches that were parked at such steps (and, on async, in the
queue's order). Consequences, checked by
tests/test_reductions.py on every shipped scenario and on random ones:

- every invariant keeps its verdict, and every measure (peak, copies, steady
  blocks) its value: a quiescent, steady, final or stuck state has no branch
  parked at an enabled step of this kind, so it is reached exactly;
- shortest lengths may grow (a moved step can be an extra action before the
  violation), so the checker re-searches violations without this reduction
  (cowcheck.explicit) to report true shortest lengths."""

from __future__ import annotations

from typing import Optional


from .protocol import Step
from .state import Branch, Copy, State, Status, published_uses
from .structure import Op
from .action import Transition
from .system import ProtocolModel

#: the step kinds that can form an ample set, given the conditions above
LOCAL_STEPS = frozenset({"wait-kernel", "wait-copy", "append", "replace", "publish"})
#: launches, local only where the queue is unordered (the async device)
LAUNCHES = frozenset({"copy", "copy-block", "write"})


class Ample:
    """Chooses the actions to explore from a state: one branch's enabled
    actions when the conditions above allow it, else everything."""

    def __init__(self, model: ProtocolModel):
        self.model = model
        self.enabled = not model.structure.any_atomic
        self.may_cancel = tuple(spec.may_cancel for spec in model.scenario.branches)
        self.local_steps = LOCAL_STEPS | LAUNCHES if model.device == "async" else LOCAL_STEPS

    def describe(self) -> list[str]:
        return ["partial-order (branch-local steps, and launches on async, explored alone)"] if self.enabled else []

    def __call__(self, state: State, transitions: list[Transition]) -> list[Transition]:
        if not self.enabled or len(transitions) < 2:
            return transitions
        for i, br in enumerate(state.branches):
            if br.status is not Status.RUNNING or br.op is None:
                continue
            step = self.model.program(br)[br.step]
            if step.op not in self.local_steps or (step.op == "wait-kernel" and br.op is Op.APPEND and self.may_cancel[i]):
                continue
            if self._local(state, i, br, step):
                name = self.model.names[i]
                mine = [tr for tr in transitions if tr.action.actor == name]
                if mine:
                    return mine
        return transitions

    def _local(self, state: State, i: int, br: Branch, step: Step) -> bool:
        """Whether branch i's next step meets its condition in the module
        docstring."""
        op = step.op
        if op == "wait-kernel":
            return True
        if op == "publish":
            return all(_private(state, i, b) for b in set(br.working) ^ set(br.published))
        if op in ("wait-copy", "append"):
            return _private(state, i, _bound(br, step.args[0]))
        B = self.model.B
        if op == "replace":     # x stays a use: through the published table, or a second entry in the working one
            x, y = (_bound(br, name) for name in step.args)
            return x in br.working and _private(state, i, y) and (
                x in published_uses(br, B) or br.working.count(x) > 1 or _private(state, i, x))
        if any(type(q) is not Copy and q.branch == i for q in state.queue):
            return False     # the exclusive-write check skips its own branch's tables, not its kernels
        uses = set(br.working).union(published_uses(br, B))
        if op == "write":
            return len(br.published) > br.pos // B and all(b in uses or _private(state, i, b) for b in br.published)
        x, y = (_bound(br, name) for name in step.args)      # copy / copy-block
        return _private(state, i, y) and (x in uses or _private(state, i, x))


def _bound(br: Branch, name: str) -> Optional[int]:
    """The block a step's argument names (None: the local is unbound)."""
    return br.tail if name == "tail" else br.new


def _private(state: State, i: int, b: int | None) -> bool:
    """Only branch i can reach block b, and nobody can come to while i stays put."""
    if b is None or b in state.free:
        return False     # None: an unbound local; the step will raise, let it do so unreduced
    for j, other in enumerate(state.branches):
        if j != i and (b == other.tail or b == other.new or b in other.working or b in other.published):
            return False
    for op in state.queue:
        if (b == op.src or b == op.dst) if type(op) is Copy else b in op.snapshot:
            return False
    return True
