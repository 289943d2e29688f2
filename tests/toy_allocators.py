"""Small block managers for the engine-harness tests: a correct one and
variants that each break one thing (a bad adapter, a bug, a missing
observer). Not a test module: tests/test_model_harness.py and
tests/test_views_harness.py import them, and name them by this file's path
(`TOY:manager`) where a scenario needs a reference."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cowcheck.adapters import OutOfBlocks

#: this file, for "path:factory" references
TOY = Path(__file__).resolve()


class Manager:
    """A small correct block manager (copy-on-write of a shared partial
    tail, LIFO free list), the baseline the bad adapters below break."""

    def __init__(self, pool: int, block_size: int):
        self.B, self.free_list, self.rc = block_size, list(range(pool)), [0] * pool
        self.tables: dict[str, list[int]] = {}
        self.length: dict[str, int] = {}

    def _alloc(self) -> int:
        if not self.free_list:
            raise OutOfBlocks()
        b = self.free_list.pop(0)
        self.rc[b] = 1
        return b

    def _dec(self, b: int) -> None:
        assert self.rc[b] > 0, f"Double free! block {b}"
        self.rc[b] -= 1
        if self.rc[b] == 0:
            self.free_list.insert(0, b)

    def start(self, branches, prompt):
        blocks = [self._alloc() for _ in range(-(-prompt // self.B))]
        for b in blocks:
            self.rc[b] = len(branches)
        for name in branches:
            self.tables[name], self.length[name] = list(blocks), prompt

    def append(self, branch, token):
        table, n = self.tables[branch], self.length[branch]
        copies = []
        if n % self.B == 0:
            table.append(self._alloc())
        elif self.rc[table[-1]] > 1:
            new = self._alloc()
            self._dec(table[-1])
            copies.append((table[-1], new))
            table[-1] = new
        self.length[branch] = n + 1
        return copies

    def fork(self, parent, child):
        self.tables[child], self.length[child] = list(self.tables[parent]), self.length[parent]
        for b in self.tables[child]:
            self.rc[b] += 1

    def rollback(self, branch, n):
        self.length[branch] -= n
        table = self.tables[branch]
        while len(table) > -(-self.length[branch] // self.B):
            self._dec(table.pop())

    def free(self, branch):
        for b in self.tables.pop(branch):
            self._dec(b)

    def table(self, branch):
        return list(self.tables[branch])

    def refcount(self, block):
        return self.rc[block]

    def free_blocks(self):
        return list(self.free_list)


def manager(pool, block_size):
    return Manager(pool, block_size)


class Blind(Manager):
    """No observers: refcount and free_blocks are missing."""
    refcount = None
    free_blocks = None


class NoFork(Manager):
    fork = None


class OddCopies(Manager):
    def append(self, branch, token):
        super().append(branch, token)
        return [(1,)]


class OutsideThePool(Manager):
    def table(self, branch):
        return [99]


class WordyRefcount(Manager):
    def refcount(self, block):
        return "one"


class Locked(Manager):
    def __init__(self, pool, block_size):
        super().__init__(pool, block_size)
        self.lock = threading.Lock()


class DoubleFree(Manager):
    """Drops the old tail twice after copy-on-write: the engine's own
    assertion fires (vLLM's "Double free!")."""

    def append(self, branch, token):
        copies = super().append(branch, token)
        for src, _ in copies:
            self._dec(src)
        return copies


class Flaky(Manager):
    """Not deterministic once armed: hands out the free list's last block
    (a module-level switch, state outside the snapshot)."""
    armed = [False]

    def _alloc(self):
        if Flaky.armed[0] and len(self.free_list) > 1:
            self.free_list.append(self.free_list.pop(0))
        return super()._alloc()


def no_fork(pool, block_size): return NoFork(pool, block_size)
def odd_copies(pool, block_size): return OddCopies(pool, block_size)
def outside_the_pool(pool, block_size): return OutsideThePool(pool, block_size)
def wordy_refcount(pool, block_size): return WordyRefcount(pool, block_size)
def locked(pool, block_size): return Locked(pool, block_size)
def blind(pool, block_size): return Blind(pool, block_size)
def double_free(pool, block_size): return DoubleFree(pool, block_size)
def flaky(pool, block_size): return Flaky(pool, block_size)


class Released(Manager):
    """Gives the copy's destination back at once: it stays on the free list
    while the copy writes into it and the branch's table maps it."""

    def append(self, branch, token):
        copies = super().append(branch, token)
        for _, dst in copies:
            self._dec(dst)
        return copies


def released(pool, block_size): return Released(pool, block_size)


def takes_nothing():
    """Not a factory: it does not take (pool, block_size)."""
    return Manager(4, 2)


class Hangs(Manager):
    """The second append of branch a never returns (a loop that waits for a
    block nobody frees)."""

    def append(self, branch, token):
        while token == "a2":
            try:
                time.sleep(0.01)
            except Exception:      # the engine's own catch-all does not swallow the deadline
                pass
        return super().append(branch, token)


class Interrupted(Manager):
    """Its first append takes a Ctrl-C (as if the user pressed it there)."""

    def append(self, branch, token):
        raise KeyboardInterrupt()


def hangs(pool, block_size): return Hangs(pool, block_size)
def interrupted(pool, block_size): return Interrupted(pool, block_size)


class Versioned(Manager):
    """Names the engine code it runs: $TOY_VERSION, as a release would."""
    def version(self):
        import os
        return os.environ.get("TOY_VERSION", "toy 1.0")


class Unversioned(Manager):
    def version(self):
        return 3


def versioned(pool, block_size): return Versioned(pool, block_size)
def unversioned(pool, block_size): return Unversioned(pool, block_size)
