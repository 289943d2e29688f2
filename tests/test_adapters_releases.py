"""The real-engine adapters (cowcheck.adapters.vllm_v1, .sglang), called as
the harness calls them, on each tested release's own sources.

Each release is fetched once (pip download of the wheel, its .py files kept
in build/engines/, git-ignored); a test that needs a download is marked
slow, and skips with pip's reason where the registry is unreachable.

The vLLM releases: `vllm_v1.TESTED` (fetched if missing), the ones of
`vllm_v1.SAMPLED` already in the cache, and those named in
$COWCHECK_VLLM_RELEASES (spaces or commas; fetched if missing): how a reader
checks any other release,

    COWCHECK_VLLM_RELEASES=0.18.1 python -m pytest tests/test_adapters_releases.py tests/test_adapters_findings.py -k vllm-0.18.1
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

from cowcheck.adapters import sources, sglang, vllm_core, vllm_v1
from cowcheck.model.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent


def _cached(package: str, version: str) -> bool:
    return (sources.CACHE / f"{package}-{version}" / ".complete").is_file()


def _vllm_releases() -> tuple[str, ...]:
    """TESTED, the SAMPLED ones in the cache, and $COWCHECK_VLLM_RELEASES."""
    named = tuple(os.environ.get("COWCHECK_VLLM_RELEASES", "").replace(",", " ").split())
    wanted = vllm_v1.TESTED + tuple(v for v in vllm_v1.SAMPLED if _cached("vllm", v)) + named
    return tuple(dict.fromkeys(wanted))


def _releases(package: str, versions: tuple[str, ...]) -> list:
    """One param per release: slow where it is not in the cache yet."""
    return [pytest.param(v, id=f"{package}-{v}",
                         marks=[] if _cached(package, v) else [pytest.mark.slow])
            for v in versions]


def _fetch(package: str, version: str) -> str:
    try:
        return str(sources.fetch(package, version))
    except sources.FetchError as err:
        pytest.skip(f"{package} {version} could not be fetched: {err}")


@pytest.fixture(scope="session", params=_releases("vllm", _vllm_releases()))
def vllm_source(request) -> str:
    return _fetch("vllm", request.param)


@pytest.fixture(scope="session", params=_releases("sglang", sglang.TESTED))
def sglang_source(request) -> str:
    return _fetch("sglang", request.param)


def _pool_view(adapter: vllm_v1.VllmV1) -> tuple[list[int], list[int]]:
    """Ref counts and the free queue read straight from V1's block pool."""
    pool = adapter.manager.block_pool
    return ([b.ref_cnt for b in pool.blocks], [b.block_id for b in pool.free_block_queue.get_all_free_blocks()])


def _two_requests(source: str) -> vllm_v1.VllmV1:
    """The report's scenario: B = 2, P = 5, two requests with prompt p0 p1 p2."""
    adapter = vllm_v1.VllmV1(5, 2, source)
    assert adapter.admit("a", ["p0", "p1", "p2"]) == 0
    assert adapter.admit("b", ["p0", "p1", "p2"]) == 2  # the second request hits a's first block
    return adapter


def test_v1_second_request_hits_the_cache(vllm_source):
    adapter = _two_requests(vllm_source)
    assert vllm_v1._engine.version == Path(vllm_source).name.split("-")[1]
    assert adapter.table("a") == [0, 1] and adapter.table("b") == [0, 2]
    assert [adapter.refcount(b) for b in range(5)] == [2, 1, 1, 0, 0]
    assert adapter.free_blocks() == [3, 4]
    # keyed at admission, before any prefill has run: V1's schedule-time keys
    assert adapter.cached() == {0: ("p0", "p1")}


