"""Bounded model checking: unroll the transition relation depth by depth and
ask z3, for each invariant not yet broken, whether a run of exactly that many
actions breaks it. Depths are tried in increasing order, so the first
violation found of an invariant is a shortest one, with the lengths of docs/semantics.md#traces:
an action-checked invariant's length includes the action, a state-checked
one's is the depth of the state.

A violation is decoded into model.system.Action objects and re-run through
the explicit model, which both gives the real states for the counterexample
(a cowcheck.engines.counterexample.Counterexample on the verdict; the caller writes it where
it wants) and checks the z3 trace against the explicit semantics: any
mismatch is an encoding bug and raises, never a wrong counterexample.

The graph of every scenario is finite and acyclic, so when no run of depth d
exists at all, every run has been covered and an unbroken invariant holds.

The cost is the unsatisfiable queries below each shortest violation. Three
things keep them small without changing any answer: the arrays of the state
are sized by cowcheck.symbolic.bounds; the step from depth k leaves out the
instances that cannot fire within k actions (Unrolling.relation_at); and
cowcheck.symbolic.reduction's constraints (symmetry breaking, commuting
actions) leave z3 fewer equivalent runs to refute.

An invariant with no z3 encoding (a custom one) gets an unsupported verdict
with a note; the others are checked as usual."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

import z3

from cowcheck.model.action import Action
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import State
from cowcheck.model.system import ProtocolModel

from cowcheck.interrupts import poll
from cowcheck.engines.invariants import INVARIANTS, Invariant, Judge, for_system, validate_expect
from cowcheck.engines.invariants import Kind
from cowcheck.engines.results import BmcResult, Outcome, Verdict
from cowcheck.engines.counterexample import Counterexample
from cowcheck.engines.stop import Stop, StopKind, interrupted
from cowcheck.symbolic.invariants import SymbolicJudge, encoded, unsupported
from cowcheck.symbolic.reduction import Reductions
from cowcheck.symbolic.state import Sym
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.terms import Renaming, Term, any_of, decided, solving


class EncodingMismatch(AssertionError):
    """The z3 trace does not follow the explicit model: a bug in the encoding."""


#: the run from the initial state (BMC's); k-induction's runs start anywhere
INIT_RUN = "s"


class Unrolling:
    """The transition relation and the invariant formulas, built once over a
    template state and instantiated (z3.substitute) at each depth.

    On the run from the initial state, the step from depth k leaves out the
    action instances that cannot fire within k actions of it
    (SymbolicSystem.earliest): those relations are built once per set of
    instances and cached. Runs from arbitrary states (k-induction) get the full one."""

    def __init__(self, scenario: Scenario, invariants: tuple[Invariant, ...]):
        self.system = system = SymbolicSystem(scenario)
        self.invariants = invariants
        self.pre, self.nxt = system.fresh("s."), system.fresh("n.")
        self.executed = [system.execute(self.pre, inst) for inst in system.instances]
        self.changed = [self._changed(x) for x in self.executed]
        self.act_width = len(self.executed).bit_length() + 1
        self.act = z3.BitVec("act", self.act_width)
        judge = SymbolicJudge(system, self.pre, self.executed)
        self.state_bad_ = {inv.id: judge.state(inv.id) for inv in invariants}
        self.action_bad_ = {inv.id: judge.action(inv.id) for inv in invariants}
        self.judge = judge
        self.relation = self._relation(tuple(range(len(self.executed))))
        self._pruned: dict[tuple, z3.BoolRef] = {}
        self.earliest = [system.earliest(inst) for inst in system.instances]
        self.runs: dict[str, tuple[list, list]] = {}   # run name -> (states, acts)
        self._renamings: dict[tuple[int, str, bool], Renaming] = {}

    def _changed(self, x) -> dict:
        """The fields (index in Sym.flat) an executed instance may change,
        with their new values: those not left as the template's own field."""
        return {f: new for f, (old, new) in enumerate(zip(self.pre.flat(), x.post.flat()))
                if not (z3.is_expr(new) and new.eq(old))}

    def _relation(self, allowed: tuple[int, ...]) -> z3.BoolRef:
        """act picks one of the `allowed` instances; it must be enabled and
        lead somewhere; each field of the next state is the chosen
        instance's value for it (only instances that change a field name it)."""
        act = self.act
        parts = [z3.ULT(act, len(self.executed)) if len(allowed) == len(self.executed) else any_of(act == i for i in allowed)]
        for i in allowed:
            x = self.executed[i]
            parts.append(z3.Implies(act == i, z3.And(x.guard, x.leads)))
        for f, (old, new) in enumerate(zip(self.pre.flat(), self.nxt.flat())):
            value = old
            for i in reversed(allowed):
                if f in self.changed[i]:
                    value = z3.If(act == i, self.changed[i][f], value)
            parts.append(new == value)
        return z3.And(parts)

    def relation_at(self, k: int, run: str = INIT_RUN) -> z3.BoolRef:
        """The relation of the step from depth k of a run: on the run from
        the initial state, only the instances that can fire by then."""
        if run != INIT_RUN:
            return self.relation
        allowed = tuple(i for i, e in enumerate(self.earliest) if e is not None and e <= k)
        if len(allowed) == len(self.executed):
            return self.relation
        if allowed not in self._pruned:
            self._pruned[allowed] = self._relation(allowed)
        return self._pruned[allowed]

    def has_state_check(self, inv_id: str) -> bool:
        return not z3.is_false(self.state_bad_[inv_id])

    def has_action_check(self, inv_id: str) -> bool:
        return not z3.is_false(self.action_bad_[inv_id])

    def state(self, k: int, run: str = INIT_RUN) -> Sym:
        """The k-th state of a run (BMC's run from the initial state is "s";
        k-induction's runs from anywhere get their own names)."""
        states, acts = self.runs.setdefault(run, ([], []))
        while len(states) <= k:
            states.append(self.system.fresh(f"{run}{len(states)}."))
            acts.append(z3.BitVec(f"{run}act{len(acts)}", self.act_width))
        return states[k]

    def act_at(self, k: int, run: str = INIT_RUN):
        self.state(k, run)
        return self.runs[run][1][k]

    def _at(self, formula, k: int, run: str, with_next: bool = False):
        key = (k, run, with_next)
        if key not in self._renamings:
            pairs = list(zip(self.pre.flat(), self.state(k, run).flat()))
            if with_next:
                pairs += list(zip(self.nxt.flat(), self.state(k + 1, run).flat())) + [(self.act, self.act_at(k, run))]
            self._renamings[key] = Renaming(pairs)
        return self._renamings[key](formula)

    def step(self, k: int, run: str = INIT_RUN) -> z3.BoolRef:
        """The transition from depth k to depth k+1."""
        return self._at(self.relation_at(k, run), k, run, with_next=True)

    def state_bad(self, inv_id: str, d: int, run: str = INIT_RUN) -> z3.BoolRef:
        """The state at depth d breaks the invariant."""
        return self._at(self.state_bad_[inv_id], d, run)

    def action_bad(self, inv_id: str, d: int, run: str = INIT_RUN) -> z3.BoolRef:
        """Some action enabled at depth d breaks the invariant (a violation of length d+1)."""
        return self._at(self.action_bad_[inv_id], d, run)

    def at(self, formula, d: int, run: str = INIT_RUN) -> z3.BoolRef:
        """A formula over the template state, at depth d of a run."""
        return self._at(formula, d, run)

    # -- decoding ------------------------------------------------------------------
    def decode(self, m: z3.ModelRef, prefix: int, inv: Invariant,
               by_action: bool) -> tuple[list[tuple[Action, Optional[State]]], dict]:
        """The model's run of `prefix` actions as [(Action, State)] from the
        explicit model, each state checked against z3's, then the violation
        judged by the explicit Judge: in the last state, or (by_action) at an
        action from it, as the explorer's trace_of does."""
        model, system = self.system.model, self.system
        state = model.init_state()
        run: list[tuple[Action, Optional[State]]] = []
        for k in range(prefix):
            inst = system.instances[m.eval(self.act_at(k), model_completion=True).as_long()]
            want = [m.eval(x, model_completion=True).as_signed_long() for x in self.state(k + 1).flat()]
            taken = next((t for t in model.successors(state) if t.state is not None and system.matches(inst, state, t)), None)
            if taken is None or taken.state is None or system.values(taken.state) != want:
                raise EncodingMismatch(f"step {k + 1}: z3 took '{inst.label}', which the explicit model "
                                       + ("does not enable" if taken is None else "takes to another state"))
            run.append((taken.action, taken.state))
            state = taken.state
        judge = Judge((inv,))
        successors = model.successors(state)
        if by_action:
            for tr in successors:
                for _, witness in judge.action(model, state, tr):
                    return run + [(tr.action, tr.state)], witness
        else:
            for _, witness in judge.state(model, state, model.is_final(state), not successors):
                return run, witness
        raise EncodingMismatch(f"the decoded run does not break {inv.id} in the explicit model")


