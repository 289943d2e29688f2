"""Branches as their [[branch]] tables give them: a branch's program
(appends, forks, speculation) and, in a cache scenario, a request's own
prompt and the request it is admitted after (docs/semantics.md#scenario,
docs/semantics.md#branch-programs, docs/semantics.md#prefix-caching)."""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple, Optional

from cowcheck.model.errors import SpecError
from cowcheck.model.fields import MAXIMA, integer
from cowcheck.model.structure import Op

BRANCH_KEYS = ("appends", "may_cancel", "program", "parent", "prompt", "after", "source", "sink")
#: the keys of a request in a cache scenario only
CACHE_BRANCH_KEYS = ("prompt", "after")
#: a request's P/D roles (docs/semantics.md#transfers), cache scenarios only
ROLE_KEYS = ("source", "sink")
REMOTE = "remote"
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
    (None for a root, born at the prompt). In a cache scenario a branch
    is a request: `prompt` its own prompt's tokens, `after` the request it
    is admitted after (docs/semantics.md#prefix-caching)."""
    appends: int = 0
    may_cancel: bool = False
    program: tuple[str, ...] = ()
    parent: Optional[int] = None
    prompt: Optional[tuple[str, ...]] = None
    after: Optional[int] = None
    #: a P/D consumer (`source = "remote"`: its prompt's full blocks arrive
    #: by recv) and producer (`sink = "remote"`: its blocks are sent)
    source: Optional[str] = None
    sink: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.program:
            object.__setattr__(self, "program", ("append",) * self.appends)
        else:
            object.__setattr__(self, "appends", sum(o.op is Op.APPEND for o in self.operations))

    @cached_property
    def operations(self) -> tuple[Operation, ...]:
        return tuple(o for text in self.program for o in parse_operation(text))

    @cached_property
    def drafts(self) -> tuple[bool, ...]:
        """Per flattened operation: whether it is a speculative draft's append."""
        out: list[bool] = []
        for text in self.program:
            word, *rest = text.split()
            out += [True] * int(rest[0]) + [False] if word == "speculate" else [False]
        return tuple(out)

    @property
    def plain(self) -> bool:
        """A root that only appends: the lifecycle without branch programs."""
        return self.parent is None and all(text == "append" for text in self.program)

    @property
    def label(self) -> str:
        """Short, for one-line descriptions: `2` (two appends), `2c` (and
        cancellable), or the program `[append, fork c]c`."""
        text = str(self.appends) if self.plain else "[" + ", ".join(self.program) + "]"
        if self.prompt is not None:
            text = f"{_prompt_label(self.prompt)}:{text}"
        if self.after is not None:
            text += f" after {BRANCH_NAMES[self.after]}"
        return text + ("c" if self.may_cancel else "")

    @property
    def forks(self) -> int:
        return sum(o.op is Op.FORK for o in self.operations)

    @property
    def speculates(self) -> int:
        return sum(o.op is Op.ROLLBACK for o in self.operations)


def _prompt_label(prompt: tuple[str, ...]) -> str:
    """`p3` for the tokens p0 p1 p2, else the names in brackets."""
    if prompt == tuple(f"p{i}" for i in range(len(prompt))):
        return f"p{len(prompt)}"
    return "[" + " ".join(prompt) + "]"


def branch_definition(b: BranchSpec) -> dict[str, Any]:
    """A branch as its file would give it (the short form when it is plain)."""
    out: dict[str, Any] = {"appends": b.appends} if b.plain else {"program": list(b.program)}
    out["may_cancel"] = b.may_cancel
    if b.parent is not None:
        out["parent"] = BRANCH_NAMES[b.parent]
    if b.prompt is not None:
        out["prompt"] = list(b.prompt)
    if b.after is not None:
        out["after"] = BRANCH_NAMES[b.after]
    for key in ROLE_KEYS:
        if getattr(b, key) is not None:
            out[key] = getattr(b, key)
    return out


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
            appends = integer(raw, "appends", source, 0, required=False, label=f"{key}.appends") or 0
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


def _prompt(value: Any, source: str, key: str) -> tuple[str, ...]:
    """A request's `prompt`: an integer n (the tokens p0 .. p{n-1}) or a
    list of token names."""
    allowed = 'an integer from 1 to 1024 (the tokens p0 .. p{n-1}) or a list of token names such as ["p0", "p1", "a1"]'
    if type(value) is int:
        if not 1 <= value <= MAXIMA["prompt"]:
            raise SpecError(source, key, f"must be at least one token: {allowed}, got {value!r}")
        return tuple(f"p{i}" for i in range(value))
    if not isinstance(value, list):
        raise SpecError(source, key, f"must be {allowed}, got {value!r}")
    if not value or len(value) > MAXIMA["prompt"]:
        raise SpecError(source, key, f"must hold 1 to {MAXIMA['prompt']} tokens, got {len(value)}")
    for k, token in enumerate(value):
        if not isinstance(token, str) or not token or token.split() != [token]:
            raise SpecError(source, f"{key}[{k}]", f"a token must be a non-empty name without spaces, got {token!r}")
    return tuple(value)


def no_forks(raw_branches: list[Any], source: str) -> None:
    """A cache scenario's requests share through the cache, never by a fork."""
    for i, raw in enumerate(raw_branches):
        if not isinstance(raw, dict):
            continue            # parse_branches names it
        if "parent" in raw:
            raise SpecError(source, f"branch[{i}].parent", "a cache scenario has no forks: its requests share through the "
                            "cache; give each request its own 'prompt' (and 'after') instead")
        program = raw.get("program")
        for k, item in enumerate(program if isinstance(program, list) else []):
            if isinstance(item, str) and item.split()[:1] == ["fork"]:
                raise SpecError(source, f"branch[{i}].program[{k}]", "'fork' is not allowed in a cache scenario; "
                                'allowed: "append", "speculate <K>"')


def parse_requests(raw_branches: list[Any], branches: tuple[BranchSpec, ...], prompt: int, source: str) -> tuple[BranchSpec, ...]:
    """A cache scenario's branches as requests: each with its own prompt
    (default: the scenario's), `after` another request (no cycles), and
    neither forks nor parents (docs/semantics.md#prefix-caching)."""
    names = BRANCH_NAMES[:len(raw_branches)]
    out = []
    for i, (raw, spec) in enumerate(zip(raw_branches, branches)):
        key = f"branch[{i}]"
        if "prompt" in raw:
            tokens = _prompt(raw["prompt"], source, f"{key}.prompt")
        elif prompt:
            tokens = tuple(f"p{t}" for t in range(prompt))
        else:
            raise SpecError(source, f"{key}.prompt", "missing: a request needs a prompt of at least one token "
                            "(its own 'prompt', or the scenario's)")
        after = raw.get("after")
        if after is not None:
            if not isinstance(after, str) or after not in names:
                raise SpecError(source, f"{key}.after", f"unknown request {after!r}; allowed: the name of another request "
                                f"({', '.join(names)}, in file order)")
            if after == names[i]:
                raise SpecError(source, f"{key}.after", f"request {names[i]!r} cannot be admitted after itself")
        roles = {}
        for role in ROLE_KEYS:
            if role in raw and raw[role] != REMOTE:
                raise SpecError(source, f"{key}.{role}", f'must be "{REMOTE}", got {raw[role]!r}')
            roles[role] = raw.get(role)
        out.append(replace(spec, prompt=tokens, after=None if after is None else names.index(after), **roles))
    for c in range(len(out)):
        seen, at = {c}, out[c].after
        while at is not None:
            if at in seen:
                raise SpecError(source, f"branch[{c}].after", f"the 'after' chain of request {names[c]!r} forms a cycle; "
                                "every chain must end at a request admitted without 'after'")
            seen.add(at)
            at = out[at].after
    return tuple(out)
