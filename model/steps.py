"""What each protocol step does to the state (the step table, docs/semantics.md#steps).

`choices` says whether a step is enabled and with which free choice (the block
an `alloc` pops); `apply` performs it on a Draft and returns the branch as the
step leaves it. Advancing the branch's place in its program is the caller's
job (model.system), so every step here is just its row of the table."""

from __future__ import annotations

from typing import Optional

from cowcheck.model import block as blockops
from cowcheck.model.action import Bound
from cowcheck.model.block import Draft, OutputChecked, TableMiss
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Step
from cowcheck.model.scenario import BRANCH_NAMES
from cowcheck.model.state import Branch, Copy, Kernel, State, born, read


#: the named tuples' fields as a tuple, without the call through their __new__
_new = tuple.__new__
_NO_VALUES: dict[str, int] = {}
#: an enabled step without a choice
_ENABLED: tuple[Optional[int], ...] = (None,)


def local(branch: Branch, name: str, step: Step, source: str) -> int:
    value = branch.tail if name == "tail" else branch.new
    if value is None:
        raise SpecError(source, step.where, f"step {step.text!r} uses '{name}' where none is bound"
                        + (" (tail is absent at a block boundary)" if name == "tail" else " (no alloc bound it)"))
    return value


def choices(state: State, index: int, step: Step, reuse: str, source: str) -> tuple[Optional[int], ...]:
    """() when the step is not enabled; else the alternatives (None: no choice)."""
    op = step.op
    if op == "alloc":
        return blockops.free_choices(state, reuse)
    if op == "wait-kernel":
        for q in state.queue:
            if type(q) is Kernel and q.branch == index:
                return ()
    elif op == "wait-copy":
        dst = local(state.branches[index], step.args[0], step, source)
        for q in state.queue:
            if type(q) is Copy and q.dst == dst:
                return ()
    return _ENABLED


def apply(d: Draft, index: int, br: Branch, step: Step, choice: Optional[int],
          block_size: int, name: str, source: str, child: Optional[int] = None) -> tuple[Optional[Branch], tuple[tuple[str, Bound], ...]]:
    """Perform one step of branch `index` (called `name`; `child`: the
    branch a fork operation forks). Returns the branch after it (None when
    the step launched nothing and ends exploration: a kernel-table-miss)
    and the block ids its locals bound."""
    op, args = step.op, step.args
    values = _NO_VALUES if op == "alloc" or not args else {a: local(br, a, step, source) for a in args}
    binds: tuple[tuple[str, Bound], ...] = tuple(values.items()) if values else ()

    if op == "alloc":
        assert choice is not None  # `choices` gives an alloc a free block
        blockops.alloc(d, choice)
        br = _new(Branch, br[:6] + ((choice, br.new) if args[0] == "tail" else (br.tail, choice)) + br[8:])
        binds = ((args[0], choice),)
    elif op in ("incref", "decref", "hold", "release"):
        getattr(blockops, op)(d, values[args[0]])
    elif op in ("copy", "copy-block"):
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
        br = _new(Branch, (br.status, br.pos + 1) + br[2:10] + (br.writes + 1, seq, br.rejected))
        binds = (("token", token),)
    elif op == "decref-all":
        for b in br.working:
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
        br = br._replace(pos=pos, seq=br.seq[:pos])
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
    # wait-copy and wait-kernel change nothing: `choices` already gated them
    return br, binds
