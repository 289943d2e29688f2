"""Interrupts delivered where it is safe to stop.

The command line turns Ctrl-C (SIGINT) and SIGTERM into a KeyboardInterrupt
(cowcheck.__main__), which the engines catch to report what they found so
far. Raised at an arbitrary bytecode, that is fine for the explorer's pure
Python, but not inside z3's Python bindings: an exception in the middle of a
ctypes call comes out as `ctypes.ArgumentError`, and one in a destructor is
printed and lost. So the z3 engines run `deferred()`: a signal then only
records itself, and the engine raises it at its next safe point (`poll()`,
called around every solver query). z3's own Ctrl-C handler is off (it
took the signal from Python and could still answer sat or unsat, losing
the interrupt); instead the signal also cancels the solver at once, which
then answers "unknown (interrupted)", and the engine raises the recorded
signal."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, Optional


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt so the same code stops cleanly."""


_depth = 0
_pending: list[int] = []


#: the exit status an interrupted command ends with
INTERRUPT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
received: list[int] = []   # every signal the command line's handler took, in order


#: callbacks Python runs where an exception is printed ("Exception ignored
#: in ...") and lost: weak-reference callbacks of the import system and of
#: the weak collections
_IGNORING = frozenset({"_get_module_lock.<locals>.cb", "WeakValueDictionary.__init__.<locals>.remove",
                       "WeakKeyDictionary.__init__.<locals>.remove", "WeakSet.__init__.<locals>._remove"})


def _in_finalizer(frame: Optional[FrameType]) -> bool:
    """Is Python running a destructor or a weak-reference callback? An
    exception raised there is printed and lost, not delivered (z3 frees its
    terms in `__del__`, often; an import drops its module lock in a
    callback)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_qualname in _IGNORING:
            return True
        frame = frame.f_back
    return False


def _interrupt(signum: int, frame: Optional[FrameType]) -> None:
    received.append(signum)
    if deferring():   # an engine will raise it at its next safe point
        defer(signum)
        return
    if _in_finalizer(frame):     # deliver it again a moment later, outside the destructor
        received.pop()
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return
    raise_for(signum)


def exit_status() -> int:
    """The exit status of a command stopped by the last signal received: 130
    for SIGINT, 143 for SIGTERM."""
    return INTERRUPT_STATUS.get(signal.Signals(received[-1]), 130) if received else 130


def install() -> None:
    """Take over SIGINT and SIGTERM for the command line (cowcheck.__main__),
    before anything heavy is imported."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)


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
    """The signals (SIGINT and SIGTERM if none are named) wait while inside,
    and are delivered on leaving: for writing a run's results, so the files
    come out whole, and for starting worker processes.

    A signal inside is recorded by a handler of our own and raised again
    (`signal.raise_signal`, through the handler that was there before) once
    the handlers are back, so a Ctrl-C is late, never lost. (Ignoring the
    signal, SIG_IGN, would lose it: the kernel discards an ignored signal.)
    The signals are also blocked in this thread, and so in every thread and
    process started inside, which inherit the mask across fork and exec:
    Dask's worker processes, started here, never take the Ctrl-C that a
    terminal sends to the whole process group; only this process acts on it.
    A signal sent while blocked goes to another thread (whose handler call
    still runs here, in the main thread, and records it) or waits pending
    until the mask is lifted. Only the main thread can change signal
    handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    chosen = signums or (signal.SIGINT, signal.SIGTERM)
    arrived: list[int] = []
    previous = [(s, signal.signal(s, lambda signum, frame: arrived.append(signum))) for s in chosen]
    signal.pthread_sigmask(signal.SIG_BLOCK, chosen)
    try:
        yield
    finally:
        for s, handler in previous:
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, chosen)   # one that waited pending is delivered here
        for signum in dict.fromkeys(arrived):                # each signal once, in the order it came
            signal.raise_signal(signum)


@contextmanager
def deferred(cancel: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Signals inside are recorded and raised at the next `poll()`.
    `cancel` (z3's Context.interrupt) is called the moment SIGINT or SIGTERM
    arrives, from a thread that watches Python's signal wakeup descriptor:
    the main thread may be inside a long native call then, which Python's
    handler would wait for, and which `cancel` ends early."""
    global _depth
    _depth += 1
    stop = _watch(cancel) if cancel is not None and _depth == 1 else None
    try:
        yield
    finally:
        if stop is not None:
            stop()
        _depth -= 1
    poll()


def _watch(cancel: Callable[[], None]) -> Optional[Callable[[], None]]:
    """Call `cancel` whenever SIGINT or SIGTERM arrives; returns what stops
    watching. Only the main thread can set the wakeup descriptor."""
    if threading.current_thread() is not threading.main_thread():
        return None
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        while data := os.read(read_end, 64):
            if signal.SIGINT in data or signal.SIGTERM in data:
                cancel()

    watcher = threading.Thread(target=watch, name="cowcheck-interrupts", daemon=True)
    watcher.start()

    def stop() -> None:
        signal.set_wakeup_fd(previous)
        os.close(write_end)          # the watcher reads the end of the pipe and returns
        watcher.join()
        os.close(read_end)
    return stop
