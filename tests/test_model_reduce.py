"""Reductions change what is stored, never what is reported: with symmetry,
partial-order reduction and fingerprints, every invariant's verdict and
shortest length, the peak, the copies and the steady count equal the
unreduced search's, and the counterexamples found on the reduced space replay
on concrete ids."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cowcheck.engines import counterexample as trace
from cowcheck import check
from conftest import cache_scenarios, check_into, program_branches, transfer_scenarios
from cowcheck.traces.replay import replay
from cowcheck.engines.explorer import Exploration, Explorer
from cowcheck.engines.invariants import INVARIANTS, Judge, for_system
from cowcheck.model.action import DEVICE
from cowcheck.model.reduce.ample import Ample
from cowcheck.model.compact import Compact
from cowcheck.model.errors import SpecError
from cowcheck.model.protocol import Protocol, builtin_names, protocol_from_dict
from cowcheck.model.scenario import DEVICES, load_scenario, make_scenario, scenario_from_dict
from cowcheck.model.reduce.symmetry import Symmetry
from cowcheck.model.state import Block, Copy, HostBlock, Kernel, Move, Report, State, Tier, allocated, host_allocated
from cowcheck.model.system import ProtocolModel


def measures(result) -> tuple:
    x = result.exploration
    verdicts = {k: (v.holds, v.length) for k, v in result.verdicts.items()}
    return verdicts, x.peak, x.cost_range, x.steady, x.hits_range, x.host_peak, x.transfers_range


def with_copies(scenario, draw, copies: int = 2, least: int = 1):
    """The scenario with one of its requests repeated at the end, `least` to
    `copies` more times (same prompt, program, `after`, may_cancel), so
    that request symmetry has something to do; the pool as it was (a
    tight pool stays tight)."""
    data = scenario.definition()
    del data["name"], data["source"]
    requests = data["branch"]
    copied = requests[draw(st.integers(0, len(requests) - 1))]
    data["branch"] = requests + [dict(copied) for _ in range(draw(st.integers(least, copies)))]
    return scenario_from_dict(data, "<scenario>", Path("."), scenario.name + "-copies")


@st.composite
def repeated_cache_scenarios(draw, copies: int = 2, least: int = 1, **kwargs):
    """Random cache scenarios (conftest.cache_scenarios(**kwargs)) with one
    request repeated: requests with one prompt, program and `after`."""
    return with_copies(draw(cache_scenarios(**kwargs)), draw, copies, least)


#: cache scenarios for the agreement tests: as drawn, and with a request repeated
any_cache_scenario = st.one_of(cache_scenarios(most=3), repeated_cache_scenarios(copies=2, most=2))


@st.composite
def scenarios(draw):
    B = draw(st.integers(1, 3))
    L = draw(st.integers(0, 5))
    spec = (draw(st.integers(0, 2)), draw(st.booleans()))
    # repeat one program so that branch symmetry has something to do
    branches = [spec] * draw(st.integers(1, 3)) + [(draw(st.integers(0, 2)), draw(st.booleans())) for _ in range(draw(st.integers(0, 1)))]
    return make_scenario(B, L, branches, draw(st.sampled_from(builtin_names(cache=False))),
                         device=draw(st.sampled_from(DEVICES)), reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


@st.composite
def programs(draw):
    """Scenarios with branch programs: beam forks and speculation."""
    return make_scenario(draw(st.integers(1, 2)), draw(st.integers(0, 3)), program_branches(draw, st),
                         draw(st.sampled_from(builtin_names(cache=False))), device=draw(st.sampled_from(DEVICES)),
                         reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


any_scenario = st.one_of(scenarios(), programs())


def cow_variant(name: str, **paths: list[str]) -> Protocol:
    data = tomllib.loads((Path(__file__).resolve().parent.parent / "specs" / "protocols" / "cow.toml").read_text())
    data["name"] = name
    data["append"]["paths"].update(paths)
    return protocol_from_dict(data, f"<{name}>")


#: orders no shipped protocol has: the reference to a copy's source dropped
#: before the copy lands (after a branch has parked at its wait, the last
#: owner may write the source in place or free it)
ADVERSARIAL = (
    # drops its reference to the tail before the copy out of it lands: the
    # last owner then writes in place into the copy's source (exclusive-write)
    cow_variant("drop-before-copy-lands", copy=["alloc new", "copy tail new", "replace tail new", "publish",
                                                "decref tail", "wait-copy new", "write", "wait-kernel"]),
    # the same with the copy's destination published first: a kernel reads it
    cow_variant("publish-and-drop-before-copy-lands", copy=["alloc new", "copy tail new", "replace tail new", "publish",
                                                            "write", "decref tail", "wait-copy new", "wait-kernel"]),
)


@st.composite
def adversarial(draw):
    """Two or three writers into a shared partial tail."""
    B = draw(st.integers(2, 3))
    return make_scenario(B, B + 1, [draw(st.integers(1, 2))] * draw(st.integers(2, 3)), draw(st.sampled_from(ADVERSARIAL)))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(any_scenario)
def test_every_reduction_agrees_with_the_unreduced_search(scenario):
    plain = check(scenario, max_states=6_000, symmetry=False, por=False)
    assume(plain.exploration.complete)
    reduced = check(scenario, symmetry=True, por=False)
    fingerprinted = check(scenario, symmetry=True, fingerprints=True, por=False)
    compacted = check(scenario, symmetry=False, compact=True, por=False)
    ordered = check(scenario, symmetry=False, por=True)
    both = check(scenario, symmetry=True, por=True)
    assert measures(reduced) == measures(plain)
    assert measures(ordered) == measures(plain)
    assert measures(both) == measures(plain)
    assert ordered.exploration.states <= plain.exploration.states
    assert measures(fingerprinted) == measures(plain)
    assert measures(compacted) == measures(plain)
    assert compacted.exploration.states == plain.exploration.states
    assert reduced.exploration.states <= plain.exploration.states
    assert fingerprinted.exploration.states == reduced.exploration.states
    settled = settled_search(scenario, symmetry=False)      # the first of --por's two searches, on its own
    keeps_reachability(settled, plain)
    assert settled.states <= plain.exploration.states


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(scenario=st.one_of(any_scenario, any_cache_scenario))
def test_counterexamples_from_the_reduced_space_replay(scenario, tmp_path_factory):
    out = tmp_path_factory.mktemp("cx")
    result = check_into(scenario, out, symmetry=True, por=True, fingerprints=True, max_states=6_000)
    assume(result.exploration.complete)
    for verdict in result.verdicts.values():
        if verdict.holds is False:
            replayed = replay(trace.load(verdict.path))
            assert replayed.ok, replayed.message
            assert replayed.step == verdict.length
    if result.peak_path:
        assert replay(trace.load(result.peak_path)).ok


def scramble(state, scenario, rnd):
    """The same state under random names: blocks permuted (the free list
    keeps its order; `any` reuse keeps it sorted), and branches of equal
    programs permuted with their tokens (in a cache scenario, in keys too).
    In a transfer scenario host blocks are permuted too (the host free list
    keeps its order), and transfers in flight and pending reports renamed;
    under `any` reuse it keeps block ids there, as symmetry does."""
    sym = Symmetry(scenario)
    blocks = list(range(len(state.blocks)))
    if sym.blocks_enabled:
        rnd.shuffle(blocks)                                   # blocks[old] = new
    tier = state.tier
    hosts = list(range(len(tier.host) if tier is not None else 0))
    if sym.blocks_enabled:
        rnd.shuffle(hosts)
    order = list(range(len(state.branches)))              # order[new] = old
    for members in sym.classes:
        shuffled = list(members)
        rnd.shuffle(shuffled)
        for slot, old in zip(members, shuffled):
            order[slot] = old
    new_of = {old: new for new, old in enumerate(order)}
    tokens = {a: b for new, old in enumerate(order) for a, b in zip(scenario.tokens(old), scenario.tokens(new))}

    def t(seq):
        return tuple(tokens.get(x, x) for x in seq)

    m, h = blocks.__getitem__, hosts.__getitem__
    new_blocks = [None] * len(blocks)
    for old, blk in enumerate(state.blocks):
        new_blocks[m(old)] = Block(blk.refcount, blk.holds, t(blk.slots), None if blk.key is None else t(blk.key))
    branches = [state.branches[old] for old in order]
    branches = [b._replace(tail=None if b.tail is None else m(b.tail), new=None if b.new is None else m(b.new),
                           working=tuple(map(m, b.working)), published=tuple(map(m, b.published)),
                           hits=tuple(map(m, b.hits)), loads=tuple(map(m, b.loads)), host_hits=tuple(map(h, b.host_hits)),
                           seq=t(b.seq)) for b in branches]

    def move(q: Move) -> Move:
        return q._replace(owner=new_of[q.owner], block=m(q.block), host=None if q.host is None else h(q.host),
                          key=None if q.key is None else t(q.key), tokens=t(q.tokens))

    queue = tuple(Copy(m(q.src), m(q.dst), q.n) if type(q) is Copy else move(q) if type(q) is Move else
                  Kernel(new_of[q.branch], q.pos, tokens.get(q.token, q.token), tuple(map(m, q.snapshot)),
                         t(q.expected), q.span) for q in state.queue)
    free = tuple(map(m, state.free))
    if scenario.reuse == "any":
        free = tuple(sorted(free))
    new_tier = None
    if tier is not None:
        new_host = [None] * len(hosts)
        for old, hb in enumerate(tier.host):
            new_host[h(old)] = HostBlock(hb.pins, t(hb.slots), None if hb.key is None else t(hb.key))
        new_tier = Tier(tuple(new_host), tuple(map(h, tier.free)), tuple(Report(move(r.move), r.ok) for r in tier.reports))
    return State(tuple(new_blocks), free, tuple(branches), queue, None, new_tier)


@st.composite
def many_branches(draw):
    """One program repeated up to eight times: classes of more than three
    branches get the refined representative (model/reduce/refine.py)."""
    spec = (draw(st.integers(0, 2)), draw(st.booleans()))
    return make_scenario(draw(st.integers(1, 3)), draw(st.integers(0, 5)), [spec] * draw(st.integers(1, 8)),
                         draw(st.sampled_from(builtin_names(cache=False))), device=draw(st.sampled_from(DEVICES)),
                         reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


@settings(max_examples=60, deadline=None)
@given(st.one_of(scenarios(), many_branches(), programs(), repeated_cache_scenarios(copies=4, most=2),
                 transfer_scenarios(most=3)),
       st.randoms(use_true_random=False))
def test_representative_is_canonical(scenario, rnd):
    """Walk randomly; every state and any renaming of it get the same
    representative, which is itself a fixed point and keeps the state's shape."""
    model, sym = ProtocolModel(scenario), Symmetry(scenario)
    state = model.init_state()
    for _ in range(40):
        rep = sym.representative(state)
        assert sym.representative(rep) == rep
        assert sym.representative(scramble(state, scenario, rnd)) == rep
        assert len(rep.free) == len(state.free) and len(rep.queue) == len(state.queue)
        assert sorted((b.pos, b.done, b.status) for b in rep.branches) == sorted((b.pos, b.done, b.status) for b in state.branches)
        assert sorted(b.refcount for b in rep.blocks) == sorted(b.refcount for b in state.blocks)
        options = [t for t in model.successors(state) if t.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


#: the shipped scenarios a reduction may apply to: scheduler code gets none (its checks are the harness's own, in
#: tests/test_adapters_scheduler.py), so three searches of it would compare one search with itself
SPEC_SCENARIOS = sorted(p for p in (Path(__file__).resolve().parent.parent / "specs" / "scenarios").glob("*.toml")
                        if not p.stem.startswith("sched-"))
#: the two cases of the default check against the search without partial order that take longest (4 and
#: 6 CPU s): marked slow, the test's other cases stay under ten seconds together (tests/README.md, "Slow tests")
HEAVY_SPECS = ("engine-fenced-prune-in-flight", "engine-fenced-async")


def settled_search(scenario, symmetry: bool) -> Exploration:
    """The first of the checker's partial-order searches on its own:
    settled device completions explored alone too, every state searched
    (not stopped at the first violation)."""
    model = ProtocolModel(scenario)
    orbits = Symmetry(scenario) if symmetry else None
    # every invariant the check judges: a cache scenario's and a transfer scenario's too
    return Explorer(model, for_system(INVARIANTS, model)[0], gauge=allocated, steady=model.is_steady, cost=model.is_copy_launch,
                    host_gauge=host_allocated if scenario.transfers else None,
                    moves=model.transfer_launches if scenario.transfers else None,
                    representative=orbits.representative if orbits else None, mirror=orbits.unmirrored if orbits else None,
                    ample=Ample(model, completions=True)).run()


def keeps_reachability(settled: Exploration, plain) -> None:
    """What the settled search keeps: whether some violation is reachable,
    and when none is, every measure."""
    assert settled.complete
    assert bool(settled.violations) == any(v.holds is False for v in plain.verdicts.values())
    assert set(settled.violations) <= {k for k, v in plain.verdicts.items() if v.holds is False}
    if not settled.violations:
        x = plain.exploration
        assert (settled.peak, settled.cost_range, settled.steady, settled.host_peak, settled.transfers_range) \
            == (x.peak, x.cost_range, x.steady, x.host_peak, x.transfers_range)


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("path", SPEC_SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_agrees_with_and_without_reductions(path, searched):
    scenario = load_scenario(path)
    plain = searched(path, symmetry=False, por=False)
    reduced = check(scenario, symmetry=True, compact=True, por=False)
    ordered = check(scenario, symmetry=True, por=True)
    assert plain.exploration.complete and reduced.exploration.complete and ordered.exploration.complete
    assert measures(reduced) == measures(plain)
    assert measures(ordered) == measures(plain)
    # allocator and scheduler code through a harness get no reduction
    if scenario.allocator is None and scenario.scheduler is None:
        keeps_reachability(settled_search(scenario, symmetry=True), plain)



@pytest.mark.parametrize("protocol", ADVERSARIAL, ids=lambda p: p.name)
@pytest.mark.parametrize("shape", [(2, 3, 2, 1), (4, 6, 2, 2)], ids=str)
def test_settled_completions_keep_a_violation_when_the_copy_source_is_dropped_early(protocol, shape):
    B, L, n, appends = shape
    scenario = make_scenario(B, L, [appends] * n, protocol)
    plain = check(scenario, symmetry=False, por=False)
    assert any(v.holds is False for v in plain.verdicts.values())
    keeps_reachability(settled_search(scenario, symmetry=False), plain)
    keeps_reachability(settled_search(scenario, symmetry=True), plain)


def test_settled_completions_shrink_a_correct_protocol_and_a_buggy_one_is_searched_again():
    cow = make_scenario(4, 6, [(1, False)] * 4, "cow")
    ordered_settled = check(cow, por=True, symmetry=True)
    x = ordered_settled.exploration
    assert "settled completions" in " ".join(x.reductions)
    ordered = check(cow, symmetry=True, por=False)
    assert settled_search(cow, symmetry=True).states == x.states < ordered.exploration.states
    assert measures(ordered_settled) == measures(ordered)
    racy = make_scenario(4, 6, [(1, False)] * 4, "premature-decrement")
    again = check(racy, por=True, symmetry=True)
    assert "settled completions" not in " ".join(again.exploration.reductions)
    assert measures(again) == measures(check(racy, symmetry=True, por=False))


def _unordered(state: State, device: str) -> State:
    """On the async device the queue's order decides nothing: compare queues as multisets there."""
    return state._replace(queue=tuple(sorted(state.queue, key=repr))) if device == "async" else state


@settings(max_examples=60, deadline=None)
@given(st.one_of(any_scenario, adversarial(), cache_scenarios(most=3), repeated_cache_scenarios(copies=2, most=2),
                 transfer_scenarios(most=3)),
       st.randoms(use_true_random=False))
def test_an_ample_step_commutes_with_every_other_enabled_action(scenario, rnd):
    """Walk randomly; wherever the reduction explores one step alone, that
    step and every other enabled action lead, in either order, to the same
    state (up to the queue's order on the async device) with the same facts,
    neither disables the other, and every invariant judges each action the
    same before and after the other (C1 and C2 for one step, which is where
    a wrong independence claim would show). A settled completion promises
    this only for actions that break nothing; one that breaks an invariant
    must still break one after the completion. The one exception: where the
    other action takes the scheduler lock (an atomic admission starts), the
    step waits for the lock, which is always given back; there it is taken
    as if the lock were free, and must still commute (model/reduce/ample.py)."""
    model = ProtocolModel(scenario)
    unlocked = ProtocolModel(scenario)
    unlocked.exclusive = lambda state: None      # type: ignore[method-assign]
    ample = Ample(model, completions=True)
    checks = Judge(for_system(INVARIANTS, model)[0])     # a cache and a transfer scenario's invariants too

    def judged(before, tr) -> list[str]:
        return sorted({inv for inv, _ in checks.action(model, before, tr)})

    def seen(st) -> list[str]:
        # refcount-exact judges quiescent states only, which no branch parked at the step is
        # (so they are reached exactly); every other state check sees the same
        return sorted(inv for inv, _ in checks.state(model, st, False, False, skip=("refcount-exact",)))

    state = model.init_state()
    for _ in range(60):
        trs = model.successors(state)
        chosen = ample(state, trs)
        if len(chosen) < len(trs):
            for a in chosen:
                completes = a.action.actor == DEVICE
                assert a.state is not None and (completes or not a.facts), a.action
                for b in trs:
                    if b in chosen or b.state is None:
                        continue
                    after_a = [t for t in model.successors(a.state) if t.action == b.action]
                    locked = model.exclusive(b.state) is not None
                    assert not locked or ample.admission_lock, (a.action, b.action)
                    after_b = [t for t in (unlocked if locked else model).successors(b.state) if t.action == a.action]
                    assert len(after_a) == len(after_b) == 1, (a.action, b.action)
                    if completes and (judged(state, b) or seen(b.state)):
                        assert judged(a.state, after_a[0]) or seen(after_a[0].state), (a.action, b.action)
                        continue
                    assert _unordered(after_a[0].state, scenario.device) == _unordered(after_b[0].state, scenario.device)
                    assert after_a[0].facts == b.facts and after_b[0].facts == a.facts
                    assert judged(a.state, after_a[0]) == judged(state, b), (a.action, b.action)
                    assert judged(b.state, after_b[0]) == judged(state, a), (a.action, b.action)
                    assert seen(after_a[0].state) == seen(b.state), (a.action, b.action)
        options = [t for t in trs if t.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.one_of(cache_scenarios(most=3), transfer_scenarios(most=3)), st.randoms(use_true_random=False))
def test_an_admission_lock_is_always_given_back(scenario, rnd):
    """Partial-order reduction keeps a step enabled in an ample set although
    another request's atomic admission may take the scheduler lock first:
    sound because the holder always moves on to give the lock back (walk
    randomly: wherever a request holds the lock, it has an action)."""
    model = ProtocolModel(scenario)
    assume(Ample(model).admission_lock)
    state = model.init_state()
    for _ in range(80):
        trs = model.successors(state)
        holder = model.exclusive(state)
        if holder is not None:
            assert any(t.action.actor == model.names[holder] for t in trs), state
        options = [t for t in trs if t.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


def test_cache_scenarios_are_reduced():
    """An atomic admission is the only lock of prefix-cache, so partial-order
    reduction applies; a protocol with an atomic append path stays unreduced
    in a cache scenario too."""
    warm = load_scenario(Path(__file__).resolve().parent.parent / "specs" / "scenarios" / "prefix-cache-warm.toml")
    assert Ample(ProtocolModel(warm)).enabled
    assert check(warm, por=True).exploration.states < check(warm, por=False).exploration.states
    bmv2 = make_scenario(2, 0, [{"prompt": 3, "appends": 1}] * 2, "vllm-bmv2", cache=True)
    assert not Ample(ProtocolModel(bmv2)).enabled


@pytest.mark.slow
def test_partial_order_reduction_explores_fewer_states_and_reports_true_lengths():
    cow = make_scenario(2, 3, [(2, False)] * 3, "cow")
    plain, ordered = check(cow, symmetry=False, por=False), check(cow, symmetry=False, por=True)
    assert ordered.exploration.states < plain.exploration.states
    assert "partial-order" in " ".join(ordered.exploration.reductions)
    racy = load_scenario(Path(__file__).resolve().parent.parent / "specs" / "scenarios" / "premature-decrement.toml")
    lengths = {k: v.length for k, v in check(racy, por=True).verdicts.items() if v.holds is False}
    assert lengths == {"exclusive-write": 7, "no-use-after-free": 8, "faithful-output": 27}


def test_protocols_with_atomic_paths_are_not_reduced():
    scenario = make_scenario(2, 3, [(2, False)] * 2, "vllm-bmv2")
    assert not Ample(ProtocolModel(scenario)).enabled
    assert check(scenario, por=True).exploration.states == check(scenario).exploration.states


@settings(max_examples=60, deadline=None)
@given(any_scenario, st.randoms(use_true_random=False))
def test_compact_encoding_is_fixed_width_and_lossless(scenario, rnd):
    model, encoding = ProtocolModel(scenario), Compact(scenario)
    state = model.init_state()
    for _ in range(60):
        data = encoding.encode(state)
        assert len(data) == encoding.width
        assert encoding.decode(data) == state
        options = [t for t in model.successors(state) if t.state is not None]
        if not options:
            break
        state = rnd.choice(options).state


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs())
def test_reductions_agree_with_the_unreduced_search_on_branch_programs(scenario):
    """Forks and speculation: symmetry (which leaves branches with programs
    out of its classes), partial-order reduction and the compact encoding
    report what the unreduced search reports."""
    plain = check(scenario, max_states=4_000, symmetry=False, por=False)
    assume(plain.exploration.complete)
    assert measures(check(scenario, symmetry=True, compact=True, por=False)) == measures(plain)
    assert measures(check(scenario, symmetry=True, por=True)) == measures(plain)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(any_cache_scenario)
def test_every_reduction_agrees_with_the_unreduced_search_on_cache_scenarios(scenario):
    """Random cache scenarios, as drawn and with a request repeated: request
    symmetry, partial-order reduction and both report the unreduced
    search's verdicts, shortest lengths, peak, copies, hits and steady count."""
    plain = check(scenario, max_states=6_000, symmetry=False)
    assume(plain.exploration.complete)
    reduced = check(scenario, symmetry=True)
    ordered = check(scenario, symmetry=False, por=True)
    both = check(scenario, symmetry=True, por=True, compact=True)
    assert measures(reduced) == measures(plain)
    assert measures(ordered) == measures(plain)
    assert measures(both) == measures(plain)
    assert reduced.exploration.states <= plain.exploration.states
    assert ordered.exploration.states <= plain.exploration.states
    if Ample(ProtocolModel(scenario)).completions:
        keeps_reachability(settled_search(scenario, symmetry=True), plain)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(repeated_cache_scenarios(copies=2, most=2))
def test_request_symmetry_agrees_with_the_unreduced_search(scenario):
    """The quick form of the above, for symmetry alone (not marked slow)."""
    plain = check(scenario, max_states=3_000, symmetry=False)
    assume(plain.exploration.complete)
    assert measures(check(scenario, symmetry=True)) == measures(plain)


def test_which_requests_are_interchangeable():
    """Requests with one prompt, program, `after` and may_cancel form a
    class, unless some prompt names their tokens or some request is after
    them."""
    p3 = {"prompt": 3, "appends": 1}
    scenario = make_scenario(2, 0, [p3, p3, p3, {"prompt": ["p0", "p1", "a1"], "appends": 1},     # a: named by d
                                    {"prompt": 3, "appends": 1, "after": "b"}, p3,                  # b: e is after it
                                    {"prompt": 3, "appends": 1, "after": "d"}, {"prompt": 3, "appends": 1, "after": "d"},
                                    {"prompt": 3, "appends": 1, "may_cancel": True}],
                             "prefix-cache", cache=True)
    assert Symmetry(scenario).classes == [(2, 5), (6, 7)]
    other_prompt = make_scenario(2, 0, [p3, {"prompt": ["p0", "p1", "q2"], "appends": 1}], "prefix-cache", cache=True)
    assert Symmetry(other_prompt).classes == []
    speculating = {"prompt": 3, "program": ["speculate 2", "append"]}
    programs = make_scenario(2, 0, [speculating, p3, speculating, {"prompt": 3, "program": ["append", "speculate 2"]}],
                             "prefix-cache", cache=True)
    assert Symmetry(programs).classes == [(0, 2)]


def test_branches_with_programs_are_never_in_a_symmetry_class():
    same = {"program": ["speculate 1", "append"]}
    scenario = make_scenario(2, 3, [same, same, {"appends": 1}, {"appends": 1}], "cow")
    assert Symmetry(scenario).classes == [(2, 3)]


# -- the default: partial-order reduction chosen per scenario ------------------
def reported(result) -> tuple:
    """Everything a check reports but its state counts and time: verdicts and
    shortest lengths, the measures, and every trace it would write, as JSON."""
    traces = {k: v.counterexample.to_json() for k, v in result.verdicts.items() if v.counterexample is not None}
    peak = result.peak_trace.to_json() if result.peak_trace is not None else None
    return measures(result), result.complete, traces, peak


def same_as_without_partial_order(scenario, alone=None, **options) -> tuple:
    """The default check (auto) against the search without partial-order
    reduction (symmetry alone, today's default before auto; `alone` where
    it was run already): the same report, trace for trace. Returns both."""
    auto = check(scenario, **options)
    alone = alone if alone is not None else check(scenario, por=False, **options)
    assert auto.partial_order == "auto" and alone.partial_order == "off"
    assert reported(auto) == reported(alone)
    return auto, alone


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.stem in HEAVY_SPECS else [], id=p.stem)
                                  for p in SPEC_SCENARIOS])
