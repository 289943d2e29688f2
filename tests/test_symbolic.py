"""The symbolic engine (cowcheck.symbolic) against the explicit one.

- Every built-in invariant has a z3 encoding; a custom one without one gets
  an unsupported verdict and the rest of the run goes on.
- Every step kind has a symbolic handler, and the z3 translation of every
  built-in rule condition agrees with its explicit evaluation.
- On random reachable states of random scenarios, the symbolic transition
  relation agrees with model.system action by action (which actions are
  enabled, and the state each leads to), each invariant's z3 formula agrees
  with its explicit predicate, and the type invariants k-induction assumes hold.
- The array sizes and earliest depths of cowcheck.symbolic.bounds hold in
  every reachable state of small scenarios of every built-in protocol.
- BMC's verdicts and shortest lengths equal the breadth-first explorer's on
  small scenarios (every reuse order), and its counterexamples, written to
  files and read back, replay.
- k-induction never claims a proof of an invariant the explorer sees broken."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowcheck import check
from cowcheck.engines.invariants import CACHE_INVARIANTS, HARM, IDS, INVARIANTS, Invariant, Judge, select
from cowcheck.model.condition import environment
from cowcheck.model.protocol import ARITY, CACHE_STEPS, builtin_names, load_builtin
from cowcheck.model.scenario import DEVICES, REUSES, load_scenario, make_scenario
from cowcheck.model.system import ProtocolModel
from cowcheck.traces.replay import replay
from cowcheck.engines.results import Outcome
from cowcheck.symbolic.bmc import run_bmc
from cowcheck.symbolic.conditions import formula
from cowcheck.symbolic.invariants import ENCODINGS, NO_ENCODING, SymbolicJudge
from cowcheck.symbolic.kind import run_kinduction
from cowcheck.symbolic.steps import HANDLERS
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.terms import Renaming
from cowcheck.engines.counterexample import load


def test_every_invariant_has_an_encoding():
    """Prefix caching's included (tests/test_symbolic_cache.py checks them);
    host-key-content, judged in transfer scenarios only, has none: the z3
    engines refuse transfer scenarios in one line (tests/test_model_transfers.py)."""
    assert set(IDS) - set(ENCODINGS) == {"host-key-content"} and set(ENCODINGS) <= set(IDS)
    for inv in ENCODINGS.values():
        assert inv.explicit, f"{inv.id} names no explicit predicate"


def test_every_step_has_a_handler():
    """Prefix caching's steps included."""
    assert set(HANDLERS) == set(ARITY)
    assert set(CACHE_STEPS) <= set(HANDLERS)


@pytest.mark.parametrize("protocol", builtin_names(cache=False))
def test_conditions_translate_faithfully(protocol):
    """Every rule condition of a built-in protocol, as a z3 formula, is true
    exactly where model.condition evaluates it true (two folds of one tree)."""
    rc, hd = z3.BitVec("rc", 8), z3.BitVec("hd", 8)
    for rule in load_builtin(protocol).rules:
        for fill in range(4):
            for refcount in range(3):
                for holds in range(2):
                    env = environment(fill == 0, fill, 4, {"tail": 0}, lambda _: refcount, lambda _: holds)
                    f = formula(rule.when, z3.BoolVal(fill == 0), z3.BitVecVal(fill, 8), 4, rc, hd)
                    value = z3.simplify(z3.substitute(f, (rc, z3.BitVecVal(refcount, 8)), (hd, z3.BitVecVal(holds, 8))))
                    assert z3.is_true(value) == rule.when.evaluate(env), (rule.when.text, fill, refcount, holds)


