"""Protocols: for each high-level operation of a branch, the ordered steps it
takes. Loaded from TOML (docs/semantics.md#protocols) and validated up front, so a
bad file fails before any exploration starts."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple, Optional

from cowcheck.model.condition import Condition
from cowcheck.model.errors import KindMismatch, SpecError
from cowcheck.model.stepkinds import ALLOCS, ARITY, CACHE_STEPS, STEPS, Once

LOCALS = ("tail", "new")


def step_forms(table: str) -> str:
    """The steps a table may list, as `alloc X, copy X X, ...`: every step
    but those that belong in other tables (StepKind.tables)."""
    return ", ".join(name + " X" * len(kind.args) for name, kind in STEPS.items() if table in kind.tables)

TOP_KEYS = ("name", "description", "admit", "append", "cancel", "finish", "fork", "rollback")
APPEND_KEYS = ("rules", "paths", "atomic")
RULE_KEYS = ("when", "path")
PATH_KEYS = ("steps", "atomic")
OP_KEYS = ("steps",)
PROGRAM_OP_KEYS = ("steps", "atomic")
#: the tables a cache scenario takes from the built-in prefix-cache when a
#: protocol does not give them (docs/semantics.md#prefix-caching)
CACHE_DEFAULTS = ("admit", "append", "rollback", "finish")
#: the tables a transfer scenario takes from the built-in kv-connector when a
#: protocol does not give them (docs/semantics.md#transfers)
TRANSFER_DEFAULTS = CACHE_DEFAULTS + ("cancel",)


class Step(NamedTuple):
    op: str
    args: tuple[str, ...]
    text: str
    where: str  # the key it came from, for run-time errors


class Rule(NamedTuple):
    when: Condition
    path: str


class AppendPath(NamedTuple):
    name: str
    steps: tuple[Step, ...]
    atomic: bool


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    source: str
    rules: tuple[Rule, ...]
    paths: dict[str, AppendPath] = field(hash=False)
    cancel: tuple[Step, ...]
    finish: tuple[Step, ...]
    fork: tuple[Step, ...]
    rollback: tuple[Step, ...]          # may be empty: the operation ends at verify
    atomic_fork: bool
    atomic_rollback: bool
    definition: dict[str, Any] = field(hash=False, compare=False)  # normalized, for counterexample files
    #: a cache scenario's admission (empty outside cache scenarios)
    admit: tuple[Step, ...] = ()
    atomic_admit: bool = False
    #: the tables the file gave (the others are defaults)
    given: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def max_allocs(self) -> int:
        """The most `alloc` steps of any append path (for the default pool)."""
        return max((sum(s.op in ALLOCS for s in p.steps) for p in self.paths.values()), default=0)

    @property
    def fork_allocs(self) -> int:
        return sum(s.op in ALLOCS for s in self.fork)

    @property
    def rollback_allocs(self) -> int:
        return sum(s.op in ALLOCS for s in self.rollback)

    @property
    def cache_only(self) -> bool:
        """Only a cache scenario can run it: it has no [append] of its own
        or uses a step of prefix caching outside [admit]."""
        return not self.paths or any(step.op in CACHE_STEPS for _, step in self.steps())

    def steps(self) -> list[tuple[str, Step]]:
        """Every step of every table but [admit], with its table's name."""
        out = [(f"append.paths.{p.name}", s) for p in self.paths.values() for s in p.steps]
        for table in ("cancel", "finish", "fork", "rollback"):
            out += [(table, s) for s in getattr(self, table)]
        return out


def _unknown(data: dict[str, Any], allowed: tuple[str, ...], source: str, prefix: str) -> None:
    for key in data:
        if key not in allowed:
            raise SpecError(source, f"{prefix}{key}", f"unknown key; allowed: {', '.join(allowed)}")


