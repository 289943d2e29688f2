"""Scenarios: the block graph and branch programs a protocol is checked on
(specs/SEMANTICS.md#scenario)."""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

from .errors import SpecError
from .protocol import Protocol, protocol_from_dict, read_toml, resolve_protocol

DEVICES = ("async", "stream", "streams")
REUSES = ("lifo", "fifo", "any")
SCENARIO_KEYS = ("protocol", "block_size", "prompt", "pool", "device", "reuse", "branch", "expect", "description")
BRANCH_KEYS = ("appends", "may_cancel")
BRANCH_NAMES = string.ascii_lowercase


@dataclass(frozen=True)
class BranchSpec:
    appends: int = 0
    may_cancel: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    protocol: Protocol
    block_size: int
    prompt: int
    pool: int
    device: str
    reuse: str
    branches: tuple[BranchSpec, ...]
    expect: tuple[str, ...] = ()
    description: str = ""

    @property
    def prompt_blocks(self) -> int:
        return -(-self.prompt // self.block_size)

    def branch_name(self, index: int) -> str:
        return BRANCH_NAMES[index]

    def tokens(self, index: int) -> tuple[str, ...]:
        """Branch `index`'s reference sequence: the prompt, then its own tokens."""
        name = BRANCH_NAMES[index]
        own = self.branches[index].appends
        return tuple(f"p{i}" for i in range(self.prompt)) + tuple(f"{name}{k}" for k in range(1, own + 1))

    def with_overrides(self, protocol: Protocol | None = None, device: str | None = None, reuse: str | None = None) -> "Scenario":
        """The same scenario under another protocol, device model or reuse
        order (the command line's overrides). An explicit pool is kept; a
        default one is recomputed for the new protocol."""
        changed = replace(
            self,
            protocol=protocol or self.protocol,
            device=device or self.device,
            reuse=reuse or self.reuse,
        )
        if protocol is not None and self.pool == default_pool(self.protocol, self.block_size, self.prompt, self.branches):
            changed = replace(changed, pool=default_pool(protocol, self.block_size, self.prompt, self.branches))
        return changed

    def definition(self) -> dict[str, Any]:
        """The scenario as plain data, protocol included, so a counterexample
        file is self-contained."""
        return {
            "name": self.name,
            "source": self.source,
            "block_size": self.block_size,
            "prompt": self.prompt,
            "pool": self.pool,
            "device": self.device,
            "reuse": self.reuse,
            "branch": [{"appends": b.appends, "may_cancel": b.may_cancel} for b in self.branches],
            "protocol": self.protocol.definition,
        }


def default_pool(protocol: Protocol, block_size: int, prompt: int, branches: tuple[BranchSpec, ...]) -> int:
    """An upper bound on the blocks the scenario can ever hold."""
    prompt_blocks = -(-prompt // block_size)
    return prompt_blocks + sum(b.appends for b in branches) * protocol.max_allocs


#: Upper bounds far beyond what exhaustive exploration can reach; they turn an
#: impossible parameter into an error instead of a hang.
MAXIMA = {"block_size": 64, "prompt": 1024, "pool": 1024, "appends": 64}


@overload
def _int(data: dict[str, Any], key: str, source: str, minimum: int, required: Literal[True], label: str | None = None) -> int: ...
@overload
def _int(data: dict[str, Any], key: str, source: str, minimum: int, required: bool, label: str | None = None) -> int | None: ...


def _int(data: dict[str, Any], key: str, source: str, minimum: int, required: bool, label: str | None = None) -> int | None:
    maximum = MAXIMA[key]
    if key not in data:
        if required:
            raise SpecError(source, label or key, f"missing; an integer from {minimum} to {maximum} is required")
        return None
    value = data[key]
    if type(value) is not int or not minimum <= value <= maximum:
        raise SpecError(source, label or key, f"must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str, source: str) -> str:
    value: str = data.get(key, default)  # one of `allowed` once checked
    if value not in allowed:
        raise SpecError(source, key, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
    return value


def parse_expect(value: Any, source: str) -> tuple[str, ...]:
    """The form of `expect`; which invariant ids exist is the checker's to say
    (cowcheck.invariants.validate_expect)."""
    items = [value] if isinstance(value, str) else value
    allowed = "\"holds\", \"safe\", \"violates <invariant>\", or a list of these"
    if not isinstance(items, list) or not items:
        raise SpecError(source, "expect", f"must be {allowed}")
    out = []
    for item in items:
        words = item.split() if isinstance(item, str) else []
        if words in (["holds"], ["safe"]) or (len(words) == 2 and words[0] == "violates"):
            out.append(" ".join(words))
        else:
            raise SpecError(source, "expect", f"unknown expectation {item!r}; allowed: {allowed}")
    return tuple(out)


def scenario_from_dict(data: Any, source: str, base: Path, name: str) -> Scenario:
    if not isinstance(data, dict):
        raise SpecError(source, "", "must be a table")
    for key in data:
        if key not in SCENARIO_KEYS:
            raise SpecError(source, key, f"unknown key; allowed: {', '.join(SCENARIO_KEYS)}")
    proto = data.get("protocol", "cow")
    protocol = protocol_from_dict(proto, source + " (protocol)") if isinstance(proto, dict) else resolve_protocol(proto, base, source)
    block_size = _int(data, "block_size", source, 1, required=True)
    prompt = _int(data, "prompt", source, 0, required=True)

    raw_branches = data.get("branch")
    if not isinstance(raw_branches, list) or not raw_branches:
        raise SpecError(source, "branch", "missing; give at least one [[branch]] table")
    if len(raw_branches) > len(BRANCH_NAMES):
        raise SpecError(source, "branch", f"{len(raw_branches)} branches; at most {len(BRANCH_NAMES)} are allowed")
    branches = []
    for i, raw in enumerate(raw_branches):
        key = f"branch[{i}]"
        if not isinstance(raw, dict):
            raise SpecError(source, key, "must be a table")
        for k in raw:
            if k not in BRANCH_KEYS:
                raise SpecError(source, f"{key}.{k}", f"unknown key; allowed: {', '.join(BRANCH_KEYS)}")
        appends = _int(raw, "appends", source, 0, required=False, label=f"{key}.appends") or 0
        may_cancel = raw.get("may_cancel", False)
        if not isinstance(may_cancel, bool):
            raise SpecError(source, f"{key}.may_cancel", f"must be true or false, got {may_cancel!r}")
        branches.append(BranchSpec(appends, may_cancel))
    branches_t = tuple(branches)

    prompt_blocks = -(-prompt // block_size)
    pool = _int(data, "pool", source, 0, required=False)
    if pool is None:
        pool = default_pool(protocol, block_size, prompt, branches_t)
    elif pool < prompt_blocks:
        raise SpecError(source, "pool", f"{pool} blocks cannot hold the prompt; it needs at least {prompt_blocks} (ceil({prompt}/{block_size}))")

    description = data.get("description", "")
    if not isinstance(description, str):
        raise SpecError(source, "description", "must be a string")
    return Scenario(
        name=name,
        source=source,
        protocol=protocol,
        block_size=block_size,
        prompt=prompt,
        pool=pool,
        device=_choice(data, "device", DEVICES, "async", source),
        reuse=_choice(data, "reuse", REUSES, "lifo", source),
        branches=branches_t,
        expect=parse_expect(data["expect"], source) if "expect" in data else (),
        description=description,
    )


def load_scenario(path: Path) -> Scenario:
    path = Path(path)
    return scenario_from_dict(read_toml(path), str(path), path.parent, path.stem)


def make_scenario(block_size: int, prompt: int, branches: list[tuple[int, bool]] | list[int], protocol: str | Protocol = "cow",
                  device: str = "async", reuse: str = "lifo", pool: int | None = None, name: str = "") -> Scenario:
    """A scenario built in code (benchmarks, tests), validated like a file."""
    data: dict[str, Any] = {
        "block_size": block_size,
        "prompt": prompt,
        "device": device,
        "reuse": reuse,
        "branch": [{"appends": b} if isinstance(b, int) else {"appends": b[0], "may_cancel": b[1]} for b in branches],
    }
    if pool is not None:
        data["pool"] = pool
    if isinstance(protocol, str):
        data["protocol"] = protocol
        scenario = scenario_from_dict(data, "<scenario>", Path("."), name or f"{protocol}-B{block_size}-L{prompt}")
    else:
        data["protocol"] = protocol.definition
        scenario = scenario_from_dict(data, "<scenario>", Path("."), name or f"{protocol.name}-B{block_size}-L{prompt}")
        scenario = replace(scenario, protocol=protocol)
    return scenario
