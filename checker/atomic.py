"""Every file cowcheck writes is written whole or not at all: the text goes
to a temporary file in the same folder, which is renamed over the target.
A reader (or a run interrupted half way) sees the old file or the new one,
never a part of either. The file gets the mode any new file gets (0666 less
the umask), as `open` would give it, not the 0600 of a temporary file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` whole, creating missing folders on the way. An
    error names `path`, never the temporary file the user did not ask for."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
