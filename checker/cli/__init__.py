"""The `cowcheck` command line: one module per command group, over what they
share (cowcheck.cli.common).

- check.py: `check`, `list`
- traces.py: `replay`, `explain`
- pages.py: `html`, `graph`, `lab`
- sweep.py: `sweep`, `shrink`
- fuzz.py: `fuzz`
- bench.py: `bench`
- diff.py: `diff`
- enginetest.py: `engine-test`"""

from __future__ import annotations

import importlib
import sys
from typing import Optional

import click

from cowcheck import interrupts

#: each command: (its module here, the click command in it); `cowcheck --help` lists them by name
COMMANDS = {
    "check": ("check", "check"), "replay": ("traces", "replay"), "explain": ("traces", "explain"),
    "list": ("check", "list_"), "bench": ("bench", "bench"), "html": ("pages", "html"), "graph": ("pages", "graph"),
    "lab": ("pages", "lab"), "sweep": ("sweep", "sweep"), "shrink": ("sweep", "shrink"), "fuzz": ("fuzz", "fuzz"),
    "diff": ("diff", "diff"), "engine-test": ("enginetest", "engine_test"),
}


class Commands(click.Group):
    """The commands, each imported when it is asked for (click's lazy
    subcommands): `cowcheck check` loads the engines, not the sweeps, the
    pages and the fuzzer too. Every command started about 0.4 s later
    before, and the tests start several hundred of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        command = getattr(importlib.import_module(f"cowcheck.cli.{module}"), attribute)
        assert isinstance(command, click.Command) and command.name == name, (name, command)
        return command


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """cowcheck: model checking for the copy-on-write block ownership
    protocols of LLM inference engines."""


def run() -> None:
    """The `cowcheck` command: click's usage errors (an unknown option, a
    value out of range) and unusable paths (an output under a file, a folder
    without write permission) become one line and exit status 2, like every
    other kind of bad input. Output that the terminal's encoding cannot
    show (a unicode name on an ASCII terminal) is escaped, not a crash."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        main.main(standalone_mode=False)
    except click.exceptions.Exit as done:  # --help, or a command's own exit
        sys.exit(done.exit_code)
    except click.UsageError as error:
        where = error.ctx.command_path if error.ctx else "cowcheck"
        click.echo(f"{where}: error: {error.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        click.echo(f"cowcheck: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):   # Ctrl-C or SIGTERM in a command with nothing to save
        sys.exit(interrupts.exit_status())
    except OSError as error:   # a path given on the command line that cannot be written or read
        where = f"{error.filename}: " if error.filename else ""
        click.echo(f"cowcheck: error: {where}{error.strerror or error}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
