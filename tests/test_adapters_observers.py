"""The real-engine adapters on the bugs they exist to find (issue 34, item
8): an adapter's observers describe whatever the engine does, bugs
included; a dependency of the engine's that is not installed is one line;
and the shipped pressure scenarios (specs/scenarios/prefix-code*-pressure*.toml)
find each planted bug class in vLLM V1 and SGLang.

Each bug is planted in the engine's own loaded module (monkeypatch, undone
after the test), or in a patched copy of its source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cowcheck import api
from cowcheck.adapters import sglang, vllm_v1
from cowcheck.adapters.sources import CACHE

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"
VLLM = {v: CACHE / f"vllm-{v}" for v in ("0.9.1", "0.34.0")}
SGLANG = CACHE / "sglang-0.5.23"
RADIX = "sglang.srt.mem_cache.radix_cache"
POOL = "vllm.v1.core.block_pool"


def _have(path: Path):
    return pytest.mark.skipif(not (path / ".complete").is_file(), reason=f"{path.name}'s sources are not in build/engines")


def findings(result) -> dict[str, int]:
    return {k: v.length for k, v in result.verdicts.items() if v.length is not None}


# -- vLLM V1: a tree that keys drafts --------------------------------------------

def drafts_keyed(tree: Path) -> Path:
    """A copy of a vLLM release whose prefix cache keys a block that holds
    drafts (SGLang 24590's bug, in V1): the block hasher and the cache
    count the request's spec tokens as its own."""
    shutil.copytree(VLLM["0.34.0"], tree)

    def edit(rel: str, old: str, new: str) -> None:
        path = tree / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, 1))
    edit("vllm/v1/core/kv_cache_utils.py", "num_tokens = request.num_tokens - num_hash_lookahead_tokens",
         "num_tokens = request.num_tokens_with_spec - num_hash_lookahead_tokens")
    edit("vllm/v1/core/kv_cache_utils.py", "request._all_token_ids, start_token_idx, end_token_idx",
         "list(request._all_token_ids) + list(request.spec_token_ids), start_token_idx, end_token_idx")
    edit("vllm/v1/core/kv_cache_manager.py",
         "            request.num_tokens,\n        )\n        self.coordinator.cache_blocks(request, num_tokens_to_cache)",
         "            request.num_tokens_with_spec,\n        )\n        request.update_block_hashes()\n"
         "        self.coordinator.cache_blocks(request, num_tokens_to_cache)")
    return tree


@_have(VLLM["0.34.0"])
def test_v1s_cached_describes_a_key_that_covers_drafts(tmp_path, monkeypatch):
    """The key's tokens are the drafts it hashed: cached() names them, and
    the check reports verified-only-cached, not a shape error of the
    adapter's own (exit 2)."""
    monkeypatch.setenv(vllm_v1.ENV, str(drafts_keyed(tmp_path / "vllm")))
    adapter = vllm_v1.make(4, 2)
    adapter.admit("a", ["p0", "p1"])
    adapter.append("a", "a1", True)
    adapter.append("a", "a2", True)
    assert ("a1", "a2") in adapter.cached().values()
    adapter.rollback("a", 2)  # both rejected: the key stays, and still names them
    assert ("a1", "a2") in adapter.cached().values()
    found = findings(api.check(SCENARIOS / "prefix-code-cache-drafts.toml", allocator=vllm_v1.REF))
    assert "verified-only-cached" in found and "allocator-error" not in found


@_have(VLLM["0.34.0"])
def test_v1s_cached_names_unknown_tokens_for_a_key_no_request_hashed(monkeypatch):
    """From 0.11.0 a key is bare bytes: its tokens are learned from the
    request that hashed it. A key nobody hashed is described with
    unknown tokens (which no content matches), not a KeyError."""
    monkeypatch.setenv(vllm_v1.ENV, str(VLLM["0.34.0"]))
    adapter = vllm_v1.make(4, 2)
    adapter.admit("a", ["p0", "p1"])
    assert ("p0", "p1") in adapter.cached().values()
    adapter.key_tokens.clear()          # as if the key came from nowhere
    assert set(adapter.cached().values()) == {(vllm_v1.UNKNOWN,) * 2}


# -- a dependency of the engine's that is not installed ---------------------------

HIDE = textwrap.dedent("""
    import sys
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "typing_extensions":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.modules.pop("typing_extensions", None)
    sys.meta_path.insert(0, Hide())
    if sys.argv[1] == "no-stand-in":
        from cowcheck.adapters import vllm_v1
        del vllm_v1.STAND_INS["typing_extensions"]
    from cowcheck.cli import main
    main(sys.argv[2:])
""")


def _hidden(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, vllm_v1.ENV: str(VLLM["0.9.1"])}
    return subprocess.run([sys.executable, "-c", HIDE, mode, "check", str(SCENARIOS / "prefix-code.toml"), "--allocator",
                           vllm_v1.REF, "--out", str(tmp_path / "cx")], capture_output=True, text=True, env=env, cwd=ROOT)


