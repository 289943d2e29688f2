"""The layout of a scenario's symbolic state, as the step handlers see it:
`Layout`.

`SymbolicSystem` (cowcheck.symbolic.system) builds one `Layout` when it is
made and hands it to cowcheck.symbolic.steps, whose handlers need the sizes
of the state, where each branch can be, the program counters of the
protocol's Structure and a few lookups on symbolic fields (a block's place
in the free list, the block a kernel writes, the token a position holds),
but nothing else of the system: not its action instances, not the explicit
model it mirrors. Keeping that in a small frozen object of its own is what
lets steps.py not import system.py (system.py imports steps.py's handlers),
so the two modules form no import cycle."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Mapping

import z3

from cowcheck.model.device import Device, OpKind
from cowcheck.model.structure import Place, Structure

from cowcheck.symbolic.state import COPY_KIND, NONE_READ, Sym, SymOp
from cowcheck.symbolic.terms import Term, all_of, any_of, by_value, select


@dataclass(frozen=True)
class Layout:
    """What the step handlers (cowcheck.symbolic.steps) need of a
    SymbolicSystem, fixed once the system is built.

    It exists so that steps.py depends on this and not on system.py, which
    imports the handlers: the system builds its layout once and passes it
    to `steps.take` and `steps.complete` in place of itself. The fields
    keep the system's names and meanings (SymbolicSystem says what each
    is); the methods are the system's lookups that the handlers use, and
    the system's own methods of the same names answer through them."""
    B: int                                  # block size
    L: int                                  # prompt length
    P: int                                  # blocks in the pool
    N: int                                  # branches
    T: int                                  # table entries
    KS: int                                 # sequence fields per kernel (programs only, else 0)
    width: int                              # the bit-width of every field
    maxpos: tuple[int, ...]                 # the furthest each branch gets
    offset: tuple[int, ...]                 # token id of each branch's first own token
    programs: bool                          # the program fields are encoded
    reuse: str                              # the scenario's reuse order
    device: Device                          # the scenario's device model
    structure: Structure                    # the protocol's Structure
    pc_of: Mapping[Place, int]              # program counter of each place
    descendants: tuple[tuple[int, ...], ...]    # what a cancel of each branch cancels while unborn
    references: tuple[tuple[int, ...], ...]     # each branch's reference sequence as token ids (plain scenarios)
    # cache scenarios (docs/semantics.md#prefix-caching; SymbolicSystem says how they are encoded)
    cache: bool = False
    KL: int = 0                                 # key token fields per block
    prompts: tuple[tuple[int, ...], ...] = ()   # each request's prompt as token ids
    drafts: tuple[tuple[bool, ...], ...] = ()   # per request and operation: a speculative draft's append
    H: tuple[int, ...] = ()                     # each request's most hits: (L_j - 1) // B

    def num(self, value: int) -> Term:
        return z3.BitVecVal(value, self.width)

    def token(self, j: int, pos: Term) -> Term:
        """Branch j's token at a (possibly symbolic) position (plain scenarios: its reference)."""
        return z3.If(pos < self.L, pos, self.offset[j] + pos - self.L) if z3.is_expr(pos) else (
            pos if pos < self.L else self.offset[j] + pos - self.L)

    def expected(self, branch: Term, i: int) -> Term:
        """Position i of a (possibly symbolic) branch's reference sequence (plain scenarios)."""
        if isinstance(branch, int):
            tokens = self.references[branch]
            return tokens[i] if i < len(tokens) else NONE_READ - 1
        return select([self.expected(j, i) for j in range(self.N)], branch, NONE_READ - 1)

    def sequence(self, seq: list, i: int) -> Term:
        """Position i of a sequence stored as program fields: the prompt's
        token below L, else its field (past its fields: never a token)."""
        if i < self.L:
            return i
        return seq[i - self.L] if i - self.L < len(seq) else NONE_READ - 1

    def branch_expected(self, s: Sym, j: int, i: int) -> Term:
        """Position i of branch j's sequence now."""
        return self.sequence(s.br[j].seq, i) if self.programs else self.expected(j, i)

    def in_free(self, s: Sym, b: Term) -> Term:
        return any_of(z3.And(i < s.flen, s.free[i] == b) for i in range(self.P))

    def target(self, o: SymOp) -> Term:
        """The block a kernel writes: snapshot[pos // B] (cowcheck.engines.invariants._target)."""
        kdom = range(self.L, max(max(self.maxpos), self.L + 1))
        return by_value(o.kpos, kdom, lambda p: o.snap[p // self.B] if p // self.B < self.T else -1)

    def written(self, o: SymOp) -> list[tuple[Term, int, Term]]:
        """What a kernel writes: (whether it writes position p, p, the block
        snapshot[p // B]) for each position it could; a plain write writes
        kpos only, a cache scenario's kernel the `span` positions ending
        there (cowcheck.engines.invariants._targets)."""
        if not self.cache:
            return [(z3.BoolVal(True), -1, self.target(o))]
        out = []
        for p in range(max(max(self.maxpos), 1)):
            block = o.snap[p // self.B] if p // self.B < self.T else -1
            out.append((z3.And(o.kpos >= p, o.kpos - o.span < p), p, block))
        return out

    def key_token(self, s: Sym, b: Term, slot: int) -> Term:
        """The token block b's key has at slot `slot` of the block (its
        klen - B + slot-th): -1 when b has no key."""
        lengths = range(self.B, self.KL + 1, self.B)
        if not lengths:
            return -1
        cells = [by_value(s.klen[x], [0, *lengths], lambda n: s.key[x][n - self.B + slot] if n else -1)
                 for x in range(self.P)]
        return select(cells, b, -1)

    def ready(self, s: Sym, i: int) -> Term:
        """Queue slot i may complete under the scenario's device model."""
        if i == 0 or self.device.unordered:
            return s.qlen > i
        return z3.And(s.qlen > i, all_of(z3.Not(self.ordered(s.q[m], s.q[i])) for m in range(i)))

    def ordered(self, earlier: SymOp, later: SymOp) -> Term:
        """The device orders queue op `earlier` before `later`
        (model.queue.ready: what is not a copy is a kernel)."""
        def kind(o: SymOp, k: OpKind) -> Term:
            return o.kind == COPY_KIND if k is OpKind.COPY else o.kind != COPY_KIND
        return any_of(z3.And(kind(earlier, a), kind(later, b)) for a, b in product(OpKind, OpKind) if self.device.orders(a, b))
