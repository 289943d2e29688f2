"""The harness's memo of host calls: do not ask the allocator twice.

Through the harness most host calls repeat one already made on the same
allocator (71 % on vLLM V1's n = 4 scenario): the same pickled adapter,
asked the same call, in another state of the search, one that a device
completion changed and the allocator did not. The memo keeps, per adapter
pickle and call, what the call returned and the adapter after it: pickled
once, with its snapshot key, and every observer's answer on it (table,
refcount, holds, free_blocks, cached). A repeat then neither unpickles,
calls, observes nor pickles; it gets the same answer and the same
resulting snapshot, so the search is the same.

That holds for an adapter whose calls depend on nothing but its pickle and
their arguments. One that depends on more (a clock, a global counter,
randomness not in its pickle) declares `deterministic = False`, and the
memo is off for it. The memo holds at most `LIMIT` calls; past that the
oldest goes."""

from __future__ import annotations

import pickle
from typing import Any, Hashable, Optional

#: the most host calls the memo keeps
LIMIT = 1 << 15
#: what a call that raised OutOfBlocks returned, as the memo keeps it
OUT_OF_BLOCKS = object()
#: the adapter attribute by which it says whether its calls depend on its pickle alone
DETERMINISTIC = "deterministic"


class Outcome:
    """A host call on one adapter pickle: what it returned, and the adapter
    after it (`live` until it is pickled, then `frozen`: its snapshot key
    and pickle), with the observers' answers on it so far."""

    __slots__ = ("returned", "live", "frozen", "answers")

    def __init__(self, returned: Any, live: Any):
        self.returned, self.live = returned, live
        self.frozen: Optional[tuple[Hashable, bytes]] = None
        self.answers: dict[tuple[str, tuple[Any, ...]], Any] = {}

    def ask(self, method: str, args: tuple[Any, ...]) -> Any:
        """An observer's answer on the adapter after the call (asked of the
        adapter once: unpickled again if it was pickled since)."""
        key = (method, args)
        if key not in self.answers:
            if self.live is None:
                assert self.frozen is not None, "an outcome is live or frozen"
                self.live = pickle.loads(self.frozen[1])
            self.answers[key] = getattr(self.live, method)(*args)
        return self.answers[key]


class After:
    """Stands in for the adapter after a call: each method it is asked is
    answered by the outcome (HarnessModel._freeze takes its snapshot from
    the outcome too)."""

    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def __getattr__(self, method: str) -> Any:
        return lambda *args: self.outcome.ask(method, args)


class Memo:
    """(adapter pickle, call) -> Outcome, at most `limit` of them."""

    def __init__(self, limit: Optional[int] = None):
        self.limit = LIMIT if limit is None else limit      # 0: keep nothing (bench's run without the memo)
        self.entries: dict[tuple[bytes, str], Outcome] = {}
        self.calls = 0
        self.hits = 0

    def get(self, key: tuple[bytes, str]) -> Optional[Outcome]:
        self.calls += 1
        found = self.entries.get(key)
        self.hits += found is not None
        return found

    def put(self, key: tuple[bytes, str], outcome: Outcome) -> None:
        if self.limit <= 0:
            return
        if len(self.entries) >= self.limit:
            del self.entries[next(iter(self.entries))]     # the oldest
        self.entries[key] = outcome