def test_an_invariant_without_an_encoding_is_unsupported():
    """A custom invariant has no z3 encoding: its verdict says so in one
    line, and the built-in invariants are checked as usual."""
    custom = Invariant("at-most-one-queued", HARM, "every state", "at most one op in flight",
                       on_state=lambda model, state, final, stuck: {"queued": len(state.queue)} if len(state.queue) > 1 else None)
    scenario = make_scenario(2, 3, [1, 1], "spare-capacity")
    result = run_bmc(scenario, (custom,) + select(["exclusive-write"]), 4)
    verdict = result.verdicts["at-most-one-queued"]
    assert verdict.outcome is Outcome.UNSUPPORTED and verdict.note == NO_ENCODING and "\n" not in verdict.note
    assert list(result.verdicts) == ["at-most-one-queued", "exclusive-write"]
    found = result.verdicts["exclusive-write"]
    assert found.outcome is Outcome.VIOLATED
    assert found.length == check(scenario, symmetry=False).verdicts["exclusive-write"].length
    assert run_bmc(scenario, (custom,), 4).verdicts["at-most-one-queued"].outcome is Outcome.UNSUPPORTED
    kind = run_kinduction(make_scenario(2, 1, [1], "cow"), (custom,) + select(["no-leak"]), 1)
    assert kind.verdicts["at-most-one-queued"].outcome is Outcome.UNSUPPORTED
    assert kind.verdicts["no-leak"].outcome is Outcome.HOLDS and "at-most-one-queued" not in kind.closed_at


# -- the encoding, state by state ----------------------------------------------
def _value(expr, state: Renaming):
    """A formula or field with a concrete state substituted, as a Python value."""
    if not z3.is_expr(expr):
        return expr
    out = z3.simplify(state(expr))
    if z3.is_true(out) or z3.is_false(out):
        return z3.is_true(out)
    return out.as_signed_long()


class Bench:
    """One scenario's encoding, executed once over a template state."""

    def __init__(self, scenario):
        self.enc = SymbolicSystem(scenario)
        self.sym = self.enc.fresh("t.")
        self.executed = [self.enc.execute(self.sym, inst) for inst in self.enc.instances]
        self.judge = SymbolicJudge(self.enc, self.sym, self.executed)
        self.explicit = Judge(INVARIANTS + CACHE_INVARIANTS if scenario.cache else INVARIANTS)

    def agree(self, state) -> None:
        enc, model = self.enc, self.enc.model
        concrete = Renaming(enc.substitution(self.sym, state))
        assert _value(enc.domain(self.sym), concrete), "a reachable state is outside the type invariants"
        successors = model.successors(state)
        matched = set()
        for inst, x in zip(enc.instances, self.executed):
            enabled = _value(x.guard, concrete)
            trs = [t for t in successors if enc.matches(inst, state, t)]
            assert enabled == bool(trs), (inst.label, enabled, [str(t.action) for t in trs])
            if not enabled:
                continue
            assert len(trs) == 1, inst.label
            tr = trs[0]
            matched.add(id(tr))
            assert _value(x.leads, concrete) == (tr.state is not None), inst.label
            if tr.state is not None:
                got = [_value(v, concrete) for v in x.post.flat()]
                assert got == enc.values(tr.state), (inst.label, str(tr.action))
            n = enc.instances.index(inst)
            broken = {i for i, _ in self.explicit.action(model, state, tr)}
            for inv_id in ENCODINGS:
                assert _value(self.judge.action(inv_id, which=n), concrete) == (inv_id in broken), (inv_id, str(tr.action))
        assert matched == {id(t) for t in successors}, "an explicit action has no symbolic instance"
        broken = {i for i, _ in self.explicit.state(model, state, model.is_final(state), not successors)}
        for inv_id in ENCODINGS:
            assert _value(self.judge.state(inv_id), concrete) == (inv_id in broken), inv_id


