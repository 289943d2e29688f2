"""Scenarios: the block graph and branch programs a protocol is checked on
(docs/semantics.md#scenario)."""

from __future__ import annotations

import string
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple, Optional, overload

from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol, protocol_from_dict, read_toml, resolve_protocol
from cowcheck.model.structure import Op

DEVICES = ("async", "stream", "streams")
REUSES = ("lifo", "fifo", "any")
SCENARIO_KEYS = ("protocol", "allocator", "block_size", "prompt", "pool", "device", "reuse", "branch", "expect", "description")
BRANCH_KEYS = ("appends", "may_cancel", "program", "parent")
BRANCH_NAMES = string.ascii_lowercase
PROGRAM_FORMS = '"append", "fork <child>", "speculate <K>" (K >= 1)'


class Operation(NamedTuple):
    """One operation of a branch's flattened program: an append (a draft
    included), a fork of child branch `arg`, or a rollback of `arg` drafts
    (verify, then the protocol's [rollback]). `speculate K` flattens to K
    appends and one rollback, so a cancel may come between any two."""
    op: Op
    arg: int = 0


def parse_operation(text: str) -> list[Operation]:
    """A program entry, already validated, as flat operations."""
    word, *rest = text.split()
    if word == "append":
        return [Operation(Op.APPEND)]
    if word == "fork":
        return [Operation(Op.FORK, BRANCH_NAMES.index(rest[0]))]
    k = int(rest[0])
    return [Operation(Op.APPEND)] * k + [Operation(Op.ROLLBACK, k)]


