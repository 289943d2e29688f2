"""Which folder an engine adapter loads the engine's sources from: the one
its environment variable names (`COWCHECK_VLLM_SOURCE`,
`COWCHECK_SGLANG_SOURCE`); else, while a counterexample of that engine's
code is replayed, the folder the file records (`allocator_code.source`);
else none (the installed package).

A counterexample records the folder its trace was found in, so `explain`,
`html` and `replay` of the file need no variable set in a new shell: the
file names its code. Where the folder is gone too, the error names it and
the variable to set, rather than the adapter's "not importable"."""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Iterator, Mapping, Optional

from cowcheck.model.code import Code

#: while a counterexample is replayed (`loading`): by variable, the folder it records
_REPLAYED: ContextVar[Mapping[str, str]] = ContextVar("cowcheck_recorded_folders", default=MappingProxyType({}))


def folder(variable: str) -> Optional[str]:
    """The folder an adapter loads its engine from: $variable; else, while
    a counterexample of that engine is replayed, the folder it records;
    else None (the installed package)."""
    return os.environ.get(variable) or _REPLAYED.get().get(variable)


@dataclass(frozen=True)
class Recorded:
    """The folder a counterexample of an engine's code records, where the
    variable that would name another is unset."""
    variable: str
    folder: str
    release: str

    @property
    def there(self) -> bool:
        return Path(self.folder).is_dir()

    def note(self) -> str:
        """The line a command says when it loads the engine from the folder."""
        return f"{self.variable} is unset: {self.release} is loaded from the folder the file records, {self.folder}"

    def gone(self) -> str:
        """Why the engine cannot be loaded: the folder is not there."""
        return (f"the file records {self.release} from {self.folder}, which is not there, and {self.variable} is unset: "
                f"set {self.variable} to a folder of {self.release}'s Python sources (an unpacked wheel or a checkout)")


def recorded(allocator: Optional[str], code: Optional[Code]) -> Optional[Recorded]:
    """The folder a counterexample records for its engine, where the
    adapter it names (`module:factory`) reads its folder from a variable
    (the module's ENV) and that variable is unset; None otherwise."""
    if allocator is None or code is None or code.source is None:
        return None
    try:
        variable = getattr(importlib.import_module(allocator.partition(":")[0]), "ENV", None)
    except (ImportError, TypeError, ValueError):     # a path to a file, or a module gone: the harness says so
        return None
    if not isinstance(variable, str) or os.environ.get(variable):
        return None
    return Recorded(variable, code.source, code.release)


@contextmanager
def loading(found: Optional[Recorded]) -> Iterator[None]:
    """While this runs, the adapter loads its engine from the recorded
    folder (`folder`), where it is there."""
    if found is None or not found.there:
        yield
        return
    token = _REPLAYED.set(MappingProxyType({**_REPLAYED.get(), found.variable: found.folder}))
    try:
        yield
    finally:
        _REPLAYED.reset(token)