def test_every_shipped_scenario_reports_by_default_what_the_search_without_partial_order_does(path, searched):
    auto, alone = same_as_without_partial_order(load_scenario(path), searched(path, por=False))
    assert auto.complete and [s.purpose for s in alone.searches] == ["verdicts"]
    purposes = [s.purpose for s in auto.searches]
    broken = any(v.holds is False for v in auto.verdicts.values())
    if purposes == ["verdicts"]:           # partial-order reduction not used: it says why
        assert auto.choice.startswith("auto: without partial-order reduction: ")
        assert auto.exploration.states == alone.exploration.states
    elif broken:                           # found a violation: every figure from the search without it
        assert purposes == ["first violation", "verdicts"] and "a violation" in auto.choice
        assert auto.exploration.states == alone.exploration.states
        assert auto.searches[0].violations and auto.searches[0].stopped == "first violation"
    else:                                  # none: the reduced search answers, and the peak's trace comes from without
        assert purposes == ["first violation", "peak trace"] and "no violation" in auto.choice
        assert "settled completions" in " ".join(auto.exploration.reductions)
        assert auto.exploration.states == auto.searches[0].states <= alone.exploration.states
        assert auto.searches[1].stopped == "the peak reached"


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(any_scenario, adversarial()), st.booleans())
def test_the_default_reports_what_the_search_without_partial_order_does_on_random_scenarios(scenario, symmetry):
    alone = check(scenario, max_states=4_000, symmetry=symmetry, por=False)
    assume(alone.complete)
    # the reduced search stores a subset of the states, so it completes under the same bound
    same_as_without_partial_order(scenario, max_states=4_000, symmetry=symmetry)


