"""The scheduler harness (docs/semantics.md#scheduler-harness) on the toy P/D
scheduler of tests/toy_schedulers.py: each verdict class, bad adapters in
one line, replay, and agreement with the protocol file that describes the
same orders on the section's P/D scenarios (S3, S4, S5)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from cowcheck import api
from cowcheck.engines import explicit
from cowcheck.engines.options import SearchOptions
from cowcheck.model.errors import SpecError
from cowcheck.model.scheduler import SchedulerModel
from cowcheck.traces.replay import replay

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "specs" / "scenarios"
sys.path.insert(0, str(HERE))


def run(name: str, factory: str, **changes):
    scenario = api.as_scenario(SCENARIOS / f"{name}.toml")
    scenario = dataclasses.replace(scenario, scheduler=f"toy_schedulers:{factory}", allocator_base=str(HERE), expect=(),
                                   **changes)
    return explicit.explore(scenario, SearchOptions())


def broken(result) -> set[str]:
    return {i for i, v in result.verdicts.items() if str(v.outcome) == "violated"}


def checked(result) -> set[str]:
    return {i for i, v in result.verdicts.items() if str(v.outcome) in ("holds", "violated")}


def test_correct_scheduler_holds_on_each_pd_scenario():
    for name in ("pd-consumer-abort", "pd-consumer-ahead", "pd-consumer-ahead-local"):
        assert str(run(name, "correct").summary) == "safe and disciplined", name
    assert str(run("pd-producer-lease", "correct", lease=False).summary) == "safe and disciplined"


def test_each_verdict_class():
    assert str(run("pd-consumer-abort", "free_at_abort").summary) == "unsafe"
    assert str(run("pd-consumer-ahead-local", "ahead_eager_abort").summary) == "safe but undisciplined"
    stale = run("pd-producer-lease", "stale_report")
    assert "allocator-error" in broken(stale)
    assert "stale finished_sending" in stale.verdicts["allocator-error"].witness["message"]


@pytest.mark.parametrize("name, factory, protocol", [
    ("pd-consumer-abort", "correct", "kv-connector"),
    ("pd-consumer-abort", "free_at_abort", "free-at-abort"),          # vLLM 32255 before its fix
    ("pd-consumer-ahead", "correct", "kv-connector"),
    ("pd-consumer-ahead", "ahead_eager_abort", "load-over-in-flight"),  # 45357 before its deferred frees
    ("pd-consumer-ahead-local", "ahead_eager_abort", "load-over-in-flight"),
    ("pd-producer-lease", "correct", "kv-connector"),                 # 52234: the lease, whatever the order
])
def test_agrees_with_the_protocol_file_of_the_same_orders(name, factory, protocol):
    harness = run(name, factory)
    scenario = api.with_overrides(api.as_scenario(SCENARIOS / f"{name}.toml"), protocol)
    model = explicit.explore(scenario, SearchOptions())
    judged = checked(harness)
    assert broken(harness) == broken(model) & judged


def test_counterexamples_are_shortest_and_replay():
    result = run("pd-consumer-abort", "free_at_abort")
    uaf = result.verdicts["no-use-after-free"]
    assert uaf.length == 3      # add a, schedule (its recv), abort a: the recv's block goes back while it writes it
    steps = [str(a) for a in uaf.counterexample.actions]
    assert steps[0].startswith("a (admit): add") and steps[1].startswith("engine: schedule") and "abort" in steps[2]
    for verdict in result.verdicts.values():
        if verdict.counterexample is not None:
            assert replay(verdict.counterexample).ok


def test_a_toy_schedulers_counterexamples_replay_on_the_pool_where_faithful_output_breaks():
    """Every counterexample of the toy scheduler's bugs replays on the KV
    pool (a step that raised launched nothing); the pool diverges where
    faithful-output breaks in the model, and only there."""
    for name, factory in (("pd-consumer-abort", "free_at_abort"), ("pd-producer-lease", "stale_report"),
                          ("pd-consumer-ahead", "ahead_eager_abort")):
        for inv, verdict in run(name, factory).verdicts.items():
            if verdict.counterexample is not None:
                replayed = api.replay(verdict.counterexample, pool="numpy")
                first = replayed.pool.first_divergence
                assert replayed.ok and (first is not None) == (inv == "faithful-output"), (name, inv)


def test_lease_breaks_the_remote_reader():
    result = run("pd-producer-lease", "correct")
    assert broken(result) == {"no-use-after-free", "exclusive-write", "faithful-output"}
    assert "remote reader" in result.verdicts["faithful-output"].witness["message"]


@pytest.mark.parametrize("factory, words", [
    ("bad_kind", "kind 'fetch'"),
    ("outside_pool", "block must be a block id"),
    ("send_without_sink", "which has no sink"),
    ("not_a_plan", "must return a plan"),
    ("three_in_flight", "plans_in_flight"),
    ("waits_unknown", "waits for 'nope', which is no transfer in flight or unreported"),
])
def test_bad_adapters_in_one_line(factory, words):
    with pytest.raises(SpecError) as err:
        run("pd-consumer-abort", factory)
    text = str(err.value)
    assert "\n" not in text and f"toy_schedulers:{factory}" in text and words in text


def test_scenario_key_and_refusals(tmp_path):
    text = (SCENARIOS / "pd-consumer-abort.toml").read_text().replace('protocol = "free-at-abort"',
                                                                      'scheduler = "toy_schedulers:correct"')
    path = tmp_path / "s.toml"
    path.write_text(text.replace('expect = [', 'expect = "holds"\n#['))
    scenario = api.as_scenario(path)
    assert scenario.scheduler == "toy_schedulers:correct" and scenario.subject == "toy_schedulers:correct"
    assert isinstance(SchedulerModel(scenario), SchedulerModel)
    with pytest.raises(SpecError, match="scheduler code is checked by the explorer"):
        api.check(scenario, engine="bmc")
    path.write_text(text.replace('cache = "prefix"\n', ""))
    with pytest.raises(SpecError, match="only a cache scenario"):
        api.as_scenario(path)


def test_an_observer_that_raises_is_an_allocator_error_whatever_the_call_freed():
    """The abort frees blocks (free_at_abort) and then a host observer raises:
    the transition has no after-state, and the invariants that read one
    (no-use-after-free's freed block) judge nothing of it."""
    result = run("pd-consumer-abort", "host_cached_raises", host_pool=2)
    assert "allocator-error" in broken(result)
    assert "host_cached() after an abort" in result.verdicts["allocator-error"].witness["message"]


def test_a_call_that_raised_carries_only_allocator_raised():
    """What the call had freed before its observer raised is dropped with
    the after-state: the raised transition's one fact is AllocatorRaised,
    so no invariant that reads an after-state is handed a fact without one."""
    scenario = dataclasses.replace(api.as_scenario(SCENARIOS / "pd-consumer-abort.toml"), host_pool=2, expect=(),
                                   scheduler="toy_schedulers:host_cached_raises", allocator_base=str(HERE))
    model = SchedulerModel(scenario)
    seen, todo, raised = set(), [model.init_state()], []
    while todo:         # every reachable state: the abort that frees two blocks before the observer raises among them
        for tr in model.successors(todo.pop()):
            if tr.state is None:
                raised.append(tr)
            elif tr.state not in seen:
                seen.add(tr.state)
                todo.append(tr.state)
    assert raised and all([type(f).__name__ for f in tr.facts] == ["AllocatorRaised"] for tr in raised)


def test_is_final_reuses_the_schedule_successors_called_and_agrees_without_it(monkeypatch):
    """is_final after successors(state) takes whether schedule() launched
    anything from that call; asked first (as a replay may), it calls
    schedule() itself: the same answer on every reachable state."""
    scenario = dataclasses.replace(api.as_scenario(SCENARIOS / "pd-producer-lease.toml"), expect=(),
                                   scheduler="toy_schedulers:correct", allocator_base=str(HERE))
    model, fresh = SchedulerModel(scenario), SchedulerModel(scenario)
    calls = []
    schedule = SchedulerModel._schedule
    monkeypatch.setattr(SchedulerModel, "_schedule", lambda self, *args: (calls.append(self), schedule(self, *args))[1])
    seen, todo, finals = set(), [model.init_state()], 0
    while todo:
        state = todo.pop()
        trs = model.successors(state)
        calls.clear()
        final = model.is_final(state)
        assert model not in calls and final == fresh.is_final(state)
        finals += final
        for tr in trs:
            if tr.state is not None and tr.state not in seen:
                seen.add(tr.state)
                todo.append(tr.state)
    assert finals


def test_the_json_result_and_the_check_table_name_the_scheduler(tmp_path):
    """`--json` carries the scenario's `scheduler` (result.schema.json has
    it), and the closing table's protocol / allocator column shows the
    scheduler's short label, not the protocol file the scenario also names."""
    import json

    from click.testing import CliRunner
    from jsonschema import Draft202012Validator

    from cowcheck.cli import main
    from cowcheck.schemas import load

    out = tmp_path / "r.json"
    done = CliRunner().invoke(main, ["check", str(SCENARIOS / "pd-consumer-abort.toml"),
                                     str(SCENARIOS / "pd-consumer-ahead.toml"), "--scheduler",
                                     str(HERE / "toy_schedulers.py") + ":correct", "--json", str(out),
                                     "--out", str(tmp_path / "cx")], terminal_width=200)
    assert done.exit_code in (0, 1), done.output
    result = json.loads(out.read_text())[0]
    assert result["scheduler"].endswith("toy_schedulers.py:correct") and "allocator" not in result
    assert not list(Draft202012Validator(load("result")).iter_errors(result))
    table = done.output[done.output.rindex("protocol / allocator"):]
    assert "toy_schedulers.correct" in table and "free-at-abort" not in table and "kv-connector" not in table


def test_a_scheduler_scenario_is_written_back_with_its_scheduler(tmp_path):
    """What `shrink` and `fuzz` write for scheduler code names the
    scheduler (not the protocol a scheduler scenario carries by default),
    and reads back as the same scenario."""
    from cowcheck.model.scenario import load_scenario
    from cowcheck.sweeps.shrink import scenario_toml
    scenario = dataclasses.replace(api.as_scenario(SCENARIOS / "pd-consumer-abort.toml"), scheduler="toy_schedulers:correct",
                                   allocator_base=str(HERE), expect=())
    text = scenario_toml(scenario, "written back", "holds", tmp_path)
    assert 'scheduler = "toy_schedulers:correct"' in text and "protocol =" not in text and "reuse =" not in text
    (tmp_path / "back.toml").write_text(text)
    back = load_scenario(tmp_path / "back.toml")
    assert back.scheduler == scenario.scheduler and back.branches == scenario.branches and back.pool == scenario.pool


def test_a_plans_waits_hold_its_kernels_until_the_named_earlier_transfers_land():
    """A consumer's prefill scheduled the step after its recvs launched,
    before they are reported: blind, its kernel may run under them
    (copy-before-use, faithful-output); naming them in the plan's `waits`
    (a worker that waits for them, as vLLM's offloading worker waits for
    jobs_to_flush) orders them before it, as a sync load is."""
    blind, waits = run("pd-consumer-ahead", "early_kernel"), run("pd-consumer-ahead", "early_kernel_waits")
    assert {"copy-before-use", "faithful-output"} <= broken(blind)
    # the recv lands while the waiting kernel is queued, as a sync load does: exclusive-write's own rule
    assert broken(waits) == {"exclusive-write"} and str(waits.summary) == "safe but undisciplined"