@dataclass(frozen=True)
class BranchSpec:
    """A branch's program. `appends` counts every append it makes, drafts
    included (its writes, the most tokens it names); `appends = k` alone is
    short for a program of k "append"s. `parent`: the branch that forks it
    (None for a root, born at the prompt)."""
    appends: int = 0
    may_cancel: bool = False
    program: tuple[str, ...] = ()
    parent: Optional[int] = None

    def __post_init__(self) -> None:
        if not self.program:
            object.__setattr__(self, "program", ("append",) * self.appends)
        else:
            object.__setattr__(self, "appends", sum(o.op is Op.APPEND for o in self.operations))

    @cached_property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(o for text in self.program for o in parse_operation(text))

    @property
    def plain(self) -> bool:
        """A root that only appends: the lifecycle without branch programs."""
        return self.parent is None and all(text == "append" for text in self.program)

    @property
    def label(self) -> str:
        """Short, for one-line descriptions: `2` (two appends), `2c` (and
        cancellable), or the program `[append, fork c]c`."""
        text = str(self.appends) if self.plain else "[" + ", ".join(self.program) + "]"
        return text + ("c" if self.may_cancel else "")

    @property
    def forks(self) -> int:
        return sum(o.op is Op.FORK for o in self.operations)

    @property
    def speculates(self) -> int:
        return sum(o.op is Op.ROLLBACK for o in self.operations)


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
    #: `module:factory` or `path/file.py:factory` (relative to the scenario's
    #: folder): allocator code checked through the engine harness in place
    #: of the protocol (docs/semantics.md#engine-harness)
    allocator: Optional[str] = None
    #: the folder a path in `allocator` is relative to (the scenario file's;
    #: for a counterexample, the folder of the scenario it was made from)
    allocator_base: str = field(default="", compare=False)

    @property
    def prompt_blocks(self) -> int:
        return -(-self.prompt // self.block_size)

    def branch_name(self, index: int) -> str:
        return BRANCH_NAMES[index]

    @property
    def subject(self) -> str:
        """What is checked, in a report: the protocol's name, or the allocator code's reference."""
        return self.allocator if self.allocator is not None else self.protocol.name

    def own_tokens(self, index: int) -> tuple[str, ...]:
        """The tokens branch `index` can write, in write order: its k-th
        write writes `<name>k`, and a name is never reused."""
        name = BRANCH_NAMES[index]
        return tuple(f"{name}{k}" for k in range(1, self.branches[index].appends + 1))

    def tokens(self, index: int) -> tuple[str, ...]:
        """The prompt, then branch `index`'s own tokens: a plain branch's
        reference sequence (with forks and rollbacks the sequence is state,
        cowcheck.model.state.Branch.seq)."""
        return tuple(f"p{i}" for i in range(self.prompt)) + self.own_tokens(index)

    @property
    def roots(self) -> tuple[int, ...]:
        return tuple(i for i, b in enumerate(self.branches) if b.parent is None)

    @property
    def plain(self) -> bool:
        """No branch forks or speculates: the lifecycle of the first release."""
        return all(b.plain for b in self.branches)

    def max_pos(self, index: int) -> int:
        """The longest branch `index`'s sequence can grow: its appends on top
        of the prompt, or of the longest its parent can be at the fork."""
        spec = self.branches[index]
        start = self.prompt if spec.parent is None else self.max_pos(spec.parent)
        return start + spec.appends

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(self.branch_name(i) for i in range(len(self.branches)))

    @cached_property
    def operations(self) -> tuple[tuple[Operation, ...], ...]:
        """Each branch's flattened program."""
        return tuple(spec.operations for spec in self.branches)

    @cached_property
    def lineage(self) -> tuple[tuple[int, ...], ...]:
        """Each branch's descendants: the unborn ones a cancel of it cancels with it."""
        return tuple(self.descendants(i) for i in range(len(self.branches)))

    def descendants(self, index: int) -> tuple[int, ...]:
        """The branches forked by `index`, and theirs."""
        out: list[int] = []
        for child, spec in enumerate(self.branches):
            if spec.parent == index:
                out.append(child)
                out.extend(self.descendants(child))
        return tuple(out)

    def with_overrides(self, protocol: Protocol | None = None, device: str | None = None, reuse: str | None = None) -> "Scenario":
        """The same scenario under another protocol, device model or reuse
        order (the command line's overrides). An explicit pool is kept; a
        default one is recomputed for the new protocol."""
        changed = replace(
            self,
            protocol=protocol or self.protocol,
            allocator=None if protocol is not None else self.allocator,
            device=device or self.device,
            reuse=reuse or self.reuse,
        )
        if protocol is not None and self.pool == default_pool(self.protocol, self.block_size, self.prompt, self.branches):
            changed = replace(changed, pool=default_pool(protocol, self.block_size, self.prompt, self.branches))
        return changed

    def definition(self) -> dict[str, Any]:
        """The scenario as plain data, protocol included, so a counterexample
        file is self-contained."""
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "block_size": self.block_size,
            "prompt": self.prompt,
            "pool": self.pool,
            "device": self.device,
            "reuse": self.reuse,
            "branch": [branch_definition(b) for b in self.branches],
        }
        if self.allocator is not None:
            out["allocator"] = self.allocator
        else:
            out["protocol"] = self.protocol.definition
        return out


def branch_definition(b: BranchSpec) -> dict[str, Any]:
    """A branch as its file would give it (the short form when it is plain)."""
    if b.plain:
        return {"appends": b.appends, "may_cancel": b.may_cancel}
    out: dict[str, Any] = {"program": list(b.program), "may_cancel": b.may_cancel}
    if b.parent is not None:
        out["parent"] = BRANCH_NAMES[b.parent]
    return out


