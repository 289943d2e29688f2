"""Array sizes for the symbolic state, derived from the scenario's programs.

The z3 state has one field per table entry and per device-queue slot, so
every slot that no run can use costs fields in every state of the unrolling
and, for the queue, one more device-completion instance per step. These
bounds are computed by a small static analysis of the protocol's structure
(cowcheck.model.structure); they are upper bounds on every reachable state
(the tests check them against the explorer's reachable states), never a
restriction of the runs.

- Table entries (`table_bound`): a working table grows only by `append`
  steps (a child starts from its parent's table at the fork). Every append
  path has exactly one `write`, so the positions an append of a plain
  branch decides at are known (the n-th at L + n), and with branch programs
  a small set of them (`positions`: a rollback rewinds by 0 .. K). There
  `boundary` and `fill` are known, so only the rules that can still be
  chosen for some refcount and holds of the tail count (`possible_rules`);
  each contributes the `append` steps of its path.
- Queue slots (`branch_queue_bound`, summed over branches): the queue holds ops launched by the branches.
  A `wait-kernel` step is enabled only once none of the branch's kernels is
  in flight, and `wait-copy Y` only once no copy into Y is, so the ops a
  branch can have in flight are the ones it launched and has not waited for
  since: kernels since its last `wait-kernel`, copies into a local since
  the last `wait-copy` of that local, and copies whose local was rebound
  (`alloc`) or cleared (the end of an operation), which no wait covers any
  more. The analysis follows each branch through every sequence of paths,
  cancellations (at the places the structure says a cancel may start) and
  finish its scenario allows and keeps the most such ops at any point; the
  queue bound is the sum over branches.

The same walk gives, for runs from the initial state, the fewest actions a
branch takes before each of its steps can run (`earliest`): BMC leaves an
action instance out of the transition relation at the depths where it
cannot fire yet (a finish, with its costly decref-all, needs every
operation done first; a child acts only after its parent's `share`),
which shrinks the early steps of every unrolling.

All rely on the rule (docs/semantics.md#decisions) that every append path has exactly one
`write` (model.protocol checks it): so `positions` knows where each
operation of a branch's flattened program (cowcheck.model.scenario.Operation)
can begin, and `rules_at(k)`, the rules the append at operation k can
choose, are known up front."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import z3

from cowcheck.model.condition import Algebra
from cowcheck.model.protocol import AppendPath, Protocol, Step
from cowcheck.model.scenario import Scenario
from cowcheck.model.stepkinds import ALLOCS, COPIES, KERNEL_LAUNCHES, LAUNCHES, TRANSFER_STEPS
from cowcheck.model.structure import Op, Place, Structure

from cowcheck.symbolic.conditions import formula


class Pending(NamedTuple):
    """What one branch has launched and not waited for."""
    kernels: int = 0
    tail: int = 0        # copies into the block bound to `tail` now
    new: int = 0         # copies into the block bound to `new` now
    stale: int = 0       # copies no wait of this branch can cover any more

    @property
    def size(self) -> int:
        return self.kernels + self.tail + self.new + self.stale

    def after(self, step: Step) -> "Pending":
        """The pending ops once `step` has been taken."""
        op, args = step.op, step.args
        if op in TRANSFER_STEPS:     # never reached: the z3 engines refuse transfers (cowcheck.symbolic.system)
            return self
        if op in KERNEL_LAUNCHES:
            return self._replace(kernels=self.kernels + 1)
        if op == "wait-kernel":
            return self._replace(kernels=0)
        if op in COPIES:
            return self._replace(**{args[1]: getattr(self, args[1]) + 1})
        if op == "wait-copy":
            return self._replace(**{args[0]: 0})
        if op in ALLOCS:   # the local now names another block: its copies are out of reach
            return self._replace(**{args[0]: 0, "stale": self.stale + getattr(self, args[0])})
        return self

    def ended(self) -> "Pending":
        """The end of an operation clears the locals."""
        return Pending(self.kernels, 0, 0, self.stale + self.tail + self.new)


def places(structure: Structure, op: Op, path: Optional[str] = None) -> list[Place]:
    """The places of one program, in order."""
    return [Place(op, path, k) for k in range(len(structure.program(op, path)))]


def walk(structure: Structure, op: Op, path: Optional[str], start: Pending,
         may_cancel: bool) -> tuple[int, Pending, list[Pending]]:
    """Run one program from `start`: the most pending ops at any point, the
    pending ops once it has ended, and (may_cancel) the pending ops at each
    place where a cancel may start."""
    pending, peak, cancel_points = start, start.size, []
    for place in places(structure, op, path):
        if may_cancel and structure.cancellable(place):
            cancel_points.append(pending)
        pending = pending.after(structure.step(place))
        peak = max(peak, pending.size)
        if structure.is_last(place):
            pending = pending.ended()
    return peak, pending, cancel_points


#: rules_at(k): the indices of the rules the append at operation k of a
#: branch's flattened program can choose (empty for a fork or a rollback)
RulesAt = Callable[[int], list[int]]


def paths(scenario: Scenario, rules: list[int]) -> list[AppendPath]:
    """The append paths the given rules choose."""
    protocol = scenario.protocol
    return [protocol.paths[protocol.rules[r].path] for r in rules]


def positions(scenario: Scenario, j: int) -> list[set[int]]:
    """The positions branch j can be at when each operation of its flattened
    program begins (and, last, when its finish does). Every append path
    writes once, a fork keeps pos, a rollback of K drafts rewinds by 0 .. K,
    and a child starts where its parent can be at the fork. Plain: the n-th
    append begins at L + n."""
    spec = scenario.branches[j]
    if scenario.cache:      # a request's operations begin after its admission's prefill
        now = {len(scenario.prompt_of(j))}
    elif spec.parent is None:
        now = {scenario.prompt}
    else:
        parent = scenario.branches[spec.parent].operations
        at = next(k for k, o in enumerate(parent) if o.op is Op.FORK and o.arg == j)
        now = positions(scenario, spec.parent)[at]
    out = []
    for o in spec.operations:
        out.append(now)
        if o.op is Op.APPEND:
            now = {p + 1 for p in now}
        elif o.op is Op.ROLLBACK:
            now = {p - r for p in now for r in range(o.arg + 1)}
    return out + [now]


def own_steps(structure: Structure, op: Op, what: str) -> int:
    """How many `what` steps one fork or rollback takes."""
    return sum(s.op == what for s in structure.program(op))


def branch_queue_bound(scenario: Scenario, structure: Structure, j: int, rules_at: RulesAt) -> int:
    """The most ops branch j can have in flight at once, over every sequence
    of its operations (for the k-th, if an append, the paths of
    `rules_at(k)`), cancellations (between operations and, if may_cancel,
    at the cancel places inside an append) and its finish."""
    spec = scenario.branches[j]
    peak, between = 0, {Pending()}

    def end_with(op: Op, starts) -> None:
        nonlocal peak
        for start in starts:
            peak = max(peak, walk(structure, op, None, start, False)[0])

    if scenario.cache:      # a waiting request may be cancelled; else it is admitted first
        if spec.may_cancel:
            end_with(Op.CANCEL, between)
        most, end, _ = walk(structure, Op.ADMIT, None, Pending(), False)
        peak, between = max(peak, most), {end}

    for k, operation in enumerate(spec.operations):
        after: set[Pending] = set()
        if operation.op is Op.APPEND:
            for path in paths(scenario, rules_at(k)):
                for start in between:
                    most, end, cancel_points = walk(structure, Op.APPEND, path.name, start, spec.may_cancel)
                    peak = max(peak, most)
                    after.add(end)
                    if spec.may_cancel:
                        end_with(Op.CANCEL, cancel_points)
        else:       # a fork or a rollback (verify launches nothing; an empty [rollback] ends there)
            for start in between:
                most, end, _ = walk(structure, operation.op, None, start, False)
                peak = max(peak, most)
                after.add(end)
        if spec.may_cancel:
            end_with(Op.CANCEL, between)
        between = after
    end_with(Op.FINISH, between)
    if spec.may_cancel:
        end_with(Op.CANCEL, between)
    return peak


def table_bound(scenario: Scenario, structure: Structure, j: int, rules_at: Callable[[int], RulesAt]) -> int:
    """The longest working (and so published) table branch j can have. A
    table grows only by `append` steps (a child starts with its parent's
    table at the fork; `trim` and `decref-all` only shrink it), so the
    bound adds up, operation by operation, the most `append` steps each
    can take. `rules_at(i)` is branch i's RulesAt."""
    def appends(steps) -> int:
        return sum(s.op == "append" for s in steps)

    return _grown(scenario, structure, j, rules_at)[-1] + max(appends(structure.program(Op.FINISH)),
                                                             appends(structure.program(Op.CANCEL)))


