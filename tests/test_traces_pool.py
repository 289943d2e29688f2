"""The concrete executor: traces replayed on a real KV pool agree with the
model, step for step, on when the output goes wrong."""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import fake_cupy
from conftest import cache_scenarios, ROOT
from cowcheck.engines import counterexample as trace
from cowcheck import check
from cowcheck.cli import main
from cowcheck.traces.pool import TOLERANCE, VALUE, Pool, TokenSpace, reference_output, replay_on_pool
from cowcheck.engines.invariants import BY_ID, Judge
from cowcheck.model.protocol import builtin_names
from cowcheck.model.branches import BRANCH_NAMES
from cowcheck.model.scenario import DEVICES, make_scenario
from cowcheck.model.system import ProtocolModel

#: every committed counterexample (scheduler code's replays on the pool from its plans and states)
COUNTEREXAMPLES = sorted((ROOT / "counterexamples").glob("*.json"))
FAITHFUL = Judge((BY_ID["faithful-output"],))
#: the correct protocols: their traces match the reference everywhere (a lease that expires is a scenario's bug)
CORRECT = ("cow", "holds", "kv-connector", "kv-connector-lazy")


@pytest.mark.parametrize("path", COUNTEREXAMPLES, ids=lambda p: p.stem)
def test_committed_counterexample_replays_on_the_pool(path):
    cx = trace.load(path)
    replayed = replay_on_pool(cx.scenario, cx.actions, initial=cx.initial, states=cx.states)
    space = TokenSpace(cx.scenario)
    for k in replayed.kernels:
        assert np.isfinite(k.max_diff)
        if k.kind == "kernel":
            assert k.decoded in space.vocabulary and k.expected in space.vocabulary
    first = replayed.first_divergence
    if cx.invariant == "faithful-output":
        assert first is not None and first.step == cx.length
    elif cx.scenario.scheduler is not None:
        assert first is None, "a scheduler trace diverges on the pool only where faithful-output breaks in the model"
    elif cx.scenario.allocator is None and cx.scenario.protocol.name in CORRECT and not cx.scenario.lease:
        assert first is None, "a correct protocol's trace must match the reference everywhere"


def test_premature_decrement_gives_a_wrong_but_plausible_token():
    cx = trace.load(ROOT / "counterexamples" / "premature-decrement.faithful-output.json")
    first = replay_on_pool(cx.scenario, cx.actions).first_divergence
    assert (first.step, first.branch, first.pos) == (27, "b", 3)
    assert first.expected == "p2"                      # the previous-token head's reference
    assert first.decoded != first.expected             # wrong ...
    assert first.decoded in TokenSpace(cx.scenario).vocabulary  # ... but a real token, no crash
    assert first.max_diff > 0.1


def test_reference_decodes_the_previous_token():
    scenario = make_scenario(4, 6, [3, 3, 3], "cow")
    space = TokenSpace(scenario)
    hits = total = 0
    for i in range(3):
        seq = scenario.tokens(i)
        for pos in range(1, len(seq)):
            total += 1
            hits += space.decode(reference_output(space, seq, pos)) == seq[pos - 1]
    assert hits >= 0.9 * total


def test_vectors_are_deterministic():
    scenario = make_scenario(2, 3, [2, 2], "cow")
    a, b = TokenSpace(scenario), TokenSpace(scenario)
    assert np.array_equal(a.vectors("p1"), b.vectors("p1"))
    assert not np.array_equal(a.vectors("p1"), a.vectors("p2"))


def test_pool_starts_with_the_prompt_and_zeros_and_keeps_stale_contents():
    scenario = make_scenario(2, 3, [1], "cow", pool=4)
    space = TokenSpace(scenario)
    pool = Pool(np, scenario, space)
    assert np.array_equal(pool.memory[1, 0], space.key_value("p2"))
    assert not pool.memory[1, 1].any() and not pool.memory[2:].any()
    pool.kernel("a1", 3, (0, 1))
    pool.copy(1, 3, 2)  # a block reused later still holds what was copied into it
    assert np.array_equal(pool.memory[3, 1], space.key_value("a1"))


