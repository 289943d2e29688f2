"""Rule conditions: small boolean expressions that choose an append path.

A condition is parsed with Python's own parser and then checked against a
whitelist of node types and names, so the grammar is exactly the one of docs/semantics.md#protocols:
`boundary`, `fill`, `B`, `refcount(X)`, `holds(X)`, `true`, `false`, integers,
comparisons, `and`, `or`, `not` and parentheses.

The check builds the condition's own parse tree (`Node`: small named tuples,
one per form of the grammar) and every reader of a condition is a `fold`
over that tree with an `Algebra`, which says what to make of each form given
what was made of its parts: the explicit model's evaluation (`Condition.evaluate`,
folded once into Python source and compiled), the z3 translation
(cowcheck.symbolic.conditions) and the integers the z3 encoding must be
wide enough for (cowcheck.symbolic.bounds)."""

from __future__ import annotations

import ast
import warnings
from typing import Any, Callable, Generic, Mapping, NamedTuple, Optional, TypeVar, Union

from cowcheck.model.errors import SpecError

NAMES = ("boundary", "fill", "B", "true", "false")
FUNCTIONS = ("refcount", "holds")
READABLE = ("tail",)  # the locals a condition may read: `new` is never bound when a rule is evaluated
ALLOWED = "boundary, fill, B, refcount(tail), holds(tail), true, false, integers, ==, !=, <, <=, >, >=, and, or, not"

#: the comparisons, by Python's node type and by the text the tree keeps
COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


# -- the parse tree --------------------------------------------------------------
class Name(NamedTuple):
    name: str                       # one of NAMES


class Const(NamedTuple):
    value: int


class Counter(NamedTuple):
    counter: str                    # refcount | holds
    local: str                      # one of READABLE


class Not(NamedTuple):
    operand: "Node"


class BoolOp(NamedTuple):
    op: str                         # and | or
    operands: tuple["Node", ...]    # two or more


class Compare(NamedTuple):
    """A chain `t0 op0 t1 op1 t2 ...`, as in Python: each adjacent pair compared."""
    terms: tuple["Node", ...]
    ops: tuple[str, ...]            # one fewer than terms, each in COMPARISONS' values


Node = Union[Name, Const, Counter, Not, BoolOp, Compare]

T = TypeVar("T")


class Algebra(Generic[T]):
    """What a fold makes of each form, given what it made of the parts."""

    def name(self, name: str) -> T:
        raise NotImplementedError

    def const(self, value: int) -> T:
        raise NotImplementedError

    def counter(self, counter: str, local: str) -> T:
        raise NotImplementedError

    def not_(self, operand: T) -> T:
        raise NotImplementedError

    def and_(self, operands: list[T]) -> T:
        raise NotImplementedError

    def or_(self, operands: list[T]) -> T:
        raise NotImplementedError

    def compare(self, terms: list[T], ops: tuple[str, ...]) -> T:
        raise NotImplementedError


def fold(node: Node, algebra: Algebra[T]) -> T:
    """The tree folded bottom-up, parts left to right."""
    if isinstance(node, Name):
        return algebra.name(node.name)
    if isinstance(node, Const):
        return algebra.const(node.value)
    if isinstance(node, Counter):
        return algebra.counter(node.counter, node.local)
    if isinstance(node, Not):
        return algebra.not_(fold(node.operand, algebra))
    if isinstance(node, BoolOp):
        operands = [fold(x, algebra) for x in node.operands]
        return algebra.and_(operands) if node.op == "and" else algebra.or_(operands)
    return algebra.compare([fold(x, algebra) for x in node.terms], node.ops)