#: bit-blast to SAT after simplification; aig compresses the Boolean structure
#: (about 25% faster than plain bit-blasting on the premature-decrement scenarios)
TACTIC = ("simplify", "propagate-values", "solve-eqs", "elim-uncnstr", "max-bv-sharing", "bit-blast", "aig", "sat")


def solve(formulas: list) -> Optional[z3.ModelRef]:
    """A model of the conjunction, or None when unsatisfiable. Each query is a
    fresh non-incremental solver that bit-blasts to SAT. Measured on
    premature-decrement B=4 L=6 4x3 (length 15), one solver kept across the
    depths did worse: z3's incremental SMT core about 50x slower per query,
    its incremental SAT solver (SolverFor("QF_FD"), with assumptions) about
    1.7x slower in all. A fresh solver preprocesses the whole query at once
    (solve-eqs, elim-uncnstr): for exclusive-write it drops every slot
    field, which nothing that query asks about reads."""
    poll()
    solver = z3.Then(*TACTIC).solver()
    solver.add(*formulas)
    answer = decided(solver, solver.check())
    return solver.model() if answer == z3.sat else None


def run_bmc(scenario: Scenario, invariants: tuple[Invariant, ...] = INVARIANTS, depth: int = 30,
            reduce: bool = True) -> BmcResult:
    """Find, for each invariant, a shortest violation of at most `depth`
    actions. Verdicts: violated (with its length and counterexample), holds
    when every run ended within the bound without breaking it, not seen when
    it was not broken within the bound but longer runs exist, unsupported
    when it has no z3 encoding. Interrupted (Ctrl-C, SIGTERM), it returns
    what was decided so far.

    At each depth one query asks whether any open invariant breaks; only when
    one does are more asked, to sort out which (z3's model says). `reduce`
    adds cowcheck.symbolic.reduction's constraints to the run (the answers
    are the same without them, only slower to get)."""
    validate_expect(scenario)
    invariants, unjudged = scenario_invariants(scenario, invariants)
    checked, left_out = encoded(invariants)
    verdicts: dict[str, Verdict] = {inv.id: unsupported(inv) for inv in left_out}
    deepening = Deepening()
    stop: Optional[Stop] = None
    try:
        with solving():
            if checked:
                _deepen(scenario, checked, depth, reduce, verdicts, deepening)
    except KeyboardInterrupt as interrupt:   # what was decided so far stands; the rest is not seen
        stop = interrupted(interrupt)
    for inv in checked:
        if inv.id not in verdicts:
            verdicts[inv.id] = Verdict(inv.id, Kind(inv.kind), Outcome.HOLDS if deepening.exhausted else Outcome.NOT_SEEN)
    verdicts = {**{inv.id: verdicts[inv.id] for inv in invariants}, **unjudged}
    # nothing left open within any bound
    settled = stop is None and (deepening.exhausted or all(verdicts[inv.id].outcome is Outcome.VIOLATED for inv in checked))
    if not settled:
        stop = stop or Stop(StopKind.BMC_BOUND, depth)
    return BmcResult(scenario, verdicts, settled, stop, sum(deepening.seconds),
                     bound=depth, reached=deepening.reached, depth_seconds=deepening.seconds)


