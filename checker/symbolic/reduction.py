"""Constraints that let BMC rule out fewer runs without changing its answers.

BMC's cost is the unsatisfiable queries below the shortest violation: z3
must refute every run of that length, and most runs are reorderings of one
another. Two constraints keep, of each family of equivalent runs, at least
one member, so the shortest length of every violation, the existence of a
run of each length, and so every verdict stay exactly the same:

- symmetry breaking (`symmetry_breaking`): root branches with the same
  program (same operations, same may_cancel) are interchangeable: renaming one into
  the other (their tokens with them) maps runs to runs and, since every
  invariant is symmetric under that renaming, violations to violations of
  the same length. So the runs where the first action of such a branch
  comes after the first action of every interchangeable branch of a lower
  index are enough.
- commuting actions (`Commuting`): two action instances that touch disjoint
  fields (neither writes what the other reads or writes) can be swapped
  when adjacent: same enabledness, same state after both. So the runs where
  no two adjacent instances are independent and in decreasing index order
  are enough (a partial-order reduction).

Why both at once keep a run of every family (the argument needs instances
numbered branch by branch, in branch order, as SymbolicSystem does): among the
runs reachable from a given run by renamings and adjacent swaps of
independent instances, take the least in lexicographic order of instance
indices. Swapping an independent decreasing pair would give a smaller one,
so it has none. If an interchangeable branch j' > j acted before j, renaming
j and j' would leave every earlier action (of other branches and the
device: "complete queue[i]" names a slot, not a branch) unchanged and turn
j''s first action into j's, of a lower index: a smaller run again. So it
also has the first actions in branch order. Both constraints are about the
run's prefix only; the action a violation is judged at stays free."""

from __future__ import annotations

import z3

from cowcheck.model.state import Status

from cowcheck.symbolic.state import STATUS_CODE, Sym
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.terms import Renaming, all_of


def interchangeable(system: SymbolicSystem) -> list[tuple[int, int]]:
    """Pairs (j, j') of root branches with the same program, j' the next
    such branch after j. Children are never paired: two children of one
    parent are forked at different points of its program (renaming them
    would rename its forks), and two roots with equal programs fork no one
    (a child is forked exactly once). A cache scenario has none: another
    request's prompt may name one request's tokens (and a waiting request
    has not started, whatever `started` says of its status)."""
    if system.cache:
        return []
    last: dict = {}
    pairs = []
    for j, spec in enumerate(system.scenario.branches):
        if spec.parent is not None:
            continue
        if spec in last:
            pairs.append((last[spec], j))
        last[spec] = j
    return pairs


def started(s: Sym, j: int) -> z3.BoolRef:
    """Branch j has taken an action. Its first one (a decide, or the first
    step of a finish or cancel) leaves it inside an operation (pc != 0) or,
    for a one-step operation, with `done` or its status changed; pc returns
    to 0 only when an operation ends, which changes one of those for good."""
    b = s.br[j]
    return z3.Or(b.pc != 0, b.done != 0, b.status != STATUS_CODE[Status.RUNNING])


def symmetry_breaking(system: SymbolicSystem, s: Sym) -> z3.BoolRef:
    """In state s, no branch has started before an interchangeable branch of
    a lower index (a constraint on every state of the run)."""
    return all_of(z3.Implies(started(s, later), started(s, earlier)) for earlier, later in interchangeable(system))


def _variables(exprs: list, seen: set) -> set:
    """The ids of the uninterpreted constants in exprs. `seen` holds the
    subterms already visited for this instance (its guard and posts share
    many). The walk uses z3's C API on raw terms: wrapping each subterm in
    a Python ExprRef (reference counted both ways) took most of the time,
    and the terms stay alive as long as `exprs` does."""
    exprs = [e for e in exprs if z3.is_expr(e)]
    if not exprs:
        return set()
    c = exprs[0].ctx.ref()
    out, todo = set(), [e.as_ast() for e in exprs]
    while todo:
        a = todo.pop()
        key = z3.Z3_get_ast_id(c, a)
        if key in seen or z3.Z3_get_ast_kind(c, a) != z3.Z3_APP_AST:
            continue
        seen.add(key)
        n = z3.Z3_get_app_num_args(c, a)
        if n:
            todo.extend(z3.Z3_get_app_arg(c, a, i) for i in range(n))
        elif z3.Z3_get_decl_kind(c, z3.Z3_get_app_decl(c, a)) == z3.Z3_OP_UNINTERPRETED:
            out.add(key)
    return out


class Commuting:
    """Which action instances commute. An instance reads the template fields
    that occur in its guard, its `leads` and the new values it writes, and
    writes the fields it may change. When neither of two instances writes a
    field the other reads or writes, each is enabled after the other exactly
    when it was before, and both orders compute the same new values: they
    commute. Judged on the formulas, not on states, so it is conservative
    (a queue launch and a completion always conflict, whatever the slots)."""

    def __init__(self, pre: Sym, executed: list, changed: list[dict]):
        """`changed[i]`: field index -> new value, for the fields instance i
        writes (Unrolling.changed)."""
        field_of = {x.get_id(): f for f, x in enumerate(pre.flat())}
        reads, writes = [], []
        for x, fields in zip(executed, changed):
            ids = _variables([x.guard, x.leads, *fields.values()], set())
            reads.append({field_of[i] for i in ids if i in field_of})
            writes.append(set(fields))
        #: for each instance b, the instances a < b that commute with it
        self.smaller = [[a for a in range(b) if not writes[a] & (reads[b] | writes[b]) and not writes[b] & reads[a]]
                        for b in range(len(executed))]

    def ordered(self, first, second) -> z3.BoolRef:
        """Two consecutive actions are not an independent pair in decreasing
        order."""
        return all_of(z3.Implies(first == b, all_of(second != a for a in smaller))
                      for b, smaller in enumerate(self.smaller) if smaller)


class Reductions:
    """Both constraints along BMC's run from the initial state of an
    Unrolling `u` (cowcheck.symbolic.bmc)."""

    def __init__(self, u):
        self.u = u
        self.commuting = Commuting(u.pre, u.executed, u.changed)
        # both built once, over the template state and two template actions, and renamed at each depth
        self.symmetry = symmetry_breaking(u.system, u.pre)
        self.first, self.second = (z3.BitVec(f"ord.{which}", u.act_width) for which in ("first", "second"))
        self.ordered = self.commuting.ordered(self.first, self.second)

    def at(self, k: int) -> list:
        """The constraints on state k of the run and on the two actions into it."""
        u = self.u
        parts = [u.at(self.symmetry, k)]
        if k >= 2:
            parts.append(Renaming([(self.first, u.act_at(k - 2)), (self.second, u.act_at(k - 1))])(self.ordered))
        return parts