def _grown(scenario: Scenario, structure: Structure, j: int, rules_at: Callable[[int], RulesAt]) -> list[int]:
    """The most entries branch j's working table can have after each of
    its operations (first: when it begins)."""
    spec = scenario.branches[j]
    if scenario.cache:
        size = admit_table(scenario, structure, j)
    elif spec.parent is None:
        size = scenario.prompt_blocks
    else:
        parent = scenario.branches[spec.parent].operations
        at = next(k for k, o in enumerate(parent) if o.op is Op.FORK and o.arg == j)
        size = _grown(scenario, structure, spec.parent, rules_at)[at + 1]
    out = [size]
    mine = rules_at(j)
    for k, operation in enumerate(spec.operations):
        if operation.op is Op.APPEND:
            size += max((sum(s.op == "append" for s in p.steps) for p in paths(scenario, mine(k))), default=0)
        else:
            size += own_steps(structure, operation.op, "append")
        out.append(size)
    return out


def admit_table(scenario: Scenario, structure: Structure, j: int) -> int:
    """The longest working table request j's admission can leave (or have
    midway): ceil(L / B) when one lookup comes before its one touch-hits
    and its one alloc-prompt (the hits and the allocation add up to the
    prompt's blocks); else every touch-hits, alloc-prompt and append added up."""
    admit = [step.op for step in structure.program(Op.ADMIT)]
    blocks = -(-len(scenario.prompt_of(j)) // scenario.block_size)
    hits = (len(scenario.prompt_of(j)) - 1) // scenario.block_size
    if admit.count("lookup") == admit.count("touch-hits") == admit.count("alloc-prompt") == 1 \
            and admit.index("lookup") < min(admit.index("touch-hits"), admit.index("alloc-prompt")):
        return blocks + admit.count("append")
    return hits * admit.count("touch-hits") + blocks * admit.count("alloc-prompt") + admit.count("append")


class _Integers(Algebra[list[int]]):
    """The absolute values of the integers a condition writes."""

    def name(self, name: str) -> list[int]:
        return []

    def const(self, value: int) -> list[int]:
        return [abs(value)]

    def counter(self, counter: str, local: str) -> list[int]:
        return []

    def not_(self, operand: list[int]) -> list[int]:
        return operand

    def and_(self, operands: list[list[int]]) -> list[int]:
        return [x for xs in operands for x in xs]

    def or_(self, operands: list[list[int]]) -> list[int]:
        return [x for xs in operands for x in xs]

    def compare(self, terms: list[list[int]], ops: tuple[str, ...]) -> list[int]:
        return [x for xs in terms for x in xs]


def condition_integers(protocol: Protocol) -> list[int]:
    """The absolute values of the integers written in the rules' conditions
    (a z3 encoding of them needs bit-vectors wide enough for these)."""
    return [x for rule in protocol.rules for x in rule.when.fold(_Integers())]


def possible_rules(scenario: Scenario, pos: int) -> list[int]:
    """The rules a decide at `pos` can choose: those whose condition can be
    the first true one for some refcount and holds of the tail (only
    pos % B matters, so the answer is kept per fill)."""
    key = (id(scenario.protocol), scenario.block_size, pos % scenario.block_size)
    if key not in _RULES:
        _RULES[key] = (scenario.protocol, _possible_rules(scenario, pos))
    return list(_RULES[key][1])


#: possible_rules by (protocol id, B, fill); the protocol is kept so that its id is not reused
_RULES: dict[tuple[int, int, int], tuple[Protocol, list[int]]] = {}


def _possible_rules(scenario: Scenario, pos: int) -> list[int]:
    protocol, B = scenario.protocol, scenario.block_size
    width = max(16, (2 * max([B, *condition_integers(protocol)])).bit_length() + 1)
    rc, hd = z3.BitVec("bound.rc", width), z3.BitVec("bound.hd", width)
    fill = z3.BitVecVal(pos % B, width)
    earlier: list[z3.BoolRef] = []
    out = []
    for r, rule in enumerate(protocol.rules):
        cond = formula(rule.when, z3.BoolVal(pos % B == 0), fill, B, rc, hd)
        solver = z3.Solver()
        solver.add(rc >= 0, hd >= 0, cond, *[z3.Not(c) for c in earlier])
        if solver.check() == z3.sat:
            out.append(r)
        earlier.append(cond)
    return out


class Earliest(NamedTuple):
    """The fewest actions a run takes, from the initial state, before the
    branch can take each of its steps (absent: never): its own actions
    and, for a child, its parent's up to the fork that brings it to life."""
    decide: dict[int, int]                 # rule index -> actions before that decide
    steps: dict[Place, int]                # place -> actions before its step
    launch: Optional[int]                  # actions before its first launch (None: it never launches)
    ops: dict[int, int]                    # operation index -> actions before it begins (a fork's first step, a verify)
    births: dict[int, int]                 # child -> actions before its first action


def earliest(scenario: Scenario, structure: Structure, j: int, rules_at: Callable[[int], RulesAt],
             memo: Optional[dict[int, Earliest]] = None) -> Earliest:
    """Walk branch j's operations taking the shortest possible path each
    time (an operation starts after the shortest ways through the ones
    before); a finish needs every operation done, a cancel may come first
    thing (once the branch is born). `rules_at(i)` is branch i's RulesAt."""
    memo = {} if memo is None else memo
    if j in memo:
        return memo[j]
    spec = scenario.branches[j]
    decide: dict[int, int] = {}
    steps: dict[Place, int] = {}
    ops: dict[int, int] = {}
    births: dict[int, int] = {}
    launches: list[int] = []

    def program(op: Op, path: Optional[str], before: int) -> None:
        for place in places(structure, op, path):
            at = before + place.step
            steps[place] = min(steps.get(place, at), at)
            if structure.step(place).op in LAUNCHES:
                launches.append(at)

    born = 0 if spec.parent is None else earliest(scenario, structure, spec.parent, rules_at, memo).births.get(j)
    start: Optional[int] = born
    if scenario.cache:      # the admission comes first (waiting for `after` only delays it)
        program(Op.ADMIT, None, 0)
        start = len(structure.program(Op.ADMIT))
    mine = rules_at(j)
    for k, operation in enumerate(spec.operations):
        if start is None:
            break
        ops[k] = start
        if operation.op is Op.APPEND:
            rules = mine(k)
            if not rules:      # no rule can match: the branch is stuck here for good
                start = None
                break
            for r in rules:
                decide[r] = min(decide.get(r, start), start)
            for path in paths(scenario, rules):
                program(Op.APPEND, path.name, start + 1)
            start += 1 + min(len(path.steps) for path in paths(scenario, rules))
        elif operation.op is Op.FORK:
            program(Op.FORK, None, start)
            share = next(i for i, s in enumerate(structure.program(Op.FORK)) if s.op == "share")
            births[operation.arg] = start + share + 1
            start += len(structure.program(Op.FORK))
        else:           # verify, then the rollback's steps
            program(Op.ROLLBACK, None, start + 1)
            start += 1 + len(structure.program(Op.ROLLBACK))
    if start is not None:
        program(Op.FINISH, None, start)
    if spec.may_cancel and born is not None:
        program(Op.CANCEL, None, born)
    memo[j] = Earliest(decide, steps, min(launches, default=None), ops, births)
    return memo[j]