def test_the_default_with_first_reports_the_first_violation_the_search_without_partial_order_finds():
    racy = make_scenario(2, 3, [2, 2], "premature-decrement")
    auto, _ = same_as_without_partial_order(racy, first=True)
    assert [s.purpose for s in auto.searches] == ["verdicts"]       # found in the first states, before the reduced search
    deep = load_scenario(SPEC_SCENARIOS[0].parent / "rollback-no-trim-fork.toml")   # its first violation lies past them
    auto, _ = same_as_without_partial_order(deep, first=True)
    assert [s.purpose for s in auto.searches] == ["first violation", "verdicts"]
    cow = make_scenario(2, 3, [2, 2], "cow")
    auto, _ = same_as_without_partial_order(cow, first=True)
    assert auto.complete and [s.purpose for s in auto.searches] == ["first violation", "peak trace"]


def test_a_bound_that_stops_the_reduced_search_gives_the_bounded_search_without_it():
    """A partial run stays partial, and is the one the search without
    partial-order reduction gives under the same bound."""
    cow = make_scenario(4, 6, [(1, False)] * 4, "cow")
    for bound, purposes in ((50, ["verdicts"]), (100, ["first violation", "verdicts"])):   # under FIRST_STATES, over
        auto, alone = same_as_without_partial_order(cow, max_states=bound)
        assert not auto.complete and auto.stopped == alone.stopped == f"--max-states {bound}"
        assert auto.exploration.states == alone.exploration.states == bound
        assert [s.purpose for s in auto.searches] == purposes
        assert f"stopped (--max-states {bound})" in auto.choice
    # a bound the reduced search stays under gives the whole answer
    whole, alone = check(cow, max_states=3_000), check(cow, por=False)
    assert whole.complete and whole.exploration.states < 3_000 < alone.exploration.states
    assert reported(whole)[0] == reported(alone)[0]


