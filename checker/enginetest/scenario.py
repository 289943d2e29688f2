"""An engine scenario (specs/engine/*.toml): the requests a real engine
serves and the choices the explorer enumerates.

    description = "..."
    expect = ["violates allocator-error"]   # every invariant not named holds; ["holds"]: every one
    [engine]
    block_size = 4          # tokens per block
    pool = 6                # blocks in the cache
    max_new_tokens = 3
    num_return_sequences = 1   # the engine's forks: every request has n - 1 children
    max_steps = 12          # a schedule's bound on forward steps
    [[request]]
    name = "a"
    prompt = [11, 12, 13, 14]
    submit_within = 0       # submitted at each step 0..n (one schedule each)
    after = "b"             # submitted only once request b finished (counted from there)
    cancel = ["a__child#0"] # (on [engine]) ids cancelled at each step, in flight or after the update

The `[engine]` table is what marks the file: `cowcheck check` skips such
files in a folder (cowcheck.cli.common.scenario_files)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cowcheck.model.errors import SpecError

#: the invariants the engine mode judges, in report order
INVARIANTS = ("exclusive-write", "refcount-write", "cache-immutable", "no-use-after-free", "faithful-output",
              "refcount-exact", "no-leak", "allocator-error")


@dataclass(frozen=True)
class Request:
    name: str
    prompt: tuple[int, ...]
    submit_within: int = 0
    after: Optional[str] = None


@dataclass(frozen=True)
class EngineScenario:
    name: str
    description: str
    block_size: int
    pool: int
    max_new_tokens: int
    num_return_sequences: int
    max_steps: int
    requests: tuple[Request, ...]
    cancels: tuple[str, ...]
    #: the invariants the file expects violated (None: no expect)
    expect: Optional[frozenset[str]]
    #: the file it was read from, as given (empty for one built in code)
    source: str = ""

    def to_toml_data(self) -> dict[str, Any]:
        """The scenario as its file's parsed TOML has it (what `parse` reads
        back): a counterexample embeds it, so a replay needs nothing else."""
        requests = [{"name": r.name, "prompt": list(r.prompt), "submit_within": r.submit_within,
                     **({"after": r.after} if r.after is not None else {})} for r in self.requests]
        return {"description": self.description,
                **({"expect": expect_lines(self.expect)} if self.expect is not None else {}),
                "engine": {"block_size": self.block_size, "pool": self.pool, "max_new_tokens": self.max_new_tokens,
                           "num_return_sequences": self.num_return_sequences, "max_steps": self.max_steps,
                           "cancel": list(self.cancels)},
                "request": requests}


def expect_lines(expect: frozenset[str]) -> list[str]:
    """An expect as a file writes it: ["holds"] when nothing is expected
    violated."""
    return [f"violates {i}" for i in sorted(expect)] or ["holds"]


def is_engine_data(data: dict[str, Any]) -> bool:
    """A TOML document that is an engine scenario."""
    return isinstance(data.get("engine"), dict)


def _int(where: str, table: dict[str, Any], key: str, default: Optional[int] = None, least: int = 0) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise SpecError(where, key, f"must be an integer >= {least}, not {value!r}")
    return value


def parse(data: dict[str, Any], name: str, source: str = "") -> EngineScenario:
    """The scenario in a parsed TOML document; SpecError naming the field."""
    if not is_engine_data(data):
        raise SpecError(name, "engine", "an engine scenario needs an [engine] table")
    eng = data["engine"]
    requests = []
    for i, raw in enumerate(data.get("request", [])):
        where = f"{name} request {i}"
        prompt = raw.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) and 0 <= t < 256 for t in prompt):
            raise SpecError(where, "prompt", "must be a non-empty list of token ids 0..255")
        after = raw.get("after")
        requests.append(Request(str(raw.get("name", f"r{i}")), tuple(prompt), _int(where, raw, "submit_within", 0),
                                str(after) if after is not None else None))
    if not requests:
        raise SpecError(name, "request", "an engine scenario needs at least one [[request]]")
    names = {r.name for r in requests}
    for r in requests:
        if r.after is not None and r.after not in names:
            raise SpecError(name, "after", f"request {r.name!r} waits for {r.after!r}, which is not a request")
    expect = data.get("expect")
    wanted = None
    if expect is not None:
        wanted = set()
        for line in expect:
            verb, _, inv = str(line).partition(" ")
            if line == "holds" and len(expect) == 1:
                continue
            if verb != "violates" or inv not in INVARIANTS:
                raise SpecError(name, "expect", f"{line!r}: write 'holds' alone, or 'violates INVARIANT', one of {', '.join(INVARIANTS)}")
            wanted.add(inv)
    return EngineScenario(name, str(data.get("description", "")), _int(name, eng, "block_size", 4, 1),
                          _int(name, eng, "pool", 8, 1), _int(name, eng, "max_new_tokens", 3, 1),
                          _int(name, eng, "num_return_sequences", 1, 1), _int(name, eng, "max_steps", 12, 1),
                          tuple(requests), tuple(str(c) for c in eng.get("cancel", [])),
                          frozenset(wanted) if wanted is not None else None, source)


def load(path: Path) -> EngineScenario:
    import tomllib
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SpecError(str(path), "", f"cannot read: {error}") from None
    return parse(data, Path(path).stem, str(path))
