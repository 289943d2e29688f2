"""Symmetry: states that differ only in which interchangeable branch is which,
or in which block id holds what, behave alike. `Symmetry.representative`
maps a state to one member of its orbit, so an explorer can store each orbit
once (Stateright's `Representative`, TLC's SYMMETRY).

Two kinds of renaming are symmetries of the transition system:

- Branches with the same program (appends, may_cancel) are interchangeable
  once their tokens are renamed with them (a1 <-> b1, ...): every rule,
  step and invariant treats branch names only as names.
- Block ids are names too: nothing in the model compares ids, except the free
  list's order, which a renaming carries along (and which `any` reuse keeps
  sorted, so there it is re-sorted).

The representative sorts each class of interchangeable branches by a
signature of its local state, then numbers blocks in order of first
appearance (branch tables in the new branch order, then the device queue,
then any block no one references and the free list, ordered by contents
where their order carries no meaning). Where signatures tie it takes the
least of the tied orders, so every member of an orbit gets the same
representative: the explorer stores each orbit exactly once, and a trace is
rebuilt by matching representatives step by step."""

from __future__ import annotations

from itertools import groupby, permutations, product
from typing import Optional

from .scenario import Scenario
from .state import Block, Branch, Copy, InFlight, Kernel, State, Status

#: a block as a signature sees it: refcount, holds, filled slots
Shape = tuple[int, int, int]
#: a branch as `Symmetry._signature` sees it
Signature = tuple[Status, int, int, str, str, int, int, tuple[int, ...], bool,
                  tuple[Shape, ...], tuple[Shape, ...], tuple[int, ...]]


