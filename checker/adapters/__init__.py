"""What an allocator adapter is, for engine teams writing one (docs/how-to/allocator-code.md): the methods the engine harness calls
(`Adapter`, for type checkers) and the exception that says "no free block
now" (`OutOfBlocks`). The harness itself is cowcheck.model.harness."""

from __future__ import annotations

from typing import Hashable, Protocol, runtime_checkable

from cowcheck.model.harness import HarnessModel, OutOfBlocks, load_factory

__all__ = ["Adapter", "OutOfBlocks", "HarnessModel", "load_factory"]


@runtime_checkable
class Adapter(Protocol):
    """The host side of an allocator, as the harness drives it. Branches
    are named "a", "b", ... and tokens "a1", "a2", ...; block ids are the
    allocator's own, from 0 to pool - 1. An adapter is deep-copied with
    pickle, so it holds plain data. `refcount`, `free_blocks` and
    `snapshot` are optional: without the first two some invariants are
    reported as not checked; `snapshot` replaces the exact pickled state as
    what makes two states one (the adapter then answers for it)."""

    def start(self, branches: list[str], prompt: int) -> None:
        """Allocate the prompt's blocks, shared by these root branches."""

    def append(self, branch: str, token: str) -> list[tuple[int, int]]:
        """Make room for the branch's next token; return the copies (src,
        dst) the engine must run first (copy-on-write), possibly none.
        Raise OutOfBlocks when no block is free."""

    def fork(self, parent: str, child: str) -> None:
        """The child shares the parent's blocks."""

    def rollback(self, branch: str, n: int) -> None:
        """Forget the branch's last n tokens."""

    def free(self, branch: str) -> None:
        """The branch finished or was pruned."""

    def table(self, branch: str) -> list[int]:
        """The block table the branch's next kernel uses."""


class Observed(Protocol):
    """The optional observers."""

    def refcount(self, block: int) -> int: ...

    def free_blocks(self) -> list[int]: ...

    def snapshot(self) -> Hashable: ...