@st.composite
def small_scenarios(draw):
    branches = [(draw(st.integers(0, 2)), draw(st.booleans())) for _ in range(draw(st.integers(1, 2)))]
    return make_scenario(draw(st.integers(1, 3)), draw(st.integers(0, 4)), branches,
                         draw(st.sampled_from(builtin_names(cache=False))), device=draw(st.sampled_from(DEVICES)),
                         reuse=draw(st.sampled_from(REUSES)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios(), st.integers(0, 2**32 - 1))
def test_encoding_agrees_with_the_model_on_random_reachable_states(scenario, seed):
    rnd = random.Random(seed)
    agree_along_a_walk(Bench(scenario), rnd, rnd.randint(0, 25))


def agree_along_a_walk(bench: "Bench", rnd: random.Random, steps: int) -> None:
    """The encoding agrees with the model in every state of one random walk
    of at most `steps` actions."""
    state = bench.enc.model.init_state()
    for _ in range(steps):
        bench.agree(state)
        nxt = [t.state for t in bench.enc.model.successors(state) if t.state is not None]
        if not nxt:
            break
        state = rnd.choice(nxt)
    bench.agree(state)


def test_encoding_agrees_along_the_premature_decrement_race():
    """A fixed, deterministic case: every state of the explorer's shortest
    traces of both discipline breaks (a kernel writing the source of an
    in-flight copy, a freed block still mapped)."""
    scenario = make_scenario(2, 3, [2, 2], "premature-decrement")
    bench = Bench(scenario)
    result = check(scenario, symmetry=False, invariants=select(["exclusive-write", "no-use-after-free"]))
    for verdict in result.verdicts.values():
        replayed = replay(verdict.counterexample)
        assert replayed.ok, replayed.message
        for state in replayed.states:
            bench.agree(state)


# -- the static bounds against every reachable state --------------------------------
def _by_depth(model: ProtocolModel):
    """Every reachable state with its breadth-first depth (the fewest actions
    that reach it), and its transitions."""
    start = model.init_state()
    depth, frontier = {start: 0}, [start]
    while frontier:
        state = frontier.pop(0)
        transitions = model.successors(state)
        yield state, depth[state], transitions
        for t in transitions:
            if t.state is not None and t.state not in depth:
                depth[t.state] = depth[state] + 1
                frontier.append(t.state)


@pytest.mark.parametrize("protocol", builtin_names(cache=False))
def test_bounds_hold_in_every_reachable_state(protocol):
    """The queue and table sizes bound every reachable state, and no action
    instance fires before the depth SymbolicSystem.earliest gives it."""
    for block_size, prompt, branches in [(2, 3, [(2, True), 1]), (1, 1, [(2, True), (1, False)]), (3, 4, [3, (1, True)])]:
        enc = SymbolicSystem(make_scenario(block_size, prompt, branches, protocol))
        for state, depth, transitions in _by_depth(enc.model):
            assert len(state.queue) <= enc.Q
            assert all(len(t) <= enc.T for b in state.branches for t in (b.working, b.published))
            for t in transitions:
                inst = next(i for i in enc.instances if enc.matches(i, state, t))
                assert enc.earliest(inst) is not None and enc.earliest(inst) <= depth, (inst.label, depth)


# -- BMC against the explorer ------------------------------------------------------
def _lengths(result):
    return {k: (v.holds, v.length) for k, v in result.verdicts.items()}


def _agrees_within(bmc, explicit, depth):
    """Within the bound BMC sees exactly what the explorer sees."""
    for inv_id, v in explicit.verdicts.items():
        b = bmc.verdicts[inv_id]
        if v.holds is False and v.length <= depth:
            assert (b.holds, b.length) == (False, v.length), inv_id
        else:
            assert b.holds is not False, (inv_id, b.length)
            assert b.holds is (True if bmc.complete else None), inv_id


@pytest.mark.parametrize("protocol,depth,reuse", [("premature-decrement", 8, "lifo"), ("spare-capacity", 5, "lifo"),
                                                 ("premature-decrement", 8, "any")])
def test_bmc_finds_the_reference_shortest_violations(protocol, depth, reuse, tmp_path):
    scenario = make_scenario(2, 3, [2, 2], protocol, reuse=reuse)
    explicit = check(scenario, symmetry=False)
    bmc = run_bmc(scenario, INVARIANTS, depth)
    _agrees_within(bmc, explicit, depth)
    for v in bmc.verdicts.values():
        if v.holds is False:
            assert v.counterexample is not None and v.counterexample.length == v.length
            replayed = replay(load(v.counterexample.write(tmp_path / f"{v.invariant}.json")))
            assert replayed.ok, replayed.message
    assert bmc.to_json()["engine"] == "bmc"


@pytest.mark.parametrize("protocol,device,branches,reuse,pool", [
    ("spare-capacity", "stream", [(1, True), 0], "lifo", None),                                       # cancellation, one stream
    ("vllm-bmv1", "streams", [1, 0], "lifo", None),                                                   # atomic paths, two streams
    pytest.param("premature-decrement", "stream", [(1, True), 0], "any", 3, marks=pytest.mark.slow),  # any free block, a spare one
])
def test_bmc_is_exhaustive_on_tiny_scenarios(protocol, device, branches, reuse, pool):
    """When every run ends within the bound, BMC's verdicts are complete and
    equal the explorer's, holds included."""
    scenario = make_scenario(2, 1, branches, protocol, device=device, reuse=reuse, pool=pool)
    explicit = check(scenario, symmetry=False)
    bmc = run_bmc(scenario, INVARIANTS, explicit.exploration.depth + 1)
    assert bmc.complete
    assert _lengths(bmc) == _lengths(explicit)


def test_kinduction_never_proves_a_broken_invariant():
    scenario = make_scenario(2, 1, [1, 1], "spare-capacity")
    explicit = check(scenario, symmetry=False)
    result = run_kinduction(scenario, INVARIANTS, 3)
    for inv_id, v in explicit.verdicts.items():
        if v.holds is False:
            assert result.verdicts[inv_id].holds is not True, inv_id
            assert result.closed_at.get(inv_id) is None
    assert result.to_json()["engine"] == "kind"


def test_the_reductions_do_not_change_bmc_answers():
    """Symmetry breaking and commuting actions (cowcheck.symbolic.reduction)
    keep every verdict and shortest length: three interchangeable branches."""
    scenario = make_scenario(2, 3, [1, 1, 1], "spare-capacity")
    assert _lengths(run_bmc(scenario, INVARIANTS, 6)) == _lengths(run_bmc(scenario, INVARIANTS, 6, reduce=False))


SMALL_SPECS = ["spare-capacity", "publish-before-copy", "vllm-bmv1-async", "premature-decrement", "cow-stream",
               "cow-any-reuse"]


@pytest.mark.parametrize("name", SMALL_SPECS)
def test_bmc_agrees_with_the_explorer_on_shipped_scenarios_within_the_bound(name, searched):
    """Within depth 8, BMC breaks exactly the invariants the explorer breaks
    in at most 8 actions, at the same shortest lengths."""
    path = Path(__file__).resolve().parent.parent / "specs" / "scenarios" / f"{name}.toml"
    bmc = run_bmc(load_scenario(path), INVARIANTS, 8)
    explicit = searched(path, symmetry=False, por=False)
    found = {k: v.length for k, v in bmc.verdicts.items() if v.holds is False}
    expected = {k: v.length for k, v in explicit.verdicts.items() if v.holds is False and v.length <= 8}
    assert found == expected


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios())
def test_bmc_agrees_with_the_explorer_on_random_scenarios_within_the_bound(scenario):
    """The same agreement on scenarios hypothesis draws (every built-in
    protocol, device and reuse order): the z3 engine and the explorer share
    only the model, so each is the other's check."""
    bound = 8
    bmc = run_bmc(scenario, INVARIANTS, bound)
    explicit = check(scenario, symmetry=False)
    found = {k: v.length for k, v in bmc.verdicts.items() if v.holds is False}
    expected = {k: v.length for k, v in explicit.verdicts.items() if v.holds is False and v.length <= bound}
    assert found == expected
    if bmc.complete:     # every run ended within the bound: "holds" must agree too
        assert _lengths(bmc) == _lengths(explicit)