@st.composite
def small_scenarios(draw):
    """Random small scenarios; most of them racy (two or more writers on a
    partial tail), since a wrong output needs a race."""
    if draw(st.integers(0, 9)) < 7:
        B = draw(st.integers(2, 3))
        L = draw(st.sampled_from([n for n in range(1, 6) if n % B]))
        count, appends = st.integers(2, 3), st.integers(1, 3)
    else:
        B, L = draw(st.integers(1, 3)), draw(st.integers(0, 5))
        count, appends = st.integers(1, 3), st.integers(0, 3)
    branches = [(draw(appends), draw(st.integers(0, 3)) == 0) for _ in range(draw(count))]
    return make_scenario(B, L, branches, draw(st.sampled_from(builtin_names(cache=False))),
                         device=draw(st.sampled_from(DEVICES)), reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


#: the protocols branch programs are checked under: the correct one, the
#: buggy forks and rollbacks, and the pipelined ones whose late kernels race
PROGRAM_PROTOCOLS = ("cow", "fork-share-first", "fork-no-incref", "rollback-no-trim", "pipelined-fork", "pipelined-rollback")


@st.composite
def program_scenarios(draw):
    """Random small scenarios with branch programs: one or two roots, up to
    three children (listed in any file order) forked anywhere in their
    parent's program, speculation with one or two drafts, appends, cancels.
    Most are racy: a partial tail, and a child, so a fork shares the tail."""
    racy = draw(st.integers(0, 9)) < 7
    n = draw(st.integers(2 if racy else 1, 4))
    roots = draw(st.integers(1, min(2, n - racy)))
    born = draw(st.permutations(range(n)))           # born[k]: the file index of the k-th branch to exist
    parent = {born[k]: born[draw(st.integers(0, k - 1))] for k in range(roots, n)}
    programs = [draw(st.lists(st.sampled_from(("append", "append", "speculate 1", "speculate 2")), max_size=3)) for _ in range(n)]
    for child, p in sorted(parent.items()):
        programs[p].insert(draw(st.integers(0, len(programs[p]))), f"fork {BRANCH_NAMES[child]}")
    branches = [{"program": programs[i], "may_cancel": draw(st.booleans()),
                 **({"parent": BRANCH_NAMES[parent[i]]} if i in parent else {})} for i in range(n)]
    B = draw(st.integers(2 if racy else 1, 3))
    L = draw(st.sampled_from([n for n in range(1, 6) if n % B]) if racy else st.integers(0, 5))
    return make_scenario(B, L, branches, draw(st.sampled_from(PROGRAM_PROTOCOLS)),
                         device=draw(st.sampled_from(DEVICES)), reuse=draw(st.sampled_from(("lifo", "fifo", "any"))))


def random_walk(scenario, rnd) -> tuple[list, Optional[int]]:
    """A random walk through a scenario's state space, and the step at which
    the model's faithful-output first breaks on it (None: it holds). The
    device completes lazily (with a per-walk probability) so that copies and
    kernels stay in flight long enough to race, and a branch tends to keep
    the scheduler for a while (with another), so that one branch can run a
    whole operation, or its whole program, inside another's."""
    model = ProtocolModel(scenario)
    eager, sticky = rnd.uniform(0.05, 0.6), rnd.uniform(0.0, 0.9)
    state, actions, model_step, last = model.init_state(), [], None, None
    for step in range(1, 200):
        options = model.successors(state)
        device = [t for t in options if t.action.actor == "device"]
        branches = [t for t in options if t.action.actor != "device"]
        same = [t for t in branches if t.action.actor == last]
        if same and rnd.random() < sticky:
            branches = same
        pick = device if device and (not branches or rnd.random() < eager) else branches
        if not pick:
            break
        tr = rnd.choice(pick)
        if tr.state is None:  # a kernel-table-miss ends the walk
            break
        actions.append(tr.action)
        last = tr.action.actor if tr.action.actor != "device" else last
        if model_step is None and any(True for _ in FAITHFUL.action(model, state, tr)):
            model_step = step
        state = tr.state
    return actions, model_step


@st.composite
def walks(draw, scenarios=small_scenarios()):
    scenario = draw(scenarios)
    return (scenario, *random_walk(scenario, draw(st.randoms(use_true_random=False))))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(walks())
def test_pool_diverges_exactly_when_the_model_says_the_output_is_wrong(walk):
    scenario, actions, model_step = walk
    first = replay_on_pool(scenario, actions).first_divergence
    event("wrong output" if model_step else "faithful")
    assert (first.step if first else None) == model_step


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(walks(program_scenarios()))
def test_pool_follows_the_model_through_forks_and_rollbacks(walk):
    """The same agreement with branch programs: a child's reference is the
    sequence it inherited at its fork, a kernel's is its branch's sequence
    right after its write, and a rewound draft's token is garbage that no
    reference contains."""
    scenario, actions, model_step = walk
    first = replay_on_pool(scenario, actions).first_divergence
    steps = {a.step for a in actions}
    event(f"{scenario.protocol.name}: " + ("wrong output" if model_step else "faithful"))
    event(" ".join(s for s in ("share", "verify", "rewind", "decref-all") if s in steps) or "no program step")
    assert (first.step if first else None) == model_step


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(walks(cache_scenarios()))
def test_pool_follows_the_model_through_the_prefix_cache(walk):
    """The same agreement in cache scenarios: prefill kernels write several
    slots, a hit reads another request's blocks, an evicted and reused
    block holds its new owner's tokens, and the pool goes wrong exactly
    where the model's faithful-output breaks."""
    scenario, actions, model_step = walk
    first = replay_on_pool(scenario, actions).first_divergence
    steps = {a.step for a in actions}
    hits = any(a.step == "touch-hits" and dict(a.binds)["hits"] for a in actions)
    evictions = any("evicted" in dict(a.binds) for a in actions)
    event(f"{scenario.protocol.name}: " + ("wrong output" if model_step else "faithful"))
    event(("hit " if hits else "") + ("evicted " if evictions else "") + ("prefill" if "prefill" in steps else "no prefill"))
    assert (first.step if first else None) == model_step


#: the transfer scenarios of DESIGN.md's table, as data (docs/semantics.md#transfers)
_X = {"prompt": ["x0", "x1", "x2"], "after": "a"}
TRANSFER_SCENARIOS = {
    "S1": dict(pool=2, host_pool=2, branch=[{"prompt": 3}, _X, {"prompt": 3, "after": "b"}]),
    "S2": dict(pool=2, host_pool=2, branch=[{"prompt": 3}, {**_X, "appends": 1, "may_cancel": True}, {"prompt": 3, "after": "b"}]),
    "S3": dict(pool=2, branch=[{"prompt": 3, "source": "remote", "may_cancel": True}, {**_X, "appends": 1}]),
    "S4": dict(pool=2, branch=[{"prompt": 3, "appends": 1, "may_cancel": True},
                               {"prompt": ["q0", "q1", "q2"], "after": "a", "source": "remote"}]),
    "S5": dict(pool=2, lease=True, branch=[{"prompt": 3, "sink": "remote"}, _X]),
    "S7": dict(pool=2, host_pool=2, faults=["store"], branch=[{"prompt": 3}, _X, {"prompt": 3, "after": "b"}]),
    "S8": dict(pool=2, host_pool=2, faults=["load", "store"], branch=[{"prompt": 3}, _X, {"prompt": 3, "after": "b", "appends": 1}]),
    "S8-recv": dict(pool=3, faults=["recv", "send"], branch=[{"prompt": 5, "source": "remote", "appends": 1, "may_cancel": True},
                                                             {"prompt": 3, "after": "a", "sink": "remote"}]),
}
TRANSFER_PROTOCOLS = ("kv-connector", "kv-connector-lazy", "free-at-abort", "store-ahead", "load-over-in-flight",
                      "host-key-at-store")


@st.composite
def transfer_scenarios(draw):
    """The section's transfer scenarios under any transfer protocol,
    transfer model and device."""
    from cowcheck.model.scenario import scenario_from_dict
    name = draw(st.sampled_from(sorted(TRANSFER_SCENARIOS)))
    data = {"cache": "prefix", "block_size": 2, "reuse": "lifo", **TRANSFER_SCENARIOS[name],
            "protocol": draw(st.sampled_from(TRANSFER_PROTOCOLS)), "device": draw(st.sampled_from(DEVICES)),
            "transfer": draw(st.sampled_from(("stream", "own-stream", "own-stream-fenced", "nic")))}
    return scenario_from_dict(data, name, ROOT / "specs" / "protocols", name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(walks(transfer_scenarios()))
def test_pool_follows_the_model_through_transfers(walk):
    """The same agreement with a host tier and a remote engine: stores and
    loads copy between the pool and the host tier when they complete, a
    recv writes its prompt tokens, a send's read is the remote reader's
    output, a failure touches nothing; the pool goes wrong exactly where the
    model's faithful-output breaks, a kernel's or a send's."""
    scenario, actions, model_step = walk
    first = replay_on_pool(scenario, actions).first_divergence
    done = {str(dict(a.binds)["kind"]) + ("" if a.op == "transfer-complete" else " failed")
            for a in actions if a.op in ("transfer-complete", "transfer-fail")}
    event(f"{scenario.protocol.name}: " + ("wrong output" if model_step else "faithful"))
    event(" ".join(sorted(done)) or "no transfer completed")
    if first is not None:
        event(f"first divergence: {first.kind}")
    assert (first.step if first else None) == model_step


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(transfer_scenarios())
def test_shortest_wrong_output_through_transfers_diverges_at_the_same_step(scenario):
    """Every transfer model and device: a stale load, a recv over another
    request's prompt, a send reading a reused block."""
    verdict = check(scenario, invariants=(BY_ID["faithful-output"],), max_states=20_000, first=True).verdicts["faithful-output"]
    assume(verdict.holds is False)
    first = replay_on_pool(scenario, verdict.counterexample.actions).first_divergence
    event(f"{scenario.name} {scenario.protocol.name}: {first.kind if first else 'none'}")
    assert first is not None and first.step == verdict.length


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cache_scenarios(protocols=("vllm-v1", "no-evict", "cache-drafts", "free-in-flight", "touch-after-alloc")))
def test_shortest_wrong_output_through_the_cache_diverges_at_the_same_step(scenario):
    result = check(scenario, invariants=(BY_ID["faithful-output"],), max_states=5_000, first=True)
    verdict = result.verdicts["faithful-output"]
    assume(verdict.holds is False)
    first = replay_on_pool(scenario, verdict.counterexample.actions).first_divergence
    assert first is not None and first.step == verdict.length


def test_the_right_token_written_for_another_position_is_the_same_data_on_the_pool():
    """Found by the test above: a cancelled request's kernel still in flight
    reads a block that the next request's prefill has refilled with the same
    token in the same slot, written for position 0 instead of 3. The model
    compares tokens, so that read is faithful; the pool holds tokens too (it
    adds positions when attention reads), so it agrees, and both go wrong
    only where the next request reads the cancelled one's late write."""
    scenario = make_scenario(3, 0, [{"prompt": ["p0", "p1", "p2", "p0"], "appends": 1, "may_cancel": True},
                                    {"prompt": ["p0", "p0"]}], "free-in-flight", pool=4, cache=True)
    verdict = check(scenario, invariants=(BY_ID["faithful-output"],)).verdicts["faithful-output"]
    replay = replay_on_pool(scenario, verdict.counterexample.actions)
    aliased = [k for k in replay.kernels if k.kind == "kernel" and k.branch == "a" and k.pos == 4]
    assert aliased and not aliased[0].diverged
    assert verdict.length == 21 and replay.first_divergence.step == 21


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_scenarios())
def test_shortest_wrong_output_diverges_on_the_pool_at_the_same_step(scenario):
    result = check(scenario, invariants=(BY_ID["faithful-output"],), max_states=5_000, first=True)
    verdict = result.verdicts["faithful-output"]
    assume(verdict.holds is False)
    first = replay_on_pool(scenario, verdict.counterexample.actions).first_divergence
    assert first is not None and first.step == verdict.length


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(program_scenarios())
def test_shortest_wrong_output_of_a_program_diverges_at_the_same_step(scenario):
    result = check(scenario, invariants=(BY_ID["faithful-output"],), max_states=2_000, first=True)
    verdict = result.verdicts["faithful-output"]
    assume(verdict.holds is False)
    first = replay_on_pool(scenario, verdict.counterexample.actions).first_divergence
    assert first is not None and first.step == verdict.length


