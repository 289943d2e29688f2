"""Random scenarios that create the pressure bugs need (docs/how-to/fuzz.md),
one generator per scenario kind:

- fork: a shared prompt whose tail is exactly full, holds one token, lacks
  one slot, or anything between; branches that append, speculate and fork
  children mid-generation; cancels in flight; tight pools.
- cache: requests whose prompts share a prefix cut at a block boundary or
  one token past it, prompts of their own (eviction pressure), prompts that
  continue an earlier request's output (after its drafts too); `after`
  chains that warm the cache; cancels; speculation; pools small enough that
  cached blocks are evicted while other requests hold hits.
- transfer: a cache scenario with a host tier, P/D sources and sinks,
  failing transfers, leases and every transfer model.

The subject is a protocol, or code (`Code`) through the engine harness
(allocator code) or the scheduler harness (scheduler code: cache and
transfer scenarios only, without speculation, which a scheduler decides
itself).

A scenario is drawn from its own seed, `<seed>:<index>`, so scenario i is the
same whatever was drawn before it and wherever it is drawn. GENERATOR_VERSION
names the generators' behaviour: a change that draws other scenarios from
the same seed raises it, and every result records it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol
from cowcheck.model.scenario import Scenario, scenario_from_dict

from cowcheck.fuzzing.draws import Draw, RandomDraw

#: raised whenever the same seed would draw other scenarios
GENERATOR_VERSION = 1
KINDS = ("fork", "cache", "transfer")
DEVICES = ("async", "stream", "streams")
REUSES = ("lifo", "fifo", "any")
TRANSFERS = ("stream", "own-stream", "own-stream-fenced", "nic")
FAULTS = ("store", "load", "recv", "send")
#: how many times a draw that the scenario loader refuses is drawn again
REDRAWS = 20


@dataclass(frozen=True)
class Knobs:
    """How far the generators go. The defaults keep each scenario small
    enough to check exhaustively in well under a second, which is where
    bugs of this kind show (the shipped bug scenarios need at most three
    branches of two operations)."""
    max_block: int = 3
    max_prompt: int = 5
    max_branches: int = 3          # roots and children (fork), or requests (cache, transfer)
    max_ops: int = 2               # operations of one program
    max_host_pool: int = 3         # 0: transfer scenarios of P/D roles only, no host tier
    devices: tuple[str, ...] = DEVICES
    reuses: tuple[str, ...] = REUSES
    transfers: tuple[str, ...] = TRANSFERS
    faults: tuple[str, ...] = FAULTS
    leases: bool = True
    cancels: bool = True
    speculation: bool = True
    forks: bool = True
    tight_pools: bool = True

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Drawn:
    """A drawn scenario, where it came from, and whether its pool is tighter
    than the default (an out-of-memory wait is then the scenario's doing,
    so no-deadlock is not judged on it)."""
    index: int
    scenario: Scenario
    tight: bool = False
    data: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Code:
    """Code fuzzed through a harness: its "module:factory" reference and
    the scenario key that names it, `allocator` (the engine harness) or
    `scheduler` (the scheduler harness)."""
    ref: str
    harness: str = "allocator"


Subject = Union[Protocol, Code]


def draw_scenario(seed: int, index: int, kind: str, subject: Subject, knobs: Knobs = Knobs(),
                  base: Optional[Path] = None) -> Drawn:
    """Scenario `index` of `seed`: the same on every call."""
    draw = RandomDraw(f"{seed}:{index}")
    name = f"fuzz-{kind}-s{seed}-{index}"
    last: Optional[SpecError] = None
    for _ in range(REDRAWS):
        try:
            return scenario_of(draw, kind, subject, knobs, name, index, base)
        except SpecError as error:    # a combination the loader refuses: draw again, from the same stream
            last = error
    assert last is not None
    raise last


def scenario_of(draw: Draw, kind: str, subject: Subject, knobs: Knobs, name: str = "fuzz", index: int = 0,
                base: Optional[Path] = None) -> Drawn:
    """One scenario of `kind` for `subject`, from the choices of `draw`."""
    code = subject if isinstance(subject, Code) else None
    if code is not None and code.harness == "scheduler":     # the scheduler harness never speculates
        knobs = replace(knobs, speculation=False)
    data = (fork_data if kind == "fork" else cache_data)(draw, knobs, transfers=kind == "transfer", allocator=code is not None)
    data["device"] = draw.choice(knobs.devices)
    if code is not None:
        data[code.harness] = code.ref
    else:
        assert isinstance(subject, Protocol)
        data["protocol"] = subject.definition
        data["reuse"] = draw.choice(knobs.reuses)
    folder = base or Path(".")
    source = f"<fuzz {name}>"
    scenario = scenario_from_dict(data, source, folder, name)
    tight = False
    least = _least_pool(scenario)
    if knobs.tight_pools and least < scenario.pool and draw.boolean(0.4):
        data["pool"] = draw.integer(least, scenario.pool - 1)
        scenario, tight = scenario_from_dict(data, source, folder, name), True
    return Drawn(index, scenario, tight, data)


def _least_pool(scenario: Scenario) -> int:
    """The smallest pool the scenario loads with: its largest prompt's blocks."""
    if scenario.cache:
        return max(-(-len(b.prompt or ()) // scenario.block_size) for b in scenario.branches)
    return max(1, -(-scenario.prompt // scenario.block_size))


# -- fork scenarios ------------------------------------------------------------------
def _prompt_length(draw: Draw, block_size: int, most: int) -> int:
    """A prompt whose tail is exactly full, holds one token, lacks one
    slot, or anything up to `most`."""
    blocks = draw.integer(1, max(1, most // block_size))
    shape = draw.choice(("full", "one token", "one slot short", "any"))
    if shape == "full" or block_size == 1:
        return blocks * block_size
    if shape == "one token":
        return (blocks - 1) * block_size + 1
    if shape == "one slot short":
        return blocks * block_size - 1
    return draw.integer(0, most)


def _operation(draw: Draw, knobs: Knobs, fork: bool) -> str:
    options = ["append", "append"] + (["speculate"] if knobs.speculation else []) + (["fork"] if fork else [])
    word = draw.choice(options)
    if word == "speculate":
        return f"speculate {draw.integer(1, 2)}"
    return word


def fork_data(draw: Draw, knobs: Knobs, transfers: bool = False, allocator: bool = False) -> dict[str, Any]:
    """A fork scenario's keys (no protocol, device or reuse yet)."""
    block_size = draw.integer(1, knobs.max_block)
    prompt = _prompt_length(draw, block_size, knobs.max_prompt)
    roots = draw.integer(1, knobs.max_branches)
    programs: list[list[str]] = []
    parents: list[Optional[int]] = []
    for i in range(roots):
        programs.append([])
        parents.append(None)
    i = 0
    while i < len(programs):                 # children, appended as they are forked, draw their own programs
        child = parents[i] is not None
        count = draw.integer(0 if child else 1, knobs.max_ops)
        for _ in range(count):
            can_fork = knobs.forks and not child and len(programs) < knobs.max_branches
            op = _operation(draw, knobs, can_fork)
            if op == "fork":
                programs.append([])
                parents.append(i)
                op = f"fork {BRANCH_NAMES[len(programs) - 1]}"
            programs[i].append(op)
        i += 1
    branches = []
    for program, parent in zip(programs, parents):
        branch: dict[str, Any] = {"program": program} if program else {"appends": 0}
        if parent is not None:
            branch["parent"] = BRANCH_NAMES[parent]
        if knobs.cancels and draw.boolean(0.4):
            branch["may_cancel"] = True
        branches.append(branch)
    return {"block_size": block_size, "prompt": prompt, "branch": branches}


# -- cache and transfer scenarios ------------------------------------------------------
def cache_data(draw: Draw, knobs: Knobs, transfers: bool = False, allocator: bool = False) -> dict[str, Any]:
    """A cache scenario's keys (a transfer scenario's with `transfers`)."""
    if transfers:     # a transfer scenario's state space grows fastest: smaller requests
        knobs = replace(knobs, max_block=min(knobs.max_block, 2), max_prompt=min(knobs.max_prompt, 3),
                        max_ops=min(knobs.max_ops, 1))
    block_size = draw.integer(1, min(knobs.max_block, 2) if allocator else knobs.max_block)
    shared = [f"p{t}" for t in range(knobs.max_prompt + 1)]
    count = draw.integer(1 if not transfers else 2, max(knobs.max_branches, 2 if transfers else 1))
    requests: list[dict[str, Any]] = []
    for i in range(count):
        name = BRANCH_NAMES[i]
        request: dict[str, Any] = {}
        earlier = [j for j in range(i) if requests[j]["_writes"]]
        shape = draw.choice(("boundary", "one past", "own", "continue") if earlier else ("boundary", "one past", "own"))
        if shape == "continue":
            j = draw.choice(earlier)
            before = requests[j]
            prompt = list(before["prompt"]) + [f"{BRANCH_NAMES[j]}{k}" for k in range(1, draw.integer(1, before["_writes"]) + 1)]
            if draw.boolean():
                prompt.append(f"x{name}0")
            request["after"] = BRANCH_NAMES[j]
        elif shape == "own":
            prompt = [f"x{name}{t}" for t in range(draw.integer(1, knobs.max_prompt))]
        else:
            blocks = draw.integer(1, max(1, knobs.max_prompt // block_size))
            cut = blocks * block_size + (1 if shape == "one past" else 0)
            prompt = shared[:min(cut, len(shared))]
            if draw.boolean(0.3):
                prompt.append(f"x{name}0")
        request["prompt"] = prompt
        if "after" not in request and i and draw.boolean(0.5):
            request["after"] = BRANCH_NAMES[draw.integer(0, i - 1)]
        program = [_operation(draw, knobs, False) for _ in range(draw.integer(0, knobs.max_ops))]
        request["program" if program else "appends"] = program or 0
        request["_writes"] = sum(int(op.split()[1]) if op.startswith("speculate") else 1 for op in program)
        if knobs.cancels and draw.boolean(0.35):
            request["may_cancel"] = True
        requests.append(request)
    data: dict[str, Any] = {"block_size": block_size, "cache": "prefix"}
    if transfers:
        _transfer_keys(draw, knobs, data, requests)
    for request in requests:
        del request["_writes"]
    data["branch"] = requests
    return data


def _transfer_keys(draw: Draw, knobs: Knobs, data: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    """A host tier, P/D roles, faults, a lease and a transfer model: at least
    a host tier or one role, so that it is a transfer scenario (one role
    where max_host_pool is 0)."""
    host_pool = draw.integer(0, knobs.max_host_pool)
    for request in requests:
        role = draw.choice(("none", "none", "source", "sink"))
        if role != "none":
            request[role] = "remote"
    if not host_pool and not any("source" in r or "sink" in r for r in requests):
        if knobs.max_host_pool:
            host_pool = draw.integer(1, knobs.max_host_pool)
        else:
            requests[draw.integer(0, len(requests) - 1)][draw.choice(("source", "sink"))] = "remote"
    data["host_pool"] = host_pool
    data["transfer"] = draw.choice(knobs.transfers)
    # drawn whatever the knobs allow, so that narrower knobs draw the same scenarios less what they leave out
    faults = [kind for kind in FAULTS if draw.boolean(0.25) and kind in knobs.faults]
    if faults:
        data["faults"] = faults
    if any("sink" in r for r in requests) and draw.boolean(0.5) and knobs.leases:
        data["lease"] = True


def kind_for(protocol: Protocol) -> str:
    """The scenario kind a protocol is fuzzed with by default: transfer when
    it launches transfers, cache when only a cache scenario runs it, else
    fork."""
    from cowcheck.model.stepkinds import TRANSFER_STEPS
    if any(step.op in TRANSFER_STEPS for _, step in protocol.steps()):
        return "transfer"
    return "cache" if protocol.cache_only else "fork"
