"""What cowcheck finds in the real engines through the engine harness
(docs/how-to/vllm-sglang.md): vLLM V1's KVCacheManager on the
shipped V1-style scenarios (specs/scenarios/prefix-code*.toml, run with
`--allocator cowcheck.adapters.vllm_v1:make`), SGLang's RadixCache on the
B = 1 ones (prefix-code-b1*.toml, `--allocator cowcheck.adapters.sglang:make`),
on every tested release, fetched as in tests/test_adapters_releases.py.

The shipped files name the V1-style pool (specs/allocators/prefix.py) as
their allocator, so `cowcheck check specs/` runs them on a machine without
any engine; the real engines are the override."""

from __future__ import annotations

import pickle
import tomllib
from pathlib import Path

import pytest

from cowcheck import api
from cowcheck.adapters import sglang, vllm_v1
from cowcheck.model.scenario import scenario_from_dict

from test_adapters_releases import sglang_source, vllm_source  # noqa: F401  (the fixtures that fetch each release)

SCENARIOS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
SAFE, UNDISCIPLINED, UNSAFE = "safe and disciplined", "safe but undisciplined", "unsafe"

#: V1, every tested and sampled release alike (vllm_v1.TESTED, .SAMPLED: 0.9.1 to 0.34.0; the releases
#: differ in where block hashes live and how drafts are kept from the cache, not in what reaches a
#: block): scenario -> (summary, shortest length of each violated invariant)
V1_FINDINGS = {
    # two requests with one prompt: the second maps the first's prompt block, keyed at admission, before its fill lands
    "prefix-code": (UNDISCIPLINED, {"exclusive-write": 3, "refcount-write": 3}),
    "prefix-code-async": (UNSAFE, {"faithful-output": 3, "exclusive-write": 3, "refcount-write": 3}),
    # a warm cache: two requests, then two more after them whose prompts share one block
    "prefix-code-warm": (UNDISCIPLINED, {"exclusive-write": 3, "refcount-write": 3}),
    "prefix-code-warm-async": (UNSAFE, {"faithful-output": 3, "exclusive-write": 3, "refcount-write": 3}),
    # a request cancelled in flight: V1 frees its blocks at once, the next request is handed one the kernel still writes
    "prefix-code-cancel-in-flight-stream": (UNDISCIPLINED, {"no-use-after-free": 4, "refcount-write": 5, "exclusive-write": 6,
                                                            "cache-immutable": 6}),
    "prefix-code-cancel-in-flight": (UNSAFE, {"no-use-after-free": 4, "refcount-write": 5, "exclusive-write": 6,
                                              "cache-immutable": 6, "faithful-output": 7}),
    # a speculation whose drafts fill a block, then a request that continues the accepted output: drafts are never keyed
    "prefix-code-speculate": (SAFE, {}),
    "prefix-code-speculate-async": (SAFE, {}),
    # a tight pool: one request waits for the other, then evicts its cached blocks
    "prefix-code-tight-pool": (SAFE, {}),
    "prefix-code-tight-pool-async": (SAFE, {}),
}

#: SGLang 0.5.23 (page size 1: B = 1): scenario -> (summary, shortest lengths)
SGLANG_FINDINGS = {
    # nothing is inserted into the tree before a request finishes: two requests with one prompt never share
    "prefix-code-b1": (SAFE, {}),
    "prefix-code-b1-async": (SAFE, {}),
    "prefix-code-b1-warm": (SAFE, {}),
    "prefix-code-b1-warm-async": (SAFE, {}),
    # finishing a cancelled request in flight unlocks its slots (evictable) and inserts its in-flight token
    "prefix-code-b1-cancel-in-flight": (UNSAFE, {"no-use-after-free": 4, "exclusive-write": 6, "faithful-output": 7,
                                                 "cache-immutable": 10}),
}

#: SGLang 0.5.23 with page size 2 (B = 2: its PagedTokenToKVPoolAllocator) on the shipped V1-style B = 2 scenarios
SGLANG_B2_FINDINGS = {
    # two requests with one prompt, and a warm cache whose later requests hit a whole page: nothing is shared before it is filled
    "prefix-code": (SAFE, {}),
    "prefix-code-async": (SAFE, {}),
    "prefix-code-warm": (SAFE, {}),
    "prefix-code-warm-async": (SAFE, {}),
    # a request cancelled in flight (pool 2): its pages are unlocked, or freed, while its kernel still writes one
    "prefix-code-cancel-in-flight-stream": (UNDISCIPLINED, {"no-use-after-free": 4, "exclusive-write": 6}),
    "prefix-code-cancel-in-flight": (UNSAFE, {"no-use-after-free": 4, "exclusive-write": 6, "faithful-output": 7,
                                              "cache-immutable": 10}),
}


