"""A paged-KV block manager written the way inference engines write theirs,
and buggy variants of it, for the engine harness
(docs/semantics.md#engine-harness).

`BlockManager` follows vLLM v0's BlockSpaceManager (v1): a pool of physical
blocks with a free list and a refcount per block, one block table per
sequence, and `append_slot` that opens a fresh block at a block boundary,
writes in place into a last block it owns alone, and copies a shared,
partly filled last block first (copy-on-write). It never waits for a copy:
it returns `(src, dst)` pairs and the engine runs them before the next
kernel, which is right on one CUDA stream and wrong on a device that may
complete work out of launch order (protocol file `engine.toml`, like
`vllm-bmv1`). Freed blocks go to the front of the free list (LIFO reuse, the
model's default), and a double free raises, as vLLM's "Double free!" does.

`Adapter` is the few lines an engine team writes around its own manager:
cowcheck's branch names become sequence ids, its token names are ignored
(this manager does not share blocks by content).

The buggy managers change one method each; each docstring names the real
bug class it stands for, and each has a protocol file of its own. Every
factory takes `(pool, block_size)` and returns an adapter: reference them
as `cowcheck.specs.allocators.engine:correct` (or by this file's path).
Everything is plain dicts and lists, so the harness can pickle the adapter
to copy a state.
"""

from __future__ import annotations

from cowcheck.adapters import OutOfBlocks


class BlockAllocator:
    """Physical blocks 0 .. num_blocks-1: a free list, taken from the front
    and pushed on the front when a block is freed (LIFO), and a refcount per
    block (0 exactly when the block is free)."""

    def __init__(self, num_blocks: int) -> None:
        self.free_list: list[int] = list(range(num_blocks))
        self.refcounts: list[int] = [0] * num_blocks

    def allocate(self) -> int:
        if not self.free_list:
            raise OutOfBlocks("no free block")
        block = self.free_list.pop(0)
        self.refcounts[block] = 1
        return block

    def incref(self, block: int) -> None:
        self.refcounts[block] += 1

    def free(self, block: int) -> None:
        """Drop one reference; the last one returns the block to the pool."""
        if self.refcounts[block] <= 0:
            raise AssertionError(f"Double free! block {block} is already freed")
        self.refcounts[block] -= 1
        if self.refcounts[block] == 0:
            self.free_list.insert(0, block)


