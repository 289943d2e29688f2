"""`python -m cowcheck`: the same command as the `cowcheck` script."""

from .cli import run

run()
