"""Which engine code a trace was found in (issue 34, item 3): an engineer's
changed tree of a release and the unchanged release are two codes. Every
result and counterexample records the release, the source folder and a
digest of the engine files loaded; their files are named apart, a check of
one never deletes the other's, and a replay or explain on other code says
so first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import cowcheck
from cowcheck.cli import main
from cowcheck.adapters import sglang, vllm_v1
from cowcheck.adapters.sources import CACHE, digest
from cowcheck.engines.results import Outcome
from cowcheck.model.code import Code, other_code
from cowcheck.traces.output import write_result
from cowcheck.views.html import stepper_html

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "specs" / "scenarios" / "prefix-code-tight-pool.toml"
VLLM = CACHE / "vllm-0.34.0"
SGLANG = CACHE / "sglang-0.5.23"

needs_vllm = pytest.mark.skipif(not (VLLM / ".complete").is_file(), reason="vLLM 0.34.0's sources are not in build/engines")


def changed_tree(tmp_path: Path) -> Path:
    """vLLM 0.34.0 with a change to block_pool.py: a block handed out again
    keeps its cache key (no-stale-key breaks on the tight pool, which the
    release keeps safe)."""
    tree = tmp_path / "vllm-change"
    shutil.copytree(VLLM, tree)
    pool = tree / "vllm/v1/core/block_pool.py"
    text = pool.read_text()
    keep = ("                    if block.block_hash is not None:\n"
            "                        self._maybe_evict_cached_block(block)\n")
    assert keep in text
    pool.write_text(text.replace(keep, "                    pass  # the change: the key stays\n"))
    return tree


def check(tree: Path, out: Path, monkeypatch) -> list[Path]:
    monkeypatch.setenv(vllm_v1.ENV, str(tree))
    CliRunner().invoke(main, ["check", str(SCENARIO), "--allocator", vllm_v1.REF, "--out", str(out)])
    return sorted(out.glob("*.json"))


@needs_vllm
def test_a_changed_trees_counterexamples_survive_a_check_of_the_release(tmp_path, monkeypatch):
    change, out = changed_tree(tmp_path), tmp_path / "cx"
    found = check(change, out, monkeypatch)
    stale = [p for p in found if p.name.endswith(".no-stale-key.json")]
    assert len(stale) == 1, found
    data = json.loads(stale[0].read_text())
    assert data["allocator_version"] == "vLLM 0.34.0"
    assert data["allocator_code"]["source"] == str(change.resolve())
    assert data["allocator_code"]["digest"].startswith("sha256:") and data["allocator_code"]["digest"][7:19] in stale[0].name
    # the unchanged release, into the same folder: no-stale-key holds there, and the change's file stays
    after = check(VLLM, out, monkeypatch)
    assert stale[0] in after and json.loads(stale[0].read_text()) == data
    release_files = [p for p in after if p not in found]
    assert release_files and all(json.loads(p.read_text())["allocator_code"]["source"] == str(VLLM.resolve())
                                 for p in release_files)
    # the change, checked again: its own files are its to replace or remove
    assert check(change, out, monkeypatch) == after


@needs_vllm
def test_a_replay_on_other_code_says_so_first(tmp_path, monkeypatch):
    change, out = changed_tree(tmp_path), tmp_path / "cx"
    stale = next(p for p in check(change, out, monkeypatch) if p.name.endswith(".no-stale-key.json"))
    cx = cowcheck.load_counterexample(stale)
    short = cx.allocator_code.short
    # on the code that found it: nothing said of code, and explain's first line names the tree
    same = cowcheck.replay(cx, pool="none").model
    assert same.ok and same.other_code is None
    first = cowcheck.explain(cx).splitlines()[0]
    assert "vLLM 0.34.0" in first and str(change.resolve()) in first and short in first
    page = stepper_html(json.loads(stale.read_text()))
    header = page[page.index("<header>"):page.index("</header>")]
    assert str(change.resolve()) in header and short in header
    # on the release: the message opens with the code that differs, before where the trace stops applying
    monkeypatch.setenv(vllm_v1.ENV, str(VLLM))
    other = cowcheck.replay(cx, pool="none").model
    assert not other.ok
    assert other.message.startswith(f"other code than found this trace: recorded with vLLM 0.34.0 (from {change.resolve()}, {short})")
    assert other.message.index("replayed with vLLM 0.34.0") < other.message.index("step")
    shown = CliRunner().invoke(main, ["explain", str(stale)])
    assert " ".join(shown.output.split()).startswith("other code: other code than found this trace"), shown.output


def test_a_file_of_other_code_is_never_deleted(tmp_path):
    """The writer's own rule, with a file of the same name: a "now holds"
    file is removed only when it records the same code."""
    result = cowcheck.check(ROOT / "specs" / "scenarios" / "no-evict.toml")
    cx = next(iter(result.counterexamples))
    mine = Code("toy 1.0", "/src/toy", "sha256:" + "1" * 64)
    theirs = Code("toy 1.0", "/src/toy-change", "sha256:" + "2" * 64)
    for code, kept in ((theirs, True), (Code("toy 1.0"), True), (None, True), (mine, False)):
        out = tmp_path / str(code).replace("/", "_").replace(" ", "_")
        result.allocator_code = mine
        write_result(result, out)
        verdict = result.verdicts[cx.invariant]
        path = Path(verdict.path)
        data = json.loads(path.read_text())
        for key in ("allocator_version", "allocator_code"):
            data.pop(key, None)
        data.update(code.fields() if code is not None else {})
        path.write_text(json.dumps(data))
        verdict.counterexample, verdict.outcome = None, Outcome.HOLDS
        write_result(result, out)
        assert path.is_file() == kept, code
        verdict.counterexample, verdict.outcome = cx, Outcome.VIOLATED


def test_code_is_compared_by_release_and_tree():
    release = Code("vLLM 0.34.0")
    tree = Code("vLLM 0.34.0", "/a", "sha256:" + "a" * 64)
    moved = Code("vLLM 0.34.0", "/b", "sha256:" + "a" * 64)
    changed = Code("vLLM 0.34.0", "/a", "sha256:" + "b" * 64)
    assert other_code(tree, moved) is None and other_code(release, tree) is None and other_code(None, tree) is None
    assert other_code(tree, changed) and other_code(tree, release) and other_code(release, Code("vLLM 0.9.1"))
    assert other_code(tree, None) and str(tree) == f"vLLM 0.34.0 (from /a, {'a' * 12})"


@pytest.mark.skipif(not (SGLANG / ".complete").is_file(), reason="SGLang 0.5.23's sources are not in build/engines")
def test_each_adapter_digests_the_engine_files_it_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv(sglang.ENV, str(SGLANG))
    code = sglang.make(4, 1).code()
    assert code["source"] == str(SGLANG.resolve()) and code["digest"].startswith("sha256:")
    # a file it never loads does not change the digest; one it loads does
    tree = tmp_path / "sglang"
    shutil.copytree(SGLANG, tree)
    (tree / "sglang/srt/entrypoints").mkdir(parents=True, exist_ok=True)
    (tree / "sglang/srt/entrypoints/unrelated.py").write_text("# not loaded\n")
    monkeypatch.setenv(sglang.ENV, str(tree))
    assert sglang.make(4, 1).code()["digest"] == code["digest"]
    change = tmp_path / "sglang-change"
    shutil.copytree(SGLANG, change)
    radix = change / "sglang/srt/mem_cache/radix_cache.py"
    radix.write_text(radix.read_text() + "\n# a change\n")
    monkeypatch.setenv(sglang.ENV, str(change))
    assert sglang.make(4, 1).code()["digest"] != code["digest"]
    assert digest(change, [radix]) != digest(SGLANG, [SGLANG / "sglang/srt/mem_cache/radix_cache.py"])
