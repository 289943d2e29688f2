"""What every command shares: the consoles, one line and exit status 2 for bad
input, --json output, output paths checked before a long run, and the
scenario files named on the command line."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import click
from rich.console import Console
from rich.markup import escape

from cowcheck import atomic
from cowcheck.engines.counterexample import Counterexample
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import is_protocol_data, read_toml
from cowcheck.traces.replay import engine_folder

# A terminal's own width; in a file or a pipe, $COLUMNS where a CI job sets
# it (rich reads it), else wide enough for the verdict table.
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 140)

err_console = Console(stderr=True)



def fail(error: SpecError) -> None:
    """Bad input: one line, exit status 2, never a traceback."""
    click.echo(f"cowcheck: error: {error}", err=True)
    sys.exit(2)



def say_engine_folder(cx: Counterexample) -> None:
    """One line on stderr where the commands that replay a counterexample
    load its engine from the folder the file records (its variable unset)."""
    found = engine_folder(cx)
    if found is not None and found.there:
        err_console.print(escape(found.note()), soft_wrap=True, highlight=False)



def emit_json(data: Any, json_path: str) -> None:
    """--json: to stdout for '-', else written atomically."""
    payload = json.dumps(data, indent=2)
    if json_path == "-":
        click.echo(payload)
    else:
        atomic.write_text(Path(json_path), payload + "\n")



def writable_file(path: Optional[str], flag: str) -> None:
    """Refuse an output file that cannot be written before a long run, not
    after it. Missing folders on the way are fine: they are created when the
    file is written (the rule for every output, docs/reference/commands.md)."""
    if not path or path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise SpecError(flag, "", f"cannot write {path}: it is a folder")
    writable_folder(target.parent, flag, path)
    if target.exists() and not os.access(target, os.W_OK):
        raise SpecError(flag, "", f"cannot write {path}: permission denied")



def writable_folder(folder: Path, flag: str, output: Optional[str] = None) -> None:
    """An output folder must be one, or creatable, and writable: proved by
    creating and removing a folder in its nearest existing ancestor, the one
    test the system answers truthfully (permission bits say yes to /proc and
    /sys, and to everything for root). Errors name the user's path (`output`,
    default the folder), never the probe."""
    named = output or str(folder)
    existing = Path(folder)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError(flag, "", f"cannot write {named}: {existing} is not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".cowcheck-probe-"))
    except OSError as error:
        raise SpecError(flag, "", f"cannot write {named}: the system refuses ({error.strerror or error})") from None



def scenario_files(paths: tuple[str, ...]) -> list[Path]:
    """Scenario files named on the command line, or found in folders. In a
    folder, TOML files with an operation's table and no [[branch]] are
    protocols, those with a [grid] table are grids (cowcheck sweep) and
    those with an [engine] table are engine scenarios (cowcheck
    engine-test); all are skipped."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for candidate in sorted(path.rglob("*.toml")):
                data = read_toml(candidate)
                if not is_protocol_data(data) and "grid" not in data and "engine" not in data:
                    out.append(candidate)
        elif path.exists():
            data = read_toml(path) if path.suffix == ".toml" else {}
            if is_protocol_data(data):
                table = next(key for key in ("admit", "append", "cancel", "finish", "fork", "rollback") if key in data)
                raise SpecError(str(path), table, "this is a protocol file; pass a scenario, or apply it with --protocol")
            out.append(path)
        else:
            raise SpecError(str(path), "", "no such file or folder")
    if not out:
        raise SpecError(", ".join(paths), "", "no scenario files found")
    return out

