"""Two runs of a check side by side (`cowcheck diff`): per scenario, each
invariant whose verdict or shortest length changed, the peak if it
changed, and whether the change made anything worse.

A run is what `cowcheck check` left: its `--json` file (every invariant it
judged, with its outcome) or its folder of counterexamples
(`<scenario>.<invariant>.json` for each broken invariant,
`<scenario>.peak.json` for the peak). A folder knows only what broke: an
invariant without a file there reads as "no counterexample", which is no
verdict of its own (it did not break, or was not checked).

Worse means: an invariant that did not break now breaks, one that broke
now breaks in fewer actions, or a scenario of the earlier run is missing
from the later one (a run that lost a scenario says nothing about it).
Everything else that changed is shown and is not worse: an invariant that
no longer breaks or breaks later, a verdict that became undecided (a
partial run, an engine that cannot judge it), a peak that moved (a cost,
not a verdict), a new scenario.

`read_run` reads a run; `compare` reads nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple, Optional

from cowcheck.engines import counterexample as trace
from cowcheck.engines.results import FORMAT, Outcome
from cowcheck.model.errors import SpecError

#: what an invariant reads as in a folder that has no file for it
NO_FILE = "no counterexample"
#: what an invariant reads as in a --json result that does not list it (--invariant)
NOT_CHECKED = "not checked"
#: the two kinds of input, for error messages
EXPECTED = "expected the --json file of a cowcheck check, or a folder of its counterexamples"


class Answer(NamedTuple):
    """One invariant's answer in one run: an Outcome's value, NO_FILE or
    NOT_CHECKED, and the shortest length when it broke."""
    outcome: str
    length: Optional[int] = None

    @property
    def broken(self) -> bool:
        return self.outcome == Outcome.VIOLATED

    @property
    def judged(self) -> bool:
        """A verdict the run gave (not a file that is absent, nor an invariant it left out)."""
        return self.outcome not in (NO_FILE, NOT_CHECKED)

    def __str__(self) -> str:
        return f"{self.outcome} ({self.length})" if self.broken else self.outcome

    def to_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "length": self.length}


@dataclass(frozen=True)
class Record:
    """One scenario's answers in one run; `absent` is what an invariant it
    does not list reads as."""
    name: str
    answers: dict[str, Answer]
    peak: Optional[int]
    absent: Answer

    def answer(self, invariant: str) -> Answer:
        return self.answers.get(invariant, self.absent)


@dataclass(frozen=True)
class Run:
    """What one check left, as read from `where`."""
    where: str
    records: dict[str, Record]


class Change(StrEnum):
    NOW_BREAKS = "now breaks"
    SOONER = "breaks sooner"
    LATER = "breaks later"
    NO_LONGER = "no longer breaks"
    VERDICT = "verdict changed"
    PEAK_UP = "peak up"
    PEAK_DOWN = "peak down"
    MISSING = "missing"
    NEW = "new"


#: the changes that make `cowcheck diff` exit 1
WORSE = frozenset({Change.NOW_BREAKS, Change.SOONER, Change.MISSING})

#: the item of a change that concerns the whole scenario (missing, new) or its peak
SCENARIO, PEAK = "scenario", trace.PEAK


@dataclass(frozen=True)
class Difference:
    """One line of a comparison: a scenario (as the later run names it, the
    earlier run's name when it is missing), the name it was paired with in
    the earlier run, the item (an invariant id, PEAK or SCENARIO), what
    each run says, and the change."""
    scenario: str
    baseline: Optional[str]
    item: str
    before: Optional[Any]        # an Answer, a peak (int) or a scenario's name; None where the run has none
    after: Optional[Any]
    change: Change

    @property
    def worse(self) -> bool:
        return self.change in WORSE

    def words(self, side: Optional[Any]) -> str:
        """What one side says, as the table shows it."""
        if side is None:
            return "absent"
        if self.item == PEAK:
            return f"{side} blocks"
        return "checked" if self.item == SCENARIO else str(side)

    def to_json(self) -> dict[str, Any]:
        def side(value: Optional[Any]) -> Optional[dict[str, Any]]:
            if value is None:
                return None
            if self.item == PEAK:
                return {"peak_blocks": value}
            return {"scenario": value} if self.item == SCENARIO else value.to_json()
        return {"scenario": self.scenario, "baseline": self.baseline, "item": self.item,
                "before": side(self.before), "after": side(self.after), "change": str(self.change), "worse": self.worse}


@dataclass(frozen=True)
class Comparison:
    """Every difference between two runs, in scenario order, and how many
    scenarios were paired."""
    before: str
    after: str
    compared: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def worse(self) -> list[Difference]:
        return [d for d in self.differences if d.worse]

    def count(self, change: Change) -> int:
        return sum(d.change is change for d in self.differences)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "before": self.before, "after": self.after, "compared": self.compared,
                "missing": self.count(Change.MISSING), "new": self.count(Change.NEW), "worse": len(self.worse),
                "differences": [d.to_json() for d in self.differences]}


# -- the comparison ---------------------------------------------------------------------
def compare(before: Run, after: Run) -> Comparison:
    """What changed from `before` to `after`, scenario by scenario."""
    differences: list[Difference] = []
    pairs = pair(before.records, after.records)
    for old, new in pairs:
        if new is None:
            assert old is not None
            differences.append(Difference(old.name, old.name, SCENARIO, old.name, None, Change.MISSING))
        elif old is None:
            differences.append(Difference(new.name, None, SCENARIO, None, new.name, Change.NEW))
        else:
            differences += _changes(old, new)
    compared = sum(old is not None and new is not None for old, new in pairs)
    return Comparison(before.where, after.where, compared, differences)


def _changes(old: Record, new: Record) -> list[Difference]:
    out = []
    for invariant in [*old.answers, *(i for i in new.answers if i not in old.answers)]:
        a, b = old.answer(invariant), new.answer(invariant)
        change = verdict_change(a, b)
        if change is not None:
            out.append(Difference(new.name, old.name, invariant, a, b, change))
    if old.peak is not None and new.peak is not None and old.peak != new.peak:
        out.append(Difference(new.name, old.name, PEAK, old.peak, new.peak,
                              Change.PEAK_UP if new.peak > old.peak else Change.PEAK_DOWN))
    return out


def verdict_change(before: Answer, after: Answer) -> Optional[Change]:
    """How one invariant's answer changed, or None when it did not. An
    absent file or an invariant left out is compared only as "not broken"."""
    if after.broken:
        if not before.broken:
            return Change.NOW_BREAKS
        assert before.length is not None and after.length is not None
        return Change.SOONER if after.length < before.length else Change.LATER if after.length > before.length else None
    if before.broken:
        return Change.NO_LONGER if after.outcome in (Outcome.HOLDS, NO_FILE) else Change.VERDICT
    if before.judged and after.judged and before.outcome != after.outcome:
        return Change.VERDICT
    return None


def base_name(name: str) -> str:
    """A scenario's name without what an override appends (`~protocol-device-reuse`)."""
    return name.split("~", 1)[0]


def pair(before: dict[str, Record], after: dict[str, Record]) -> list[tuple[Optional[Record], Optional[Record]]]:
    """The scenarios of two runs paired by name; of those left, one of each
    run with the same name before its `~` (the scenario as written and under
    an override, or under two overrides), when that pair is the only one;
    the rest alone. In the order of the name each is shown by."""
    pairs: list[tuple[Optional[Record], Optional[Record]]] = [(before[n], after[n]) for n in before if n in after]
    old_left = [r for n, r in before.items() if n not in after]
    new_left = [r for n, r in after.items() if n not in before]
    for base in {base_name(r.name) for r in old_left}:
        olds = [r for r in old_left if base_name(r.name) == base]
        news = [r for r in new_left if base_name(r.name) == base]
        if len(olds) == 1 and len(news) == 1:
            pairs.append((olds[0], news[0]))
            old_left.remove(olds[0])
            new_left.remove(news[0])
    pairs += [(r, None) for r in old_left] + [(None, r) for r in new_left]
    return sorted(pairs, key=_shown)


def _shown(paired: tuple[Optional[Record], Optional[Record]]) -> str:
    """The name a pair is shown by: the later run's, else the earlier's."""
    record = paired[1] or paired[0]
    assert record is not None
    return record.name


# -- reading a run ------------------------------------------------------------------------
def read_run(path: Path) -> Run:
    """A run from its --json file or its folder of counterexamples; anything
    else is a SpecError naming the file and what is wrong."""
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise SpecError(str(path), "", f"no such file or folder; {EXPECTED}")
    return read_results(path)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"cannot be read ({getattr(err, 'strerror', None) or err})") from None
    except json.JSONDecodeError as err:
        raise SpecError(str(path), "", f"invalid JSON ({err}); {EXPECTED}") from None
    except (RecursionError, MemoryError):
        raise SpecError(str(path), "", f"nested too deeply to read; {EXPECTED}") from None


