"""The `cowcheck` command (and `python -m cowcheck`).

Signals are taken over before anything heavy is imported: Ctrl-C (SIGINT)
and SIGTERM (what `timeout` and CI runners send) both become a
KeyboardInterrupt that every command turns into its results so far and exit
status 130 (143 for SIGTERM), never a traceback."""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Optional


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt so the same code stops cleanly."""


#: the exit status an interrupted command ends with
INTERRUPT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
received: list[int] = []


def _interrupt(signum: int, frame: Optional[FrameType]) -> None:
    received.append(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


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