FORK = [{"program": ["append", "fork c", "append"]}, {"appends": 1}, {"program": ["append"], "parent": "a"}]
SPECULATE = [{"program": ["speculate 2", "append"]}, {"appends": 1}]


@pytest.mark.parametrize("protocol, branches, length", [
    ("fork-share-first", FORK, 32),          # the reference row (docs/semantics.md#reference-numbers)
    ("fork-no-incref", FORK, 31),
    ("pipelined-fork", FORK, 17),
    ("pipelined-rollback", SPECULATE, 15),
])
def test_buggy_program_goes_wrong_on_the_pool_where_the_model_says(protocol, branches, length):
    scenario = make_scenario(2, 3, branches, protocol)
    verdict = check(scenario, invariants=(BY_ID["faithful-output"],)).verdicts["faithful-output"]
    assert verdict.length == length
    first = replay_on_pool(scenario, verdict.counterexample.actions).first_divergence
    assert first is not None and first.step == length and first.max_diff > 100 * TOLERANCE
    assert first.decoded in TokenSpace(scenario).vocabulary          # a real token, no crash


def run_speculation(protocol: str, accepted: int) -> tuple:
    """One branch drafts a1 a2 (B = 2, L = 2: both into one fresh block),
    the verifier keeps `accepted` of them, and a3 is written at the rewound
    position; the device completes at once. The scenario and its trace."""
    scenario = make_scenario(2, 2, [{"program": ["speculate 2", "append"]}], protocol)
    model = ProtocolModel(scenario)
    state, actions = model.init_state(), []
    while not model.is_final(state):
        tr = next(t for t in model.successors(state) if dict(t.action.binds).get("accepted", accepted) == accepted)
        actions.append(tr.action)
        state = tr.state
    return scenario, actions


