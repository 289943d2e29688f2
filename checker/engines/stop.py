"""Why a run stopped before its end, as a value.

Every engine stops short for one of a few reasons: a bound the user set
(states, depth, memory, seconds; BMC's depth; k-induction's k), a signal
(Ctrl-C, SIGTERM), a call of the user's code past its deadline, the memory
running out, or on purpose (the first violation found, the peak reached).
A `Stop` is that reason (its `kind`) with its data. The engines make one,
the views and the sweeps ask it (`interrupted`, `kind`), and it is put in
words once per audience: `str()` in the command line's words, which the
report, the JSON's `stopped`, JUnit and the engines' own lines (the
explorer's choice of searches) all print, and `in_sweep` in a sweep's,
where a bound on states or seconds is the cell's budget.

A Stop is a frozen value of plain data: results that carry one pickle
(through Dask, in sweeps) and compare by value."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from signal import SIGINT, SIGTERM, Signals
from typing import Optional

from cowcheck.interrupts import Terminated
from cowcheck.model.harness import CallDeadline, past_deadline


class StopKind(Enum):
    """Why a run stopped short."""
    STATES = "state bound"                  # --max-states: `bound` states stored
    DEPTH = "depth bound"                   # --max-depth: `bound` actions deep
    MEMORY = "memory bound"                 # --max-memory: `bound` MiB resident
    OUT_OF_MEMORY = "out of memory"         # a MemoryError, under no bound or before it
    SECONDS = "time bound"                  # SearchOptions.max_seconds: `bound` seconds
    INTERRUPTED = "interrupted"             # a signal (`by`), maybe inside a call (`during`)
    CALL_DEADLINE = "call deadline"         # the call `during` ran past `bound` seconds
    BMC_BOUND = "bmc bound"                 # BMC searched to depth `bound` and longer runs exist
    NOT_CLOSED = "k-induction not closed"   # k-induction up to k = `bound` left `open` unproven
    FIRST_VIOLATION = "first violation"     # on purpose: --first, or a staged search
    SOUGHT = "every sought violation found"  # on purpose: a search for given shortest lengths
    PEAK_REACHED = "the peak reached"       # on purpose: the search for the peak's trace
    PEAK_NOT_REACHED = "the peak not reached"


#: the name each signal goes by in the words
SIGNAL_NAMES = {SIGINT: "Ctrl-C", SIGTERM: "SIGTERM"}
#: what the words add when the search for the peak's shortest trace stopped
PEAK_SEARCH = " (searching for the peak's shortest trace)"


@dataclass(frozen=True)
class Stop:
    """Why a run stopped short, and the data that says where: the bound
    reached (states, depth, MiB, seconds, BMC depth, k), the signal, the
    call it stopped in, the invariants left open. `peak`: it stopped the
    search for the peak's shortest trace (cowcheck.engines.explicit), after
    the search that judged every invariant ended."""
    kind: StopKind
    bound: Optional[float] = None
    by: Optional[Signals] = None
    during: Optional[str] = None
    open: tuple[str, ...] = ()
    peak: bool = False

    @property
    def interrupted(self) -> bool:
        """A signal stopped it: the command stops too."""
        return self.kind is StopKind.INTERRUPTED

    def __str__(self) -> str:
        """The command line's words (and so the report's, the JSON's, JUnit's)."""
        kind, bound = self.kind, self.bound
        if kind is StopKind.STATES:
            words = f"--max-states {bound}"
        elif kind is StopKind.DEPTH:
            words = f"--max-depth {bound}"
        elif kind is StopKind.MEMORY:
            words = f"--max-memory {bound:,} MiB"
        elif kind is StopKind.OUT_OF_MEMORY:
            words = "out of memory (MemoryError)"
        elif kind is StopKind.SECONDS:
            words = f"max_seconds {bound:g}"
        elif kind is StopKind.INTERRUPTED:
            words = f"interrupted ({SIGNAL_NAMES[self.by or SIGINT]})" + (f" in {self.during}" if self.during else "")
        elif kind is StopKind.CALL_DEADLINE:
            assert self.during is not None and bound is not None
            words = past_deadline(self.during, bound)
        elif kind is StopKind.BMC_BOUND:
            words = f"bmc bound {bound}"
        elif kind is StopKind.NOT_CLOSED:
            words = f"k-induction did not close within k <= {bound}: {', '.join(self.open)}"
        else:                               # the stops on purpose are their names
            words = kind.value
        return words + (PEAK_SEARCH if self.peak else "")

    def in_sweep(self, seconds: Optional[float]) -> str:
        """A sweep's words: a bound on states or seconds is the cell's
        budget, which gave `seconds` for the whole check (the engine's own
        bound may be what was left of it for its last search)."""
        if self.kind is StopKind.SECONDS:
            budget = seconds if seconds is not None else self.bound
            return f"budget: {budget:g} s"
        if self.kind is StopKind.STATES:
            return f"budget: max-states {self.bound}" + (PEAK_SEARCH if self.peak else "")
        return str(self)


class Stoppable:
    """What may stop short (a search, a check's result): its `stop`, and
    that stop in the command line's words (`stopped`, None when it did not)."""
    stop: Optional[Stop]

    @property
    def stopped(self) -> Optional[str]:
        return None if self.stop is None else str(self.stop)


def interrupted(interrupt: KeyboardInterrupt) -> Stop:
    """A run stopped by Ctrl-C, or by SIGTERM (delivered as an interrupt by
    the command line, cowcheck.__main__), inside the adapter call the
    interrupt names if any (cowcheck.adapters.deadline)."""
    return Stop(StopKind.INTERRUPTED, by=SIGTERM if isinstance(interrupt, Terminated) else SIGINT,
                during=getattr(interrupt, "during", None))


def past(late: CallDeadline) -> Stop:
    """A run stopped by a call of the user's code that did not return
    within its deadline."""
    return Stop(StopKind.CALL_DEADLINE, late.seconds, during=f"{late.adapter} {late.call}")


#: why `Explorer.seek` stopped when it reached its target
PEAK_REACHED = Stop(StopKind.PEAK_REACHED)
