"""`cowcheck explain`: a counterexample narrated for a person, step by step:
the action, every branch's tables, the blocks it touched, the device queue,
and at the end what the invariant expected and what happened."""

from __future__ import annotations

import io
from typing import Optional

from rich.console import Console
from rich.markup import escape

from cowcheck.model.block import Freed
from cowcheck.model.state import Block, Branch, Copy, State, Status
from cowcheck.model.system import ProtocolModel

from .invariants import Invariant
from .rerun import Replayed, judging, replay
from .trace import Counterexample


def _slots(block: Block) -> str:
    return "[" + " ".join(t if t is not None else "_" for t in block.slots) + "]"


def _block_line(i: int, before: Block | None, after: Block, free: bool) -> str:
    def delta(name: str) -> str:
        new = getattr(after, name)
        old = getattr(before, name) if before is not None else new
        return f"{name} {old}->{new}" if old != new else f"{name} {new}"
    slots = _slots(after) if before is None or before.slots == after.slots else f"{_slots(before)} -> {_slots(after)}"
    return f"block {i}: {delta('refcount')}, {delta('holds')}, slots {slots}" + (" (free)" if free else "")


def _where(model: ProtocolModel, br: Branch, appends: int) -> str:
    if br.status is not Status.RUNNING:
        return br.status
    if br.op is None:
        return f"between operations ({br.done} of {appends} appends done)"
    program = model.program(br)
    label = f"{br.path} path" if br.op == "append" else br.op
    locals_ = ", ".join(f"{k}={v}" for k, v in (("tail", br.tail), ("new", br.new)) if v is not None)
    return f"{label}, next: {program[br.step].text}" + (f" ({locals_})" if locals_ else "")


def _queue(model: ProtocolModel, state: State) -> str:
    if not state.queue:
        return "nothing"
    items = []
    for op in state.queue:
        if type(op) is Copy:
            items.append(f"copy {op.src}->{op.dst} ({op.n} slot{'s' if op.n != 1 else ''})")
        else:
            target = op.snapshot[op.pos // model.B]
            items.append(f"kernel {model.names[op.branch]}@{op.pos} writes {op.token} into block {target} via {list(op.snapshot)}")
    return "; ".join(items)


def _state_lines(model: ProtocolModel, before: State | None, state: State, touched: set[int]) -> list[str]:
    lines = []
    for i in sorted(touched):
        lines.append(_block_line(i, before.blocks[i] if before else None, state.blocks[i], i in state.free))
    for j, br in enumerate(state.branches):
        tables = f"working {list(br.working)}, published {list(br.published)}"
        lines.append(f"{model.names[j]}: pos {br.pos}, {tables}; {_where(model, br, model.scenario.branches[j].appends)}")
    lines.append(f"in flight: {_queue(model, state)}")
    return lines


def explain(cx: Counterexample, replayed: Replayed, console: Console, holds_when: Optional[str] = None) -> None:
    """Narrate a replayed trace; `holds_when` is the invariant's rule in words."""
    s = cx.scenario
    model = ProtocolModel(s)
    what = f"breaks [bold]{escape(cx.invariant)}[/] ({cx.invariant_kind})" if cx.invariant else f"reaches its peak of {cx.peak} blocks"
    console.print(f"[bold]{escape(s.name)}[/]: protocol [bold]{escape(s.protocol.name)}[/], device {s.device}, reuse {s.reuse}, "
                  f"B={s.block_size}, L={s.prompt}, pool {s.pool}, "
                  f"{len(s.branches)} branches ({', '.join(f'{model.names[i]}: {b.appends} appends' + (', may cancel' if b.may_cancel else '') for i, b in enumerate(s.branches))})")
    console.print(f"This trace {what} in {cx.length} actions.\n")
    console.print("[bold]initial state[/]")
    init = replayed.states[0]
    for line in _state_lines(model, None, init, {i for i in range(len(init.blocks)) if i not in init.free}):
        console.print("   " + escape(line))
    for n, tr in enumerate(replayed.transitions, 1):
        before = replayed.states[n - 1]
        after = tr.state
        last = n == len(replayed.transitions)
        style = "bold red" if last and cx.invariant else "bold"
        console.print(f"\n[{style}]step {n}[/] {escape(str(tr.action))}")
        if after is None:
            console.print("   no kernel launched: the published table does not cover the position")
            continue
        touched = {i for i, (a, b) in enumerate(zip(before.blocks, after.blocks)) if a != b}
        touched |= {v for k, v in tr.action.binds if k in ("tail", "new", "src", "dst", "block") and isinstance(v, int)}
        touched |= {f.block for f in tr.facts if type(f) is Freed}
        for line in _state_lines(model, before, after, touched):
            console.print("   " + escape(line))
    console.print()
    if cx.invariant and replayed.witness is not None:     # the model's witness: the file's is not trusted
        console.print(f"[bold red]{escape(cx.invariant)} breaks at step {replayed.step}.[/]")
        if holds_when:
            console.print(f"   it holds when: {escape(holds_when)}")
        console.print(f"   what happened: {escape(describe(replayed.witness))}")
    else:
        console.print(f"[bold]{escape(replayed.message)}[/]")


def describe(witness: dict) -> str:
    """What the invariant expected and what happened, in one sentence."""
    if "expected" in witness:
        where = (f"branch {witness['branch']}'s kernel for position {witness['pos']} read through snapshot {witness['snapshot']}"
                 if witness.get("via") == "kernel" else
                 f"branch {witness['branch']}'s check-output read through its working table {witness.get('table')}")
        return (f"{where}: at position {witness['position']} it expected {witness['expected']} and read {witness['read']}"
                f" (expected {' '.join(map(str, witness['expected_sequence']))}, read {' '.join(str(t) if t else '_' for t in witness['read_sequence'])})")
    return witness.get("message", str(witness))


def explain_text(cx: Counterexample, invariants: tuple[Invariant, ...] = (), width: int = 120) -> str:
    """The narration as plain text (what `cowcheck explain` prints, without
    colour), for a test's failure message or a log."""
    inv = judging(cx, invariants)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False, emoji=False)
    replayed = replay(cx, invariants)
    if not replayed.ok and replayed.step is not None and replayed.step < len(replayed.transitions):
        console.print(f"warning: {escape(replayed.message)}")
    explain(cx, replayed, console, holds_when=inv.holds_when if inv else None)
    return buffer.getvalue()