class Symmetry:
    def __init__(self, scenario: Scenario, branches: bool = True, blocks: bool = True):
        self.blocks_enabled = blocks
        self.sort_free = scenario.reuse == "any"
        self.names = [scenario.branch_name(i) for i in range(len(scenario.branches))]
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, spec in enumerate(scenario.branches):
            groups.setdefault((spec.appends, spec.may_cancel), []).append(i)
        self.classes = [tuple(g) for g in groups.values() if len(g) > 1] if branches else []
        # tokens each branch owns, for renaming: own[i][k-1] = f"{name_i}{k}"
        self.own = [scenario.tokens(i)[scenario.prompt:] for i in range(len(scenario.branches))]

    def describe(self) -> list[str]:
        out = []
        if self.classes:
            out.append("branch symmetry (" + "; ".join("".join(self.names[i] for i in c) for c in self.classes) + ")")
        if self.blocks_enabled:
            out.append("block-id symmetry")
        return out

    # -- the representative -------------------------------------------------
    @staticmethod
    def _shapes(state: State) -> list[Shape]:
        """Per block what a signature may say of it: refcount, holds, filled slots."""
        return [(blk.refcount, blk.holds, len(blk.slots) - blk.slots.count(None)) for blk in state.blocks]

    @staticmethod
    def _signature(state: State, i: int, shapes: list[Shape]) -> Signature:
        """What branch i looks like without naming blocks or branches: the
        finer it is, the fewer ties are left for `representative` to try."""
        br = state.branches[i]
        shape = shapes.__getitem__
        kernels = tuple(q.pos for q in state.queue if type(q) is Kernel and q.branch == i)
        return (br.status, br.pos, br.done, br.op or "", br.path or "", br.step,
                -1 if br.tail is None else br.working.index(br.tail) if br.tail in br.working else -2,
                (-1,) if br.new is None else shape(br.new),
                br.working == br.published, tuple(map(shape, br.working)), tuple(map(shape, br.published)), kernels)

    def representative(self, state: State) -> State:
        """The orbit's canonical member: branches of each class sorted by
        signature, blocks numbered by first appearance; where signatures tie,
        the least (by repr) of the tied orders. Canonical, since the
        signature and the numbering name no branch and no block."""
        orders = self._orders(state)
        if len(orders) == 1:
            return self._relabel(state, orders[0])
        candidates = {self._relabel(state, order) for order in orders}
        # tied branches are often truly alike (swapping them changes nothing)
        return candidates.pop() if len(candidates) == 1 else min(candidates, key=repr)

    def _orders(self, state: State) -> list[list[int]]:
        """Every branch order (order[new] = old) that sorts each class by
        signature; more than one only where signatures tie."""
        orders = [list(range(len(state.branches)))]
        shapes = self._shapes(state) if self.classes else []
        for members in self.classes:
            sig = {i: self._signature(state, i, shapes) for i in members}
            ranked = sorted(members, key=sig.__getitem__)
            runs = [list(g) for _, g in groupby(ranked, key=sig.__getitem__)]
            extended = []
            for choice in product(*(permutations(run) for run in runs)):
                flat = [i for run in choice for i in run]
                for order in orders:
                    order = list(order)
                    for slot, old in zip(members, flat):
                        order[slot] = old
                    extended.append(order)
            orders = extended
        return orders

    def _relabel(self, state: State, order: list[int]) -> State:
        branches = state.branches
        moved = order != list(range(len(branches)))
        new_of = [0] * len(order)                   # new_of[old] = new
        for new, old in enumerate(order):
            new_of[old] = new
        tokens = self._token_map(order) if moved else None
        if self.blocks_enabled:
            block_map = self._block_map(state, order, tokens)
        else:
            block_map = list(range(len(state.blocks)))
        if not moved and block_map == list(range(len(state.blocks))):
            return state

        m = block_map.__getitem__
        new_blocks: list[Block] = [None] * len(state.blocks)  # type: ignore[list-item]  # block_map is onto: every slot is set
        for old, blk in enumerate(state.blocks):
            if tokens is not None:      # blocks are immutable: moved as they are unless their tokens change
                blk = Block(blk.refcount, blk.holds, tuple(map(tokens.get, blk.slots, blk.slots)))  # type: ignore[arg-type]  # get(None, None) is None
            new_blocks[block_map[old]] = blk
        new_branches = []
        for old in order:
            br = branches[old]
            new_branches.append(Branch(br.status, br.pos, br.done, br.op, br.path, br.step,
                                       None if br.tail is None else m(br.tail), None if br.new is None else m(br.new),
                                       tuple(map(m, br.working)), tuple(map(m, br.published))))
        queue: list[InFlight] = []
        for op in state.queue:
            if type(op) is Copy:
                queue.append(Copy(m(op.src), m(op.dst), op.n))
            else:
                token = op.token if tokens is None else tokens.get(op.token, op.token)
                queue.append(Kernel(new_of[op.branch], op.pos, token, tuple(map(m, op.snapshot))))
        free = tuple(map(m, state.free))
        if self.sort_free:
            free = tuple(sorted(free))
        return State(tuple(new_blocks), free, tuple(new_branches), tuple(queue))

    def _token_map(self, order: list[int]) -> dict[str, str]:
        """Old token -> new token when branch `order[new]` becomes branch `new`."""
        out = {}
        for new, old in enumerate(order):
            if new != old:
                for old_token, new_token in zip(self.own[old], self.own[new]):
                    out[old_token] = new_token
        return out

    def _block_map(self, state: State, order: list[int], tokens: Optional[dict[str, str]]) -> list[int]:
        """old block id -> new id, numbered in order of first appearance."""
        size = len(state.blocks)
        mapping = [-1] * size
        count = 0

        def visit(b: Optional[int]) -> None:
            nonlocal count
            if b is not None and mapping[b] < 0:
                mapping[b] = count
                count += 1

        for old in order:
            br = state.branches[old]
            for b in br.working:
                visit(b)
            for b in br.published:
                visit(b)
            visit(br.tail)
            visit(br.new)
        for op in state.queue:
            if type(op) is Copy:
                visit(op.src)
                visit(op.dst)
            else:
                for b in op.snapshot:
                    visit(b)
        # Blocks no one references are told apart only by their contents, so
        # order them by contents: equal ones are interchangeable, and any
        # order among them gives the same state. Under `any` reuse the free
        # list is a set, so its blocks are ordered the same way.
        def contents(b: int) -> tuple[int, int, tuple[str, ...]]:
            blk = state.blocks[b]
            slots = blk.slots if tokens is None else tuple(map(tokens.get, blk.slots, blk.slots))  # type: ignore[arg-type]  # get(None, None) is None
            return blk.refcount, blk.holds, tuple(t or "" for t in slots)

        rest = sorted((b for b in range(size) if mapping[b] < 0 and b not in state.free), key=contents)
        for b in rest:
            visit(b)
        for b in (sorted(state.free, key=contents) if self.sort_free else state.free):
            visit(b)
        return mapping
