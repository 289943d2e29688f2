"""The step kinds (cowcheck.model.stepkinds): one table says what steps
there are, and everything else follows it.

- The protocol parser accepts exactly the steps of the table, each in the
  tables its kind names, with its arity; every built-in protocol uses only
  them.
- Every step kind is handled by each engine that dispatches on a step's
  name: the explicit model (cowcheck.model.steps's `choices`, `apply` and
  `_cache_step`), the z3 engines (cowcheck.symbolic.steps.HANDLERS), the
  sentences of the views (cowcheck.views.words), the partial-order
  reduction for the kinds it may explore alone, the z3 engines' bound on
  pending ops for launches and waits, and the KV pool replay for the kernel
  launches (whose expected sequences it remembers). The engine harness runs
  allocator code, not protocol steps, so it has nothing to cover.
  The functions that dispatch with `if op == ...` are read with `ast`: the
  names they compare a step's op with (a literal, or a module-level set of
  names) must cover the kinds.
- The sets derived from the table equal the hand-written ones they replaced.
- The manual's step tables (docs/_hooks/steps.py) have one row per kind."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

from cowcheck.model import stepkinds, steps as explicit
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import builtin_names, load_builtin, parse_step, step_forms
from cowcheck.model.reduce import ample
from cowcheck.model.stepkinds import STEPS, TABLES
from cowcheck.symbolic import bounds
from cowcheck.symbolic.steps import HANDLERS
from cowcheck.traces import pool
from cowcheck.views import words

ROOT = Path(__file__).resolve().parents[1]


# -- reading a dispatch --------------------------------------------------------------
def _names(node: ast.AST, module: ModuleType) -> set[str]:
    """The step names an expression stands for: a string literal, a tuple of
    them, or a module-level collection of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names(e, module) for e in node.elts))
    if isinstance(node, ast.Name):
        value = vars(module).get(node.id)
        if isinstance(value, (tuple, frozenset, set)) and all(isinstance(v, str) for v in value):
            return set(value)
    return set()


def _subject(node: ast.AST, subject: tuple[str, ...]) -> bool:
    return (isinstance(node, ast.Name) and node.id in subject) or (isinstance(node, ast.Attribute) and node.attr in subject)


def dispatched(func: Callable[..., Any], subject: tuple[str, ...] = ("op",)) -> set[str]:
    """The step names a function compares a step's name with (`op ==
    "write"`, `op in COPIES`, `step.op != "wait-kernel"`)."""
    module = inspect.getmodule(func)
    assert module is not None
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _subject(node.left, subject):
            for comparator in node.comparators:
                found |= _names(comparator, module)
    return found


# -- the parser ----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STEPS))
def test_the_parser_accepts_each_kind_where_it_may_stand(name):
    kind = STEPS[name]
    text = " ".join([name] + ["tail"] * len(kind.args))
    for table in TABLES:
        if table in kind.tables:
            assert parse_step(text, "p.toml", "k", table).op == name
            assert (name + " X" * len(kind.args)) in step_forms(table).split(", ")
        else:
            assert name not in [form.split()[0] for form in step_forms(table).split(", ")]
    with pytest.raises(SpecError, match="takes"):
        parse_step(" ".join([name] + ["tail"] * (len(kind.args) + 1)), "p.toml", "k", "append")


def test_the_parser_accepts_nothing_else():
    for table in TABLES:
        assert {form.split()[0] for form in step_forms(table).split(", ")} <= set(STEPS)
    with pytest.raises(SpecError, match="unknown step 'teleport'"):
        parse_step("teleport", "p.toml", "k", "append")


def test_the_builtin_protocols_use_only_kinds_of_the_table():
    for name in builtin_names():
        protocol = load_builtin(name)
        used = {step.op for _, step in protocol.steps()} | {step.op for step in protocol.admit}
        assert used <= set(STEPS), name


def test_each_kind_is_well_formed():
    for name, kind in STEPS.items():
        assert kind.name == name and kind.effect and set(kind.tables) <= set(TABLES)
        assert kind.once is None or kind.home is not None, f"{name}: a count needs a table of its own"
        assert all(arg in ("X", "Y") for arg in kind.args)


# -- the engines ---------------------------------------------------------------------
def test_the_explicit_model_performs_every_kind():
    handled = dispatched(explicit.choices) | dispatched(explicit.apply) | dispatched(explicit._cache_step)
    assert set(STEPS) - handled == set()
    assert handled - {"decide"} <= set(STEPS)


def test_the_z3_engines_handle_every_kind():
    assert set(HANDLERS) == set(STEPS)


def test_the_views_have_words_for_every_kind():
    handled = dispatched(words._step_words) | dispatched(words._program_words) | dispatched(words._cache_words)
    assert set(STEPS) - handled == set()


