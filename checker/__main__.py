"""The `cowcheck` command (and `python -m cowcheck`).

Signals are taken over before anything heavy is imported (cowcheck.interrupts):
Ctrl-C (SIGINT) and SIGTERM (what `timeout` and CI runners send) both become
a KeyboardInterrupt that every command turns into its results so far and exit
status 130 (143 for SIGTERM), never a traceback."""

from __future__ import annotations

import sys

from cowcheck import interrupts


def run() -> None:
    interrupts.install()
    try:
        from cowcheck.cli import run as command
    except KeyboardInterrupt:        # interrupted while starting: nothing to report yet
        sys.exit(interrupts.exit_status())
    command()


if __name__ == "__main__":
    run()