def findings(result) -> tuple[str, dict[str, int]]:
    return str(result.summary), {k: v.length for k, v in result.verdicts.items() if v.length is not None}


@pytest.fixture
def v1(vllm_source, monkeypatch):  # noqa: F811
    monkeypatch.setenv(vllm_v1.ENV, vllm_source)
    return vllm_source


@pytest.fixture
def sg(sglang_source, monkeypatch):  # noqa: F811
    monkeypatch.setenv(sglang.ENV, sglang_source)
    return sglang_source


@pytest.mark.parametrize("name", V1_FINDINGS)
def test_what_cowcheck_finds_in_v1(v1, name):
    assert findings(api.check(SCENARIOS / f"{name}.toml", allocator=vllm_v1.REF)) == V1_FINDINGS[name]


@pytest.mark.parametrize("name", V1_FINDINGS)
def test_the_shipped_v1_style_pool_finds_the_same(name):
    """The shipped pool, written the way V1 writes its block pool, breaks the same invariants at the same lengths."""
    assert findings(api.check(SCENARIOS / f"{name}.toml")) == V1_FINDINGS[name]


def test_counterexamples_name_the_engine_release(v1, sg):
    """A counterexample found in an engine's own code says which release:
    the one whose sources the adapter loaded (its _version.py)."""
    from cowcheck.adapters.sources import release
    found = api.check(SCENARIOS / "prefix-code-async.toml", allocator=vllm_v1.REF).verdicts["faithful-output"].counterexample
    assert found.allocator_version == f"vLLM {release(Path(v1), 'vllm')}" and "unknown" not in found.allocator_version
    found = api.check(SCENARIOS / "prefix-code-b1-async.toml", allocator=sglang.REF).peak_trace
    assert found.allocator_version == f"SGLang {release(Path(sg), 'sglang')}" and "unknown" not in found.allocator_version


def test_which_invariant_shows_each_of_v1s_design_choices(v1):
    # keys before the fill lands: on one stream nothing wrong is computed, the discipline invariants break
    stream = api.check(SCENARIOS / "prefix-code.toml", allocator=vllm_v1.REF)
    assert str(stream.summary) == UNDISCIPLINED and stream.verdicts["faithful-output"].holds
    assert {"exclusive-write", "refcount-write"} <= findings(stream)[1].keys()
    # ... and on an asynchronous device the second request reads the block before its fill: wrong output
    assert api.check(SCENARIOS / "prefix-code-async.toml", allocator=vllm_v1.REF).verdicts["faithful-output"].length == 3
    # frees blocks a kernel still writes: no-use-after-free first, and on one stream nothing worse
    cancel = api.check(SCENARIOS / "prefix-code-cancel-in-flight-stream.toml", allocator=vllm_v1.REF)
    assert min(findings(cancel)[1].items(), key=lambda kv: kv[1]) == ("no-use-after-free", 4)
    assert cancel.verdicts["faithful-output"].holds


@pytest.mark.parametrize("name", ["prefix-code-warm-async", "prefix-code-cancel-in-flight"])
def test_v1s_canonical_snapshot_merges_states_and_changes_no_verdict(v1, name):
    canonical = api.check(SCENARIOS / f"{name}.toml", allocator=vllm_v1.REF)
    exact = api.check(SCENARIOS / f"{name}.toml", allocator="cowcheck.adapters.vllm_v1:make_exact")
    assert findings(canonical) == findings(exact)
    assert canonical.x.states <= exact.x.states


def test_v1_snapshot_ignores_dict_order(v1):
    """Two paths to one allocation state: dicts filled in another order pickle differently, snapshot alike."""
    one, two = vllm_v1.make(6, 2), vllm_v1.make(6, 2)
    one.admit("a", ["p0", "p1", "p2"])
    one.admit("b", ["p0", "p1", "p2"])
    two.admit("a", ["p0", "p1", "p2"])
    two.admit("b", ["p0", "p1", "p2"])
    one.key_tokens = dict(reversed(one.key_tokens.items()))
    one.requests = dict(reversed(one.requests.items()))
    assert one.snapshot() == two.snapshot()
    two.append("a", "a1", False)
    assert one.snapshot() != two.snapshot()