def test_the_default_leaves_partial_order_reduction_off_where_it_does_not_pay_and_says_why():
    cases = {
        make_scenario(2, 3, [2, 2], "cow", device="stream"): "on the stream device no completion is settled",
        make_scenario(2, 3, [2, 2], "vllm-bmv2"): "atomic paths",
    }
    for scenario, why in cases.items():
        auto, alone = same_as_without_partial_order(scenario)
        assert why in auto.choice and [s.purpose for s in auto.searches] == ["verdicts"]
    bounded = check(make_scenario(2, 3, [2, 2], "cow"), max_depth=5)
    assert "--max-depth" in bounded.choice and not bounded.complete


def test_por_cannot_be_asked_for_with_a_depth_bound():
    with pytest.raises(SpecError, match="--max-depth"):
        check(make_scenario(2, 3, [2, 2], "cow"), por=True, max_depth=5)


def test_the_choice_bench_runs_every_row_in_the_three_modes():
    """`cowcheck bench --choice`: a row per mode, the same answer in each,
    and the summary over a group (what it computes, not how fast)."""
    from cowcheck.bench.choice import MODES, _rows, _summary
    path = Path(__file__).resolve().parent.parent / "specs" / "scenarios" / "premature-decrement.toml"
    rows = _rows("premature-decrement", str(path), 60.0)
    assert list(rows) == [mode for mode, _ in MODES]
    assert all(r["complete"] and r["broken"] == rows["--no-por"]["broken"] != [] for r in rows.values())
    assert rows["default"]["searches"] == ["verdicts"] and rows["default"]["runs"] >= 1      # broken in its first states
    summary = _summary([rows], "--no-por")
    assert summary["scenarios"] == 1 and summary["worst"] == "premature-decrement" and summary["sum_ratio"] > 0
    assert set(summary["seconds"]) == set(rows)


