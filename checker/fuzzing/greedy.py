"""One change at a time: the scenarios one step smaller than a drawn one (a
branch or request dropped, an operation dropped or a speculation lowered,
a cancel dropped, a prompt a token shorter, B or the pool one smaller, a
host block, fault, lease or P/D role dropped), on the scenario as a file
holds it.

cowcheck.sweeps.shrink searches every scenario a violating one dominates,
smallest first: exact, but the candidates of a drawn scenario of three
branches of two operations number in the hundreds of thousands. So a
finding is first reduced greedily (the first smaller neighbour that still
breaks the invariant, until none does: a few dozen checks), and the
shrinker then searches what the much smaller result dominates."""

from __future__ import annotations

import copy
import re
from typing import Any, Iterator

from cowcheck.model.branches import BRANCH_NAMES

#: a token a branch writes: its name and a count from 1
_OWN_TOKEN = re.compile(r"^([a-z])([1-9][0-9]*)$")


def neighbours(data: dict[str, Any], keep_pool: bool = False) -> Iterator[dict[str, Any]]:
    """The scenarios one change smaller than `data`, biggest changes first.
    Some may not load (a pool below a prompt): the caller skips those.
    `keep_pool`: never set a pool (for no-deadlock, which a pool below the
    default breaks by itself)."""
    branches = data["branch"]
    cache = data.get("cache") == "prefix"
    for i in range(len(branches)):
        if cache or branches[i].get("parent") is not None or sum(b.get("parent") is None for b in branches) > 1:
            if len(branches) > 1:
                yield _dropped(data, i)
    for i, branch in enumerate(branches):
        program = _program(branch)
        for k, op in enumerate(program):
            yield _with_program(data, i, program[:k] + program[k + 1:], dropped=op)
            word, *rest = op.split()
            if word == "speculate" and int(rest[0]) > 1:
                yield _with_program(data, i, program[:k] + [f"speculate {int(rest[0]) - 1}"] + program[k + 1:])
    for i, branch in enumerate(branches):
        for key in ("may_cancel", "source", "sink"):
            if branch.get(key):
                changed = copy.deepcopy(data)
                del changed["branch"][i][key]
                yield changed
        if cache and len(branch["prompt"]) > 1:
            changed = copy.deepcopy(data)
            changed["branch"][i]["prompt"] = branch["prompt"][:-1]
            yield changed
    if not cache and data["prompt"] > 0:
        yield {**copy.deepcopy(data), "prompt": data["prompt"] - 1}
    if data["block_size"] > 1:
        yield {**copy.deepcopy(data), "block_size": data["block_size"] - 1}
    if "pool" in data and not keep_pool:
        yield {**copy.deepcopy(data), "pool": data["pool"] - 1}
    if data.get("host_pool", 0) > 0:
        yield {**copy.deepcopy(data), "host_pool": data["host_pool"] - 1}
    for fault in data.get("faults", ()):
        yield {**copy.deepcopy(data), "faults": [f for f in data["faults"] if f != fault]}
    if data.get("lease"):
        yield {**copy.deepcopy(data), "lease": False}


def _program(branch: dict[str, Any]) -> list[str]:
    return list(branch["program"]) if "program" in branch else ["append"] * branch.get("appends", 0)


def _with_program(data: dict[str, Any], i: int, program: list[str], dropped: str = "") -> dict[str, Any]:
    """Branch i with another program; dropping a `fork c` drops c (and its
    children) too."""
    changed = copy.deepcopy(data)
    branch = changed["branch"][i]
    branch.pop("appends", None)
    branch.pop("program", None)
    branch.update({"program": program} if program else {"appends": 0})
    if dropped.startswith("fork "):
        return _dropped(changed, BRANCH_NAMES.index(dropped.split()[1]))
    return changed


def _dropped(data: dict[str, Any], gone: int) -> dict[str, Any]:
    """Branch `gone` dropped with its children (they are never forked), and
    the branches left renamed in file order: parents, forks, `after` (dropped
    where it named a dropped request) and the tokens of prompts (a dropped
    request's become plain names, `d` and the old token, as the shrinker
    writes them)."""
    branches = data["branch"]
    names = [BRANCH_NAMES[i] for i in range(len(branches))]
    dropped = {gone}
    changed = True
    while changed:
        changed = False
        for i, b in enumerate(branches):
            if i not in dropped and b.get("parent") in {names[d] for d in dropped}:
                dropped.add(i)
                changed = True
    kept = [i for i in range(len(branches)) if i not in dropped]
    rename = {names[old]: BRANCH_NAMES[new] for new, old in enumerate(kept)}

    def token(t: str) -> str:
        match = _OWN_TOKEN.match(t)
        if match is None or match.group(1) not in names:
            return t
        return f"{rename[match.group(1)]}{match.group(2)}" if match.group(1) in rename else f"d{t}"

    out = []
    for old in kept:
        b = copy.deepcopy(branches[old])
        if "program" in b:
            b["program"] = [f"fork {rename[op.split()[1]]}" if op.startswith("fork ") else op
                            for op in b["program"] if not op.startswith("fork ") or op.split()[1] in rename]
        if "parent" in b:
            b["parent"] = rename[b["parent"]]
        if "after" in b:
            if b["after"] in rename:
                b["after"] = rename[b["after"]]
            else:
                del b["after"]
        if "prompt" in b:
            b["prompt"] = [token(t) for t in b["prompt"]]
        out.append(b)
    return {**copy.deepcopy(data), "branch": out}