def scenario_invariants(scenario: Scenario, invariants: tuple[Invariant, ...]) -> tuple[tuple[Invariant, ...], dict[str, Verdict]]:
    """The invariants a scenario is judged on, as the explorer's
    (cowcheck.engines.invariants.for_system: a cache scenario adds prefix
    caching's to the built-in ones, any other has none of them), and the
    verdicts of those it cannot have."""
    kept, why = for_system(invariants, ProtocolModel(scenario))
    return kept, {i: Verdict(i, Kind(kind), Outcome.UNSUPPORTED, note=note) for i, (kind, note) in why.items()}


@dataclass
class Deepening:
    """How far BMC got: the deepest depth decided, whether every run ended
    within it, and z3's seconds per depth (kept when it is interrupted)."""
    reached: int = 0
    exhausted: bool = False
    seconds: list[float] = field(default_factory=list)


def _deepen(scenario: Scenario, checked: tuple[Invariant, ...], depth: int, reduce: bool,
            verdicts: dict[str, Verdict], deepening: Deepening) -> None:
    """Deepen the unrolling to `depth`, recording each violation found in
    `verdicts` and the progress in `deepening`."""
    u = Unrolling(scenario, checked)
    reductions = Reductions(u) if reduce else None
    path = [u.system.init(u.state(0))]
    init = u.system.model.init_state()

    def hunt(bad: Callable[[str], Term], length: int, prefix: int, by_action: bool) -> None:
        """Record every open invariant that `bad` can break at this length."""
        while True:
            open_ = {inv.id: bad(inv.id) for inv in checked if inv.id not in verdicts}
            open_ = {i: f for i, f in open_.items() if not z3.is_false(f)}
            m = solve(path + [z3.Or(list(open_.values()))]) if open_ else None
            if m is None:
                return
            for inv in checked:
                if inv.id in open_ and z3.is_true(m.eval(open_[inv.id], model_completion=True)):
                    run, witness = u.decode(m, prefix, inv, by_action)
                    cx = Counterexample.from_run(scenario, init, run, invariant=inv.id, invariant_kind=str(inv.kind),
                                                 witness=witness)
                    verdicts[inv.id] = Verdict(inv.id, Kind(inv.kind), Outcome.VIOLATED, length, counterexample=cx,
                                               witness=witness)

    for d in range(depth + 1):
        start = time.perf_counter()
        if d >= 1:
            # violations of length d at an action taken from depth d-1 (a
            # kernel-table-miss leads nowhere, so ask before requiring a state d)
            hunt(partial(u.action_bad, d=d - 1), d, d - 1, True)
            path.append(u.step(d - 1))
            path += reductions.at(d) if reductions else []
            if solve(path) is None:  # no run is d actions long: every run was covered
                deepening.seconds.append(time.perf_counter() - start)
                deepening.exhausted = True
                return
        deepening.reached = d
        hunt(partial(u.state_bad, d=d), d, d, False)
        deepening.seconds.append(time.perf_counter() - start)
        if all(inv.id in verdicts for inv in checked):
            return