# -- parsing (and so validating) ---------------------------------------------------------
class Condition:
    """A parsed condition: `tree` for the folds, `evaluate(env)` with the
    names of `environment`."""

    def __init__(self, text: str, source: str, key: str):
        self.text = text
        try:
            with warnings.catch_warnings():
                # Python accepts `1and x` with a SyntaxWarning on stderr; here it is an error
                warnings.simplefilter("error", SyntaxWarning)
                parsed = ast.parse(text.strip(), mode="eval")
            self.tree: Node = _convert(parsed.body, text, source, key)
            code, _ = fold(self.tree, _Source())
            self._run: Callable[[Mapping[str, Any]], Any] = eval(
                compile(f"lambda env: {code}", f"<condition {text!r}>", "eval"), {"__builtins__": {}})
        except SyntaxError as err:
            raise SpecError(source, key, f"condition {text!r} does not parse ({err.msg}); allowed: {ALLOWED}") from None
        except (RecursionError, MemoryError):
            raise SpecError(source, key, f"condition {_short(text)} is nested too deeply to parse; allowed: {ALLOWED}") from None

    def evaluate(self, env: Mapping[str, Any]) -> bool:
        return bool(self._run(env))

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        """Pickled as its text and parsed again (its compiled function does
        not pickle), so that a scenario, and a check's result that holds
        it, can cross to another process."""
        return (Condition, (self.text, "<pickled>", "condition"))

    def fold(self, algebra: Algebra[T]) -> T:
        return fold(self.tree, algebra)

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _convert(node: ast.AST, text: str, source: str, key: str) -> Node:
    """Python's tree of a condition as ours; anything outside the grammar is
    a SpecError that names it."""
    def bad(what: str) -> SpecError:
        return SpecError(source, key, f"condition {text!r} uses {what}; allowed: {ALLOWED}")

    if isinstance(node, ast.BoolOp):
        return BoolOp("and" if isinstance(node.op, ast.And) else "or",
                      tuple(_convert(value, text, source, key) for value in node.values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return Not(_convert(node.operand, text, source, key))
    if isinstance(node, ast.Compare):
        if not all(type(op) in COMPARISONS for op in node.ops):
            raise bad("an operator that is not a comparison")
        return Compare(tuple(_convert(value, text, source, key) for value in [node.left, *node.comparators]),
                       tuple(COMPARISONS[type(op)] for op in node.ops))
    if isinstance(node, ast.Name):
        if node.id not in NAMES:
            raise bad(f"unknown name '{node.id}'")
        return Name(node.id)
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise bad(f"the constant {node.value!r}")
        return Const(node.value)
    if isinstance(node, ast.Call):
        name = getattr(node.func, "id", None)
        if name not in FUNCTIONS:
            raise bad(f"unknown function '{ast.unparse(node.func)}'")
        arg = node.args[0] if len(node.args) == 1 else None
        if node.keywords or not isinstance(arg, ast.Name) or arg.id not in READABLE:
            raise bad(f"'{ast.unparse(node)}' (the argument must be tail)")
        return Counter(name, arg.id)
    raise bad(f"'{ast.unparse(node)}'")


# -- the explicit evaluation ----------------------------------------------------------------
# Python source, with the precedence of each fragment so that parentheses go
# only where they are needed (the tokenizer limits their nesting)
_OR, _AND, _NOT, _COMPARE, _ATOM = range(5)
Fragment = tuple[str, int]


class _Source(Algebra[Fragment]):
    """The condition as a Python expression over `env`: compiled once, it
    evaluates with Python's own semantics (short-circuits, chained
    comparisons), so a counter read where no tail is bound is reached
    exactly when the condition reads it."""

    @staticmethod
    def _inside(fragment: Fragment, above: int) -> str:
        text, precedence = fragment
        return text if precedence > above else f"({text})"

    def name(self, name: str) -> Fragment:
        return f"env[{name!r}]", _ATOM

    def const(self, value: int) -> Fragment:
        return repr(value), _ATOM

    def counter(self, counter: str, local: str) -> Fragment:
        return f"env[{counter!r}](env[{local!r}])", _ATOM

    def not_(self, operand: Fragment) -> Fragment:
        return "not " + self._inside(operand, _NOT - 1), _NOT

    def and_(self, operands: list[Fragment]) -> Fragment:
        return " and ".join(self._inside(x, _AND) for x in operands), _AND

    def or_(self, operands: list[Fragment]) -> Fragment:
        return " or ".join(self._inside(x, _OR) for x in operands), _OR

    def compare(self, terms: list[Fragment], ops: tuple[str, ...]) -> Fragment:
        parts = [self._inside(terms[0], _COMPARE)]
        for op, term in zip(ops, terms[1:]):
            parts += [op, self._inside(term, _COMPARE)]
        return " ".join(parts), _COMPARE


def environment(boundary: bool, fill: int, block_size: int, locals_: dict[str, Optional[int]],
                refcount: Callable[[Optional[int]], int], holds: Callable[[Optional[int]], int]) -> dict[str, Any]:
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