def parse_step(text: Any, source: str, key: str, table: str) -> Step:
    """One step of `table` (append, admit, cancel, finish, fork or rollback)."""
    if not isinstance(text, str) or not text.split():
        raise SpecError(source, key, f"a step must be a non-empty string; allowed: {step_forms(table)}")
    op, *args = text.split()
    if op == "decide":
        raise SpecError(source, key, "'decide' is implicit (the first action of every append); do not list it")
    if op not in ARITY:
        raise SpecError(source, key, f"unknown step '{op}'; allowed in [{table}]: {step_forms(table)}")
    if len(args) != ARITY[op]:
        raise SpecError(source, key, f"step '{op}' takes {ARITY[op]} local(s), got {len(args)}: {text!r}")
    for arg in args:
        if arg not in LOCALS:
            raise SpecError(source, key, f"unknown local '{arg}' in {text!r}; allowed: tail, new")
    return Step(op, tuple(args), " ".join([op, *args]), key)


def _steps(value: Any, source: str, key: str, table: str) -> tuple[Step, ...]:
    """The steps of one path or operation table (`table`: append, cancel,
    finish, fork or rollback), with the counts the semantics ask for."""
    if not isinstance(value, list) or (not value and table != "rollback"):
        raise SpecError(source, key, "must be a non-empty list of steps" if table != "rollback" else "must be a list of steps")
    steps = tuple(parse_step(v, source, f"{key}[{i}]", table) for i, v in enumerate(value))
    for i, step in enumerate(steps):
        tables = STEPS[step.op].tables
        if table not in tables:
            where = " or ".join("append paths" if home == "append" else f"[{home}]" for home in tables)
            raise SpecError(source, f"{key}[{i}]", f"'{step.op}' is allowed only in {where}")
    place = "an append path" if table == "append" else f"[{table}]"
    for kind in STEPS.values():
        if kind.once is None or kind.home != table:
            continue
        n = sum(s.op == kind.name for s in steps)
        if kind.once is Once.EXACTLY and n != 1:
            raise SpecError(source, key, f"{place} must have exactly one '{kind.name}' step{kind.why}, it has {n}")
        if kind.once is Once.AT_MOST and n > 1:
            raise SpecError(source, key, f"{place} may have at most one '{kind.name}' step, it has {n}")
    return steps