@pytest.mark.parametrize("protocol", ["cow", "rollback-no-trim"])
@pytest.mark.parametrize("accepted", [0, 1, 2])
def test_a_rewound_draft_is_garbage_the_pool_never_reads_as_truth(protocol, accepted):
    """The rejected drafts' keys stay in their slots past pos (a3 takes the
    first of them), and every kernel and the final check-output match the
    rewound sequence, never the drafts."""
    scenario, actions = run_speculation(protocol, accepted)
    replayed = replay_on_pool(scenario, actions)
    assert replayed.first_divergence is None
    a3 = [k for k in replayed.kernels if k.kind == "kernel"][-1]
    assert (a3.pos, a3.expected) == (2 + accepted, ("p1", "a1", "a2")[accepted])   # the previous-token head
    assert replayed.kernels[-1].kind == "check-output" and replayed.kernels[-1].pos == 3 + accepted
    if accepted == 0:                                  # block 2 (drafts a1 a2) is where a3 goes again
        space = TokenSpace(scenario)
        pool = Pool(np, scenario, space)
        for action in actions:
            if action.op == "kernel-complete":
                binds = dict(action.binds)
                pool.kernel(binds["token"], binds["pos"], binds["snapshot"])
        slots = [[space.nearest(pool.memory[b, i, VALUE]) for i in range(2)] for b in range(scenario.pool)]
        assert ["a3", "a2"] in slots                   # a3 over a1; the rejected a2 still there