def test_v1_decode_speculation_rejection_free(vllm_source):
    adapter = _two_requests(vllm_source)
    assert adapter.append("a", "a1", False) == [] and adapter.append("b", "b1", False) == []
    assert adapter.cached() == {0: ("p0", "p1"), 1: ("p2", "a1"), 2: ("p2", "b1")}
    adapter.append("a", "a2", True)
    adapter.append("a", "a3", True)
    request = adapter.requests["a"]
    assert adapter.table("a") == [0, 1, 3]
    assert len(request.all_token_ids) == 4 and len(request.spec_token_ids) == 2  # drafts never verified tokens
    assert all("a2" not in tokens and "a3" not in tokens for tokens in adapter.cached().values())
    adapter.rollback("a", 1)  # a3 rejected, a2 accepted; V1 keeps the block
    assert adapter._name(list(request.all_token_ids)[-1]) == "a2" and not request.spec_token_ids
    assert request.num_computed_tokens == 5 and adapter.table("a") == [0, 1, 3]
    adapter.rollback("a", 0)  # a verify with nothing rejected changes nothing
    assert request.num_computed_tokens == 5
    adapter.free("a")
    adapter.free("b")
    assert adapter.table("a") == [] and [adapter.refcount(b) for b in range(5)] == [0] * 5
    assert sorted(adapter.free_blocks()) == [0, 1, 2, 3, 4]
    assert set(adapter.cached()) == {0, 1, 2}  # still cached, evictable


def test_v1_observers_agree_with_the_block_pool(vllm_source):
    adapter = _two_requests(vllm_source)
    adapter.append("a", "a1", False)
    adapter.append("a", "a2", True)
    refs, queue = _pool_view(adapter)
    pool = adapter.manager.block_pool
    assert pool.blocks[0].is_null and refs[0] == 0 and 0 not in queue  # the null block is never cowcheck's
    assert [adapter.refcount(b) for b in range(5)] == refs[1:]
    assert adapter.free_blocks() == [b - 1 for b in queue]
    assert all(0 <= b < 5 for name in "ab" for b in adapter.table(name))


def test_v1_tight_pool_raises_out_of_blocks(vllm_source):
    adapter = vllm_v1.VllmV1(2, 2, vllm_source)
    adapter.admit("a", ["p0", "p1", "p2"])
    with pytest.raises(vllm_v1.OutOfBlocks):
        adapter.admit("b", ["x0", "x1", "x2"])


def test_v1_pickles_into_a_fresh_process(vllm_source):
    adapter = _two_requests(vllm_source)
    adapter.append("a", "a1", False)
    blob = pickle.dumps(adapter)
    copy = pickle.loads(blob)
    assert copy.table("b") == [0, 2] and copy.cached() == adapter.cached()
    code = ("import pickle, sys; a = pickle.loads(sys.stdin.buffer.read()); a.append('b', 'b1', False); "
            "print(a.table('a'), a.table('b'), sorted(a.cached().items()))")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True).stdout.decode()
    assert out.strip() == "[0, 1] [0, 2] [(0, ('p0', 'p1')), (1, ('p2', 'a1')), (2, ('p2', 'b1'))]"


def test_v1_block_hashes_live_where_the_release_keeps_them(vllm_source):
    """Up to 0.10.0 the manager keeps a request's block hashes, from 0.10.1
    the request does: found by what the release has, whatever the shape of
    vllm/utils (a file in 0.9.1, a package from 0.9.2). Either way the
    snapshot holds them, and a hash either carries its tokens (up to
    0.10.2) or the adapter has learned them."""
    adapter = _two_requests(vllm_source)
    in_manager = dict(getattr(adapter.manager, "req_to_block_hashes", {}))
    on_request = {rid: list(r.block_hashes) for rid, r in adapter.requests.items() if hasattr(r, "block_hashes")}
    assert bool(in_manager) != bool(on_request)
    hashes = (in_manager or on_request)["a"]
    assert len(hashes) == 1  # p0 p1: one full block
    assert vllm_v1._manager_hashes(adapter.manager) or any(snap[-1] for snap in adapter.snapshot()[0])
    assert hasattr(hashes[0], "token_ids") or bytes(hashes[0]) in adapter.key_tokens


def test_v1_make_reads_the_environment(vllm_source, monkeypatch):
    monkeypatch.setenv(vllm_v1.ENV, vllm_source)
    adapter = vllm_v1.make(4, 2)
    assert adapter.source == vllm_source and adapter.free_blocks() == [0, 1, 2, 3]


