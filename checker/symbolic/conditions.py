"""Rule conditions as z3 formulas: a fold of model.condition's parse tree."""

from __future__ import annotations

import operator

import z3

from cowcheck.model.condition import Algebra, Condition

from cowcheck.symbolic.terms import Term, all_of

OPERATORS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class _Formula(Algebra[Term]):
    """Names and counters bound to z3 terms; a comparison between a boolean
    and a number compares the boolean as 0 or 1, as Python does."""

    def __init__(self, boundary: Term, fill: Term, block_size: int, rc: Term, hd: Term):
        self.width = fill.size()
        self.names = {"boundary": boundary, "fill": fill, "B": self.const(block_size),
                      "true": z3.BoolVal(True), "false": z3.BoolVal(False)}
        self.counters = {"refcount": rc, "holds": hd}

    def name(self, name: str) -> Term:
        return self.names[name]

    def const(self, value: int) -> Term:
        return z3.BitVecVal(value, self.width)

    def counter(self, counter: str, local: str) -> Term:
        return self.counters[counter]

    def not_(self, operand: Term) -> Term:
        return z3.Not(operand)

    def and_(self, operands: list[Term]) -> Term:
        return z3.And(operands)

    def or_(self, operands: list[Term]) -> Term:
        return z3.Or(operands)

    def _number(self, x: Term) -> Term:
        return z3.If(x, self.const(1), self.const(0)) if z3.is_bool(x) else x

    def compare(self, terms: list[Term], ops: tuple[str, ...]) -> Term:
        parts = []
        for op, a, b in zip(ops, terms, terms[1:]):
            if not (z3.is_bool(a) and z3.is_bool(b)):
                a, b = self._number(a), self._number(b)
            parts.append(OPERATORS[op](a, b))
        return all_of(parts)


def formula(condition: Condition, boundary: Term, fill: Term, block_size: int, rc: Term, hd: Term) -> z3.BoolRef:
    """The condition as a z3 formula, with `fill` (a bit-vector: its width is
    the formula's) and `boundary`, and the tail's refcount and holds."""
    result = condition.fold(_Formula(boundary, fill, block_size, rc, hd))
    return result if z3.is_bool(result) else result != 0