def _int(value: Any) -> bool:
    return type(value) is int and value >= 0


def read_results(path: Path) -> Run:
    """The list `cowcheck check --json` writes: per scenario its verdicts
    (outcome and length) and, from the explorer, its peak."""
    data, source = _json(path), str(path)
    if not isinstance(data, list):
        raise SpecError(source, "", f"not a list of results; {EXPECTED}")
    records: dict[str, Record] = {}
    outcomes = [str(o) for o in Outcome]
    for n, result in enumerate(data):
        if not isinstance(result, dict) or result.get("format") != FORMAT:
            raise SpecError(source, f"[{n}]", f"not a cowcheck check result (format {FORMAT} expected); {EXPECTED}")
        name, verdicts, peak = result.get("scenario"), result.get("verdicts"), result.get("peak_blocks")
        if not isinstance(name, str) or not name:
            raise SpecError(source, f"[{n}].scenario", "must be the scenario's name, a non-empty string")
        if name in records:
            raise SpecError(source, f"[{n}].scenario", f"{name!r} appears twice; one run checks a scenario once")
        if not isinstance(verdicts, dict):
            raise SpecError(source, f"[{n}].verdicts", "must be an object of verdicts, one per invariant")
        if peak is not None and not _int(peak):
            raise SpecError(source, f"[{n}].peak_blocks", "must be a count of blocks, or null")
        answers = {}
        for invariant, verdict in verdicts.items():
            where = f"[{n}].verdicts.{invariant}"
            outcome = verdict.get("outcome") if isinstance(verdict, dict) else None
            if outcome not in outcomes:
                raise SpecError(source, f"{where}.outcome", f"must be one of {', '.join(outcomes)}")
            length = verdict.get("length")
            if outcome == Outcome.VIOLATED and not _int(length):
                raise SpecError(source, f"{where}.length", "must be the shortest counterexample's length in actions")
            answers[invariant] = Answer(outcome, length if outcome == Outcome.VIOLATED else None)
        records[name] = Record(name, answers, peak, Answer(NOT_CHECKED))
    return Run(source, records)


