"""Small helpers over z3 terms, shared by the whole symbolic engine."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import z3

from cowcheck.interrupts import deferred, poll

Term = Any       # a z3 expression, or a Python int standing for a constant


def like(x: Term, value: Term) -> Term:
    """A Python int as a constant of x's sort (z3 would make it an Int)."""
    return value if z3.is_expr(value) else z3.BitVecVal(value, x.size())


def select(items: list, index: Term, default: Term = -1) -> Term:
    """items[index] for a symbolic index: an ite chain (default out of range)."""
    if not z3.is_expr(index):
        return items[index] if 0 <= index < len(items) else default
    items = [like(index, v) for v in items]
    out = like(index, default)
    for i in reversed(range(len(items))):
        out = z3.If(index == i, items[i], out)
    return out


def by_value(x: Term, domain: Iterable[int], fn: Callable[[int], Term]) -> Term:
    """fn(x) for a symbolic x known to lie in `domain`: a case split, which
    keeps pos // B and pos % B free of non-linear arithmetic."""
    domain = list(domain)
    values = [like(x, fn(v)) for v in domain]
    out = values[-1]
    for v, value in zip(reversed(domain[:-1]), reversed(values[:-1])):
        out = z3.If(x == v, value, out)
    return out


class Renaming:
    """One substitution (template term -> term), applied to many formulas.

    z3.substitute rebuilds its two arrays and, unless Python runs with -O,
    checks every pair's sorts on each call: a fifth of a BMC run's time,
    where the same pairs instantiate the relation and every invariant at a
    depth. Here both happen once."""

    def __init__(self, pairs: Iterable[tuple[Any, Any]]):
        self.pairs = list(pairs)        # the arrays point into these terms: keep them alive
        assert all(a.sort().eq(b.sort()) for a, b in self.pairs), "a renaming must keep each term's sort"
        n = len(self.pairs)
        self._from, self._to = (z3.z3types.Ast * n)(), (z3.z3types.Ast * n)()
        for i, (a, b) in enumerate(self.pairs):
            self._from[i], self._to[i] = a.as_ast(), b.as_ast()

    def __call__(self, formula: Any) -> Any:
        if not self.pairs:
            return formula
        ctx = formula.ctx
        return z3.z3._to_expr_ref(z3.Z3_substitute(ctx.ref(), formula.as_ast(), len(self.pairs), self._from, self._to),
                                  ctx)


def any_of(items: Iterable[Term]) -> Term:
    items = list(items)
    return z3.Or(items) if items else z3.BoolVal(False)


def all_of(items: Iterable[Term]) -> Term:
    items = list(items)
    return z3.And(items) if items else z3.BoolVal(True)


@contextmanager
def solving() -> Iterator[None]:
    """Where a z3 engine runs: signals are raised at its safe points
    (`decided`), and one arriving while z3 works cancels the call at once
    (cowcheck.interrupts.deferred). A cancelled check answers unknown; any
    other call raises "canceled", which is the same interrupt. z3's own
    Ctrl-C handler is turned off: it takes the signal from Python and may
    still answer sat or unsat, losing it.

    The parameter is set and the main context built while signals wait too:
    a KeyboardInterrupt inside `z3.Context.__init__` would leave a context
    without its `owner`, whose destructor then fails ("Exception ignored
    in Context.__del__")."""
    with deferred():
        z3.set_param("ctrl_c", False)
        context = z3.main_ctx()
    with deferred(cancel=context.interrupt):
        try:
            yield
        except z3.Z3Exception as error:
            if "cancel" not in str(error):
                raise
            poll()                                   # the signal that cancelled it, as itself
            raise KeyboardInterrupt(str(error)) from None


def decided(solver: Any, answer: Any) -> Any:
    """z3's answer, or why it has none: a signal cancels the query
    (`solving()`), and z3 answers unknown ("interrupted", "canceled"); that
    is the user's interrupt, raised as the signal that came. Any other
    unknown is an error of the engine."""
    poll()
    if answer == z3.unknown:
        reason = solver.reason_unknown()
        if "interrupt" in reason or "cancel" in reason:
            raise KeyboardInterrupt(reason)
        raise RuntimeError(f"z3 answered unknown ({reason})")
    return answer
