"""A deferred release, as engines with step fences write it: the part of
a block manager that keeps a freed owner's blocks (a sequence's, a
request's) while a kernel it launched may still run, and releases them
when the engine learns, at a fence, that its last such kernel completed
(`kernel_done`). Until then the blocks stay the owner's own references,
not holds: its kernel writes blocks of refcount 1, as the literal rule of
refcount-write asks (docs/semantics.md#engines-that-wait-and-allocators-that-hold).

Mixed in before a manager whose `free(owner)` releases at once:
`fenced.py`'s manager (engine.py's, per sequence) and `prefix.py`'s
`StepFenced` (the V1-style pool, per request).
"""

from __future__ import annotations

from typing import Any, Hashable


class DeferredRelease:
    """Counts the kernels each owner launched and the engine has not yet
    reported done; `free` waits for the count to reach 0."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: kernels launched per owner that the engine has not reported done
        self.in_flight: dict[Hashable, int] = {}
        #: owners freed while a kernel of theirs may still run
        self.deferred: set[Hashable] = set()

    def launched(self, owner: Hashable) -> None:
        """The owner's call launched a kernel (a prefill, an append's)."""
        self.in_flight[owner] = self.in_flight.get(owner, 0) + 1

    def kernel_done(self, owner: Hashable) -> None:
        self.in_flight[owner] -= 1
        if self.in_flight[owner] == 0 and owner in self.deferred:
            self.deferred.discard(owner)
            super().free(owner)  # type: ignore[misc]  # the manager's own release

    def free(self, owner: Hashable) -> None:
        """Drop the owner's references, or, while a kernel of its may still
        run, once that kernel is done."""
        if self.in_flight.get(owner, 0):
            self.deferred.add(owner)
        else:
            super().free(owner)  # type: ignore[misc]
