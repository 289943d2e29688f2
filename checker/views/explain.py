"""Traces in words, in the terminal: `cowcheck explain` (a counterexample
narrated for a person with rich, step by step: the action and what it did,
every branch's tables, the blocks it touched, the device queue, and at the
end what the invariant expected and what happened), and `explain_text`, the
same narration as plain text for a test's failure message or a log.

The sentences themselves (what an action did, where a branch is in its
program, what a witness shows) are checker/views/words.py's, shared with the
pages and the pictures; `explain` converts the model's states to the
counterexample file's JSON form they work on. A trace of allocator code
(the engine harness) shows each branch's one table and the allocator's
refcounts, and holds only where its holds() reports some."""

from __future__ import annotations

import io
from typing import Optional

from rich.console import Console
from rich.markup import escape

from cowcheck.engines.counterexample import Counterexample
from cowcheck.engines.invariants import Invariant
from cowcheck.model.block import Freed
from cowcheck.model.state import Block, Copy, Move, State, state_to_json
from cowcheck.model.system import TransitionSystem
from cowcheck.traces.replay import Replayed, judging, replay
from cowcheck.views.words import (_slots, _tokens, action_words, cache_words, describe, doing, initial_words, is_cache, is_harness,
                                  is_plain, key_text, reuse_words, program_summary, subject)


# -- a state, in lines ---------------------------------------------------------------
def _block_line(i: int, before: Block | None, after: Block, free: bool, holds: bool = True, cache: bool = False) -> str:
    """A block's counters and slots (holds only where the subject has them:
    allocator code only where its holds() reports some), and in a cache scenario its key: a free block
    with a key is still cached."""
    def delta(name: str) -> str:
        new = getattr(after, name)
        old = getattr(before, name) if before is not None else new
        return f"{name} {old}->{new}" if old != new else f"{name} {new}"
    slots = _slots(after.slots) if before is None or before.slots == after.slots else f"{_slots(before.slots)} -> {_slots(after.slots)}"
    counters = f"{delta('refcount')}, {delta('holds')}" if holds else delta("refcount")
    key = ""
    if cache:
        old = before.key if before is not None else after.key
        name = lambda k: "none" if k is None else key_text(k)
        key = f", key {name(old)} -> {name(after.key)}" if old != after.key else (f", key {name(after.key)}" if after.key else "")
    state = " (free, cached)" if free and after.key is not None else " (free)" if free else ""
    return f"block {i}: {counters}, slots {slots}{key}{state}"