def test_sglang_match_lock_insert_dedupe_evict(sglang_source):
    adapter = sglang.SGLang(8, sglang_source)
    assert adapter.admit("a", ["p0", "p1", "p2"]) == 0 and adapter.table("a") == [0, 1, 2]
    adapter.append("a", "a1", False)
    adapter.append("a", "a2", True)
    adapter.append("a", "a3", True)
    adapter.rollback("a", 1)  # a3's slot goes back
    assert adapter.table("a") == [0, 1, 2, 3, 4] and 5 in adapter.free_blocks()
    assert adapter.cached() == {}  # nothing is inserted before a request finishes
    adapter.free("a")
    assert adapter.cached() == {0: ("p0",), 1: ("p1",), 2: ("p2",), 3: ("a1",), 4: ("a2",)}
    assert adapter.admit("b", ["p0", "p1", "p2"]) == 2  # at most L - 1 tokens match
    assert adapter.table("b")[:2] == [0, 1]
    duplicate = adapter.table("b")[2]
    adapter.free("b")  # the tree already holds p2: b's own slot for it is freed
    assert duplicate in adapter.free_blocks() and adapter.cached()[2] == ("p2",)
    # a request larger than the free slots evicts unlocked leaves
    assert adapter.admit("c", ["x0", "x1", "x2", "x3", "x4"]) == 0
    assert len(adapter.table("c")) == 5 and 4 not in adapter.cached()
    assert pickle.loads(pickle.dumps(adapter)).table("c") == adapter.table("c")


def test_sglang_pages_of_two_slots(sglang_source, monkeypatch):
    """B = 2: SGLang's PagedTokenToKVPoolAllocator on its torch-native path
    (its Triton kernels are stand-ins that are never launched), the radix
    tree on whole pages."""
    monkeypatch.setenv(sglang.ENV, sglang_source)
    adapter = sglang.make(6, 2)
    assert adapter.page == 2 and adapter.allocator.use_triton_kernels is False
    assert type(adapter.allocator).__name__ == "PagedTokenToKVPoolAllocator" and adapter.free_blocks() == [0, 1, 2, 3, 4, 5]
    assert adapter.admit("a", ["p0", "p1", "p2"]) == 0 and adapter.table("a") == [0, 1]
    assert adapter.requests["a"]["slots"] == [2, 3, 4]  # page p holds slots 2p, 2p + 1; page 0 is SGLang's padding page
    adapter.append("a", "a1", False)  # fills the last page: no new page
    assert adapter.table("a") == [0, 1] and adapter.free_blocks() == [2, 3, 4, 5]
    adapter.append("a", "a2", False)  # a new page
    assert adapter.table("a") == [0, 1, 2]
    adapter.free("a")  # the whole pages go into the tree; the last, partial page is freed
    assert adapter.cached() == {0: ("p0", "p1"), 1: ("p2", "a1")} and 2 in adapter.free_blocks()
    # at most L - 1 tokens, cut to whole pages: p0 p1 (p2 is the last token)
    assert adapter.admit("b", ["p0", "p1", "p2"]) == 2 and adapter.table("b")[0] == 0
    duplicate = adapter.table("b")[1]
    adapter.append("b", "b1", True)
    adapter.append("b", "b2", True)
    adapter.append("b", "b3", True)
    third = adapter.table("b")[2]
    assert len(adapter.table("b")) == 3 and third not in adapter.free_blocks()
    adapter.rollback("b", 3)  # all rejected: only the page wholly past the kept tokens (b2 b3) goes back
    assert adapter.table("b") == [0, duplicate] and third in adapter.free_blocks()
    adapter.append("b", "b1", False)  # the kept page's rejected slot is the next token's
    assert adapter.requests["b"]["slots"][-2:] == [2 * duplicate + 2, 2 * duplicate + 3]
    adapter.free("b")  # the tree holds p0 p1 already (b's match), and p2 b1 is new: nothing duplicated
    assert adapter.cached()[duplicate] == ("p2", "b1") and adapter.cached()[0] == ("p0", "p1")
    copy = pickle.loads(pickle.dumps(adapter))
    assert copy.snapshot() == adapter.snapshot() and copy.cached() == adapter.cached()


