"""The `cowcheck` command (and `python -m cowcheck`).

Signals are taken over before anything heavy is imported: Ctrl-C (SIGINT)
and SIGTERM (what `timeout` and CI runners send) both become a
KeyboardInterrupt that every command turns into its results so far and exit
status 130 (143 for SIGTERM), never a traceback."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Optional


#: the exit status an interrupted command ends with
INTERRUPT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
received: list[int] = []


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
    from . import interrupts
    received.append(signum)
    if interrupts.deferring():   # an engine will raise it at its next safe point
        interrupts.defer(signum)
        return
    if _in_finalizer(frame):     # deliver it again a moment later, outside the destructor
        received.pop()
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return
    interrupts.raise_for(signum)


def interrupt_status() -> int:
    return INTERRUPT_STATUS.get(signal.Signals(received[-1]), 130) if received else 130


def run() -> None:
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        from .cli import run as command
    except KeyboardInterrupt:        # interrupted while starting: nothing to report yet
        sys.exit(interrupt_status())
    command()


if __name__ == "__main__":
    run()
