"""One error type for every kind of bad input.

Every message names the file, the key and what is allowed, so the command line
can print it as one line and exit 2 instead of showing a traceback."""

from __future__ import annotations


class SpecError(Exception):
    """Bad input: a malformed scenario, protocol or counterexample file, or a
    protocol that fails at run time (a step that uses an unbound local)."""

    def __init__(self, source: str, key: str, message: str):
        self.source = str(source)
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        key = f"key '{self.key}': " if self.key else ""
        return one_line(f"{where}{key}{self.message}")


def one_line(text: str) -> str:
    """`text` with its control characters escaped (a newline or carriage
    return quoted from a bad file would split the one error line)."""
    return "".join(c if c >= " " or c == "\t" else repr(c)[1:-1] for c in text)


class KindMismatch(SpecError):
    """An override made for the other kind of scenario: a prefix-cache
    protocol on a fork scenario, an adapter that answers `admit` (not
    `start` and `fork`) on a fork scenario, or one that answers `start` and
    `fork` (not `admit`) on a cache scenario. Bad input for a file named on
    the command line; a check over a folder skips the scenario and counts
    it (`scenario_kind`, and `why` in words)."""

    def __init__(self, source: str, key: str, message: str, scenario_kind: str, why: str):
        self.scenario_kind = scenario_kind      # "fork" or "cache": the kind of the scenario that does not fit
        self.why = why
        super().__init__(source, key, message)


def error_text(err: BaseException) -> str:
    """An exception as one names it: `Type: message`, or `Type` alone when
    it has no message (never a dangling `Type: `)."""
    message = str(err)
    return f"{type(err).__name__}: {message}" if message else type(err).__name__
