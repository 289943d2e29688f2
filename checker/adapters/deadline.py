"""A deadline on every adapter call (docs/semantics.md#engine-harness).

Allocator code can loop forever or block on a lock; without a bound the
check would hang silently. The explorer gives the harness a `Deadline` as
its guard (`HarnessModel.guard`): every call runs inside it, and one that
has not returned after `seconds` is stopped by a `CallDeadline` raised
inside it, which ends the search with a partial result naming the adapter,
the method and its arguments.

How: in the main thread, `signal.setitimer(ITIMER_REAL)` and a SIGALRM
handler that raises the exception at the next bytecode of the call (or
out of the sleep or lock wait it is blocked in). The handler and the timer
that were there before (pytest-timeout's, say) are put back when the call
returns; one that was due sooner is delivered when it was due. SIGINT and
SIGTERM are not touched: a Ctrl-C inside a call is the interrupt it always
was (cowcheck.interrupts), and carries the call it stopped (`during`), so
the report names it. Off the main thread, where Python allows no signal
handler (a Dask worker's task thread), a watchdog thread raises the same
exception in the calling thread (`PyThreadState_SetAsyncExc`); that stops
Python code, not a call blocked inside C.

`running()` is the call in progress, for the command line's progress line."""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any, Iterator, Optional

from cowcheck.model.harness import CallDeadline

#: the deadline when neither the scenario (`call_deadline`) nor the command
#: line (`--call-deadline`) gives one: far beyond any allocator call of the
#: small scenarios checked, short enough not to be taken for a hang
DEFAULT_SECONDS = 10.0


@dataclass(frozen=True)
class Running:
    """An adapter call in progress."""
    adapter: str
    call: str
    since: float            # time.perf_counter() when it began

    def describe(self, now: Optional[float] = None) -> str:
        seconds = (time.perf_counter() if now is None else now) - self.since
        return f"{self.adapter} {self.call} ({seconds:.1f} s)"


_running: list[Running] = []


def running() -> Optional[Running]:
    """The adapter call this process is in now, if any."""
    return _running[-1] if _running else None


class Deadline:
    """The guard of one harness: `with deadline(call): ...` runs the call
    under `seconds` (0 or None: no deadline, only `running()`)."""

    def __init__(self, seconds: Optional[float], adapter: str):
        self.seconds = seconds or 0.0
        self.adapter = adapter

    @contextmanager
    def __call__(self, call: str) -> Iterator[None]:
        now = Running(self.adapter, call, time.perf_counter())
        _running.append(now)
        try:
            if not self.seconds:
                yield
            elif threading.current_thread() is threading.main_thread():
                with self._alarm(call):
                    yield
            else:
                with self._watchdog(call):
                    yield
        except KeyboardInterrupt as interrupt:     # name the call the Ctrl-C stopped
            if getattr(interrupt, "during", None) is None:
                interrupt.during = now.describe()  # type: ignore[attr-defined]
            raise
        finally:
            _running.remove(now)

    @contextmanager
    def _alarm(self, call: str) -> Iterator[None]:
        inside = [True]
        start = time.monotonic()
        # the timer and the handler that were there before: pytest-timeout's, say
        earlier_delay, earlier_interval = signal.getitimer(signal.ITIMER_REAL)
        earlier = signal.getsignal(signal.SIGALRM)

        fired = [False]        # the earlier timer's, inside the call

        def alarm(signum: int, frame: Optional[FrameType]) -> None:
            elapsed = time.monotonic() - start
            if earlier_delay and not fired[0] and elapsed >= earlier_delay - 1e-3:
                fired[0] = True        # the earlier timer was due first: its handler runs, as it would have
                if elapsed < self.seconds:
                    signal.setitimer(signal.ITIMER_REAL, self.seconds - elapsed)
                if callable(earlier):
                    earlier(signum, frame)
                return
            if inside[0]:
                raise CallDeadline(self.adapter, call, self.seconds)

        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, min(self.seconds, earlier_delay) if earlier_delay else self.seconds)
        try:
            yield
        finally:
            inside[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, earlier)
            if earlier_delay and not fired[0]:       # what was left of the earlier timer, and its period
                left = earlier_delay - (time.monotonic() - start)
                signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), earlier_interval)

    @contextmanager
    def _watchdog(self, call: str) -> Iterator[None]:
        target = threading.get_ident()
        done = threading.Event()

        def watch() -> None:
            if not done.wait(self.seconds):
                _raise_in(target, CallDeadlineIn(self.adapter, call, self.seconds))

        watcher = threading.Thread(target=watch, name="cowcheck-call-deadline", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()


class CallDeadlineIn:
    """A CallDeadline to raise in another thread: PyThreadState_SetAsyncExc
    takes a class, so the class is made for the message."""

    def __new__(cls, adapter: str, call: str, seconds: float) -> Any:   # type: ignore[misc]
        class Late(CallDeadline):
            def __init__(self) -> None:
                super().__init__(adapter, call, seconds)
        Late.__name__ = Late.__qualname__ = "CallDeadline"
        return Late


def _raise_in(thread_id: int, exception: type) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception))