class BlockManager:
    """One block table and one length (tokens) per sequence, over a
    BlockAllocator. A table always has ceil(length / block_size) entries:
    entry i holds the sequence's positions i*B .. i*B+B-1."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self.seq_lens: dict[int, int] = {}

    def allocate_prompt(self, seq_ids: list[int], prompt_len: int) -> None:
        """The prompt's blocks, shared by every sequence of the group."""
        table = [self.allocator.allocate() for _ in range(-(-prompt_len // self.block_size))]
        for block in table:
            for _ in seq_ids[1:]:
                self.allocator.incref(block)
        for seq_id in seq_ids:
            self.block_tables[seq_id] = list(table)
            self.seq_lens[seq_id] = prompt_len

    def append_slot(self, seq_id: int) -> list[tuple[int, int]]:
        """Make room for the sequence's next token; return the copies the
        worker must run before the kernel that writes it."""
        table = self.block_tables[seq_id]
        n = self.seq_lens[seq_id]
        if len(table) <= n // self.block_size:
            # the new token opens a block: a fresh one, ours alone
            table.append(self.allocator.allocate())
            copies: list[tuple[int, int]] = []
        elif self.allocator.refcounts[table[-1]] == 1:
            copies = []             # we own the partly filled last block: write in place
        else:
            copies = self._copy_on_write(table)
        self.seq_lens[seq_id] = n + 1
        return copies

    def _copy_on_write(self, table: list[int]) -> list[tuple[int, int]]:
        """The last block is partly filled and shared: take a block of our
        own, point the table at it, drop our reference to the shared one
        (the others keep it) and have the worker copy it."""
        last = table[-1]
        new = self.allocator.allocate()
        table[-1] = new
        self.allocator.free(last)
        return [(last, new)]

    def fork(self, parent: int, child: int) -> None:
        """The child shares all the parent's blocks: one more reference each."""
        table = self.block_tables[parent]
        for block in table:
            self.allocator.incref(block)
        self.block_tables[child] = list(table)
        self.seq_lens[child] = self.seq_lens[parent]

    def rollback(self, seq_id: int, num_tokens: int) -> None:
        """Forget the last tokens (rejected drafts): shorten the sequence and
        release the blocks past its new end, last first."""
        table = self.block_tables[seq_id]
        self.seq_lens[seq_id] -= num_tokens
        keep = -(-self.seq_lens[seq_id] // self.block_size)
        for block in reversed(table[keep:]):
            self.allocator.free(block)
        del table[keep:]

    def free(self, seq_id: int) -> None:
        """The sequence is done (finished or pruned): drop its references."""
        for block in self.block_tables.pop(seq_id):
            self.allocator.free(block)
        del self.seq_lens[seq_id]


class Adapter:
    """What cowcheck drives: its branch names become the manager's sequence
    ids (in the order it first sees them); the rest is one call each."""

    def __init__(self, manager: BlockManager) -> None:
        self.manager = manager
        self.seq_ids: dict[str, int] = {}

    def _seq(self, branch: str) -> int:
        return self.seq_ids.setdefault(branch, len(self.seq_ids))

    def start(self, branches: list[str], prompt: int) -> None:
        self.manager.allocate_prompt([self._seq(b) for b in branches], prompt)

    def append(self, branch: str, token: str) -> list[tuple[int, int]]:
        return self.manager.append_slot(self._seq(branch))     # no content sharing: the token is not needed

    def fork(self, parent: str, child: str) -> None:
        self.manager.fork(self._seq(parent), self._seq(child))

    def rollback(self, branch: str, n: int) -> None:
        self.manager.rollback(self._seq(branch), n)

    def free(self, branch: str) -> None:
        self.manager.free(self._seq(branch))

    def table(self, branch: str) -> list[int]:
        return list(self.manager.block_tables[self._seq(branch)])

    def refcount(self, block: int) -> int:
        return self.manager.allocator.refcounts[block]

    def free_blocks(self) -> list[int]:
        return list(self.manager.allocator.free_list)


def correct(pool: int, block_size: int) -> Adapter:
    """The block manager as engines write it (protocol `engine`)."""
    return Adapter(BlockManager(pool, block_size))


# -- buggy variants -----------------------------------------------------------

class CopyDstReleased(BlockManager):
    """BUG: copy-on-write returns the copy but also puts its destination
    back on the free list, so the next allocation hands that block out again
    while the copy into it is still pending. Stands for vLLM's copy returned
    to the worker whose destination block had already gone back to the free
    list (a block freed in the same scheduling step as the copy into it was
    recorded). Protocol `engine-copy-dst-released`."""

    def _copy_on_write(self, table: list[int]) -> list[tuple[int, int]]:
        last = table[-1]
        new = self.allocator.allocate()
        table[-1] = new
        self.allocator.free(last)
        self.allocator.free(new)    # BUG: the destination is released with the source
        return [(last, new)]


class ForkNoTailIncref(BlockManager):
    """BUG: a fork that increments the parent's full blocks only, not the
    partly filled last block (an off-by-one: `len // B` blocks instead of
    `ceil(len / B)`, as if only full blocks could be shared). Parent and
    child then both see refcount 1 on the shared tail, both write into it in
    place, and the first to finish frees it under the other. Protocol
    `engine-fork-no-tail-incref`."""

    def fork(self, parent: int, child: int) -> None:
        table = self.block_tables[parent]
        for block in table[: self.seq_lens[parent] // self.block_size]:    # BUG: the tail is skipped
            self.allocator.incref(block)
        self.block_tables[child] = list(table)
        self.seq_lens[child] = self.seq_lens[parent]


class DoubleFreeAfterCow(BlockManager):
    """BUG: after copy-on-write the old last block is released twice, the
    double free after copy-on-write that beam search hit in vLLM ("Double
    free!"). With two owners the block is freed while the other sequence
    still maps it; only a release that takes a refcount below zero raises,
    as it would in the engine. Protocol `engine-double-free-after-cow`."""

    def _copy_on_write(self, table: list[int]) -> list[tuple[int, int]]:
        last = table[-1]
        new = self.allocator.allocate()
        table[-1] = new
        self.allocator.free(last)
        self.allocator.free(last)   # BUG: released a second time
        return [(last, new)]


class RollbackLeaks(BlockManager):
    """BUG: a rollback that shortens the sequence and its table but never
    releases the blocks it drops: they stay allocated, in no table, until
    the engine restarts. Stands for a speculative-decoding rewind that
    forgets to free the blocks its rejected drafts opened. Protocol
    `engine-rollback-leaks`."""

    def rollback(self, seq_id: int, num_tokens: int) -> None:
        table = self.block_tables[seq_id]
        self.seq_lens[seq_id] -= num_tokens
        keep = -(-self.seq_lens[seq_id] // self.block_size)
        del table[keep:]            # BUG: the blocks past the end are dropped, never freed


def copy_dst_released(pool: int, block_size: int) -> Adapter:
    return Adapter(CopyDstReleased(pool, block_size))


def fork_no_tail_incref(pool: int, block_size: int) -> Adapter:
    return Adapter(ForkNoTailIncref(pool, block_size))


def double_free_after_cow(pool: int, block_size: int) -> Adapter:
    return Adapter(DoubleFreeAfterCow(pool, block_size))


def rollback_leaks(pool: int, block_size: int) -> Adapter:
    return Adapter(RollbackLeaks(pool, block_size))
