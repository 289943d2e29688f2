"""MkDocs hook: let mkdocstrings find the `cowcheck` package, not the
`cowcheck` command. Run as `.venv/bin/mkdocs` (or `mkdocs` in an activated
virtual environment), Python puts the scripts folder first on sys.path, and
griffe would take the `cowcheck` script found there for the package. With
that folder out of the way, griffe finds the installed package
(`pip install -e ".[docs]"`: checker/ as `cowcheck`, model/ as
`cowcheck.model`, specs/ as `cowcheck.specs`).

It runs at startup, before mkdocstrings reads sys.path in its `on_config`
(MkDocs restores sys.path after loading a hook, so this cannot run at
import)."""

from __future__ import annotations

import sys
from pathlib import Path


def on_startup(command, dirty):
    sys.path[:] = [entry for entry in sys.path if not (Path(entry or ".") / "cowcheck").is_file()]
