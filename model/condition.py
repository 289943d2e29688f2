"""Rule conditions: small boolean expressions that choose an append path.

A condition is parsed with Python's own parser and then checked against a
whitelist of node types and names, so the grammar is exactly DESIGN.md's:
`boundary`, `fill`, `B`, `refcount(X)`, `holds(X)`, `true`, `false`, integers,
comparisons, `and`, `or`, `not` and parentheses."""

from __future__ import annotations

import ast
import warnings
from typing import Callable

from .errors import SpecError

NAMES = ("boundary", "fill", "B", "true", "false")
FUNCTIONS = ("refcount", "holds")
LOCALS = ("tail",)  # `new` is never bound when a rule is evaluated
ALLOWED = "boundary, fill, B, refcount(tail), holds(tail), true, false, integers, ==, !=, <, <=, >, >=, and, or, not"

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class Condition:
    """A parsed condition; call `evaluate(env)` with a `ConditionEnv`."""

    def __init__(self, text: str, source: str, key: str):
        self.text = text
        try:
            with warnings.catch_warnings():
                # Python accepts `1and x` with a SyntaxWarning on stderr; here it is an error
                warnings.simplefilter("error", SyntaxWarning)
                tree = ast.parse(text.strip(), mode="eval")
            _check(tree.body, text, source, key)
        except SyntaxError as err:
            raise SpecError(source, key, f"condition {text!r} does not parse ({err.msg}); allowed: {ALLOWED}") from None
        except (RecursionError, MemoryError):
            raise SpecError(source, key, f"condition {_short(text)} is nested too deeply to parse; allowed: {ALLOWED}") from None
        self._code = compile(tree, f"<condition {text!r}>", "eval")

    def evaluate(self, env: dict) -> bool:
        return bool(eval(self._code, {"__builtins__": {}}, env))

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check(node: ast.AST, text: str, source: str, key: str) -> None:
    def bad(what: str) -> SpecError:
        return SpecError(source, key, f"condition {text!r} uses {what}; allowed: {ALLOWED}")

    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, text, source, key)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(node.operand, text, source, key)
    elif isinstance(node, ast.Compare):
        if not all(isinstance(op, _COMPARE_OPS) for op in node.ops):
            raise bad("an operator that is not a comparison")
        for value in [node.left, *node.comparators]:
            _check(value, text, source, key)
    elif isinstance(node, ast.Name):
        if node.id not in NAMES:
            raise bad(f"unknown name '{node.id}'")
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise bad(f"the constant {node.value!r}")
    elif isinstance(node, ast.Call):
        name = getattr(node.func, "id", None)
        if name not in FUNCTIONS:
            raise bad(f"unknown function '{ast.unparse(node.func)}'")
        if node.keywords or len(node.args) != 1 or not isinstance(node.args[0], ast.Name) or node.args[0].id not in LOCALS:
            raise bad(f"'{ast.unparse(node)}' (the argument must be tail)")
    else:
        raise bad(f"'{ast.unparse(node)}'")


def environment(boundary: bool, fill: int, block_size: int, locals_: dict, refcount: Callable, holds: Callable) -> dict:
    """The names a condition may read, bound for one decision."""
    return {
        "boundary": boundary,
        "fill": fill,
        "B": block_size,
        "true": True,
        "false": False,
        "refcount": refcount,
        "holds": holds,
        **locals_,
    }