def test_sglang_pages_dedupe_and_evict(sglang_source):
    adapter = sglang.SGLang(4, sglang_source, 2)
    adapter.admit("a", ["p0", "p1", "p2"])
    adapter.admit("b", ["p0", "p1", "p2"])  # nothing in the tree yet: no hit
    adapter.free("a")
    b_first = adapter.table("b")[0]
    adapter.free("b")  # the tree already holds p0 p1 (a's page): b's page for them is freed
    assert b_first in adapter.free_blocks()[:2] and adapter.cached() == {0: ("p0", "p1")}
    # four pages needed, two free: SGLang evicts for the new tokens and one page more, unlocked leaves first
    assert adapter.admit("c", ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"]) == 0
    assert len(adapter.table("c")) == 4 and adapter.cached() == {}
    with pytest.raises(sglang.OutOfBlocks):
        adapter.append("c", "c1", False)


def test_sglang_triton_kernels_are_never_launched(sglang_source):
    sglang.engine(sglang_source)
    kernels = sys.modules["sglang.kernels.ops.memory.allocator"]
    with pytest.raises(RuntimeError, match="alloc_extend_kernel was launched"):
        kernels.alloc_extend_kernel[(1,)]()


# -- bad input -------------------------------------------------------------------

@pytest.mark.skipif(any(os.path.isdir(os.path.join(p, "vllm")) for p in sys.path if p), reason="vLLM is installed")
def test_v1_without_vllm_names_the_package_and_the_variable(monkeypatch):
    monkeypatch.delenv(vllm_v1.ENV, raising=False)
    monkeypatch.setattr(vllm_core, "_engine", vllm_core._Engine())
    with pytest.raises(SpecError) as err:
        vllm_v1.make(4, 2)
    line = str(err.value)
    assert "\n" not in line and "pip install vllm" in line and vllm_v1.ENV in line and "vllm_v1:make" in line


def test_sglang_without_sglang_names_the_package_and_the_variable(monkeypatch):
    monkeypatch.delenv(sglang.ENV, raising=False)
    monkeypatch.setattr(sglang, "_loaded", {})
    with pytest.raises(SpecError) as err:
        sglang.make(4, 1)
    assert "pip install sglang" in str(err.value) and sglang.ENV in str(err.value)


def test_a_folder_without_the_engine_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_v1.ENV, str(tmp_path))
    monkeypatch.setattr(vllm_core, "_engine", vllm_core._Engine())
    with pytest.raises(SpecError, match="holds no vllm/v1/core/block_pool.py"):
        vllm_v1.make(4, 2)


def test_an_unknown_import_names_the_module(tmp_path):
    """A release that starts to import something new: ImportError naming it."""
    (tmp_path / "fakeeng" / "core").mkdir(parents=True)
    (tmp_path / "fakeeng" / "core" / "pool.py").write_text("import fakeeng.brand_new\n")
    with pytest.raises(sources.SourceError, match="fakeeng.brand_new is imported by the engine's sources but has no stand-in"):
        sources.load(tmp_path, "fakeeng", ["fakeeng.core.pool"], {}, ["fakeeng.core.pool"])
    assert "fakeeng.core.pool" not in sys.modules


def test_extract_takes_what_the_names_use_and_keeps_the_stand_ins_values(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("import os\nfrom big.package import thing\nT = 3\nlogger = thing()\n"
                    "def uses():\n    return T, logger\nunused = thing()\n")
    module = types.ModuleType("stand_in")
    module.logger = "ours"
    sources.extract(path, ["uses"], module)
    assert module.uses() == (3, "ours") and not hasattr(module, "unused") and module.os is os


def test_imports_leave_out_type_checking(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("from typing import TYPE_CHECKING\nimport a.b\nfrom c import d, e\nfrom . import rel\n"
                    "if TYPE_CHECKING:\n    from f import g\ndef late():\n    from h import i\n")
    assert sources.imports(path) == {"typing": {"TYPE_CHECKING"}, "a.b": set(), "c": {"d", "e"}, "h": {"i"}}


def test_cli_exit_2_without_the_engine(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != vllm_v1.ENV}
    env[vllm_v1.ENV] = str(tmp_path)
    scenario = next((ROOT / "specs" / "scenarios").rglob("*.toml"))
    done = subprocess.run([sys.executable, "-m", "cowcheck", "check", str(scenario), "--allocator", vllm_v1.REF],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "holds no vllm/v1/core/block_pool.py" in done.stderr and len(done.stderr.strip().splitlines()) == 1