def _bool(value: Any, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(source, key, f"must be true or false, got {value!r}")
    return value


def _table(value: Any, source: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(source, key, "must be a table")
    return value


def _append(value: Any, source: str) -> tuple[tuple[Rule, ...], dict[str, AppendPath]]:
    """[append]: its rules and paths."""
    append = _table(value, source, "append")
    _unknown(append, APPEND_KEYS, source, "append.")
    all_atomic = _bool(append.get("atomic", False), source, "append.atomic")
    raw_paths = _table(append.get("paths"), source, "append.paths") if "paths" in append else None
    if not raw_paths:
        raise SpecError(source, "append.paths", "missing or empty; give at least one path, e.g. paths.in-place = [\"write\", \"wait-kernel\"]")
    paths: dict[str, AppendPath] = {}
    for pname, pvalue in raw_paths.items():
        key = f"append.paths.{pname}"
        atomic = all_atomic
        if isinstance(pvalue, dict):
            _unknown(pvalue, PATH_KEYS, source, key + ".")
            atomic = all_atomic or _bool(pvalue.get("atomic", False), source, key + ".atomic")
            pvalue = pvalue.get("steps")
            key += ".steps"
        paths[pname] = AppendPath(pname, _steps(pvalue, source, key, "append"), atomic)

    raw_rules = append.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        what = "missing or empty" if raw_rules in (None, []) else f"must be a list, got {raw_rules!r}"
        raise SpecError(source, "append.rules", f"{what}; give a list of {{ when = \"...\", path = \"...\" }}")
    rules = []
    for i, rule in enumerate(raw_rules):
        key = f"append.rules[{i}]"
        rule = _table(rule, source, key)
        _unknown(rule, RULE_KEYS, source, key + ".")
        when, path = rule.get("when"), rule.get("path")
        if not isinstance(when, str):
            raise SpecError(source, key + ".when", "missing; must be a condition string" if when is None
                            else f"must be a condition string, got {when!r}")
        if path not in paths:
            raise SpecError(source, key + ".path", f"unknown path {path!r}; allowed: {', '.join(paths)}")
        rules.append(Rule(Condition(when, source, key + ".when"), path))

    return tuple(rules), paths


def protocol_from_dict(data: Any, source: str, default_name: str = "protocol") -> Protocol:
    """Validate a protocol definition (parsed TOML, or JSON from a
    counterexample file) and build the Protocol."""
    data = _table(data, source, "")
    _unknown(data, TOP_KEYS, source, "")
    name = data.get("name", default_name)
    description = data.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise SpecError(source, key, "must be a string")
    rules, paths = _append(data["append"], source) if "append" in data else ((), {})
    ops = {}
    atomic_op = {"fork": False, "rollback": False, "admit": False}
    for opname in ("cancel", "finish", "fork", "rollback", "admit"):
        if opname in data:
            table = _table(data[opname], source, opname)
            programmed = opname in atomic_op
            _unknown(table, PROGRAM_OP_KEYS if programmed else OP_KEYS, source, opname + ".")
            if "steps" not in table:
                raise SpecError(source, f"{opname}.steps", "missing; give the operation's list of steps")
            ops[opname] = _steps(table["steps"], source, f"{opname}.steps", opname)
            if programmed:
                atomic_op[opname] = _bool(table.get("atomic", False), source, f"{opname}.atomic")
        elif opname == "admit":
            ops[opname] = ()
        else:
            cow = load_builtin("cow")
            ops[opname] = getattr(cow, opname)
            if opname in atomic_op:
                atomic_op[opname] = getattr(cow, f"atomic_{opname}")

    given = frozenset(key for key in TOP_KEYS[2:] if key in data)
    return _build(name, description, source, rules, paths, ops, atomic_op, given)


def inline_protocol(data: Any, source: str) -> Protocol:
    """A protocol given inline, as a table (a sweep's cell, a counterexample
    file's scenario): parsed once per definition and source, since a
    Protocol is immutable. A grid of thousands of cells then parses each of
    its protocols once (parsing compiles every rule's condition)."""
    try:
        key = json.dumps(data, sort_keys=True)
    except (TypeError, ValueError):        # not plain data: parse it as it is, to say why
        return protocol_from_dict(data, source)
    return _parsed(key, source)


@lru_cache(maxsize=256)
def _parsed(definition: str, source: str) -> Protocol:
    return protocol_from_dict(json.loads(definition), source)


def _build(name: str, description: str, source: str, rules: tuple[Rule, ...], paths: dict[str, AppendPath],
           ops: dict[str, tuple[Step, ...]], atomic: dict[str, bool], given: frozenset[str]) -> Protocol:
    """The Protocol and its normalized definition (what a counterexample
    file records: every table, so that it reloads the same anywhere; an
    [admit] only where there is one, so files of scenarios without a cache
    read as before)."""
    definition: dict[str, Any] = {"name": name, "description": description}
    if ops["admit"]:
        definition["admit"] = {"steps": [s.text for s in ops["admit"]], "atomic": atomic["admit"]}
    definition.update({
        "append": {
            "rules": [{"when": r.when.text, "path": r.path} for r in rules],
            "paths": {p.name: {"steps": [s.text for s in p.steps], "atomic": p.atomic} for p in paths.values()},
        },
        "cancel": {"steps": [s.text for s in ops["cancel"]]},
        "finish": {"steps": [s.text for s in ops["finish"]]},
        "fork": {"steps": [s.text for s in ops["fork"]], "atomic": atomic["fork"]},
        "rollback": {"steps": [s.text for s in ops["rollback"]], "atomic": atomic["rollback"]},
    })
    if not paths:
        del definition["append"]
    return Protocol(name, description, source, rules, paths, ops["cancel"], ops["finish"], ops["fork"],
                    ops["rollback"], atomic["fork"], atomic["rollback"], definition, ops["admit"], atomic["admit"], given)


def for_scenario(protocol: Protocol, cache: bool, source: str, transfers: bool = False) -> Protocol:
    """The protocol as a scenario runs it. In a cache scenario, the tables
    of CACHE_DEFAULTS it does not give are the built-in prefix-cache's (in
    a transfer scenario those of TRANSFER_DEFAULTS, kv-connector's);
    elsewhere [append] is required, [admit] is ignored and a cache step is
    bad input (docs/semantics.md#prefix-caching, docs/semantics.md#transfers)."""
    if not cache:
        why = f"protocol {protocol.name!r} is a prefix-cache protocol"
        if not protocol.paths:
            raise KindMismatch(protocol.source, "append", "missing; a protocol needs [append] with rules and paths "
                               "(only in a cache scenario does it default to prefix-cache's)", "fork", why)
        for where, step in protocol.steps():
            if step.op in CACHE_STEPS:
                raise KindMismatch(source, "protocol", f"protocol {protocol.name!r} uses the cache step {step.text!r} in {where}, "
                                   'which needs a cache scenario (cache = "prefix")', "fork", why)
        return protocol
    missing = [table for table in (TRANSFER_DEFAULTS if transfers else CACHE_DEFAULTS) if table not in protocol.given]
    if not missing:
        return protocol
    base = load_builtin("kv-connector" if transfers else "prefix-cache")
    rules, paths = (base.rules, base.paths) if "append" in missing else (protocol.rules, protocol.paths)
    ops = {op: getattr(base if op in missing else protocol, op) for op in ("admit", "rollback", "finish", "cancel")}
    ops.update({op: getattr(protocol, op) for op in ("fork",)})
    atomic = {"fork": protocol.atomic_fork,
              "rollback": (base if "rollback" in missing else protocol).atomic_rollback,
              "admit": (base if "admit" in missing else protocol).atomic_admit}
    return _build(protocol.name, protocol.description, protocol.source, rules, paths, ops, atomic,
                  protocol.given | set(missing))


def is_protocol_data(data: dict[str, Any]) -> bool:
    """Whether parsed TOML is a protocol rather than a scenario: it has an
    operation's table and no [[branch]] (a cache protocol may give only
    [cancel], say, and take the rest from prefix-cache)."""
    return "branch" not in data and any(key in data for key in TOP_KEYS[2:])


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise SpecError(str(path), "", "file not found") from None
    except IsADirectoryError:
        raise SpecError(str(path), "", "is a folder, not a TOML file") from None
    except OSError as err:
        raise SpecError(str(path), "", f"cannot be read ({err.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"invalid TOML ({err})") from None
    except (RecursionError, MemoryError):
        raise SpecError(str(path), "", "nested too deeply to read (arrays or tables inside one another)") from None


def load_protocol(path: Path) -> Protocol:
    return protocol_from_dict(read_toml(path), str(path), default_name=Path(path).stem)


def builtin_folder() -> Path:
    """specs/protocols, whether cowcheck runs from a checkout, an editable
    install or a wheel (specs/ ships as a namespace package of data)."""
    import cowcheck.specs.protocols

    return next(Path(p) for p in cowcheck.specs.protocols.__path__ if Path(p).is_dir())


def builtin_names(cache: Optional[bool] = None) -> list[str]:
    """The built-in protocols: all of them, or (cache=False) those a
    scenario without a cache can run, or (cache=True) those only a cache
    scenario can."""
    names = sorted(p.stem for p in builtin_folder().glob("*.toml"))
    return names if cache is None else [n for n in names if load_builtin(n).cache_only == cache]


_BUILTINS: dict[str, Protocol] = {}


def load_builtin(name: str) -> Protocol:
    if name not in _BUILTINS:
        path = builtin_folder() / f"{name}.toml"
        if not path.is_file():
            raise SpecError("", "protocol", f"unknown built-in protocol {name!r}; allowed: {', '.join(builtin_names())} or a path to a .toml file")
        _BUILTINS[name] = load_protocol(path)
    return _BUILTINS[name]


def resolve_protocol(ref: str, base: Path, source: str) -> Protocol:
    """A scenario's `protocol` value: a built-in name or a path relative to the
    scenario's folder."""
    if not isinstance(ref, str) or not ref:
        raise SpecError(source, "protocol", f"must be a built-in name ({', '.join(builtin_names())}) or a path to a .toml file")
    if "/" in ref or ref.endswith(".toml"):
        path = base / ref
        if not path.is_file():
            raise SpecError(source, "protocol", f"protocol file {str(path)!r} not found ({ref!r} is resolved relative to the scenario's folder); "
                            f"allowed: a built-in name ({', '.join(builtin_names())}) or a path to a .toml file")
        return load_protocol(path)
    try:
        return load_builtin(ref)
    except SpecError as err:
        raise SpecError(source, "protocol", err.message) from None