@pytest.mark.parametrize("name", SGLANG_FINDINGS)
def test_what_cowcheck_finds_in_sglang(sg, name):
    result = api.check(SCENARIOS / f"{name}.toml", allocator=sglang.REF)
    assert findings(result) == SGLANG_FINDINGS[name]
    assert "refcount" in (result.verdicts["refcount-exact"].note or "")  # SGLang keeps no count per slot


@pytest.mark.parametrize("name", SGLANG_B2_FINDINGS)
def test_what_cowcheck_finds_in_sglang_with_pages_of_two(sg, name):
    result = api.check(SCENARIOS / f"{name}.toml", allocator=sglang.REF)
    assert result.scenario.block_size == 2 and findings(result) == SGLANG_B2_FINDINGS[name]
    if name.startswith("prefix-code-warm"):
        assert result.x.hits_range[1] >= 2  # the later requests hit the first requests' whole page


def test_sglang_cancel_in_flight_on_one_stream(sg):
    """SGLang frees an aborted request at the next result processing, with a
    later forward of it in flight under its overlap scheduler: on one
    stream nothing wrong is computed, the discipline breaks (B = 1 here; B
    = 2 above)."""
    data = tomllib.loads((SCENARIOS / "prefix-code-b1-cancel-in-flight.toml").read_text())
    data.pop("expect")
    data["device"] = "stream"
    result = api.check(scenario_from_dict(data, "<b1 cancel in flight, stream>", SCENARIOS, "b1-cancel-stream"),
                       allocator=sglang.REF)
    assert findings(result) == (UNDISCIPLINED, {"no-use-after-free": 4})


def _sglang_run() -> sglang.SGLang:
    adapter = sglang.make(6, 1)
    adapter.admit("a", ["p0", "p1"])
    adapter.append("a", "a1", False)
    adapter.free("a")
    adapter.admit("b", ["p0", "p1", "b0"])
    return adapter


def test_sglang_states_are_deterministic_and_canonical(sg):
    """The logical clock and the node counter live in the adapter: the same
    calls give the same pickle (trace rebuilding replays them), and the
    snapshot holds no timestamps or node ids, only their order."""
    one = _sglang_run()
    sglang.LogicalTime.now += 1000  # another path's clock, elsewhere in the process
    two = _sglang_run()
    assert pickle.dumps(one) == pickle.dumps(two) and one.snapshot() == two.snapshot()
    assert one.clock > 0 and isinstance(one.tree.root_node.children[next(iter(one.tree.root_node.children))].last_access_time, float)
    import time
    assert time.monotonic is not sglang.LogicalTime.monotonic  # the process's own clock is untouched
    copy = pickle.loads(pickle.dumps(one))
    copy.append("b", "b1", False)
    assert copy.snapshot() != one.snapshot() and pickle.loads(pickle.dumps(copy)).snapshot() == copy.snapshot()


def test_sglang_counts_unlocked_tree_slots_as_free(sg):
    adapter = sglang.make(4, 1)
    adapter.admit("a", ["p0", "p1"])
    assert adapter.free_blocks() == [2, 3]
    adapter.free("a")  # inserted into the tree, unlocked: evictable
    assert sorted(adapter.free_blocks()) == [0, 1, 2, 3] and set(adapter.cached()) == {0, 1}


# -- cowcheck bench's rows for prefix caching through the harness ---------------------

def _bench_row(allocator: str) -> dict:
    from cowcheck.bench.child import in_child
    from cowcheck.bench.table import _measure_cache_harness
    row = in_child(_measure_cache_harness, ("prefix-cache B=2 warm cache, pool 6", allocator))
    assert row is not None
    return row


def test_bench_splits_the_time_of_the_shipped_pool():
    row = _bench_row("cowcheck.specs.allocators.prefix:correct")
    assert row["states"] == 1263 and row["summary"] == UNSAFE
    assert set(row["share"]) == {"allocator calls", "snapshots (pickle)", "harness bookkeeping", "invariants", "search and hashing"}
    assert 0.9 <= sum(row["share"].values()) <= 1.1 and row["share"]["allocator calls"] > 0
    assert row["without_memo"]["same"] and row["without_memo"]["states"] == 1263     # the memo changes nothing but time


def test_bench_runs_v1_canonically_or_says_why_not(v1, tmp_path, monkeypatch):
    row = _bench_row(vllm_v1.REF)
    assert row["states"] == 575 and row["share"]["allocator calls"] > 0 and row["share"]["snapshots (pickle)"] > 0
    monkeypatch.setenv(vllm_v1.ENV, str(tmp_path))
    assert "holds no vllm/v1/core/block_pool.py" in _bench_row(vllm_v1.REF)["skipped"]
