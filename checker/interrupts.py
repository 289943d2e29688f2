"""Interrupts delivered where it is safe to stop.

The command line turns Ctrl-C (SIGINT) and SIGTERM into a KeyboardInterrupt
(cowcheck.__main__), which the engines catch to report what they found so
far. Raised at an arbitrary bytecode, that is fine for the explorer's pure
Python, but not inside z3's Python bindings: an exception in the middle of a
ctypes call comes out as `ctypes.ArgumentError`, and one in a destructor is
printed and lost. So the z3 engines run `deferred()`: a signal then only
records itself, and the engine raises it at its next safe point (`poll()`,
called around every solver query). z3 itself answers "unknown
(interrupted)" when Ctrl-C comes while it solves, which the engines take
as the same interrupt."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt so the same code stops cleanly."""


_depth = 0
_pending: list[int] = []


def deferring() -> bool:
    return _depth > 0


def defer(signum: int) -> None:
    _pending.append(signum)


def raise_for(signum: int) -> None:
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def poll() -> None:
    """Raise a signal that arrived while deferred, now that it is safe."""
    if _pending:
        raise_for(_pending.pop())


@contextmanager
def held(*signums: int) -> Iterator[None]:
    """The signals (SIGINT and SIGTERM if none are named) are ignored while
    inside: for writing a run's results, so the files come out whole, and
    for starting worker processes, which inherit an ignored SIGINT. Only
    the main thread can change signal handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = [(s, signal.signal(s, signal.SIG_IGN)) for s in (signums or (signal.SIGINT, signal.SIGTERM))]
    try:
        yield
    finally:
        for s, handler in previous:
            signal.signal(s, handler)


@contextmanager
def deferred() -> Iterator[None]:
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    poll()