def read_folder(folder: Path) -> Run:
    """The counterexample files in a folder (not its subfolders): per
    scenario the invariants that broke, with their lengths, and the peak.
    The names come from the files' contents; JSON files that are not
    counterexample files (no "cowcheck" key) are passed over."""
    answers: dict[str, dict[str, Answer]] = {}
    peaks: dict[str, int] = {}
    for path in sorted(folder.glob("*.json")):
        if not path.is_file():
            continue
        data, source = _json(path), str(path)
        if not isinstance(data, dict) or "cowcheck" not in data:
            continue
        if data["cowcheck"] != trace.FORMAT:
            raise SpecError(source, "cowcheck", f"not a cowcheck counterexample file (format {trace.FORMAT} expected)")
        scenario = data.get("scenario")
        name = scenario.get("name") if isinstance(scenario, dict) else None
        if not isinstance(name, str) or not name:
            raise SpecError(source, "scenario.name", "must be the scenario's name, a non-empty string")
        kind = data.get("kind")
        if kind == trace.PEAK:
            if not _int(data.get("peak_blocks")):
                raise SpecError(source, "peak_blocks", "must be a count of blocks in a peak trace")
            peaks[name] = data["peak_blocks"]
            answers.setdefault(name, {})
        elif kind == "counterexample":
            invariant, length = data.get("invariant"), data.get("length")
            if not isinstance(invariant, str) or not invariant:
                raise SpecError(source, "invariant", "must be an invariant id")
            if not _int(length):
                raise SpecError(source, "length", "must be the trace's length in actions")
            answers.setdefault(name, {})[invariant] = Answer(str(Outcome.VIOLATED), length)
        elif kind not in (trace.CALL_DEADLINE, trace.HOST_PEAK):    # a call that did not return, a host peak: no invariant's answer
            raise SpecError(source, "kind", f"unknown kind {kind!r}; allowed: {', '.join(trace.KINDS)}")
    if not answers:
        raise SpecError(str(folder), "", "no counterexample files (<scenario>.<invariant>.json, <scenario>.peak.json) "
                        f"in this folder; {EXPECTED}")
    return Run(str(folder), {name: Record(name, found, peaks.get(name), Answer(NO_FILE)) for name, found in answers.items()})
