"""Which engine code a system ran: the release and the tree of it, recorded
in every result and counterexample of allocator code, so that an engineer's
changed tree and the release it was changed from keep their evidence apart.
Its own module because every system may have one (TransitionSystem.code),
not only the engine harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from cowcheck.model.errors import SpecError


@dataclass(frozen=True)
class Code:
    """Which engine code an adapter ran: its release (`version()`) and,
    where the adapter says (`code()`), the folder its sources were loaded
    from (None: the installed package) and a digest of the files it
    loaded. One release in an engineer's changed tree and the same release
    unchanged differ in the digest: what keeps one's counterexamples from
    being taken for the other's."""
    release: str
    source: Optional[str] = None
    digest: Optional[str] = None

    def __str__(self) -> str:
        if self.digest is None:
            return self.release
        where = f"from {self.source}" if self.source else "installed"
        return f"{self.release} ({where}, {self.short})"

    @property
    def short(self) -> str:
        """The digest as a name shows it: its first 12 hex digits."""
        return (self.digest or "").partition(":")[2][:12]

    def fields(self) -> dict[str, Any]:
        """What a result or counterexample file records: the release
        (`allocator_version`) and, where known, the tree (`allocator_code`)."""
        tree = {} if self.digest is None else {"allocator_code": {"source": self.source, "digest": self.digest}}
        return {"allocator_version": self.release, **tree}


def other_code(found: Optional[Code], now: Optional[Code]) -> Optional[str]:
    """Why code `now` is not the code a trace was `found` in, in words; None
    when it is, as far as the file records (a release alone compares
    releases; a digest compares trees, wherever their folders are)."""
    if found is None:
        return None
    if now is None or now.release != found.release or (found.digest is not None and now.digest != found.digest):
        return f"other code than found this trace: recorded with {found}; replayed with {now or 'code that names no version'}"
    return None


def code_from_json(release: Optional[str], extra: Any, where: str) -> Optional[Code]:
    """A file's `allocator_version` and `allocator_code` read back."""
    if release is None:
        if extra is not None:
            raise SpecError(where, "allocator_code", "needs allocator_version, the release it is a tree of")
        return None
    if extra is None:
        return Code(release)
    if (not isinstance(extra, dict) or set(extra) != {"source", "digest"} or not isinstance(extra["digest"], str)
            or not extra["digest"].startswith("sha256:") or not (extra["source"] is None or isinstance(extra["source"], str))):
        raise SpecError(where, "allocator_code", 'must be {"source": a folder or null, "digest": "sha256:..."}')
    return Code(release, extra["source"], extra["digest"])
