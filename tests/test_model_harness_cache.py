"""The engine harness on cache scenarios (docs/semantics.md#engine-harness):
admit in place of start, drafts, rollback after every verify, the cached()
observer and the cache invariants it lets the harness judge, and every bad
adapter as one line naming the adapter and the method, exit 2."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import cowcheck
from conftest import SPECS
from cowcheck.cli import main
from cowcheck.engines.results import Outcome
from cowcheck.model.harness import HarnessModel
from cowcheck.model.scenario import load_scenario
from cowcheck.model.state import Status
from cowcheck.model.structure import Op
from toy_allocators import TOY
import toy_cache_allocators as toy_cache
from toy_cache_allocators import TOY as CACHE_TOY, blind, copying

PARALLEL = 'cache = "prefix"\nblock_size = 2\n[[branch]]\nprompt = 3\nappends = 1\n[[branch]]\nprompt = 3\nappends = 1\nafter = "a"\n'
CACHE_INVARIANTS = {"no-stale-key", "cache-immutable", "verified-only-cached"}


from test_model_harness import error_line  # noqa: E402  (one bad-input line, as every harness test reads it)


def scenario_file(tmp_path: Path, allocator: str, body: str = PARALLEL) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f'allocator = "{allocator}"\ndevice = "stream"\n' + body)
    return path


def violated(result) -> set[str]:
    return {k for k, v in result.verdicts.items() if v.outcome is Outcome.VIOLATED}


@pytest.mark.parametrize("ref, words", [
    (f"{TOY}:manager", ["'admit'", "has no admit()", "cache scenario", "admit(branch, tokens) in place of start"]),
    (f"{CACHE_TOY}:words", ["'admit'", "how many prompt tokens", "'three'"]),
    (f"{CACHE_TOY}:too_many", ["'admit'", "returned 4 tokens computed", "outside 0 .. 3"]),
    (f"{CACHE_TOY}:negative", ["'admit'", "returned -1 tokens computed"]),
    (f"{CACHE_TOY}:bad_copies", ["'admit'", "(src, dst) block-id pairs"]),
    (f"{CACHE_TOY}:cached_outside", ["'cached'", "block id", "99"]),
    (f"{CACHE_TOY}:cached_short", ["'cached'", "tuple of 2 strings", "('p0',)"]),
])
def test_a_bad_cache_adapter_is_one_line_naming_the_adapter_and_the_method(tmp_path, ref, words):
    result = CliRunner().invoke(main, ["check", str(scenario_file(tmp_path, ref)), "--out", str(tmp_path / "cx")])
    line = error_line(result)
    assert ref.rpartition(":")[2] in line, line
    for word in words:
        assert word in line, line


def test_admit_launches_one_prefill_for_the_rest_of_the_prompt_and_reports_its_hits():
    scenario = load_scenario(SPECS / "scenarios" / "prefix-code.toml")
    model = HarnessModel(scenario)
    state = model.init_state()
    assert all(br.status is Status.WAITING for br in state.branches) and len(state.free) == scenario.pool
    admits = [t for t in model.successors(state) if t.action.op is Op.ADMIT]
    assert [t.action.actor for t in admits] == ["a", "b"]
    first = admits[0]
    binds = dict(first.action.binds)
    assert binds["computed"] == 0 and binds["hits"] == () and binds["from"] == 0 and binds["to"] == 2
    kernel, = first.state.queue
    assert (kernel.pos, kernel.span, kernel.snapshot) == (2, 3, binds["table"])
    # keyed when scheduled, before the fill lands: the next admission hits it
    assert first.state.blocks[binds["table"][0]].key == ("p0", "p1")
    second = next(t for t in model.successors(first.state) if t.action.op is Op.ADMIT)
    assert dict(second.action.binds)["hits"] == (binds["table"][0],) and model.hits(second.action) == 1
    assert dict(second.action.binds)["from"] == 2 and second.state.queue[-1].span == 1


def test_the_correct_pool_is_safe_but_undisciplined_on_one_stream_and_wrong_on_async():
    stream = cowcheck.check(SPECS / "scenarios" / "prefix-code.toml")
    assert stream.summary is cowcheck.Summary.UNDISCIPLINED and stream.expect_met
    assert violated(stream) == {"exclusive-write", "refcount-write"} and tuple(stream.exploration.hits_range) == (1, 1)
    unsafe = cowcheck.check(SPECS / "scenarios" / "prefix-code-async.toml")
    assert "faithful-output" in violated(unsafe) and unsafe.expect_met


def test_without_cached_the_cache_invariants_are_not_checked():
    scenario = load_scenario(SPECS / "scenarios" / "prefix-code-async.toml")
    result = cowcheck.check(scenario, allocator=blind)
    unchecked = {k for k, v in result.verdicts.items() if v.outcome is Outcome.UNSUPPORTED}
    assert CACHE_INVARIANTS <= unchecked
    assert all("no cached()" in result.verdicts[k].note for k in CACHE_INVARIANTS)
    assert "faithful-output" in violated(result)        # the harm still shows


def test_a_waiting_request_is_cancelled_without_a_call_and_a_prefill_in_flight_is_not_a_cancellation_point():
    scenario = load_scenario(SPECS / "scenarios" / "prefix-code-cancel-in-flight.toml")
    model = HarnessModel(scenario)
    state = model.init_state()
    cancel = next(t for t in model.successors(state) if t.action.op is Op.CANCEL)
    assert cancel.action.step == "cancel" and cancel.state.branches[0].status is Status.CANCELLED
    admitted = next(t for t in model.successors(state) if t.action.op is Op.ADMIT).state
    assert not any(t.action.op is Op.CANCEL for t in model.successors(admitted))     # its prefill is in flight


def test_drafts_and_rollbacks_reach_the_adapter_and_a_draft_key_is_verified_only_cached():
    calls = toy_cache.CALLS
    calls.clear()
    scenario = load_scenario(SPECS / "scenarios" / "prefix-cache-speculate.toml")
    held = cowcheck.check(scenario, allocator=toy_cache.recording)
    assert not violated(held) - {"exclusive-write", "refcount-write"}
    assert ("append", "a", "a1", True) in calls and ("append", "a", "a3", False) in calls
    assert {c for c in calls if c[0] == "rollback"} == {("rollback", "a", 0), ("rollback", "a", 1), ("rollback", "a", 2)}
    bug = cowcheck.check(SPECS / "scenarios" / "prefix-code-cache-drafts.toml")
    witness = bug.verdicts["verified-only-cached"].witness
    assert witness["branch"] == "a" and witness["covers"] == 4 and witness["verified"] == 2


def test_copies_an_admission_returns_are_launched_before_its_prefill():
    scenario = load_scenario(SPECS / "scenarios" / "prefix-code.toml")
    model = HarnessModel(scenario, copying)
    state = model.init_state()
    for _ in range(3):      # a admits, its prefill lands, b admits with a hit
        state = next(t for t in model.successors(state) if t.action.actor == ("a" if _ == 0 else "device" if _ == 1 else "b")
                     and t.action.op in (Op.ADMIT, "kernel-complete")).state
    copy, kernel = state.queue
    assert (copy.src, copy.n) == (0, 2) and kernel.pos == 2
    result = cowcheck.check(scenario, allocator=copying)
    assert tuple(result.exploration.cost_range) == (1, 1) and result.complete


def test_counterexamples_replay_on_a_pool_and_explain_names_the_admission(tmp_path):
    result = cowcheck.check(SPECS / "scenarios" / "prefix-code-async.toml")
    cx = result.verdicts["faithful-output"].counterexample
    replayed = cowcheck.replay(cx)                   # numpy: the kernels really run
    assert replayed.ok and replayed.pool is not None and replayed.pool.first_divergence is not None
    loaded = cowcheck.Counterexample.load(cx.write(tmp_path / "cx.json"))
    assert cowcheck.replay(loaded, pool="none").ok
    text = cowcheck.explain(loaded)
    assert "calls admit('a', its prompt)" in text and "prefill kernel for positions 0 to 2" in text


def test_the_allocator_axis_sweeps_cache_scenarios(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(
        '[grid]\nname = "prefix-code"\n'
        'allocator = ["cowcheck.specs.allocators.prefix:correct", "cowcheck.specs.allocators.prefix:no_evict"]\n'
        'device = "stream"\ncache = "prefix"\nblock_size = 2\nprompt = 0\nbranches = 2\n'
        'prompts = [[3, 3]]\nafter = [["", "a"]]\nmay_cancel = 0\n')
    result = CliRunner().invoke(main, ["sweep", str(grid), "--out", str(tmp_path / "o")])
    assert result.exit_code in (0, 1), result.output
    assert "prefix.correct" in result.output and "prefix.no_evict" in result.output


def test_a_pool_told_of_its_kernels_keeps_a_cancelled_requests_blocks_until_the_last_is_done():
    """Fences in a cache scenario: the V1-style pool frees an aborted
    request's blocks at once and its kernel writes them after the next
    request got one; step_fenced keeps them until kernel_done, a host action
    of its own, and holds. Reported as holds instead of the request's own
    references, the same deferral breaks refcount-write: the kernel then
    writes a block no table references (docs/semantics.md#engines-that-wait-and-allocators-that-hold)."""
    path = SPECS / "scenarios" / "prefix-code-cancel-in-flight.toml"
    scenario = replace(load_scenario(path), expect=())
    freed_at_once = cowcheck.check(scenario)
    assert {"no-use-after-free", "faithful-output"} <= violated(freed_at_once)
    fenced = cowcheck.check(SPECS / "scenarios" / "prefix-code-step-fenced.toml")
    assert fenced.complete and fenced.expect_met and not violated(fenced)
    model = HarnessModel(load_scenario(SPECS / "scenarios" / "prefix-code-step-fenced.toml"))
    seen, frontier, fences = set(), [model.init_state()], 0
    while frontier and not fences:
        state = frontier.pop()
        for t in model.successors(state):
            fences += t.action.step == "kernel_done"
            if t.state not in seen:
                seen.add(t.state)
                frontier.append(t.state)
    assert fences
    as_holds = cowcheck.check(scenario, allocator=toy_cache.deferred_as_holds)
    assert violated(as_holds) == {"refcount-write"}


def test_every_view_shrink_and_assertion_works_on_a_cache_scenario_through_the_harness(tmp_path):
    """What a user does with a counterexample of allocator code on a cache
    scenario: the Python API and the assertion helpers, the stepper page,
    the block graph with its cache map, and shrinking."""
    path = SPECS / "scenarios" / "prefix-code-async.toml"
    cx = cowcheck.assert_violates(path, "faithful-output")
    assert cx.scenario.allocator == "cowcheck.specs.allocators.prefix:correct" and cx.scenario.cache
    with pytest.raises(cowcheck.CheckFailed, match="faithful-output"):
        cowcheck.assert_safe(path)
    assert cowcheck.assert_safe(SPECS / "scenarios" / "prefix-code.toml").complete      # one stream: undisciplined, safe
    with pytest.raises(cowcheck.CheckFailed, match="exclusive-write"):
        cowcheck.assert_holds(SPECS / "scenarios" / "prefix-code.toml")
    page = cowcheck.page(cx)
    assert '"cache"' in page and "admit" in page
    written = cx.write(tmp_path / "cx.json")
    run = CliRunner().invoke(main, ["graph", str(written), "-o", str(tmp_path / "g.svg")])
    assert run.exit_code == 0, run.output
    assert "cache: (p0 p1) → block 0" in (tmp_path / "g.svg").read_text()
    shrunk = cowcheck.shrink(written, workers=0)
    assert shrunk.smaller and shrunk.counterexample is not None
    assert shrunk.scenario.allocator == cx.scenario.allocator and shrunk.scenario.cache
    assert cowcheck.replay(shrunk.counterexample).ok
