"""Scenarios: the block graph and branch programs a protocol is checked on
(docs/semantics.md#scenario)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from cowcheck.model.branches import (BRANCH_NAMES, CACHE_BRANCH_KEYS, ROLE_KEYS, BranchSpec, Operation, branch_definition,
                                     no_forks, parse_branches, parse_requests)
from cowcheck.model.device import Device, Orders, Transfer
from cowcheck.model.errors import KindMismatch, SpecError
from cowcheck.model.fields import MAXIMA, choice, integer, seconds
from cowcheck.model.protocol import Protocol, for_scenario, inline_protocol, read_toml, resolve_protocol

#: the device models' names, as files give them
DEVICES = tuple(d.value for d in Device)
#: the transfer models' names (docs/semantics.md#transfers)
TRANSFERS = tuple(t.value for t in Transfer)
REUSES = ("lifo", "fifo", "any")
CACHES = ("none", "prefix")
SCENARIO_KEYS = ("protocol", "allocator", "scheduler", "block_size", "prompt", "pool", "device", "reuse", "cache", "branch", "expect", "description",
                 "call_deadline", "host_pool", "transfer", "faults", "lease")
#: the keys of transfers (docs/semantics.md#transfers): cache scenarios only
TRANSFER_KEYS = ("host_pool", "transfer", "faults", "lease")
#: why allocator code cannot run a transfer scenario (one line, exit 2)
HARNESS_NO_TRANSFERS = ("the engine harness runs allocator code, which has no host tier, transfers or connector: "
                        "a transfer scenario (host_pool, source, sink) is checked with a protocol file")
#: the transfer kinds that may fail
FAULTS = ("store", "load", "recv", "send")


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    protocol: Protocol
    block_size: int
    prompt: int
    pool: int
    device: Device
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
    #: `module:factory` or `path/file.py:factory`: scheduler code checked
    #: through the scheduler harness in place of the protocol (cache
    #: scenarios only; docs/semantics.md#scheduler-harness); its path is
    #: relative to `allocator_base` too
    scheduler: Optional[str] = None
    #: a cache scenario (cache = "prefix"): requests that share full blocks
    #: through a prefix cache (docs/semantics.md#prefix-caching)
    cache: bool = False
    #: seconds one adapter call may run before the check stops (None: the
    #: checker's default; 0: no deadline; docs/semantics.md#engine-harness);
    #: how a check runs, not what it checks, so not in `definition()`
    call_deadline: Optional[float] = field(default=None, compare=False)
    #: transfers (docs/semantics.md#transfers): the host tier's blocks, how
    #: stores and loads are ordered, the transfer kinds that may fail, and
    #: whether a producer's lease may expire before its sends complete
    host_pool: int = 0
    transfer: Transfer = Transfer.NIC
    faults: tuple[str, ...] = ()
    lease: bool = False

    def __post_init__(self) -> None:
        """A scenario built or changed in code (`dataclasses.replace(s,
        device="stream")`) names its device as a file does: the name is
        taken as the Device, an unknown one is bad input in one line."""
        if not isinstance(self.device, Device):
            object.__setattr__(self, "device", Device.named(self.device, self.name, "device"))
        if not isinstance(self.transfer, Transfer):
            object.__setattr__(self, "transfer", Transfer.named(self.transfer, self.name, "transfer"))

    @property
    def transfers(self) -> bool:
        """A transfer scenario: a cache scenario with a host tier or a P/D
        request (docs/semantics.md#transfers). Every other scenario reads
        exactly as before."""
        return self.cache and (self.host_pool > 0 or any(b.source is not None or b.sink is not None for b in self.branches))

    @cached_property
    def orders(self) -> Device | Orders:
        """What decides which in-flight op may complete: the device model,
        with the transfer model beside it in a transfer scenario."""
        return Orders(self.device, self.transfer) if self.transfers else self.device

    @property
    def prompt_size(self) -> int:
        """The prompt tokens of the scenario: the shared prompt's, or the sum
        of the requests' own in a cache scenario (sizes compare by it)."""
        return sum(len(b.prompt or ()) for b in self.branches) if self.cache else self.prompt

    @property
    def prompt_blocks(self) -> int:
        return -(-self.prompt // self.block_size)

    def branch_name(self, index: int) -> str:
        return BRANCH_NAMES[index]

    @property
    def subject(self) -> str:
        """What is checked, in a report: the protocol's name, or the allocator or scheduler code's reference."""
        return self.allocator if self.allocator is not None else self.scheduler if self.scheduler is not None else self.protocol.name

    @property
    def code_ref(self) -> Optional[str]:
        """The reference of the code checked through a harness (an
        allocator's or a scheduler's), or None for a protocol file."""
        return self.allocator if self.allocator is not None else self.scheduler

    def own_tokens(self, index: int) -> tuple[str, ...]:
        """The tokens branch `index` can write, in write order: its k-th
        write writes `<name>k`, and a name is never reused."""
        name = BRANCH_NAMES[index]
        return tuple(f"{name}{k}" for k in range(1, self.branches[index].appends + 1))

    def prompt_of(self, index: int) -> tuple[str, ...]:
        """The prompt branch `index` starts from: the shared one, or in a
        cache scenario the request's own."""
        own = self.branches[index].prompt
        return own if own is not None else tuple(f"p{i}" for i in range(self.prompt))

    def tokens(self, index: int) -> tuple[str, ...]:
        """The prompt, then branch `index`'s own tokens: a plain branch's
        reference sequence (with forks and rollbacks the sequence is state,
        cowcheck.model.state.Branch.seq)."""
        return self.prompt_of(index) + self.own_tokens(index)

    @cached_property
    def prompt_tokens(self) -> tuple[str, ...]:
        """Every token a prompt names, in first-appearance order (the shared
        prompt's first)."""
        names = dict.fromkeys(f"p{i}" for i in range(self.prompt))
        for i in range(len(self.branches)):
            names.update(dict.fromkeys(self.prompt_of(i)))
        return tuple(names)

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
        start = len(self.prompt_of(index)) if spec.parent is None else self.max_pos(spec.parent)
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

    def with_overrides(self, protocol: Protocol | None = None, device: str | None = None, reuse: str | None = None,
                       transfer: str | None = None) -> "Scenario":
        """The same scenario under another protocol, device model, reuse
        order or transfer model (the command line's overrides). An explicit
        pool is kept; a default one is recomputed for the new protocol. An
        unknown device or transfer model is bad input naming `device` or
        `transfer`; a transfer model for a scenario without a cache is a
        KindMismatch (only a cache scenario has transfers)."""
        if transfer is not None and not self.cache:
            raise KindMismatch(self.source, "transfer", 'only a cache scenario (cache = "prefix") has transfers; '
                               "--transfer does not apply to it", "fork", "--transfer applies to cache scenarios only")
        if protocol is not None:
            protocol = for_scenario(protocol, self.cache, self.source, self.transfers)
        changed = replace(
            self,
            protocol=protocol or self.protocol,
            allocator=None if protocol is not None else self.allocator,
            scheduler=None if protocol is not None else self.scheduler,
            device=Device.named(device, "with_overrides()", "device") if device is not None else self.device,
            reuse=reuse or self.reuse,
            transfer=Transfer.named(transfer, "with_overrides()", "transfer") if transfer is not None else self.transfer,
        )
        if protocol is not None and self.pool == default_pool(self.protocol, self.block_size, self.prompt, self.branches, self.cache):
            changed = replace(changed, pool=default_pool(protocol, self.block_size, self.prompt, self.branches, self.cache))
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
            "device": self.device.value,
            "reuse": self.reuse,
            "branch": [branch_definition(b) for b in self.branches],
        }
        if self.cache:
            out["cache"] = "prefix"
            # the keys of transfers only where they differ from their defaults: other files read as before
            for key, default in (("host_pool", 0), ("transfer", Transfer.NIC), ("faults", ()), ("lease", False)):
                value = getattr(self, key)
                if value != default:
                    out[key] = list(value) if key == "faults" else str(value) if key == "transfer" else value
        if self.allocator is not None:
            out["allocator"] = self.allocator
        elif self.scheduler is not None:
            out["scheduler"] = self.scheduler
        else:
            out["protocol"] = self.protocol.definition
        return out


def default_pool(protocol: Protocol, block_size: int, prompt: int, branches: tuple[BranchSpec, ...], cache: bool = False) -> int:
    """An upper bound on the blocks the scenario can ever hold: the prompt's
    (in a cache scenario each request's), and per append (drafts included)
    the most `alloc`s of any path, per fork those of [fork], per speculate
    those of [rollback]."""
    prompt_blocks = -(-prompt // block_size)
    if cache:
        prompt_blocks = sum(-(-len(b.prompt or ()) // block_size) for b in branches)
    return (prompt_blocks + sum(b.appends for b in branches) * protocol.max_allocs
            + sum(b.forks for b in branches) * protocol.fork_allocs
            + sum(b.speculates for b in branches) * protocol.rollback_allocs)


def harness_pool(block_size: int, prompt: int, branches: tuple[BranchSpec, ...], cache: bool = False) -> int:
    """The default pool for allocator code: the prompt's blocks (in a cache
    scenario each request's) and one block per append (drafts included),
    what an allocator that copies a shared tail or opens a fresh block
    needs; code that needs more is given `pool`."""
    prompt_blocks = sum(-(-len(b.prompt or ()) // block_size) for b in branches) if cache else -(-prompt // block_size)
    return prompt_blocks + sum(b.appends for b in branches)


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
    cache = choice(data, "cache", CACHES, "none", source) == "prefix"
    scheduler = _scheduler_key(data, cache, source)
    host_pool, transfer, faults, lease, moving = _transfer_keys(data, cache, source)
    if allocator is not None and moving:
        raise SpecError(source, "allocator", HARNESS_NO_TRANSFERS)
    proto = data.get("protocol", "kv-connector" if moving else "prefix-cache" if cache else "cow")
    protocol = inline_protocol(proto, source + " (protocol)") if isinstance(proto, dict) else resolve_protocol(proto, base, source)
    protocol = for_scenario(protocol, cache, source, moving)
    block_size = integer(data, "block_size", source, 1, required=True)
    if not cache and isinstance(data.get("prompt"), list):
        raise SpecError(source, "prompt", f"must be an integer from 0 to {MAXIMA['prompt']} (the shared prompt's length), got a list "
                        f"{data['prompt']!r}; a prompt of tokens is a request's, in a cache scenario: add cache = \"prefix\"")
    prompt = integer(data, "prompt", source, 0, required=not cache) or 0

    raw_branches = data.get("branch")
    if "branch" not in data:
        raise SpecError(source, "branch", "missing; give at least one [[branch]] table")
    if not isinstance(raw_branches, list) or not raw_branches:
        got = "a single table (write [[branch]], not [branch])" if isinstance(raw_branches, dict) else repr(raw_branches)
        raise SpecError(source, "branch", f"must be a list of one or more [[branch]] tables, got {got}")
    if len(raw_branches) > len(BRANCH_NAMES):
        raise SpecError(source, "branch", f"{len(raw_branches)} branches; at most {len(BRANCH_NAMES)} are allowed")
    if cache:
        no_forks(raw_branches, source)
    branches_t = parse_branches(raw_branches, source)
    if cache:
        branches_t = parse_requests(raw_branches, branches_t, prompt, source)
    else:
        for i, raw in enumerate(raw_branches):
            for key in CACHE_BRANCH_KEYS:
                if key in raw:
                    raise SpecError(source, f"branch[{i}].{key}", 'only a cache scenario (cache = "prefix") gives requests their own '
                                    f"'{key}'; here every branch starts from the scenario's prompt")

    # the prompt the pool must hold at least: the shared one, or the largest request's
    largest = max(-(-len(b.prompt or ()) // block_size) for b in branches_t) if cache else -(-prompt // block_size)
    pool = integer(data, "pool", source, 0, required=False)
    if pool is None:
        pool = (default_pool(protocol, block_size, prompt, branches_t, cache) if allocator is None and scheduler is None
                else harness_pool(block_size, prompt, branches_t, cache))
    elif pool < largest:
        what = "the largest request's prompt" if cache else f"the prompt; it needs at least {largest} (ceil({prompt}/{block_size}))"
        raise SpecError(source, "pool", f"{pool} blocks cannot hold {what}" + (f"; it needs at least {largest}" if cache else ""))

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
        device=Device.named(data.get("device", Device.ASYNC), source, "device"),
        reuse=choice(data, "reuse", REUSES, "lifo", source),
        branches=branches_t,
        expect=parse_expect(data["expect"], source) if "expect" in data else (),
        description=description,
        allocator=allocator,
        allocator_base=str(base) if allocator is not None or scheduler is not None else "",
        scheduler=scheduler,
        cache=cache,
        call_deadline=seconds(data, "call_deadline", source),
        host_pool=host_pool,
        transfer=transfer,
        faults=faults,
        lease=lease,
    )


def _scheduler_key(data: dict[str, Any], cache: bool, source: str) -> Optional[str]:
    """`scheduler = "module:factory"` (docs/semantics.md#scheduler-harness):
    in place of `protocol` and `allocator`, in a cache scenario only."""
    scheduler = data.get("scheduler")
    if scheduler is None:
        return None
    for other in ("protocol", "allocator"):
        if other in data:
            raise SpecError(source, "scheduler", f"give either '{other}' or 'scheduler' (code through the scheduler harness), not both")
    if not isinstance(scheduler, str) or ":" not in scheduler:
        raise SpecError(source, "scheduler", f"must be \"module:factory\" or \"path/to/file.py:factory\" (relative to the scenario's folder), got {scheduler!r}")
    if not cache:
        raise SpecError(source, "scheduler", 'a scheduler admits requests with their own prompts: only a cache scenario (cache = "prefix") has one; add cache = "prefix"')
    return scheduler


def _transfer_keys(data: dict[str, Any], cache: bool, source: str) -> tuple[int, Transfer, tuple[str, ...], bool, bool]:
    """The keys of transfers (docs/semantics.md#transfers): host_pool,
    transfer, faults and lease, each refused in one line outside a cache
    scenario or when malformed; and whether this is a transfer scenario (a
    host tier, or a request with `source` or `sink`), read before the
    protocol because it decides the default one."""
    branches = data.get("branch")
    raws = branches if isinstance(branches, list) else []
    if not cache:
        for key in TRANSFER_KEYS:
            if key in data:
                raise SpecError(source, key, 'only a cache scenario (cache = "prefix") has transfers; add cache = "prefix"')
        for i, raw in enumerate(raws):
            for key in ROLE_KEYS:
                if isinstance(raw, dict) and key in raw:
                    raise SpecError(source, f"branch[{i}].{key}", 'only a cache scenario (cache = "prefix") has P/D '
                                    'requests; add cache = "prefix"')
        return 0, Transfer.NIC, (), False, False
    host_pool = integer(data, "host_pool", source, 0, required=False) or 0
    transfer = Transfer.named(data.get("transfer", Transfer.NIC), source, "transfer")
    faults = data.get("faults", [])
    if not isinstance(faults, list) or any(f not in FAULTS for f in faults):
        bad = faults if not isinstance(faults, list) else next(f for f in faults if f not in FAULTS)
        raise SpecError(source, "faults", f"must be a list of distinct items among {', '.join(map(repr, FAULTS))}, got {bad!r}")
    if len(set(faults)) != len(faults):
        raise SpecError(source, "faults", f"{next(f for f in faults if faults.count(f) > 1)!r} is listed twice; each kind once")
    lease = data.get("lease", False)
    if not isinstance(lease, bool):
        raise SpecError(source, "lease", f"must be true or false, got {lease!r}")
    roles = any(isinstance(raw, dict) and any(key in raw for key in ROLE_KEYS) for raw in raws)
    return host_pool, transfer, tuple(faults), lease, host_pool > 0 or roles


#: why a scenario or grid of allocator code cannot give `reuse`
ALLOCATOR_REUSE = "allocator code takes free blocks in its own order; reuse applies to protocols only"


def load_scenario(path: Path) -> Scenario:
    path = Path(path)
    data = read_toml(path)
    if isinstance(data, dict) and "allocator" in data and "reuse" in data:
        # a counterexample file records the field for allocator code too (its format has it); a scenario file
        # that gives it would say an order the allocator does not follow
        raise SpecError(str(path), "reuse", ALLOCATOR_REUSE)
    return scenario_from_dict(data, str(path), path.parent, path.stem)


def make_scenario(block_size: int, prompt: int, branches: list[tuple[int, bool]] | list[int] | list[dict[str, Any]], protocol: str | Protocol = "cow",
                  device: str = Device.ASYNC, reuse: str = "lifo", pool: int | None = None, name: str = "",
                  cache: bool = False) -> Scenario:
    """A scenario built in code (benchmarks, tests), validated like a file.
    `cache`: a cache scenario, whose branch dicts may give `prompt` and `after`."""
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
    if cache:
        data["cache"] = "prefix"
    if isinstance(protocol, str):
        data["protocol"] = protocol
        scenario = scenario_from_dict(data, "<scenario>", Path("."), name or f"{protocol}-B{block_size}-L{prompt}")
    else:
        data["protocol"] = protocol.definition
        scenario = scenario_from_dict(data, "<scenario>", Path("."), name or f"{protocol.name}-B{block_size}-L{prompt}")
        scenario = replace(scenario, protocol=for_scenario(protocol, scenario.cache, "<scenario>", scenario.transfers))
    return scenario
