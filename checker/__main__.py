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


def _in_finalizer(frame: Optional[FrameType]) -> bool:
    """Is Python running a destructor? An exception raised there is printed
    ("Exception ignored in ...") and lost, not delivered (z3 frees its terms
    in `__del__`, often)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
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
