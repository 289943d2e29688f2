"""A state as one fixed-width row of small integers: the frontier engine's
layout (cowcheck.engines.frontier), and what it covers.

The row holds exactly what tells two states of the explicit model
(cowcheck.model.state) apart, so that two rows are equal exactly when the
states are: per block its refcount, holds and slots; the free list, front
first; per branch its status, pos, operations done, program (an append path,
`cancel` or `finish`), step, locals and both tables; the device queue in
launch order, each op as (kind, a, b, c, snapshot length, snapshot). What a
state holds that the row does not (a branch's write counter, its sequence, a
kernel's token and expected sequence) is a function of what it does, as long
as every branch is a root that only appends. Every unused cell is -1.

Tokens are small integers: 0 is an empty slot, the prompt's `p<k>` is 1 + k,
branch j's t-th token is 1 + L + j * T + (t - 1), T the most appends of any
branch.

`refusal` says, in one line, what of a scenario the layout does not cover;
the engine refuses such a scenario as bad input, never with a silent gap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Copy, Kernel, State, Status
from cowcheck.model.stepkinds import STEPS, Launch
from cowcheck.model.structure import Op

#: the step kinds the frontier engine applies to rows (docs/reference/engines.md#frontier)
SUPPORTED_STEPS = frozenset(("alloc", "incref", "decref", "hold", "release", "copy", "copy-block", "wait-copy", "append",
                             "replace", "publish", "write", "wait-kernel", "decref-all", "check-output"))
#: the statuses a row stores, by code
STATUSES = (Status.RUNNING, Status.FINISHED, Status.CANCELLED)
RUNNING, FINISHED, CANCELLED = 0, 1, 2
#: a queue entry's kind
EMPTY, COPY, KERNEL = -1, 1, 2
#: the cells of a branch before its two tables, and of a queue entry before its snapshot
BRANCH_FIELDS = ("status", "pos", "done", "prog", "step", "tail", "new", "wlen", "plen")
ENTRY_FIELDS = ("kind", "a", "b", "c", "slen")


def dtype_for(layout: "Layout") -> type:
    """int8 where every value fits (block ids, positions, tokens, counts
    under 128), else int16: half the bytes to hash, compare and store."""
    largest = max(layout.P, layout.L + layout.N * layout.T + 1, layout.L + layout.T + 1, layout.N + 1)
    return np.int8 if largest < 100 else np.int16


def refusal(scenario: Scenario) -> Optional[str]:
    """What the frontier engine lacks to check this scenario, in one line
    (None: it covers it)."""
    protocol = scenario.protocol
    if scenario.allocator is not None:
        return "allocator code (the engine harness) is checked by the explicit engine"
    if scenario.cache:
        return "a cache scenario (cache = \"prefix\"): prefix caching is not in the row layout yet"
    if scenario.reuse == "any":
        return "reuse = \"any\" (every free block a choice) is not supported yet; lifo and fifo are"
    for spec, name in zip(scenario.branches, scenario.names):
        if spec.parent is not None or any(o.op is not Op.APPEND for o in spec.operations):
            return f"branch {name}'s program has forks or speculation: branch programs are not supported yet"
    if protocol.atomic_fork or protocol.atomic_rollback or (protocol.atomic_admit and protocol.admit):
        return f"protocol {protocol.name!r} has an atomic fork, rollback or admission: not supported yet"
    used = [s for path in protocol.paths.values() for s in path.steps] + list(protocol.cancel + protocol.finish)
    step = next((s.op for s in used if s.op not in SUPPORTED_STEPS), None)
    if step is not None:
        return f"protocol {protocol.name!r} uses the step {step!r}, which the frontier engine does not apply yet"
    return None


@dataclass(frozen=True)
class Layout:
    """Where each part of a scenario's state lies in a row, and the sizes
    that bound it: P blocks of B slots, N branches with tables of at most W
    entries, a queue of at most Q ops."""
    P: int
    B: int
    L: int
    N: int
    T: int
    W: int
    Q: int
    appends: tuple[int, ...]
    #: the programs a branch may be inside: the append paths, then cancel, then finish
    programs: tuple[tuple, ...]
    paths: tuple[str, ...]

    @staticmethod
    def of(scenario: Scenario) -> "Layout":
        protocol = scenario.protocol
        paths = tuple(protocol.paths)
        programs = tuple(protocol.paths[p].steps for p in paths) + (protocol.cancel, protocol.finish)
        appends = tuple(spec.appends for spec in scenario.branches)
        per_path = max((sum(s.op == "append" for s in p) for p in programs[:len(paths)]), default=0)
        launches = max((sum(STEPS[s.op].launches is not None for s in p) for p in programs[:len(paths)]), default=0)
        tables = sum(STEPS[s.op].launches is not None for s in protocol.cancel + protocol.finish)
        B = scenario.block_size
        return Layout(P=scenario.pool, B=B, L=scenario.prompt, N=len(appends), T=max(appends, default=0) or 1,
                      W=scenario.prompt_blocks + max(appends, default=0) * per_path,
                      Q=sum(a * launches + tables for a in appends), appends=appends, programs=programs, paths=paths)

    # -- offsets ------------------------------------------------------------
    @property
    def RC(self) -> int:
        return 0

    @property
    def HO(self) -> int:
        return self.P

    @property
    def SL(self) -> int:
        return 2 * self.P

    @property
    def FREE(self) -> int:
        return 2 * self.P + self.P * self.B

    @property
    def BW(self) -> int:
        """The cells of one branch."""
        return len(BRANCH_FIELDS) + 2 * self.W

    def br(self, i: int, field: str) -> int:
        return self.FREE + self.P + i * self.BW + BRANCH_FIELDS.index(field)

    def wt(self, i: int) -> int:
        return self.br(i, "plen") + 1

    def pt(self, i: int) -> int:
        return self.wt(i) + self.W

    @property
    def QU(self) -> int:
        return self.FREE + self.P + self.N * self.BW

    @property
    def QW(self) -> int:
        """The cells of one queue entry."""
        return len(ENTRY_FIELDS) + self.W

    def q(self, k: int, field: str) -> int:
        return self.QU + k * self.QW + (ENTRY_FIELDS.index(field) if field != "snap" else len(ENTRY_FIELDS))

    @property
    def width(self) -> int:
        return self.QU + self.Q * self.QW

    @property
    def cancel(self) -> int:
        return len(self.paths)

    @property
    def finish(self) -> int:
        return len(self.paths) + 1

    # -- tokens -------------------------------------------------------------
    def token(self, branch: int, pos: int) -> int:
        """The token at position `pos` of branch `branch`'s sequence."""
        return pos + 1 if pos < self.L else 1 + self.L + branch * self.T + (pos - self.L)

    def token_of(self, text: Optional[str], names: tuple[str, ...]) -> int:
        if text is None:
            return 0
        if text[0] == "p" and text[1:].isdigit() and "p" not in names:
            return int(text[1:]) + 1
        for j, name in enumerate(names):
            if text.startswith(name) and text[len(name):].isdigit():
                return 1 + self.L + j * self.T + int(text[len(name):]) - 1
        raise ValueError(f"token {text!r} is not in the layout")

    # -- an explicit state as a row ----------------------------------------------
    def encode(self, state: State, names: tuple[str, ...]) -> np.ndarray:
        """The row of an explicit state (traces are rebuilt by matching it)."""
        row: np.ndarray = np.full(self.width, -1, dtype=dtype_for(self))
        for b, blk in enumerate(state.blocks):
            row[self.RC + b], row[self.HO + b] = blk.refcount, blk.holds
            row[self.SL + b * self.B:self.SL + (b + 1) * self.B] = [self.token_of(t, names) for t in blk.slots]
        row[self.FREE:self.FREE + len(state.free)] = state.free
        progs: dict[tuple[Op, Optional[str]], int] = {**{(Op.APPEND, p): k for k, p in enumerate(self.paths)}, (Op.CANCEL, None): self.cancel,
                 (Op.FINISH, None): self.finish}
        for i, br in enumerate(state.branches):
            cells: tuple[int, ...] = (STATUSES.index(br.status), br.pos, br.done, -1 if br.op is None else progs[br.op, br.path], br.step,
                     -1 if br.tail is None else br.tail, -1 if br.new is None else br.new, len(br.working),
                     len(br.published))
            row[self.br(i, "status"):self.br(i, "status") + len(cells)] = cells
            row[self.wt(i):self.wt(i) + len(br.working)] = br.working
            row[self.pt(i):self.pt(i) + len(br.published)] = br.published
        for k, op in enumerate(state.queue):
            entry: tuple[int, ...]
            if type(op) is Copy:
                entry = (COPY, op.src, op.dst, op.n, 0)
                snapshot: tuple[int, ...] = ()
            else:
                assert type(op) is Kernel
                entry, snapshot = (KERNEL, op.branch, op.pos, 0, len(op.snapshot)), op.snapshot
            row[self.q(k, "kind"):self.q(k, "kind") + len(entry)] = entry
            row[self.q(k, "snap"):self.q(k, "snap") + len(snapshot)] = snapshot
        return row