@_have(VLLM["0.9.1"])
def test_an_engine_module_imported_for_typing_only_has_a_stand_in(tmp_path):
    """vLLM 0.9.1's kv_cache_interface.py takes Self from typing_extensions,
    for annotations: without it installed the check runs."""
    done = _hidden(tmp_path, "stand-in")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "safe but undisciplined" in done.stdout


@_have(VLLM["0.9.1"])
def test_a_missing_engine_dependency_is_one_line(tmp_path):
    """Without a stand-in, the module the engine imports and what to install, in one line, exit 2."""
    done = _hidden(tmp_path, "no-stand-in")
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "vllm/v1/kv_cache_interface.py imports typing_extensions, which is not installed: pip install typing-extensions" \
        in lines[0]


# -- planted bugs, found by the pressure scenarios ----------------------------------

PRESSURE = ("prefix-code-pressure", "prefix-code-pressure-cancel", "prefix-code-b1-pressure", "prefix-code-b1-pressure-cancel")


def _sg_locked_leaf_evictable(mods) -> tuple:
    """A locked leaf stays an eviction candidate (the leaf status ignores lock_ref)."""
    def update(self, node):
        if node.evicted or any(not c.evicted for c in node.children.values()):
            self.evictable_leaves.discard(node)
            return
        self.evictable_leaves.add(node)
    return mods[RADIX].RadixCache, "_update_leaf_status", update


def _sg_evicted_node_stays(mods) -> tuple:
    """Eviction frees a leaf's slots but leaves it in the tree (a stale key)."""
    return mods[RADIX].RadixCache, "_delete_leaf", lambda self, node: self.evictable_leaves.discard(node)


def _v1_touched_block_stays_free(mods) -> tuple:
    """A hit's block gains a reference but stays in the free queue (evictable while held)."""
    def touch(self, blocks):
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1
    return mods[POOL].BlockPool, "touch", touch


def _v1_evicted_block_keeps_key(mods) -> tuple:
    """A cached block handed out again keeps its key (a stale key)."""
    return mods[POOL].BlockPool, "_maybe_evict_cached_block", lambda self, block: False


def _v1_free_drops_a_shared_reference(mods) -> tuple:
    """Freeing a request takes one reference too many from a block it shares."""
    free = mods[POOL].BlockPool.free_blocks

    def free_blocks(self, blocks, *args, **kwargs):
        blocks = list(blocks)
        for block in blocks:
            if block.ref_cnt > 1:
                block.ref_cnt -= 1
        return free(self, blocks, *args, **kwargs)
    return mods[POOL].BlockPool, "free_blocks", free_blocks


SGLANG_BUGS = [_sg_locked_leaf_evictable, _sg_evicted_node_stays]
V1_BUGS = [_v1_touched_block_stays_free, _v1_evicted_block_keeps_key, _v1_free_drops_a_shared_reference]


def _new_findings(ref: str, plant, mods, monkeypatch) -> dict[str, set[str]]:
    """Per pressure scenario, what the planted engine breaks that the engine as released does not."""
    clean = {name: findings(api.check(SCENARIOS / f"{name}.toml", allocator=ref)) for name in PRESSURE}
    monkeypatch.setattr(*plant(mods))
    planted = {name: findings(api.check(SCENARIOS / f"{name}.toml", allocator=ref)) for name in PRESSURE}
    return {name: set(planted[name]) - set(clean[name]) for name in PRESSURE}


@_have(SGLANG)
@pytest.mark.parametrize("plant", SGLANG_BUGS, ids=lambda f: f.__name__.strip("_"))
def test_the_pressure_scenarios_find_each_planted_sglang_bug(plant, monkeypatch):
    monkeypatch.setenv(sglang.ENV, str(SGLANG))
    new = _new_findings(sglang.REF, plant, sglang.engine(str(SGLANG)), monkeypatch)
    assert any(new.values()), new
    if plant is _sg_locked_leaf_evictable:  # the bug: a warm hit under eviction pressure, B = 1 and B = 2
        assert "faithful-output" in new["prefix-code-b1-pressure"] and "faithful-output" in new["prefix-code-pressure"]


@_have(VLLM["0.34.0"])
@pytest.mark.parametrize("plant", V1_BUGS, ids=lambda f: f.__name__.strip("_"))
def test_the_pressure_scenarios_find_each_planted_v1_bug(plant, monkeypatch):
    monkeypatch.setenv(vllm_v1.ENV, str(VLLM["0.34.0"]))
    new = _new_findings(vllm_v1.REF, plant, vllm_v1.engine(str(VLLM["0.34.0"])).mods, monkeypatch)
    assert any(new.values()), new


def test_without_cancels_the_shipped_pool_keeps_every_invariant_under_pressure_but_progress():
    """B = 2 (pool 3) holds; B = 1 (pool 5) only deadlocks, as the harness never preempts: any other finding is a bug."""
    assert findings(api.check(SCENARIOS / "prefix-code-pressure.toml")) == {}
    assert set(findings(api.check(SCENARIOS / "prefix-code-b1-pressure.toml"))) == {"no-deadlock"}