def default_pool(protocol: Protocol, block_size: int, prompt: int, branches: tuple[BranchSpec, ...]) -> int:
    """An upper bound on the blocks the scenario can ever hold: the prompt's,
    and per append (drafts included) the most `alloc`s of any path, per fork
    those of [fork], per speculate those of [rollback]."""
    prompt_blocks = -(-prompt // block_size)
    return (prompt_blocks + sum(b.appends for b in branches) * protocol.max_allocs
            + sum(b.forks for b in branches) * protocol.fork_allocs
            + sum(b.speculates for b in branches) * protocol.rollback_allocs)


def harness_pool(block_size: int, prompt: int, branches: tuple[BranchSpec, ...]) -> int:
    """The default pool for allocator code: the prompt's blocks and one
    block per append (drafts included), what an allocator that copies a
    shared tail or opens a fresh block needs; code that needs more is
    given `pool`."""
    return -(-prompt // block_size) + sum(b.appends for b in branches)


#: Upper bounds far beyond what exhaustive exploration can reach; they turn an
#: impossible parameter into an error instead of a hang.
MAXIMA = {"block_size": 64, "prompt": 1024, "pool": 1024, "appends": 64, "speculate": 64}


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
    (cowcheck.engines.invariants.validate_expect)."""
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
    allocator = data.get("allocator")
    if allocator is not None:
        if "protocol" in data:
            raise SpecError(source, "allocator", "give either 'protocol' (a protocol file) or 'allocator' (code through the engine harness), not both")
        if not isinstance(allocator, str) or ":" not in allocator:
            raise SpecError(source, "allocator", f"must be \"module:factory\" or \"path/to/file.py:factory\" (relative to the scenario's folder), got {allocator!r}")
    proto = data.get("protocol", "cow")
    protocol = protocol_from_dict(proto, source + " (protocol)") if isinstance(proto, dict) else resolve_protocol(proto, base, source)
    block_size = _int(data, "block_size", source, 1, required=True)
    prompt = _int(data, "prompt", source, 0, required=True)

    raw_branches = data.get("branch")
    if not isinstance(raw_branches, list) or not raw_branches:
        raise SpecError(source, "branch", "missing; give at least one [[branch]] table")
    if len(raw_branches) > len(BRANCH_NAMES):
        raise SpecError(source, "branch", f"{len(raw_branches)} branches; at most {len(BRANCH_NAMES)} are allowed")
    branches_t = parse_branches(raw_branches, source)

    prompt_blocks = -(-prompt // block_size)
    pool = _int(data, "pool", source, 0, required=False)
    if pool is None:
        pool = default_pool(protocol, block_size, prompt, branches_t) if allocator is None else harness_pool(block_size, prompt, branches_t)
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
        allocator=allocator,
        allocator_base=str(base) if allocator is not None else "",
    )


def _program(raw: dict[str, Any], key: str, names: str, source: str) -> tuple[str, ...]:
    value = raw["program"]
    if not isinstance(value, list):
        raise SpecError(source, f"{key}.program", f"must be a list of operations; allowed: {PROGRAM_FORMS}")
    out = []
    for k, item in enumerate(value):
        where = f"{key}.program[{k}]"
        words = item.split() if isinstance(item, str) else []
        if words == ["append"]:
            out.append("append")
        elif len(words) == 2 and words[0] == "fork":
            if words[1] not in names:
                raise SpecError(source, where, f"'fork {words[1]}': no branch {words[1]!r} is declared; allowed: {', '.join(names) or 'none'}")
            out.append(f"fork {words[1]}")
        elif len(words) == 2 and words[0] == "speculate":
            count = int(words[1]) if words[1].isdigit() else -1
            if not 1 <= count <= MAXIMA["speculate"]:
                raise SpecError(source, where, f"'speculate' needs K drafts, an integer from 1 to {MAXIMA['speculate']}, got {words[1]!r}")
            out.append(f"speculate {count}")
        else:
            raise SpecError(source, where, f"unknown operation {item!r}; allowed: {PROGRAM_FORMS}")
    return tuple(out)


def parse_branches(raw_branches: list[Any], source: str) -> tuple[BranchSpec, ...]:
    """The [[branch]] tables, with the program rules checked across them:
    each child forked exactly once, by its parent; parents form no cycle;
    at least one root."""
    names = BRANCH_NAMES[:len(raw_branches)]
    branches = []
    for i, raw in enumerate(raw_branches):
        key = f"branch[{i}]"
        if not isinstance(raw, dict):
            raise SpecError(source, key, "must be a table")
        for k in raw:
            if k not in BRANCH_KEYS:
                raise SpecError(source, f"{key}.{k}", f"unknown key; allowed: {', '.join(BRANCH_KEYS)}")
        may_cancel = raw.get("may_cancel", False)
        if not isinstance(may_cancel, bool):
            raise SpecError(source, f"{key}.may_cancel", f"must be true or false, got {may_cancel!r}")
        parent = raw.get("parent")
        if parent is not None and (not isinstance(parent, str) or parent not in names):
            raise SpecError(source, f"{key}.parent", f"unknown branch {parent!r}; allowed: the name of another branch ({', '.join(names)}, in file order)")
        if parent == names[i]:
            raise SpecError(source, f"{key}.parent", f"branch {names[i]!r} cannot be its own parent")
        parent_index = None if parent is None else names.index(parent)
        if "program" in raw:
            if "appends" in raw:
                raise SpecError(source, f"{key}.appends", "give either 'appends' or 'program', not both ('appends = k' is short for k \"append\"s)")
            program = _program(raw, key, names, source)
            branches.append(BranchSpec(0, may_cancel, program, parent_index) if program else BranchSpec(0, may_cancel, parent=parent_index))
        else:
            appends = _int(raw, "appends", source, 0, required=False, label=f"{key}.appends") or 0
            branches.append(BranchSpec(appends, may_cancel, parent=parent_index))
    for c in range(len(branches)):
        seen, at = {c}, branches[c].parent
        while at is not None:
            if at in seen:
                raise SpecError(source, f"branch[{c}].parent", f"the parents of branch {names[c]!r} form a cycle; every chain must end at a root")
            seen.add(at)
            at = branches[at].parent
    forked_by: dict[int, list[tuple[int, int]]] = {}
    for i, spec in enumerate(branches):
        for k, text in enumerate(spec.program):
            if text.startswith("fork "):
                forked_by.setdefault(names.index(text.split()[1]), []).append((i, k))
    for c, spec in enumerate(branches):
        forks = forked_by.get(c, [])
        if spec.parent is None:
            if forks:
                i, k = forks[0]
                raise SpecError(source, f"branch[{i}].program[{k}]", f"'fork {names[c]}': branch {names[c]!r} is a root (no 'parent'); "
                                f"only a branch declared with parent = {names[i]!r} can be forked by {names[i]!r}")
            continue
        wrong = [(i, k) for i, k in forks if i != spec.parent]
        if wrong:
            i, k = wrong[0]
            raise SpecError(source, f"branch[{i}].program[{k}]", f"'fork {names[c]}': branch {names[c]!r} has parent {names[spec.parent]!r}; only its parent may fork it")
        if len(forks) != 1:
            raise SpecError(source, f"branch[{c}].parent", f"branch {names[c]!r} (parent {names[spec.parent]!r}) must be forked exactly once by its parent's program, "
                            f"it is forked {len(forks)} times")
    if not any(b.parent is None for b in branches):
        raise SpecError(source, "branch", "no root branch: at least one branch must have no 'parent'")
    return tuple(branches)


def load_scenario(path: Path) -> Scenario:
    path = Path(path)
    return scenario_from_dict(read_toml(path), str(path), path.parent, path.stem)


def make_scenario(block_size: int, prompt: int, branches: list[tuple[int, bool]] | list[int] | list[dict[str, Any]], protocol: str | Protocol = "cow",
                  device: str = "async", reuse: str = "lifo", pool: int | None = None, name: str = "") -> Scenario:
    """A scenario built in code (benchmarks, tests), validated like a file."""
    data: dict[str, Any] = {
        "block_size": block_size,
        "prompt": prompt,
        "device": device,
        "reuse": reuse,
        "branch": [{"appends": b} if isinstance(b, int) else dict(b) if isinstance(b, dict) else {"appends": b[0], "may_cancel": b[1]}
                   for b in branches],
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