def test_an_interrupt_in_the_reduced_search_reports_that_search_alone():
    """Ctrl-C while the default's reduced search runs: the result is that
    search's, partial, and the paused search without the reduction (its
    first 64 states, which decided nothing) is not reported as the one that
    gave the verdicts."""
    from cowcheck.engines.explicit import explore
    from cowcheck.engines.options import SearchOptions

    def progress(explorer, queued):
        if explorer.ample is not None:
            raise KeyboardInterrupt

    scenario = make_scenario(4, 6, [(1, False)] * 5, "cow")
    result = explore(scenario, SearchOptions(), progress=progress)
    assert not result.exploration.complete and "interrupted" in result.exploration.stopped
    assert [s.purpose for s in result.searches] == ["first violation"]
    assert result.choice == "auto: interrupted in the search with partial-order reduction"


def test_the_choice_bench_runs_only_the_rows_asked_for(capsys):
    """`cowcheck bench --choice --only TEXT`: the rows whose label holds
    TEXT, any case, and no other."""
    from rich.console import Console
    from cowcheck.bench.choice import run_choice
    figures = run_choice(Console(), True, 60.0, only="SPARE-capacity")
    capsys.readouterr()
    assert figures["holding"] == []
    assert [rows["default"]["benchmark"] for rows in figures["shipped"]] == ["spare-capacity"]