def test_replay_cli_shows_the_divergence(tmp_path):
    path = ROOT / "counterexamples" / "premature-decrement.faithful-output.json"
    result = CliRunner().invoke(main, ["replay", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pool"]["first_divergence"] == 27
    kernels = {k["step"]: k for k in data["pool"]["kernels"]}
    assert kernels[27]["diverged"] and kernels[27]["decoded"] != kernels[27]["expected"]
    assert all(not k["diverged"] for s, k in kernels.items() if s < 27)
    text = CliRunner().invoke(main, ["replay", str(path)])
    assert "FIRST DIVERGENCE" in text.stdout and "first divergence at step 27" in text.stdout


def test_cupy_pool_without_cupy_is_one_clear_line():
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here; the GPU test below covers it")
    except ImportError:
        pass
    path = ROOT / "counterexamples" / "premature-decrement.faithful-output.json"
    result = CliRunner().invoke(main, ["replay", str(path), "--pool", "cupy"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cupy" in lines[0].lower() and "pool" in lines[0]
    assert "Traceback" not in result.output


def _gpu():
    """CuPy with a device, or a skip; a failure instead where the run is
    meant to be on a GPU (.ci/gpu sets COWCHECK_REQUIRE_GPU=1)."""
    missing = pytest.fail if os.environ.get("COWCHECK_REQUIRE_GPU") == "1" else pytest.skip
    try:
        import cupy
    except ImportError:
        missing("CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            missing("no CUDA device")
    except Exception as err:  # no driver
        missing(f"no usable CUDA device ({type(err).__name__}: {err})")
    return cupy


@pytest.mark.parametrize("path", COUNTEREXAMPLES, ids=lambda p: p.stem)
def test_cupy_pool_matches_numpy(path):
    _gpu()
    cx = trace.load(path)
    cpu = replay_on_pool(cx.scenario, cx.actions, "numpy")
    gpu = replay_on_pool(cx.scenario, cx.actions, "cupy")
    assert [k.step for k in gpu.kernels] == [k.step for k in cpu.kernels]
    assert [k.diverged for k in gpu.kernels] == [k.diverged for k in cpu.kernels]
    assert [k.decoded for k in gpu.kernels] == [k.decoded for k in cpu.kernels]
    for g, c in zip(gpu.kernels, cpu.kernels):
        assert abs(g.max_diff - c.max_diff) < 100 * TOLERANCE


# -- the CuPy path without a GPU: tests/fake_cupy.py computes with numpy and
# -- raises Race on any device access not ordered after a conflicting one

@pytest.mark.parametrize("path", COUNTEREXAMPLES, ids=lambda p: p.stem)
def test_cupy_replay_is_stream_ordered(path, monkeypatch):
    cp = fake_cupy.install(monkeypatch)
    cx = trace.load(path)
    cpu = replay_on_pool(cx.scenario, cx.actions, "numpy", states=cx.states)
    gpu = replay_on_pool(cx.scenario, cx.actions, "cupy", states=cx.states)       # raises Race if unordered
    assert [k.to_json() for k in gpu.kernels] == [k.to_json() for k in cpu.kernels]
    copies = sum(1 for a in cx.actions if a.op == "copy-complete")
    assert cp.device.launches > copies + len(cpu.kernels)        # the replay really ran on the stand-in


def test_cupy_replay_without_the_event_waits_is_a_race(monkeypatch):
    """The events are what orders a kernel after the copy it reads: without
    them the stand-in sees the race a GPU could run into."""
    fake_cupy.install(monkeypatch)
    monkeypatch.setattr(fake_cupy.Stream, "wait_event", lambda self, event: None)
    cx = trace.load(ROOT / "counterexamples" / "premature-decrement.faithful-output.json")
    with pytest.raises(fake_cupy.Race):
        replay_on_pool(cx.scenario, cx.actions, "cupy")


def test_cupy_cli_replay_matches_numpy(monkeypatch):
    fake_cupy.install(monkeypatch)
    path = ROOT / "counterexamples" / "premature-decrement.faithful-output.json"
    runs = {pool: CliRunner().invoke(main, ["replay", str(path), "--json", "--pool", pool]) for pool in ("numpy", "cupy")}
    assert all(r.exit_code == 0 for r in runs.values()), runs["cupy"].output
    data = {pool: json.loads(r.stdout)["pool"] for pool, r in runs.items()}
    assert data["cupy"]["pool"] == "cupy" and data["cupy"]["first_divergence"] == 27
    assert data["cupy"]["kernels"] == data["numpy"]["kernels"]


def test_stand_in_orders_what_cuda_orders():
    cp = fake_cupy.module()
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with a:
        x = cp.asarray(np.ones(3, np.float32)) * 2
    with b, pytest.raises(fake_cupy.Race):          # no event: b may run before a
        x + 1
    b.wait_event(a.record())
    with b:
        y = x + 1                                   # after the event: ordered
    with pytest.raises(fake_cupy.Race):             # the null stream does not wait for non-blocking b
        cp.asnumpy(y)
    with a, pytest.raises(fake_cupy.Race):          # a write on a after b's read, no event back
        x[0] = 5
    b.synchronize()
    assert cp.asnumpy(y).tolist() == [3, 3, 3]      # the host waited for b, and launches after that
    with a:
        x[0] = 5                                    # ... start after it too
    with pytest.raises(TypeError):
        np.asarray(x)                               # no silent host reads, as in CuPy


def test_stand_in_orders_blocking_streams_with_the_null_stream():
    cp = fake_cupy.module()
    x = cp.asarray(np.ones(2, np.float32))          # on the null stream
    with cp.cuda.Stream(non_blocking=False):
        y = x * 3                                   # a blocking stream waits for the null stream
    with cp.cuda.Stream(non_blocking=True), pytest.raises(fake_cupy.Race):
        x * 3                                       # a non-blocking one does not
    assert cp.asnumpy(y).tolist() == [3, 3]         # and the null stream waits for blocking ones


def test_the_replay_benchmark_replays_every_committed_counterexample():
    """`cowcheck bench`'s replay line (its figures are measured there, not
    here): every committed counterexample but scheduler code's."""
    from cowcheck.bench.replay import replay_figures, replayable
    figures = replay_figures(replayable(ROOT / "counterexamples"))
    protocols = [p for p in COUNTEREXAMPLES if json.loads(p.read_text())["scenario"].get("scheduler") is None]
    assert figures["replays"] == len(protocols) and figures["actions"] > 0
    assert figures["long_trace_actions"] >= 100


def test_stand_in_checks_a_view_where_it_is_used():
    """Basic indexing makes a view, as in CuPy: no launch when it is made,
    and its read is judged against the memory's writes when it happens."""
    cp = fake_cupy.module()
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with a:
        x = cp.asarray(np.zeros(4, np.float32))
    b.wait_event(a.record())
    view = x[1:3]                                   # no launch: reads nothing yet
    with a:
        x[1] = 7                                    # a write b has not waited for
    with b, pytest.raises(fake_cupy.Race):
        view * 1
    b.wait_event(a.record())
    with b:
        y = view * 1
    b.synchronize()
    assert cp.asnumpy(y).tolist() == [7, 0]         # the view sees the write: same memory
