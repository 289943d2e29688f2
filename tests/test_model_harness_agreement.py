"""The harness is honest: on every shipped allocator scenario and under
every device model, the shipped allocators (specs/allocators/engine.py,
and for cache scenarios the V1-style pool of specs/allocators/prefix.py,
also on every shipped cache scenario's shape)
checked as code through the engine harness break exactly the invariants
that the protocol files describing the same orders (specs/protocols/engine*.toml)
break. Lengths differ (one host call is one action, where a protocol file
spells out its steps), so only verdicts are compared. The harness cannot
see a refcount underflow: the allocator's own assertion is its
`allocator-error`, compared with the protocol's `no-underflow`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import cowcheck
from conftest import SPECS
from cowcheck.model.protocol import load_builtin
from cowcheck.model.scenario import DEVICES, load_scenario
from cowcheck.engines.results import Outcome

CODE = sorted((SPECS / "scenarios").glob("engine-code*.toml"))
#: each shipped factory and the protocol file that describes it
PROTOCOL_OF = {"correct": "engine", "copy_dst_released": "engine-copy-dst-released",
               "double_free_after_cow": "engine-double-free-after-cow",
               "fork_no_tail_incref": "engine-fork-no-tail-incref", "rollback_leaks": "engine-rollback-leaks"}


def broken(result) -> set[str]:
    out = {k for k, v in result.verdicts.items() if v.outcome is Outcome.VIOLATED}
    if "allocator-error" in out:
        out = (out - {"allocator-error"}) | {"no-underflow"}
    return out


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", CODE, ids=lambda p: p.stem)
def test_allocator_code_and_its_protocol_file_break_the_same_invariants(path, device):
    code = replace(load_scenario(path), device=device, expect=())
    protocol = replace(code, allocator=None, protocol=load_builtin(PROTOCOL_OF[code.allocator.rpartition(":")[2]]))
    through_harness, from_file = cowcheck.check(code), cowcheck.check(protocol)
    assert through_harness.complete and from_file.complete
    assert broken(through_harness) == broken(from_file)
    assert through_harness.summary is from_file.summary


def test_every_shipped_allocator_has_a_scenario_and_a_protocol_file():
    named = {load_scenario(p).allocator.rpartition(":")[2] for p in CODE}
    assert named == set(PROTOCOL_OF)
    for protocol in PROTOCOL_OF.values():
        assert load_builtin(protocol).name == protocol


# -- prefix caching: the V1-style pool (specs/allocators/prefix.py) --------------------
PREFIX_CODE = sorted((SPECS / "scenarios").glob("prefix-code*.toml"))
#: each shipped V1-style factory and the protocol file that describes it
PREFIX_PROTOCOL_OF = {"correct": "prefix-v1", "touch_after_alloc": "prefix-v1-touch-after-alloc",
                      "no_evict": "prefix-v1-no-evict", "cache_drafts": "prefix-v1-cache-drafts",
                      "step_fenced": "prefix-v1-step-fenced"}
#: the shipped cache scenarios' shapes (lifo: allocator code has its own order)
CACHE_SHAPES = sorted(p for p in (SPECS / "scenarios").glob("*.toml")
                      if (s := load_scenario(p)).cache and s.allocator is None and not s.transfers)


def _agree(code, protocol_name):
    protocol = replace(code, allocator=None, allocator_base="", protocol=load_builtin(protocol_name))
    through_harness, from_file = cowcheck.check(code), cowcheck.check(protocol)
    assert through_harness.complete and from_file.complete
    assert broken(through_harness) == broken(from_file)
    assert through_harness.summary is from_file.summary


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", PREFIX_CODE, ids=lambda p: p.stem)
def test_the_v1_style_pool_and_its_protocol_file_break_the_same_invariants(path, device):
    code = replace(load_scenario(path), device=device, expect=())
    _agree(code, PREFIX_PROTOCOL_OF[code.allocator.rpartition(":")[2]])


#: (shape, factory) pairs: step_fenced only where a request may cancel;
#: elsewhere it frees as correct does, and its kernel_done fences only
#: multiply the interleavings (a minute each on the n = 3 and warm shapes)
CACHE_PAIRS = [(path, factory) for path in CACHE_SHAPES for factory in sorted(PREFIX_PROTOCOL_OF)
               if factory != "step_fenced" or any(b.may_cancel for b in load_scenario(path).branches)]


#: slow as a whole: its cases together take over ten seconds (tests/README.md, "Slow tests")
@pytest.mark.slow
@pytest.mark.parametrize("path, factory", CACHE_PAIRS, ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_every_v1_style_pool_agrees_with_its_protocol_file_on_every_shipped_cache_shape(path, factory):
    base = replace(load_scenario(path), reuse="lifo", expect=())
    for device in DEVICES:
        code = replace(base, device=device, allocator=f"cowcheck.specs.allocators.prefix:{factory}")
        _agree(code, PREFIX_PROTOCOL_OF[factory])


def test_every_v1_style_pool_has_a_scenario_and_a_protocol_file():
    named = {load_scenario(p).allocator.rpartition(":")[2] for p in PREFIX_CODE}
    assert named == set(PREFIX_PROTOCOL_OF)
    for protocol in PREFIX_PROTOCOL_OF.values():
        assert load_builtin(protocol).name == protocol