def _queue(model: TransitionSystem, state: State) -> str:
    if not state.queue:
        return "nothing"
    items = []
    for op in state.queue:
        if type(op) is Copy:
            items.append(f"copy {op.src}->{op.dst} ({op.n} slot{'s' if op.n != 1 else ''})")
        elif type(op) is Move:
            host = f" h{op.host}" if op.host is not None else ""
            direction = {"store": f"block {op.block} ->{host}", "load": f"{host.strip()} -> block {op.block}",
                         "recv": f"remote -> block {op.block}", "send": f"block {op.block} -> remote"}[op.kind]
            items.append(f"{op.kind} of {model.names[op.owner]} {direction}" + (" (reported: lease expired)" if op.reported else ""))
        elif op.span > 1:        # a prefill: several positions, maybe several blocks
            first = op.pos - op.span + 1
            blocks = ", ".join(str(b) for b in dict.fromkeys(op.snapshot[p // model.B] for p in op.written))
            items.append(f"prefill {model.names[op.branch]}@{first}-{op.pos} writes {' '.join(op.expected[first:op.pos + 1])} "
                         f"into block{'s' if ',' in blocks else ''} {blocks} via {list(op.snapshot)}")
        else:
            target = op.snapshot[op.pos // model.B]
            items.append(f"kernel {model.names[op.branch]}@{op.pos} writes {op.token} into block {target} via {list(op.snapshot)}")
    return "; ".join(items)


def _state_lines(model: TransitionSystem, scenario: dict, before: State | None, state: State, touched: set[int]) -> list[str]:
    """The touched blocks, every branch (with its sequence when the scenario
    has programs: then pos alone does not tell it), the device queue. A
    branch of allocator code has one table, what `table(branch)` returns."""
    lines = []
    harness, cache = is_harness(scenario), is_cache(scenario)
    for i in sorted(touched):
        was = before.blocks[i] if before else None
        held = bool(state.blocks[i].holds or (was and was.holds))     # allocator code: the pins its holds() reports
        lines.append(_block_line(i, was, state.blocks[i], i in state.free, not harness or held, cache))
    as_json = state_to_json(state, model.scenario)
    if cache:
        lines.append(f"cache: {cache_words(as_json)}; free list {list(state.free)}")
    plain = all(is_plain(spec) for spec in scenario["branch"]) and not cache
    for (name, br), spec in zip(as_json["branches"].items(), scenario["branch"]):
        where = doing(scenario.get("protocol"), spec, br, as_json)
        if br["status"] in ("unborn", "waiting"):
            lines.append(f"{name}: {where}")
            continue
        sequence = "" if plain else f", sequence {_tokens(br['sequence']) or '(empty)'}"
        verified = f", verified {br['verified']}" if cache else ""
        tables = f"table {br['working']}" if harness else f"working {br['working']}, published {br['published']}"
        lines.append(f"{name}: pos {br['pos']}{verified}, {tables}{sequence}; {where}")
    lines.append(f"in flight: {_queue(model, state)}")
    if state.tier is not None:       # a transfer scenario: the host tier and the connector's pending reports
        host = "; ".join(f"h{h}: pins {hb.pins}, slots {_slots(list(hb.slots))}"
                         + (f", key {key_text(hb.key)}" if hb.key else "") + (" (free)" if h in state.tier.free else "")
                         for h, hb in enumerate(state.tier.host))
        lines.append(f"host: {host or 'no host tier'}; host free list {list(state.tier.free)}")
        if state.tier.reports:
            lines.append("pending reports: " + "; ".join(f"{r.move.kind} of block {r.move.block} {'ok' if r.ok else 'failed'}"
                                                        for r in state.tier.reports))
    return lines


def explain(cx: Counterexample, replayed: Replayed, console: Console, holds_when: Optional[str] = None) -> None:
    """Narrate a replayed trace; `holds_when` is the invariant's rule in words."""
    s = cx.scenario
    model = replayed.system     # the engine the replay loaded (perhaps from the folder the file records)
    assert model is not None, "a replay records its system"
    definition = s.definition()
    if cx.invariant:
        what = f"breaks [bold]{escape(cx.invariant)}[/] ({cx.invariant_kind})"
    elif cx.call is not None:
        what = f"reaches a call of the allocator that did not return within {cx.deadline:g} s, [bold]{escape(cx.call)}[/],"
    elif cx.host_peak is not None:
        what = f"reaches its host peak of {cx.host_peak} host blocks"
    else:
        what = f"reaches its peak of {cx.peak} blocks"
    branches = "; ".join(f"{name}: {program_summary(spec)}" for name, spec in zip(model.names, definition["branch"]))
    kind, name = subject(definition)
    harness = " (through the engine harness: each host call is one action)" if is_harness(definition) else ""
    if cx.allocator_code is not None:
        harness = f", {escape(str(cx.allocator_code))}{harness}"
    # a cache scenario's requests each have their own prompt
    prompt, who = ("prefix cache", "requests") if is_cache(definition) else (f"L={s.prompt}", "branches")
    console.print(f"[bold]{escape(s.name)}[/]: {kind} [bold]{escape(name)}[/]{harness}, device {s.device}, reuse {reuse_words(s.reuse, s.allocator is not None)}, "
                  f"B={s.block_size}, {prompt}, pool {s.pool}, {len(s.branches)} {who} ({escape(branches)})")
    console.print(f"This trace {what} in {cx.length} actions.\n")
    console.print("[bold]initial state[/]")
    init = replayed.states[0]
    console.print("   " + escape(initial_words(definition, state_to_json(init, s))))
    for line in _state_lines(model, definition, None, init, {i for i in range(len(init.blocks)) if i not in init.free}):
        console.print("   " + escape(line))
    for n, tr in enumerate(replayed.transitions, 1):
        before = replayed.states[n - 1]
        after = tr.state
        last = n == len(replayed.transitions)
        style = "bold red" if last and cx.invariant else "bold"
        console.print(f"\n[{style}]step {n}[/] {escape(str(tr.action))}")
        before_json = state_to_json(before, s)
        words = action_words(tr.action.to_json(), before_json, None if after is None else state_to_json(after, s), definition)
        console.print("   " + escape(words))
        if after is None:
            continue
        touched = {i for i, (a, b) in enumerate(zip(before.blocks, after.blocks)) if a != b}
        touched |= {v for k, v in tr.action.binds if k in ("tail", "new", "src", "dst", "block") and isinstance(v, int)}
        touched |= {b for k, v in tr.action.binds if k in ("copy_src", "copy_dst", "hits", "blocks", "evicted", "keyed")
                    and isinstance(v, tuple) for b in v if isinstance(b, int)}     # a host call's copies, a cache step's blocks
        touched |= {v for k, v in tr.action.binds if k == "evicted" and isinstance(v, int)}
        touched |= {f.block for f in tr.facts if type(f) is Freed}
        for line in _state_lines(model, definition, before, after, touched):
            console.print("   " + escape(line))
    console.print()
    if cx.invariant and replayed.witness is not None:     # the model's witness: the file's is not trusted
        console.print(f"[bold red]{escape(cx.invariant)} breaks at step {replayed.step}.[/]")
        if holds_when:
            console.print(f"   it holds when: {escape(holds_when)}")
        console.print(f"   what happened: {escape(describe(replayed.witness))}")
        if replayed.witness.get("traceback"):        # allocator-error: the allocator's own frames, innermost last
            console.print("   the allocator's traceback (innermost last):")
            for frame in replayed.witness["traceback"]:
                console.print(f"     {escape(frame)}")
    elif cx.call is not None:
        console.print(f"[bold red]after step {cx.length}, {escape(cx.call)} did not return within {cx.deadline:g} s.[/]")
        console.print(f"   re-driven now: {escape(replayed.message)}")
    else:
        console.print(f"[bold]{escape(replayed.message)}[/]")


#: the console width of unwrapped text: wider than any line the narration writes
UNWRAPPED = 1 << 16


def explain_text(cx: Counterexample, invariants: tuple[Invariant, ...] = (), width: Optional[int] = None) -> str:
    """The narration as plain text (what `cowcheck explain` prints, without
    colour), for a test's failure message or a log: one line per sentence,
    unwrapped (the reader's terminal or editor wraps), or wrapped at
    `width` columns."""
    inv = judging(cx, invariants)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width or UNWRAPPED, soft_wrap=width is None, color_system=None,
                      highlight=False, emoji=False)
    replayed = replay(cx, invariants)
    if not replayed.ok and replayed.step is not None and replayed.step < len(replayed.transitions):
        console.print(f"warning: {escape(replayed.message)}")
    explain(cx, replayed, console, holds_when=inv.holds_when if inv else None)
    return buffer.getvalue()
