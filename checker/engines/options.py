"""How the explorer searches: the user's choices, one frozen value carried
unchanged from the command line (`cowcheck check`'s flags) through the API
(`cowcheck.check(..., **options)`) and the staged check (cowcheck.engines.explicit)
to the explorer, so that an option is named and documented once.

What the staged check decides for itself (which reductions a stage uses, the
depth bound of the re-search for true shortest lengths) it derives with
`dataclasses.replace`, never by restating the options."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

from cowcheck.model.errors import SpecError


@dataclass(frozen=True)
class SearchOptions:
    """The explorer's options, with the command line's defaults.

    - `max_states`, `max_depth`: stop after this many distinct states, or
      explore runs of at most this many actions (a partial result).
    - `first`: stop at the first violation.
    - `symmetry`: store each orbit of interchangeable branches and renamed
      blocks once.
    - `por`: partial-order reduction. None (the default): the check chooses
      for itself, searching with it first wherever it can pay and falling
      back to the search without it when that finds a violation, so every
      figure is the one the search without it gives
      (cowcheck.engines.explicit); True: always (`--por`), False: never
      (`--no-por`). It needs an exhaustive run: True with `max_depth` is
      refused.
    - `compact`: keep visited states as fixed-width byte encodings;
      `fingerprints`: keep 64-bit fingerprints instead of states.
    - `max_memory_mib`: stop once the process holds this many MiB (None: the
      memory available at the start, less a fifth; 0: no bound).
    - `max_seconds`: stop after searching this long (None: no bound).
    - `call_deadline`: allocator code only: stop once one adapter call has
      run this many seconds (None: the scenario's `call_deadline`, else
      10 s; 0: no deadline; cowcheck.adapters.deadline)."""
    max_states: Optional[int] = None
    max_depth: Optional[int] = None
    first: bool = False
    symmetry: bool = True
    por: Optional[bool] = None
    compact: bool = False
    fingerprints: bool = False
    max_memory_mib: Optional[int] = None
    max_seconds: Optional[float] = None
    call_deadline: Optional[float] = None

    def __post_init__(self) -> None:
        if self.por and self.max_depth is not None:
            raise SpecError("--por", "", "partial-order reduction needs an exhaustive search and cannot be combined "
                            "with --max-depth; leave out --por (by default the check chooses) or --max-depth")

    @property
    def por_asked(self) -> str:
        """`por` as the report and the JSON name it: auto, on or off."""
        return "auto" if self.por is None else "on" if self.por else "off"

    @classmethod
    def of(cls, **given: Any) -> "SearchOptions":
        """Options from keyword arguments, refusing a name that is not one
        (the API's `check(..., symmetry=False)`)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise SpecError("check()", unknown[0], f"not a search option; allowed: {', '.join(sorted(names))}")
        return cls(**given)
