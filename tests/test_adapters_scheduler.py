"""vLLM 0.34.0's real Scheduler and AsyncScheduler through the scheduler
harness (cowcheck.adapters.vllm_scheduler, docs/how-to/scheduler-code.md):
the verdicts of the section's P/D scenarios on the real code, agreement
with the protocol file that describes the same orders, the shipped
sched-vllm-* scenarios, replay of a counterexample, and the skip where no
vLLM can be loaded."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from cowcheck import api
from cowcheck.adapters import vllm_scheduler, vllm_v1
from cowcheck.adapters.sources import CACHE
from cowcheck.cli.check import engine_unavailable
from cowcheck.engines import explicit
from cowcheck.engines.options import SearchOptions
from cowcheck.model.errors import SpecError
from cowcheck.model.scheduler import SchedulerModel
from cowcheck.traces.replay import replay

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"
VLLM = CACHE / "vllm-0.34.0"

pytestmark = pytest.mark.skipif(not (VLLM / ".complete").is_file(), reason=f"{VLLM.name}'s sources are not in build/engines")

SYNC = "cowcheck.adapters.vllm_v1:scheduler"
ASYNC = "cowcheck.adapters.vllm_scheduler:async_scheduler"
NO_DEFER = "cowcheck.adapters.vllm_scheduler:async_scheduler_no_defer"


@pytest.fixture(autouse=True)
def _source(monkeypatch):
    monkeypatch.setenv(vllm_v1.ENV, str(VLLM))


EAGER = "cowcheck.adapters.vllm_scheduler:offload_eager"
EAGER_ASYNC = "cowcheck.adapters.vllm_scheduler:offload_eager_async"
LAZY = "cowcheck.adapters.vllm_scheduler:offload_lazy"
LAZY_ASYNC = "cowcheck.adapters.vllm_scheduler:offload_lazy_async"


def run(name: str, ref: str, **changes):
    scenario = api.as_scenario(SCENARIOS / f"{name}.toml")
    scenario = dataclasses.replace(scenario, protocol=None, scheduler=ref, expect=(), **changes)
    return explicit.explore(scenario, SearchOptions())


def broken(result) -> dict[str, int]:
    return {i: v.length for i, v in result.verdicts.items() if str(v.outcome) == "violated"}


def checked(result) -> set[str]:
    return {i for i, v in result.verdicts.items() if str(v.outcome) in ("holds", "violated")}


def protocol_broken(name: str, protocol: str, **changes) -> set[str]:
    scenario = api.with_overrides(api.as_scenario(SCENARIOS / f"{name}.toml"), protocol)
    scenario = dataclasses.replace(scenario, **changes)
    return set(broken(explicit.explore(scenario, SearchOptions())))


def test_s3_holds_0_34_keeps_an_aborted_consumers_blocks_until_finished_recving():
    """vLLM 32255's fix: finish_requests delays the free of a request in
    WAITING_FOR_REMOTE_KVS; b is never given a block a recv still writes."""
    result = run("pd-consumer-abort", SYNC)
    assert str(result.summary) == "safe and disciplined"
    assert broken(result) == {} and protocol_broken("pd-consumer-abort", "kv-connector") & checked(result) == set()


def test_s4_with_the_deferral_is_safe_and_undisciplined_only_by_the_pipeline():
    """defer_block_free (45357's deferred frees) keeps a's blocks past its
    in-flight step; the one broken discipline is the pipeline's own: a's
    next kernel, in flight, reads the block its previous kernel writes
    (docs/semantics.md: pipelined paths break exclusive-write even on one stream)."""
    result = run("pd-consumer-ahead", ASYNC)
    assert str(result.summary) == "safe but undisciplined"
    assert broken(result) == {"exclusive-write": 4}
    assert "branch a's in-flight kernel for position 3" in result.verdicts["exclusive-write"].witness["message"]


def test_s4_without_the_deferral_breaks_faithful_output_as_load_over_in_flight():
    """defer_block_free off (vLLM before 45357): a's abort frees its blocks
    under its in-flight kernel; b's recv lands there and a's next kernel
    reads q0 where p2 was."""
    result = run("pd-consumer-ahead", NO_DEFER)
    assert broken(result) == {"no-use-after-free": 3, "refcount-write": 4, "exclusive-write": 4, "copy-before-use": 6,
                              "faithful-output": 10}
    assert set(broken(result)) == protocol_broken("pd-consumer-ahead", "load-over-in-flight") & checked(result)
    witness = result.verdicts["faithful-output"].witness
    assert (witness["branch"], witness["position"], witness["expected"], witness["read"]) == ("a", 2, "p2", "q0")
    assert replay(result.verdicts["faithful-output"].counterexample).ok


def test_s4_local_without_the_deferral_is_safe_and_v1s_early_key_adds_cache_immutable():
    """With a local prefill the stream orders b's kernel after a's: safe,
    as load-over-in-flight's S4-local; V1 keys b's prompt at allocation,
    before a's in-flight kernel lands in that block, so the real code also
    breaks cache-immutable, which the protocol file (no early keys) does not."""
    result = run("pd-consumer-ahead-local", NO_DEFER)
    assert str(result.summary) == "safe but undisciplined"
    assert set(broken(result)) - {"cache-immutable"} == protocol_broken("pd-consumer-ahead-local", "load-over-in-flight")
    assert "cache-immutable" in broken(result)


def test_s5_breaks_faithful_output_under_the_lease_and_holds_without():
    """request_finished delays the producer's free until finished_sending;
    a lease reports the sends done while they read, b gets the blocks."""
    result = run("pd-producer-lease", SYNC)
    assert broken(result) == {"no-use-after-free": 6, "exclusive-write": 9, "faithful-output": 10}
    assert set(broken(result)) == protocol_broken("pd-producer-lease", "kv-connector") & checked(result)
    assert "remote reader" in result.verdicts["faithful-output"].witness["message"]
    assert str(run("pd-producer-lease", SYNC, lease=False).summary) == "safe and disciplined"


def test_a_synchronous_engines_abort_waits_for_the_steps_output():
    """EngineCore.step processes the aborts that arrive during the model's
    run just before update_from_output: with one batch, S4 holds."""
    assert str(run("pd-consumer-ahead", SYNC).summary) == "safe and disciplined"


def test_the_shipped_scenarios_meet_their_expect(shipped):
    """Read from the session's one check of specs/ (the `shipped` fixture),
    which runs them with the rest."""
    results = [r for r in shipped.results if r["scenario"].startswith("sched-vllm-")]
    assert len(results) == len(list(SCENARIOS.glob("sched-vllm-*.toml"))) == 10
    for result in results:
        assert result["expect_met"] and result["complete"], result["scenario"]


def launched(name: str, ref: str, **changes) -> set[str]:
    """The transfer kinds some reachable schedule() launches."""
    scenario = dataclasses.replace(api.as_scenario(SCENARIOS / f"{name}.toml"), protocol=None, scheduler=ref, expect=(),
                                   **changes)
    model = SchedulerModel(scenario)
    kinds, seen, todo = set(), set(), [model.init_state()]
    while todo:
        for tr in model.successors(todo.pop()):
            kinds |= {t.split()[0] for t in dict(tr.action.binds).get("transfers", ())}
            if tr.state is not None and tr.state not in seen:
                seen.add(tr.state)
                todo.append(tr.state)
    return kinds


@pytest.mark.parametrize("transfer", ["own-stream", "own-stream-fenced"])
def test_s1_holds_0_34_stores_only_blocks_whose_step_is_output(transfer):
    """DESIGN expected S1 to break faithful-output on own-stream with the
    real SimpleCPUOffloadScheduler; 0.34.0's eager mode stores only blocks
    "confirmed computed" (a later step's, or the finish-time flush), so no
    store is launched while the prefill that fills its block is in flight,
    whatever the transfer model. The stores and c's host load do run."""
    result = run("offload-eager-store", EAGER_ASYNC, transfer=transfer)
    assert str(result.summary) == "safe and disciplined"
    assert launched("offload-eager-store", EAGER_ASYNC, transfer=transfer) == {"store", "load"}


def test_s6_holds_with_one_batch_lazy_offloading():
    """The abort of a request whose block V1 keyed early waits for its
    step's output with one batch: nothing is freed under the kernel."""
    assert str(run("early-key-lazy-offload", LAZY).summary) == "safe and disciplined"
    assert launched("early-key-lazy-offload", LAZY) == {"store", "load"}


def test_s6_holds_with_eager_offloading_once_its_finish_time_store_is_launched():
    """The last request's finish queues a store that only the next
    schedule() launches: the harness's end waits for it (docs/semantics.md,
    the scheduler harness's decision on "final"), so no-leak holds."""
    result = run("early-key-lazy-offload", EAGER)
    assert result.verdicts["no-leak"].holds is True and str(result.summary) == "safe and disciplined"


@pytest.mark.slow
def test_s6_with_two_batches_is_safe_and_undisciplined_only_by_the_pipeline():
    """Under the AsyncScheduler the abort lands while a's next step runs;
    defer_block_free (on: SimpleCPUOffload runs as kv_both) keeps the
    blocks until that step's output. About 40 s."""
    result = run("early-key-lazy-offload", LAZY_ASYNC)
    assert broken(result) == {"exclusive-write": 4}


OLDER = CACHE / "vllm-0.33.0"


@pytest.mark.skipif(not (OLDER / ".complete").is_file(), reason=f"{OLDER.name}'s sources are not in build/engines")
def test_0_33_gives_0_34s_pd_verdicts(monkeypatch):
    """0.33.0 has both fixes too (32255's delayed free, 45357's
    defer_block_free): the same verdicts and lengths as 0.34.0."""
    monkeypatch.setenv(vllm_v1.ENV, str(OLDER))
    assert str(run("pd-consumer-abort", SYNC).summary) == "safe and disciplined"
    assert broken(run("pd-consumer-ahead", ASYNC)) == {"exclusive-write": 4}
    assert broken(run("pd-consumer-ahead", NO_DEFER)) == {"no-use-after-free": 3, "refcount-write": 4, "exclusive-write": 4,
                                                          "copy-before-use": 6, "faithful-output": 10}
    assert broken(run("pd-producer-lease", SYNC)) == {"no-use-after-free": 6, "exclusive-write": 9, "faithful-output": 10}
    assert str(run("offload-eager-store", EAGER_ASYNC).summary) == "safe and disciplined"
    # c's local hit in the step that loads its block 1 from the host: its own key, as on 0.34.0
    assert broken(run("sched-vllm-offload-lazy-early-key", LAZY)) == {}


def test_the_default_folder_and_the_skip(monkeypatch, tmp_path):
    monkeypatch.delenv(vllm_v1.ENV)
    monkeypatch.chdir(ROOT)
    assert vllm_scheduler.folder() == str(vllm_scheduler.DEFAULT) and vllm_v1.unavailable() is None
    monkeypatch.chdir(tmp_path)
    scenario = api.as_scenario(SCENARIOS / "sched-vllm-pd-consumer-abort.toml")
    why = engine_unavailable(scenario)
    assert (why is None) == (vllm_scheduler.importlib.util.find_spec("vllm") is not None)
    if why is not None:
        assert "COWCHECK_VLLM_SOURCE" in why and "\n" not in why


# -- each cited fix on the last release without it and the first with it (vllm_scheduler.FIXES) --------------

def release(version: str) -> Path:
    folder = CACHE / f"vllm-{version}"
    if not (folder / ".complete").is_file():
        pytest.skip(f"{folder.name}'s sources are not in build/engines")
    return folder


def on(monkeypatch, version: str, fix: str, **changes):
    """The fix's scenario under its configuration, on `version`."""
    monkeypatch.setenv(vllm_v1.ENV, str(release(version)))
    found = vllm_scheduler.FIXES[fix]
    return run(found.scenario, f"cowcheck.adapters.vllm_scheduler:{found.factory}", **changes)


def test_32255_the_shipped_bug_in_0_15_1_and_the_fix_in_0_16_0(monkeypatch):
    """0.15.1's finish_requests frees a consumer aborted in
    WAITING_FOR_REMOTE_KVS at once: b is given the block a's recv still
    writes, and b's kernel reads a's prompt (p0) where its own x2 was; the
    invariants free-at-abort (the protocol file of that order) breaks.
    0.16.0 delays the free until finished_recving: S3 holds."""
    assert vllm_scheduler.FIXES["32255"][2:] == ("0.15.1", "0.16.0")
    before = on(monkeypatch, "0.15.1", "32255")
    assert broken(before) == {"no-use-after-free": 4, "exclusive-write": 7, "copy-before-use": 7, "cache-immutable": 7,
                              "faithful-output": 11}
    assert set(broken(before)) == protocol_broken("pd-consumer-abort", "free-at-abort") & checked(before)
    witness = before.verdicts["faithful-output"].witness
    assert (witness["branch"], witness["position"], witness["expected"], witness["read"]) == ("b", 2, "x2", "p0")
    assert str(on(monkeypatch, "0.16.0", "32255").summary) == "safe and disciplined"


def test_45357_the_shipped_bug_in_0_23_0_and_the_fix_in_0_24_0(monkeypatch):
    """0.23.0's AsyncScheduler has no defer_block_free: the abort frees a's
    blocks under its in-flight kernel, as the no-defer configuration of
    0.34.0 does; 0.24.0 defers the free: only the pipeline's exclusive-write."""
    assert vllm_scheduler.FIXES["45357"][2:] == ("0.23.0", "0.24.0")
    before = on(monkeypatch, "0.23.0", "45357")
    assert broken(before) == {"no-use-after-free": 3, "refcount-write": 4, "exclusive-write": 4, "copy-before-use": 6,
                              "faithful-output": 10}
    assert broken(on(monkeypatch, "0.24.0", "45357")) == {"exclusive-write": 4}


def s1_with_appends(tmp_path: Path, transfer: str) -> Path:
    """S1 with a generating two tokens (and a third GPU block): in 0.23.0
    and 0.24.0 a request that finishes with its prefill is never stored
    (no finish-time flush); with a next step, the eager store of a's first
    block is decided while the prefill that fills it is in flight."""
    text = (SCENARIOS / "offload-eager-store.toml").read_text()
    text = re.sub(r"^expect = .*\n", "", text, flags=re.M)
    text = re.sub(r"^protocol = .*", f'scheduler = "{EAGER_ASYNC}"', text, flags=re.M)
    text = re.sub(r"^transfer = .*", f'transfer = "{transfer}"', text, flags=re.M)
    text = text.replace("pool = 2\n", "pool = 3\n", 1).replace("prompt = 3\n", "prompt = 3\nappends = 2\n", 1)
    path = tmp_path / f"s1-appends-{transfer}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("version", ["0.23.0", "0.24.0"])
def test_46278_is_the_workers_event_the_scheduler_stores_ahead_in_both(monkeypatch, tmp_path, version):
    """46278 adds a compute-done event in the worker (simple_kv_offload/
    worker.py) and leaves the scheduler alone: 0.23.0's and 0.24.0's
    SimpleCPUOffloadScheduler both count the prompt tokens of a prefill in
    flight as confirmed (num_computed_tokens - num_output_placeholders) and
    store a's first block while the prefill still writes it. Without the
    event (own-stream) the store reads the empty block, the host keys
    (p0 p1) over _ _, and c loads it; with it (own-stream-fenced) S1 is
    safe. The release does not move the verdict: the transfer model does.
    The shipped S1 (a finishes with its prefill) launches no store on
    these releases, and holds vacuously."""
    assert vllm_scheduler.FIXES["46278"][2:] == ("0.23.0", "0.24.0")
    monkeypatch.setenv(vllm_v1.ENV, str(release(version)))
    assert launched("offload-eager-store", EAGER_ASYNC) == set()
    before = api.check(s1_with_appends(tmp_path, "own-stream"))
    assert broken(before) == {"exclusive-write": 4, "refcount-write": 4, "host-key-content": 6, "faithful-output": 22}
    assert "keyed (p0 p1) but holds _ _" in before.verdicts["host-key-content"].witness["message"]
    after = api.check(s1_with_appends(tmp_path, "own-stream-fenced"))
    assert str(after.summary) == "safe but undisciplined"
    assert broken(after) == {"exclusive-write": 4, "refcount-write": 4}


# -- cowcheck bench's scheduler rows (checker/bench/scheduler.py) ----------------------------

def test_bench_rows_cover_each_connector_on_s1_s3_s5_and_split_the_time():
    """Every connector on every one of S1, S3 and S5, selected by `bench
    --only`; a row's search is the check's own, and its shares add up."""
    from cowcheck.bench.child import in_child
    from cowcheck.bench.scheduler import SCHEDULER_RUNS, measure_scheduler, row_label
    from cowcheck.bench.table import selected
    assert {(section, connector[0].split(",")[0]) for section, _, connector in SCHEDULER_RUNS} == \
        {(s, c) for s in ("S1", "S3", "S5") for c in ("P/D connector", "SimpleCPUOffload eager")}
    assert [r for r in SCHEDULER_RUNS if selected(row_label(*r), "scheduler s3 pd-consumer-abort, p/d")] == [SCHEDULER_RUNS[3]]
    row = in_child(measure_scheduler, SCHEDULER_RUNS[3])
    assert row["states"] == run("sched-vllm-pd-consumer-abort", SYNC).x.states and row["summary"] == "safe and disciplined"
    assert abs(sum(row["share"].values()) - 1) < 0.05 and row["share"]["snapshots (pickle)"] > 0


def test_the_config_is_pickled_by_reference_and_rebuilt_where_missing(monkeypatch):
    """A state's scheduler pickles its config and KVCacheConfig as a
    reference to the shape's shared ones; where they are not built yet (a
    fresh process), unpickling builds them."""
    import pickle
    adapter = vllm_scheduler.offload_eager(2, 2, 2)
    adapter.add("a", ["p0", "p1", "p2"], 0, None, None)
    blob = pickle.dumps(adapter)
    shared = vllm_scheduler.constants(adapter.shape)
    copy = pickle.loads(blob)
    assert copy.sched.vllm_config is shared.config and copy.connector.manager.vllm_config is shared.config
    assert copy.manager.kv_cache_config is shared.kv_config and copy.sched is not adapter.sched
    monkeypatch.setattr(vllm_scheduler, "_constants", {})
    fresh = pickle.loads(blob)
    assert fresh.sched.vllm_config is not shared.config and fresh.sched.vllm_config is fresh.connector.manager.vllm_config
    assert fresh.status("a") == "waiting" and b"max_num_batched_tokens" not in blob


def test_the_offloading_connector_scheduler_constructs_over_the_real_cpu_offloading_manager():
    """vLLM 0.34.0's OffloadingConnectorScheduler and CPUOffloadingManager
    run without torch with the stand-ins of STAND_INS_OFFLOADING; the
    manager has the host pool's chunks, and answers the scheduler side's
    first question (no hit on an empty host cache)."""
    connector = vllm_scheduler.offloading_connector_scheduler(2, 2, 3)
    manager = connector.manager
    assert type(manager).__name__ == "CPUOffloadingManager" and manager._num_chunks == 3
    assert type(manager).__module__ == "vllm.v1.kv_offload.cpu.manager"
    from cowcheck.adapters.vllm_core import _request
    request = _request("a", [1, 2, 3, 4, 5], 2)
    connector.on_new_request(request)
    assert connector.get_num_new_matched_tokens(request, 0)[0] in (0, None)


OFFLOADING = "cowcheck.adapters.vllm_scheduler:offloading"


@pytest.mark.parametrize("transfer", ["own-stream", "own-stream-fenced"])
def test_the_offloading_connector_agrees_with_store_ahead_but_frees_under_its_store(transfer):
    """S1 with vLLM 0.34.0's OffloadingConnector: its store is launched by
    the step that computes the block, as the protocol file store-ahead's
    is, and the safety verdicts agree on both transfer models. Where they
    differ, why: store-ahead's store holds its GPU block (refcount-write
    when the kernel writes it); the OffloadingConnector takes no hold, and
    frees a finished request's blocks under its stores (no-use-after-free),
    fencing their reuse with jobs_to_flush."""
    harness = set(broken(run("offload-eager-store", OFFLOADING, transfer=transfer)))
    protocol = protocol_broken("offload-eager-store", "store-ahead", transfer=transfer)
    assert harness == (protocol - {"refcount-write"}) | {"no-use-after-free"}


def test_the_offloading_connector_is_safe_through_its_jobs_to_flush_waits(monkeypatch):
    """b's prefill is given a's freed block while a's store still reads
    it; the step's jobs_to_flush, as the plan's waits, hold b's kernel
    until the store lands. A worker that did not wait would store b's
    tokens under a's key, and c would load them."""
    assert launched("offload-eager-store", OFFLOADING, transfer="own-stream-fenced") == {"store", "load"}
    monkeypatch.setattr(vllm_scheduler.OffloadingConnector, "waits", lambda self, meta: [])
    blind = run("offload-eager-store", OFFLOADING, transfer="own-stream-fenced")
    assert {"faithful-output", "host-key-content"} <= set(broken(blind))


OLDEST_OFFLOADING = CACHE / "vllm-0.30.0"


@pytest.mark.skipif(not (OLDEST_OFFLOADING / ".complete").is_file(), reason="vllm-0.30.0's sources are not in build/engines")
def test_the_offloading_connector_of_0_30_gives_0_34s_verdicts(monkeypatch):
    """The oldest release whose OffloadingConnectorScheduler the adapter
    drives (no sync loads, no failed_jobs): sched-vllm-offloading-flush's
    verdicts and lengths."""
    monkeypatch.setenv(vllm_v1.ENV, str(OLDEST_OFFLOADING))
    assert broken(run("offload-eager-store", OFFLOADING, transfer="own-stream-fenced")) == {"exclusive-write": 3,
                                                                                          "no-use-after-free": 4}


@pytest.mark.parametrize("name, step, kind, decoded, expected", [
    ("sched-vllm-pd-consumer-ahead-no-defer+85842240f64c.faithful-output", 10, "kernel", "q0", "p2"),
    ("sched-vllm-pd-producer-lease+85842240f64c.faithful-output", 10, "send", "x2", "p0")])
def test_a_scheduler_trace_replays_on_the_pool_and_diverges_where_the_model_does(name, step, kind, decoded, expected):
    """The real pool, driven by the plans of vLLM's own scheduler, reads
    what faithful-output says: a's kernel reads b's recv, the remote reader
    reads b's prompt."""
    from cowcheck.engines import counterexample as trace
    cx = trace.load(ROOT / "counterexamples" / f"{name}.json")
    replayed = api.replay(cx, pool="numpy")
    first = replayed.pool.first_divergence
    assert replayed.ok and (first.step, first.kind, first.decoded, first.expected) == (step, kind, decoded, expected)


# -- every release between the 45357 fix and the newest ------------------------------------

#: (scenario, factory, the invariants it breaks, with their lengths) as 0.24.0 to 0.32.0 give them
BETWEEN_VERDICTS = (
    ("sched-vllm-pd-consumer-abort", SYNC, {}),
    ("sched-vllm-pd-consumer-ahead", ASYNC, {"exclusive-write": 4}),
    ("sched-vllm-pd-consumer-ahead-no-defer", NO_DEFER, {"no-use-after-free": 3, "refcount-write": 4, "exclusive-write": 4,
                                                          "copy-before-use": 6, "faithful-output": 10}),
    ("sched-vllm-pd-producer-lease", SYNC, {"no-use-after-free": 6, "exclusive-write": 9, "faithful-output": 10}),
    ("sched-vllm-offload-eager-store", EAGER_ASYNC, {}),
    # c's local hit on p0 p1 while its host load is in flight: its own prompt's key, no stale one (as 0.33.0 and 0.34.0)
    ("sched-vllm-offload-lazy-early-key", LAZY, {}),
)


def test_0_30_drives_the_scheduler_with_its_config_stand_ins(monkeypatch):
    """0.28.0 to 0.30.0 read three more config fields (is_encoder_only,
    uses_xdrope, enable_mamba_fine_grained_prefix_cache), 0.27.0 passes
    new_token_ids to should_advance: S3 holds on 0.30.0 as on 0.34.0."""
    monkeypatch.setenv(vllm_v1.ENV, str(release("0.30.0")))
    assert str(run("sched-vllm-pd-consumer-abort", SYNC).summary) == "safe and disciplined"


@pytest.mark.slow
@pytest.mark.parametrize("version", vllm_scheduler.BETWEEN)
def test_every_release_between_gives_the_same_verdicts(monkeypatch, version):
    """0.25.0 to 0.32.0 give 0.24.0's verdicts on every shipped scheduler
    scenario, which are 0.34.0's."""
    monkeypatch.setenv(vllm_v1.ENV, str(release(version)))
    for name, ref, verdicts in BETWEEN_VERDICTS:
        assert broken(run(name, ref)) == verdicts, (version, name)


# -- failures (faults) ---------------------------------------------------------------

def failed_recv_outputs(monkeypatch, version: str) -> tuple[list, list]:
    """A consumer's three recvs, the second failed, on `version`: the
    KVConnectorOutput the P/D connector reports, and a's next kernels."""
    monkeypatch.setenv(vllm_v1.ENV, str(release(version)))
    reported = []
    report = vllm_scheduler.PDConnector.report
    monkeypatch.setattr(vllm_scheduler.PDConnector, "report",
                        lambda self, done, kind: reported.append(report(self, done, kind)) or reported[-1])
    adapter = vllm_scheduler.scheduler(3, 2, 0)
    adapter.add("a", ["p0", "p1", "p2", "p3", "p4"], 1, "remote", None)
    plan = adapter.schedule()
    adapter.output(plan, {}, [(t[0], i != 1) for i, t in enumerate(plan["transfers"])])
    return reported, adapter.schedule()["kernels"]


@pytest.mark.parametrize("version, failed_recving", [("0.34.0", {"a"}), ("0.24.0", None)])
def test_a_failed_recv_is_reported_as_nixl_does_and_the_prompt_recomputed(monkeypatch, version, failed_recving):
    """NIXL's worker: a request whose recv failed is finished_recving once
    all its recvs are done, with all its recv blocks in invalid_block_ids
    and, from 0.30.0, in failed_recving. The Scheduler then recomputes
    the whole prompt (0.34.0: failed_recving resets it; 0.24.0: the
    first invalid block is the first)."""
    (out,), kernels = failed_recv_outputs(monkeypatch, version)
    assert out.finished_recving == {"a"} and out.invalid_block_ids == {1, 2, 3}
    assert getattr(out, "failed_recving", None) == failed_recving
    assert kernels == [("a", 0, 4)]


def test_the_pd_consumer_fault_agrees_with_kv_connector():
    """S8-recv on the real Scheduler holds (its expect, which
    test_the_shipped_scenarios_meet_their_expect checks), as kv-connector
    does on the same scenario (failed-recv)."""
    assert api.as_scenario(SCENARIOS / "sched-vllm-pd-consumer-fault.toml").expect == \
        api.as_scenario(SCENARIOS / "failed-recv.toml").expect
    assert protocol_broken("sched-vllm-pd-consumer-fault", "kv-connector") == set()


def test_simple_cpu_offload_has_no_failure_path_a_failed_store_is_bad_input():
    """SimpleCPUOffload's worker reports every copy it launched as done:
    a scenario whose store fails is bad input, not a success."""
    with pytest.raises(SpecError, match=r"offload_\*.*SimpleCPUOffloadScheduler has no failure path"):
        run("offload-eager-store", EAGER, faults=("store",))


def test_the_offloading_connector_reports_a_failed_job_and_a_failed_loads_request():
    """0.34.0's OffloadingConnectorWorker: a failed job in failed_jobs, a
    failed async load's request in failed_recving; S8 is as safe as S1
    (sched-vllm-offloading-flush's verdicts), and agrees with store-ahead
    as S1 does. Without failed_recving c's kernel reads the block its
    failed load never wrote."""
    harness = broken(run("sched-vllm-offloading-fault", OFFLOADING))
    assert harness == {"exclusive-write": 3, "no-use-after-free": 4}
    protocol = protocol_broken("sched-vllm-offloading-fault", "store-ahead")
    assert set(harness) == (protocol - {"refcount-write"}) | {"no-use-after-free"}


def test_without_failed_recving_the_offloading_connector_runs_on_a_failed_load(monkeypatch):
    report = vllm_scheduler.OffloadingConnector.report

    def blind(self, done, kind):
        out = report(self, done, kind)
        out.failed_recving = set()
        return out
    monkeypatch.setattr(vllm_scheduler.OffloadingConnector, "report", blind)
    assert "faithful-output" in broken(run("sched-vllm-offloading-fault", OFFLOADING))


def test_the_offloading_connector_of_0_30_has_no_failure_path(monkeypatch):
    """Before 0.34 the worker asserts every transfer succeeded."""
    monkeypatch.setenv(vllm_v1.ENV, str(release("0.30.0")))
    with pytest.raises(SpecError, match="0.30.0's OffloadingConnector has no failure path"):
        run("sched-vllm-offloading-fault", OFFLOADING)


def test_vllms_own_warnings_stay_off_the_checkers_output(tmp_path):
    """The OffloadingConnector warns on every failed job, and the harness
    fails jobs in thousands of states: vLLM's loggers are a library's
    (a NullHandler), so `cowcheck check -q` prints nothing but its line."""
    import shutil
    import subprocess
    import sys
    exe = shutil.which("cowcheck", path=str(Path(sys.executable).parent)) or "cowcheck"
    done = subprocess.run([exe, "check", str(SCENARIOS / "sched-vllm-offloading-fault.toml"), "-q", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-500:]
    assert len(done.stdout.strip().splitlines()) == 1
