"""The allocators shipped in specs/allocators, tested as plain code, with no
harness: the adapter methods are called directly. The correct block manager
keeps its refcounts equal to the number of tables mapping each block, copies
exactly when a branch appends into a shared, partly filled last block, and
returns everything at the end; run on a one-stream pool (each append's
copies, then its token), every branch reads back its own sequence. Each buggy
variant shows its bug in a short direct call sequence, and every adapter
survives the pickling the harness copies states with. The engine*.toml
protocol files that describe the same orders are checked to exist and to
name their allocator."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cowcheck.model.protocol import load_builtin
from cowcheck.specs.allocators import engine
from cowcheck.specs.allocators.engine import OutOfBlocks

FACTORIES: dict[str, Callable[[int, int], Any]] = {
    "correct": engine.correct,
    "copy_dst_released": engine.copy_dst_released,
    "fork_no_tail_incref": engine.fork_no_tail_incref,
    "double_free_after_cow": engine.double_free_after_cow,
    "rollback_leaks": engine.rollback_leaks,
}
PROTOCOLS = {"correct": "engine", **{name: "engine-" + name.replace("_", "-") for name in FACTORIES if name != "correct"}}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Shadow:
    """The test's own account of a run on one stream: each branch's
    sequence, and the pool's slots as the copies and kernels leave them
    (each copy moves all B slots, then the kernel writes the token)."""

    def __init__(self, adapter: Any, pool: int, B: int, roots: list[str], L: int):
        self.adapter, self.pool, self.B = adapter, pool, B
        self.slots: list[list[Any]] = [[None] * B for _ in range(pool)]
        self.seq = {r: [f"p{i}" for i in range(L)] for r in roots}
        self.writes = {r: 0 for r in roots}
        adapter.start(list(roots), L)
        for k, block in enumerate(adapter.table(roots[0])):
            for s, token in enumerate(self.seq[roots[0]][k * B:(k + 1) * B]):
                self.slots[block][s] = token

    def append(self, branch: str) -> list[tuple[int, int]]:
        self.writes[branch] += 1
        token = f"{branch}{self.writes[branch]}"
        copies = self.adapter.append(branch, token)
        for src, dst in copies:
            self.slots[dst] = list(self.slots[src])
        pos = len(self.seq[branch])
        self.slots[self.adapter.table(branch)[pos // self.B]][pos % self.B] = token
        self.seq[branch].append(token)
        return copies

    def fork(self, parent: str, child: str) -> None:
        self.adapter.fork(parent, child)
        self.seq[child], self.writes[child] = list(self.seq[parent]), 0

    def rollback(self, branch: str, n: int) -> None:
        self.adapter.rollback(branch, n)
        del self.seq[branch][len(self.seq[branch]) - n:]

    def free(self, branch: str) -> None:
        self.adapter.free(branch)
        del self.seq[branch]

    def read(self, branch: str) -> list[Any]:
        table = self.adapter.table(branch)
        return [self.slots[table[p // self.B]][p % self.B] for p in range(len(self.seq[branch]))]

    def check(self) -> None:
        """Refcounts equal the number of tables mapping each block, the free
        list holds exactly the blocks with refcount 0, once each, every table
        has one block per B tokens, and every branch reads its sequence."""
        tables = {b: self.adapter.table(b) for b in self.seq}
        for block in range(self.pool):
            mapped = sum(block in t for t in tables.values())
            assert self.adapter.refcount(block) == mapped, (block, tables)
        free = self.adapter.free_blocks()
        assert len(free) == len(set(free))
        assert set(free) == {b for b in range(self.pool) if self.adapter.refcount(b) == 0}
        for b, table in tables.items():
            assert len(table) == ceil_div(len(self.seq[b]), self.B), (b, table, self.seq[b])
            assert self.read(b) == self.seq[b], b


# -- the correct allocator -------------------------------------------------------

def test_copy_exactly_when_appending_into_a_shared_partial_tail():
    a = engine.correct(6, 2)
    a.start(["a", "b"], 3)                      # block 0 = [p0 p1], block 1 = [p2 _], both shared
    assert a.table("a") == a.table("b") == [0, 1] and a.refcount(1) == 2
    assert a.append("a", "a1") == [(1, 2)]      # shared partial tail: copy-on-write
    assert a.table("a") == [0, 2] and a.refcount(1) == 1 and a.refcount(2) == 1
    assert a.append("b", "b1") == []            # b owns block 1 alone now: in place
    assert a.table("b") == [0, 1]
    assert a.append("a", "a2") == []            # a block boundary: a fresh block, no copy
    assert a.table("a") == [0, 2, 3] and a.free_blocks() == [4, 5]


def test_fork_shares_every_block_and_the_next_append_copies():
    a = engine.correct(6, 2)
    a.start(["a"], 3)
    assert a.append("a", "a1") == []            # alone on [p2 _]: in place
    assert a.append("a", "a2") == []            # boundary: block 2
    a.fork("a", "c")                            # pos 5: tail block 2 = [a2 _]
    assert a.table("c") == [0, 1, 2] and [a.refcount(b) for b in (0, 1, 2)] == [2, 2, 2]
    assert a.append("c", "c1") == [(2, 3)]
    assert a.append("a", "a3") == []


def test_freed_blocks_go_to_the_front_of_the_free_list():
    a = engine.correct(5, 2)
    a.start(["a"], 3)
    a.append("a", "a1")
    a.append("a", "a2")                         # table [0 1 2], free [3 4]
    a.free("a")                                 # table order: 0, then 1, then 2 on top
    assert a.free_blocks() == [2, 1, 0, 3, 4]
    assert all(a.refcount(b) == 0 for b in range(5))


def test_rollback_releases_the_blocks_past_the_new_end():
    a = engine.correct(6, 2)
    a.start(["a", "b"], 3)
    for k in (1, 2, 3):
        a.append("a", f"a{k}")                  # a: [0 2 3], 6 tokens
    a.rollback("a", 3)                          # back to 3 tokens: block 3 goes
    assert a.table("a") == [0, 2] and a.refcount(3) == 0 and a.free_blocks()[0] == 3
    a.rollback("a", 2)                          # back to 1 token: block 2 goes too
    assert a.table("a") == [0] and a.free_blocks()[:2] == [2, 3]
    assert a.append("a", "a4") == [(0, 2)]      # position 1 of block 0, shared with b: copy


def test_a_double_free_raises():
    a = engine.correct(4, 2)
    a.start(["a"], 3)
    a.manager.allocator.free(1)
    with pytest.raises(AssertionError, match="Double free"):
        a.manager.allocator.free(1)


def test_an_empty_pool_raises_out_of_blocks_and_changes_nothing():
    a = engine.correct(2, 2)
    a.start(["a", "b"], 3)
    before = pickle.dumps(a)
    with pytest.raises(OutOfBlocks):
        a.append("a", "a1")                     # copy-on-write needs a block
    assert pickle.dumps(a) == before
    a.free("b")
    assert a.append("a", "a1") == []            # alone now: in place, no block needed
    with pytest.raises(OutOfBlocks):
        a.append("a", "a2")                     # a boundary needs one
    assert pickle.dumps(engine.correct(2, 2)) != before


@st.composite
def runs(draw):
    """A small geometry and a sequence of operations on live branches:
    appends, forks, rollbacks (of any depth) and frees."""
    B = draw(st.integers(1, 3))
    L = draw(st.integers(0, 5))
    roots = ["a", "b", "c"][: draw(st.integers(1, 3))]
    ops = draw(st.lists(st.tuples(st.sampled_from(["append", "append", "append", "fork", "rollback", "free"]),
                                  st.integers(0, 7), st.integers(0, 4)), max_size=25))
    return B, L, roots, ops


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_correct_keeps_refcounts_exact_and_every_branch_reads_its_sequence(run):
    B, L, roots, ops = run
    pool = ceil_div(L, B) + 12
    shadow = Shadow(engine.correct(pool, B), pool, B, roots, L)
    a, names = shadow.adapter, iter("defghijklmnopqrstuvwxyz")
    shadow.check()
    for op, which, n in ops:
        live = sorted(shadow.seq)
        if not live:
            break
        branch = live[which % len(live)]
        if op == "append":
            pos, table = len(shadow.seq[branch]), a.table(branch)
            shared_tail = pos % B != 0 and a.refcount(table[-1]) > 1
            if not a.free_blocks() and (pos % B == 0 or shared_tail):
                with pytest.raises(OutOfBlocks):
                    a.append(branch, "x")
                continue
            copies = shadow.append(branch)
            if shared_tail:
                assert copies == [(table[-1], a.table(branch)[-1])]
            else:
                assert copies == []
            assert a.refcount(a.table(branch)[pos // B]) == 1     # the token lands in a block of its own
        elif op == "fork":
            shadow.fork(branch, next(names))
        elif op == "rollback":
            shadow.rollback(branch, min(n, len(shadow.seq[branch])))
        else:
            shadow.free(branch)
        shadow.check()
    for branch in sorted(shadow.seq):
        shadow.free(branch)
    assert sorted(a.free_blocks()) == list(range(pool))
    assert all(a.refcount(b) == 0 for b in range(pool))


# -- the buggy variants ------------------------------------------------------------

def test_copy_dst_released_hands_the_copy_destination_out_again():
    a = engine.copy_dst_released(6, 2)
    a.start(["a", "b"], 3)
    [(src, dst)] = a.append("a", "a1")
    assert a.table("a")[-1] == dst
    assert dst in a.free_blocks() and a.refcount(dst) == 0    # free while the copy into it is pending
    assert a.append("a", "a2") == []                          # a boundary: the next allocation takes it again
    assert a.table("a") == [0, dst, dst]                      # a2 lands in slot 0 of block dst, over p2
    b = engine.copy_dst_released(8, 2)
    b.start(["a", "b", "c"], 3)
    [(src, dst)] = b.append("a", "a1")
    assert b.append("b", "b1") == [(src, dst)]                # another branch's copy-on-write takes it
    assert b.table("a") == b.table("b") == [0, dst]
    correct = engine.correct(6, 2)
    correct.start(["a", "b"], 3)
    [(_, good)] = correct.append("a", "a1")
    assert good not in correct.free_blocks() and correct.refcount(good) == 1


def test_fork_no_tail_incref_leaves_the_shared_tail_at_refcount_one():
    a = engine.fork_no_tail_incref(6, 2)
    a.start(["a"], 3)
    a.fork("a", "c")
    assert a.table("a") == a.table("c") == [0, 1]
    assert a.refcount(0) == 2 and a.refcount(1) == 1          # two tables map block 1
    assert a.append("a", "a1") == [] and a.append("c", "c1") == []    # both write slot 1 of block 1
    assert a.table("a")[1] == a.table("c")[1] == 1
    a.free("a")
    assert 1 in a.free_blocks() and 1 in a.table("c")         # freed under c
    with pytest.raises(AssertionError, match="Double free"):
        a.free("c")


def test_fork_no_tail_incref_is_right_at_a_block_boundary():
    for factory in (engine.fork_no_tail_incref, engine.correct):
        a = factory(6, 2)
        a.start(["a"], 4)
        a.fork("a", "c")
        assert [a.refcount(b) for b in a.table("c")] == [2, 2]


def test_double_free_after_cow_frees_the_tail_under_the_other_branch():
    a = engine.double_free_after_cow(6, 2)
    a.start(["a", "b"], 3)
    a.append("a", "a1")                         # block 1: refcount 2 -> 0, no error yet
    assert a.refcount(1) == 0 and a.free_blocks()[0] == 1 and a.table("b") == [0, 1]
    with pytest.raises(AssertionError, match="Double free"):
        a.free("b")                             # b drops block 1 below zero: the engine crashes


def test_double_free_after_cow_raises_only_below_zero():
    a = engine.double_free_after_cow(8, 2)
    a.start(["a", "b", "c"], 3)
    a.append("a", "a1")                         # block 1: 3 -> 1, but b and c both map it
    assert a.refcount(1) == 1
    a.free("b")                                 # 1 -> 0: freed while c maps it, silently
    assert 1 in a.free_blocks() and a.table("c") == [0, 1]
    with pytest.raises(AssertionError, match="Double free"):
        a.free("c")


def test_rollback_leaks_keeps_dropped_blocks_after_every_branch_is_freed():
    for factory, leaked in ((engine.rollback_leaks, {2}), (engine.correct, set())):
        a = factory(5, 2)
        a.start(["a"], 3)
        a.append("a", "a1")
        a.append("a", "a2")                     # table [0 1 2]
        a.rollback("a", 2)
        assert a.table("a") == [0, 1]
        a.free("a")
        held = {b for b in range(5) if a.refcount(b) > 0}
        assert held == leaked and held.isdisjoint(a.free_blocks())


# -- pickling and the protocol files -------------------------------------------------

SCRIPT = [("append", "a"), ("fork", "a", "c"), ("append", "c"), ("append", "b"), ("append", "a"),
          ("rollback", "a", 1), ("append", "a"), ("free", "c"), ("append", "b"), ("free", "a"), ("free", "b")]


def _apply(adapter: Any, step: tuple) -> Any:
    try:
        if step[0] == "append":
            return ("ok", adapter.append(step[1], "t"))
        return ("ok", getattr(adapter, step[0])(*step[1:]))
    except (AssertionError, OutOfBlocks) as err:
        return (type(err).__name__, str(err))


def _observe(adapter: Any, pool: int, live: set[str]) -> tuple:
    return (adapter.free_blocks(), [adapter.refcount(b) for b in range(pool)],
            {b: adapter.table(b) for b in sorted(live)})


@pytest.mark.parametrize("name", FACTORIES)
def test_every_adapter_pickles_to_an_equal_behaving_copy(name):
    """The harness copies a state by pickling the adapter: at every point of
    a script, an unpickled copy pickles to the same bytes and answers the
    rest of the script exactly as the original does (returns, errors, free
    list, refcounts, tables)."""
    pool = 8
    original = FACTORIES[name](pool, 2)
    original.start(["a", "b"], 3)
    live = {"a", "b"}
    for cut in range(len(SCRIPT) + 1):
        copy = pickle.loads(pickle.dumps(original))
        assert pickle.dumps(copy) == pickle.dumps(original)
        ahead, rest_live = pickle.loads(pickle.dumps(original)), set(live)
        for step in SCRIPT[cut:]:
            assert _apply(ahead, step) == _apply(copy, step), (name, cut, step)
            _track(rest_live, step)
            assert _observe(ahead, pool, rest_live) == _observe(copy, pool, rest_live)
        if cut < len(SCRIPT):
            _apply(original, SCRIPT[cut])
            _track(live, SCRIPT[cut])


def _track(live: set[str], step: tuple) -> None:
    if step[0] == "fork":
        live.add(step[2])
    elif step[0] == "free":
        live.discard(step[1])


@pytest.mark.parametrize("name", FACTORIES)
def test_every_allocator_has_a_protocol_file_naming_it(name):
    protocol = load_builtin(PROTOCOLS[name])
    assert f"cowcheck.specs.allocators.engine:{name}" in protocol.description
    assert all(path.atomic for path in protocol.paths.values())
    assert protocol.description.startswith("BUGGY") == (name != "correct")
