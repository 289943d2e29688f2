"""A copy-on-write block manager for an asynchronous device: `engine.py`'s
manager with the three adapter parts for engines that wait and allocators
that hold (docs/semantics.md#engines-that-wait-and-allocators-that-hold).

`engine.py`'s manager returns its copies and trusts the engine to run them
before the kernel: right on one CUDA stream, wrong on a device that may
complete work out of launch order. This one is right on both, as an engine
for such a device would write it:

- the engine waits: the worker records an event after the copies an
  append returned and the kernel's stream waits on it (`waits_for_copies`);
- the allocator pins a copy's source, a reference of its own in the
  block's refcount, until `copy_done(src, dst)`: while the copy reads a
  shared tail nobody writes it in place (its refcount counts the pin) or
  frees it (the holds protocol's `hold tail`, in code);
- a sequence freed while its last kernel may still run keeps its blocks
  until `kernel_done` says that kernel completed (a deferred release, as
  engines fence a finished step before they reuse its blocks): the kernel
  still writes a block of refcount 1, the sequence's own. That covers a
  copy's destination too: a kernel waits for its copies, so once it is
  done they are.

The engine learns of completions late (at a fence), so a block can stay
pinned after its copy has landed: an append then copies a tail it could
have written in place, correct and one copy dearer. `holds(block)` tells
the harness how many of a block's references are pins; it counts them as
holds, not as a table's: `refcount-write` sees a pinned block written, and
`no-leak` a pin never released.

Factories: `fenced` (the design above); `fenced_no_wait`, the same
allocator without the event wait (unsafe on an asynchronous device: a kernel
reads its tail before the copy lands).
"""

from __future__ import annotations

from cowcheck.specs.allocators.deferred import DeferredRelease
from cowcheck.specs.allocators.engine import Adapter, BlockAllocator, BlockManager


class PinningAllocator(BlockAllocator):
    """A BlockAllocator whose blocks can also be pinned: a pin is one more
    reference, counted in `refcounts` like a table's, and in `pins`."""

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self.pins: list[int] = [0] * num_blocks

    def pin(self, block: int) -> None:
        self.incref(block)
        self.pins[block] += 1

    def unpin(self, block: int) -> None:
        if self.pins[block] <= 0:
            raise AssertionError(f"unpin of block {block}, which is not pinned")
        self.pins[block] -= 1
        self.free(block)            # the pin's reference; the last one frees the block


class FencedBlockManager(DeferredRelease, BlockManager):
    """BlockManager with a pin on each copy's source and a deferred
    release of a sequence freed while a kernel of its may still run."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self.allocator: PinningAllocator = PinningAllocator(num_blocks)

    def append_slot(self, seq_id: int) -> list[tuple[int, int]]:
        """As BlockManager's (a pinned tail has refcount > 1: it is copied,
        never written in place); the append launches a kernel."""
        copies = super().append_slot(seq_id)
        self.launched(seq_id)
        return copies

    def _copy_on_write(self, table: list[int]) -> list[tuple[int, int]]:
        last = table[-1]
        new = self.allocator.allocate()
        table[-1] = new
        self.allocator.pin(last)        # the copy reads it until copy_done
        self.allocator.free(last)       # our table's reference; the others keep theirs
        return [(last, new)]

    def copy_done(self, src: int, dst: int) -> None:
        self.allocator.unpin(src)


class FencedAdapter(Adapter):
    """engine.py's adapter, with the parts of an engine that waits for its
    copies and tells its allocator of completions."""

    waits_for_copies = True
    manager: FencedBlockManager

    def copy_done(self, src: int, dst: int) -> None:
        self.manager.copy_done(src, dst)

    def kernel_done(self, branch: str) -> None:
        self.manager.kernel_done(self._seq(branch))

    def holds(self, block: int) -> int:
        return self.manager.allocator.pins[block]


class NoWaitAdapter(FencedAdapter):
    """BUG: the engine launches the kernel without waiting for the copies."""

    waits_for_copies = False


def fenced(pool: int, block_size: int) -> FencedAdapter:
    """The fenced manager (copies waited for, pins, deferred release)."""
    return FencedAdapter(FencedBlockManager(pool, block_size))


def fenced_no_wait(pool: int, block_size: int) -> NoWaitAdapter:
    return NoWaitAdapter(FencedBlockManager(pool, block_size))