def test_partial_order_reduction_judges_every_kind_it_may_explore_alone():
    """`Ample._local` names each of them but the copies, its last case."""
    alone = stepkinds.LOCAL_STEPS.union(stepkinds.LAUNCHES)
    assert alone - dispatched(ample.Ample._local) == set(stepkinds.COPIES)


def test_the_bounds_count_every_launch_and_wait():
    assert set(stepkinds.LAUNCHES + stepkinds.WAITS) <= dispatched(bounds.Pending.after)


def test_the_pool_replay_follows_every_kernel_launch():
    assert set(stepkinds.KERNEL_LAUNCHES) <= dispatched(pool.Sequences.apply, ("step",))


# -- the derived sets, against the hand-written ones they replaced -------------------
OLD_ARITY = {
    "alloc": 1, "incref": 1, "decref": 1, "hold": 1, "release": 1, "copy": 2, "copy-block": 2, "wait-copy": 1,
    "append": 1, "replace": 2, "publish": 0, "write": 0, "wait-kernel": 0, "decref-all": 0, "check-output": 0,
    "incref-all": 0, "share": 0, "rewind": 0, "trim": 0, "lookup": 0, "touch-hits": 0, "alloc-prompt": 0,
    "prefill": 0, "cache-full": 0, "cache-drafts": 0, "alloc-no-evict": 1,
    # transfers (docs/semantics.md#transfers)
    "host-lookup": 0, "load": 0, "recv": 0, "store": 0, "store-free": 0, "send": 0, "wait-transfers": 0, "store-keyed": 0,
}
OLD_ONLY_IN = {"write": "append", "share": "fork", "rewind": "rollback",
               "lookup": "admit", "touch-hits": "admit", "alloc-prompt": "admit", "prefill": "admit",
               "host-lookup": "admit", "load": "admit", "recv": "admit"}
TRANSFER_LAUNCHES = ("load", "recv", "store", "store-free", "send", "store-keyed")


def test_the_derived_sets_are_the_old_ones():
    assert list(stepkinds.ARITY.items()) == list(OLD_ARITY.items())      # the order error messages list them in
    assert {name: kind.home for name, kind in STEPS.items() if kind.home} == OLD_ONLY_IN
    assert stepkinds.WAITS == ("wait-copy", "wait-kernel", "wait-transfers")
    assert stepkinds.COPIES == ("copy", "copy-block")
    assert stepkinds.ALLOCS == ("alloc", "alloc-no-evict")
    assert stepkinds.CACHE_STEPS == ("lookup", "touch-hits", "alloc-prompt", "prefill", "cache-full", "cache-drafts",
                                     "alloc-no-evict", "host-lookup") + TRANSFER_LAUNCHES[:5] + ("wait-transfers", "store-keyed")
    assert explicit.CACHE_ONLY == ("lookup", "touch-hits", "alloc-prompt", "prefill", "cache-full", "cache-drafts",
                                   "host-lookup") + TRANSFER_LAUNCHES[:5] + ("wait-transfers", "store-keyed")
    assert stepkinds.LOCAL_STEPS == frozenset({"wait-kernel", "wait-copy", "append", "replace", "publish"})
    assert set(stepkinds.LAUNCHES) == {"copy", "copy-block", "write", "prefill", *TRANSFER_LAUNCHES}
    assert stepkinds.TRANSFER_LAUNCHES == TRANSFER_LAUNCHES
    assert stepkinds.KERNEL_LAUNCHES == ("write", "prefill")
    assert set(stepkinds.ALLOCATING) == {"alloc", "alloc-no-evict", "alloc-prompt"}
    assert stepkinds.NEVER_BLOCKS == frozenset({
        "lookup", "touch-hits", "publish", "prefill", "cache-full", "cache-drafts", "append", "replace", "incref",
        "decref", "hold", "release", "copy", "copy-block", "write", "check-output", "decref-all",
        "host-lookup", *TRANSFER_LAUNCHES})


def test_step_forms_are_the_old_ones():
    for table in TABLES:
        old = ", ".join(name + "".join(" X" for _ in range(n)) for name, n in OLD_ARITY.items()
                        if OLD_ONLY_IN.get(name, table) == table)
        assert step_forms(table) == old


# -- the manual ----------------------------------------------------------------------
def test_the_manual_lists_every_kind():
    spec = importlib.util.spec_from_file_location("steps_hook", ROOT / "docs" / "_hooks" / "steps.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (ROOT / "docs" / "reference" / "steps.md").read_text()
    rendered = hook.on_page_markdown(page, None, None, None)
    assert "<!-- steps:" not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [kind.usage for kind in STEPS.values()]
