"""Hugging Face transformers' continuous batching cache through the engine
harness (cowcheck.adapters.transformers): its own `cache_allocators/`
ledger and pool, driven by its own `PagedAttentionCache` fork, prefix-match,
complete (hash and de-duplicate) and evict methods, run without torch.

The shipped fork scenarios (engine-code*.toml) and cache scenarios
(prefix-code*.toml), on one stream and on an asynchronous device, on each
tested release (`transformers.TESTED`, fetched as tests/test_adapters_releases.py
fetches vLLM); and one planted bug per class, each found: a fork that
shares the partial tail, a fork whose copy is skipped, a release that
leaks, a de-duplication that adopts a block without a reference, an
eviction that keeps the hash."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from cowcheck import api
from cowcheck.adapters import transformers
from cowcheck.adapters.sources import CACHE
from cowcheck.model.errors import SpecError

from test_adapters_releases import _fetch, _releases

SCENARIOS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
SAFE, UNDISCIPLINED, UNSAFE = "safe and disciplined", "safe but undisciplined", "unsafe"
CA = "transformers.generation.continuous_batching.cache_allocators.cache_allocator"
NEWEST = CACHE / f"transformers-{transformers.TESTED[-1]}"

#: every tested release alike: scenario -> (summary, shortest length of each violated invariant)
FINDINGS = {
    # forks: full blocks shared, the tail copied before the next forward; one stream keeps everything
    "engine-code": (SAFE, {}),
    "engine-code-fork-no-tail-incref": (SAFE, {}),
    # ... an asynchronous device runs a later step's kernel before the fork's copy (transformers has one compute stream)
    "engine-code-async": (UNSAFE, {"faithful-output": 3, "exclusive-write": 3, "no-use-after-free": 6, "copy-before-use": 3}),
    # two requests fill one prompt block each; the second update de-duplicates and frees the block the first
    # request's next step, launched before that update (async batching), still maps: harmless on one stream ...
    "prefix-code": (UNDISCIPLINED, {"no-use-after-free": 7}),
    "prefix-code-async": (UNDISCIPLINED, {"no-use-after-free": 7}),
    # ... wrong output where the freed block is written again before that step reads it (B = 1, async)
    "prefix-code-b1-async": (UNSAFE, {"faithful-output": 10, "exclusive-write": 9, "no-use-after-free": 7}),
    # a request cancelled in flight: its blocks go back to the pool while its kernel still writes one
    "prefix-code-cancel-in-flight-stream": (UNDISCIPLINED, {"exclusive-write": 6, "refcount-write": 5, "no-use-after-free": 4}),
    "prefix-code-cancel-in-flight": (UNSAFE, {"faithful-output": 7, "exclusive-write": 6, "refcount-write": 5,
                                              "no-use-after-free": 4, "cache-immutable": 8}),
    # hits, eviction under pressure, a tight pool
    "prefix-code-b1-warm": (SAFE, {}),
    "prefix-code-pressure": (SAFE, {}),
    "prefix-code-b1-pressure": (UNSAFE, {"no-deadlock": 13}),
    "prefix-code-tight-pool": (SAFE, {}),
}


@pytest.fixture(scope="session", params=_releases("transformers", transformers.TESTED))
def transformers_source(request) -> str:
    return _fetch("transformers", request.param)


@pytest.fixture
def hf(transformers_source, monkeypatch):
    monkeypatch.setenv(transformers.ENV, transformers_source)
    return transformers_source


def findings(result) -> tuple[str, dict[str, int]]:
    return str(result.summary), {k: v.length for k, v in result.verdicts.items() if v.length is not None}


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("name", FINDINGS)
def test_what_cowcheck_finds_in_transformers(hf, name):
    assert findings(api.check(SCENARIOS / f"{name}.toml", allocator=transformers.REF)) == FINDINGS[name]


def test_fork_shares_full_blocks_and_copies_the_tail(hf):
    a = transformers.Transformers(6, 2, hf)
    a.start(["a"], 3)
    full, tail = a.table("a")
    assert a.cached() == {full: ("p0", "p1")}              # the prompt's full block hashed
    a.fork("a", "b")
    child_tail = a.table("b")[1]
    assert a.table("b") == [full, child_tail] and child_tail != tail
    assert a.refcount(full) == 2 and a.refcount(tail) == 1 and a.refcount(child_tail) == 1
    assert a.append("a", "a1") == [(tail, child_tail)]    # the fork's copy, before the next forward
    assert a.append("b", "b1") == []
    assert a.cached() == {full: ("p0", "p1")}              # nothing is hashed before the forward's update ...
    a.kernel_done("a")
    assert a.cached() == {full: ("p0", "p1"), tail: ("p2", "a1")}  # ... which hashes the block it completed
    a.free("a")
    a.free("b")
    assert a.refcount(full) == 0 and full in a.free_blocks() and full in a.cached()   # unreferenced, kept cached


def test_prefix_hit_dedupe_and_eviction(hf):
    a = transformers.Transformers(4, 2, hf)
    assert a.admit("a", ["p0", "p1", "p2"]) == 0
    assert a.admit("b", ["p0", "p1", "x"]) == 0     # a's block is not hashed yet: no hit
    a.kernel_done("a")
    a.kernel_done("b")                              # b's duplicate of [p0 p1] is replaced by a's block and freed
    assert a.table("b")[0] == a.table("a")[0] and a.refcount(a.table("a")[0]) == 2
    a.free("a")
    a.free("b")
    assert a.admit("c", ["p0", "p1", "q"]) == 2     # a hit on the cached block
    a.free("c")
    assert a.admit("d", [f"y{i}" for i in range(7)]) == 0   # needs all four blocks: the cache is evicted
    assert a.cached() == {} and a.free_blocks() == []


def test_states_pickle_and_snapshot_ignores_clocks(hf):
    a = transformers.Transformers(4, 2, hf)
    a.start(["a"], 3)
    b = pickle.loads(pickle.dumps(a))
    assert b.snapshot() == a.snapshot() and b.version() == f"transformers {Path(hf).name.split('-')[1]}"


def test_speculation_is_refused(hf):
    a = transformers.Transformers(4, 2, hf)
    a.start(["a"], 3)
    with pytest.raises(SpecError, match="no speculative decoding"):
        a.rollback("a", 1)


def test_a_folder_without_the_allocators_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(transformers.ENV, str(tmp_path))
    with pytest.raises(SpecError, match="cache_allocators"):
        transformers.make(4, 2)


# -- planted bugs, one per class ---------------------------------------------------

def _tail_shared_at_fork(mods):
    """A fork shares the partial tail too."""
    return mods[CA].CacheAllocator, "count_shareable_blocks", lambda self, src, past: len(self.block_table[src])


def _copy_skipped(mods):
    """A fork backs the tail with a fresh block but asks for no copy."""
    fork = mods[CA].CacheAllocator.fork_blocks

    def fork_blocks(self, src, dst, past):
        fork(self, src, dst, past)
        return [], []
    return mods[CA].CacheAllocator, "fork_blocks", fork_blocks


def _leak(mods):
    """A released block never goes back to the pool."""
    release = mods[CA].BlockLedger.release

    def leaky(self, block_id, no_cache=False):
        release(self, block_id, no_cache)
        return False
    return mods[CA].BlockLedger, "release", leaky


def _dedupe_without_reference(mods):
    """De-duplication adopts the existing block without acquiring it."""
    compute = mods[CA].compute_block_hash

    def mark(self, request_id, token_ids, new_new_blocks):
        table, parent = self.block_table[request_id], None
        for i, bid in enumerate(table):
            h = self.ledger.block_to_hash.get(bid)
            if h is None:
                tokens = token_ids[i * self.tokens_per_page:(i + 1) * self.tokens_per_page]
                if new_new_blocks == 0 or len(tokens) < self.tokens_per_page:
                    break
                h = compute(parent, tokens)
                new_new_blocks -= 1
                same = self.ledger.register_new_hash(bid, h)
                if same is not None:
                    table[i] = same
                    if self.ledger.release(bid):
                        self.pool.free_blocks(self.index, [bid])
            parent = h
    return mods[CA].CacheAllocator, "mark_complete_blocks", mark


def _eviction_keeps_hash(mods):
    """Eviction gives the cached blocks back but keeps their hashes."""
    def evict(self):
        out = list(self.cached_blocks)
        self.cached_blocks.clear()
        return out
    return mods[CA].BlockLedger, "evict_cached_blocks", evict


#: each planted bug -> (scenario, an invariant it newly breaks there)
PLANTED = {
    _tail_shared_at_fork: ("engine-code", "exclusive-write"),
    _copy_skipped: ("engine-code", "faithful-output"),
    _leak: ("engine-code", "no-leak"),
    _dedupe_without_reference: ("prefix-code", "refcount-exact"),
    _eviction_keeps_hash: ("prefix-code-tight-pool", "no-stale-key"),
}


@pytest.mark.skipif(not (NEWEST / ".complete").is_file(), reason=f"{NEWEST.name}'s sources are not in build/engines")
@pytest.mark.parametrize("plant", PLANTED, ids=lambda f: f.__name__.strip("_"))
def test_each_planted_bug_is_found(plant, monkeypatch):
    monkeypatch.setenv(transformers.ENV, str(NEWEST))
    name, invariant = PLANTED[plant]
    clean = findings(api.check(SCENARIOS / f"{name}.toml", allocator=transformers.REF))[1]
    assert invariant not in clean
    monkeypatch.setattr(*plant(transformers.engine(str(NEWEST))))
    assert invariant in findings(api.check(SCENARIOS / f"{name}.toml", allocator=transformers.REF))[1]
