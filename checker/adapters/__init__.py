"""What an allocator adapter is, for engine teams writing one (docs/how-to/allocator-code.md): the methods the engine harness calls
(`Adapter`, for type checkers) and the exception that says "no free block
now" (`OutOfBlocks`). The harness itself is cowcheck.model.harness."""

from __future__ import annotations

from typing import Hashable, Protocol, runtime_checkable

from cowcheck.model.harness import HarnessModel, OutOfBlocks, load_factory

__all__ = ["Adapter", "CacheAdapter", "OutOfBlocks", "HarnessModel", "load_factory"]


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


@runtime_checkable
class CacheAdapter(Protocol):
    """The host side of an allocator with a prefix cache, for cache
    scenarios (docs/semantics.md#engine-harness): `admit` in place of
    `start`, no `fork`; `cached()` is optional (without it no-stale-key,
    cache-immutable and verified-only-cached are not checked)."""

    def admit(self, branch: str, tokens: list[str]) -> int | tuple[int, list[tuple[int, int]]]:
        """Admit the request with this prompt (token names); return the
        prompt tokens the engine holds already, or that and the copies to
        run before the prefill. Raise OutOfBlocks to make it wait."""

    def append(self, branch: str, token: str, draft: bool) -> list[tuple[int, int]]:
        """Make room for the request's next token (`draft`: a speculative
        draft, not verified until its rollback); return the copies."""

    def rollback(self, branch: str, n: int) -> None:
        """After every verify: the last n drafts are rejected, the others verified."""

    def free(self, branch: str) -> None:
        """The request finished or was cancelled."""

    def table(self, branch: str) -> list[int]:
        """The block table the request's next kernel uses."""


class Observed(Protocol):
    """The optional observers."""

    def refcount(self, block: int) -> int: ...

    def free_blocks(self) -> list[int]: ...

    def snapshot(self) -> Hashable: ...

    def cached(self) -> dict[int, tuple[str, ...]]:
        """Cache scenarios: each block the engine could serve as a hit, with
        the tokens of its own B slots that its key names."""
        ...
