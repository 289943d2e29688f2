"""Prefix caching (docs/semantics.md#prefix-caching): DESIGN's reference
rows for cache scenarios reproduced exactly, with and without symmetry; the
steps and the cache's rules on small cases a person can check by hand; and
bad input, one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from cowcheck import check
from cowcheck.engines.invariants import CACHE_INVARIANTS, select
from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import load_scenario, make_scenario
from cowcheck.model.state import Status
from cowcheck.model.system import ProtocolModel

from conftest import broken
from test_cli_bad_input import assert_names, error_line, invoke, write

P3 = {"prompt": 3, "appends": 1}
# name, protocol, branches, pool, {device: violated {invariant: length}}, peak, hits
REFERENCE = [
    ("together", "prefix-cache", [P3, P3], None, {"async": {}, "stream": {}}, 4, (0, 1)),
    ("together", "vllm-v1", [P3, P3], None,
     {"async": {"exclusive-write": 9, "refcount-write": 9, "faithful-output": 12},
      "stream": {"exclusive-write": 9, "refcount-write": 9}}, 3, (1, 1)),
    ("evict", "no-evict", [{"prompt": 3}, {"prompt": ["x0", "x1"], "appends": 1, "after": "a"}, {"prompt": 3, "after": "b"}], 2,
     {"async": {"no-stale-key": 21, "cache-immutable": 25, "faithful-output": 36}}, 2, (1, 1)),
    ("drafts", "cache-drafts", [{"prompt": 2, "program": ["speculate 2", "append"]},
                                {"prompt": ["p0", "p1", "a1", "a2", "x0"], "appends": 1, "after": "a"}], None,
     {"async": {"verified-only-cached": 21, "cache-immutable": 29, "faithful-output": 40}}, 3, (2, 2)),
    ("cancel", "free-in-flight", [{"prompt": 3, "appends": 1, "may_cancel": True}, {"prompt": 3, "appends": 1, "after": "a"}], None,
     {"async": {"no-use-after-free": 11, "refcount-write": 12, "exclusive-write": 15, "cache-immutable": 25, "faithful-output": 26},
      "stream": {"no-use-after-free": 11, "refcount-write": 12, "exclusive-write": 15}}, 2, (0, 1)),
]
ROWS = [(name, protocol, branches, pool, device, violated, peak, hits)
        for name, protocol, branches, pool, by_device, peak, hits in REFERENCE for device, violated in by_device.items()]


def cache_scenario(protocol, branches, pool=None, device="async", reuse="lifo", block_size=2):
    return make_scenario(block_size, 0, branches, protocol, device=device, reuse=reuse, pool=pool, cache=True)


@pytest.mark.parametrize("symmetry", [True, False], ids=["symmetry", "no-symmetry"])
@pytest.mark.parametrize("name,protocol,branches,pool,device,violated,peak,hits", ROWS,
                         ids=[f"{r[1]}-{r[0]}-{r[4]}" for r in ROWS])
def test_reference_row(name, protocol, branches, pool, device, violated, peak, hits, symmetry):
    result = check(cache_scenario(protocol, branches, pool, device), symmetry=symmetry)
    x = result.exploration
    assert x.complete
    assert broken(result) == violated
    assert x.peak == peak
    assert x.cost_range == (0, 0)
    assert x.hits_range == hits
    assert {inv.id for inv in CACHE_INVARIANTS} <= set(result.verdicts)


def successors_of(scenario):
    model = ProtocolModel(scenario)
    return model, model.init_state()


def take(model, state, *texts):
    """Follow the named actions (`a: lookup`, `device: kernel-complete`)
    from `state`, each the first successor whose action reads so."""
    for text in texts:
        actor, step = text.split(": ")
        tr = next((t for t in model.successors(state) if t.action.actor == actor and t.action.step == step), None)
        assert tr is not None, f"{text} is not enabled; enabled: {[str(t.action) for t in model.successors(state)]}"
        state = tr.state
    return state


ADMIT = ("a: lookup", "a: touch-hits", "a: alloc-prompt", "a: publish", "a: prefill", "device: kernel-complete",
         "a: wait-kernel", "a: cache-full")
FINISH_A = ("a: check-output", "a: wait-kernel", "a: decref-all")


def test_an_admission_fills_and_keys_its_full_blocks_only():
    model, state = successors_of(cache_scenario("prefix-cache", [P3]))
    assert all(br.status is Status.WAITING for br in state.branches)
    assert state.free == tuple(range(state.blocks.__len__()))
    state = take(model, state, *ADMIT)
    a = state.branches[0]
    assert (a.status, a.pos, a.verified, a.seq, a.working) == (Status.RUNNING, 3, 3, ("p0", "p1", "p2"), (0, 1))
    assert state.blocks[0].key == ("p0", "p1") and state.blocks[0].slots == ("p0", "p1")
    assert state.blocks[1].key is None            # partial: never keyed
    assert state.blocks[1].slots == ("p2", None)


def test_a_second_request_hits_and_recomputes_its_last_token():
    model, state = successors_of(cache_scenario("prefix-cache", [{"prompt": 3}, {"prompt": 3, "after": "a"}]))
    state = take(model, state, *ADMIT, *FINISH_A)
    # freed last entry first: the uncached block to the front, the cached one to the back
    assert state.free[0] == 1 and state.free[-1] == 0
    admit_b = [t.replace("a:", "b:") for t in ADMIT]
    trs = {}
    for text in admit_b[:3]:
        actor, step = text.split(": ")
        tr = next(t for t in model.successors(state) if t.action.actor == actor and t.action.step == step)
        trs[step], state = tr, tr.state
    assert dict(trs["lookup"].action.binds)["hits"] == (0,)
    assert dict(trs["alloc-prompt"].action.binds)["blocks"] == (1,)
    b = state.branches[1]
    assert b.working == (0, 1) and state.blocks[0].refcount == 1 and 0 not in state.free
    assert model.hits(trs["touch-hits"].action) == 1


def test_a_prompt_of_at_most_one_block_never_hits():
    model, state = successors_of(cache_scenario("prefix-cache", [{"prompt": 2}, {"prompt": 2, "after": "a"}]))
    state = take(model, state, *ADMIT, *FINISH_A)
    assert state.blocks[0].key == ("p0", "p1")
    tr = next(t for t in model.successors(state) if t.action.step == "lookup")
    assert dict(tr.action.binds)["hits"] == ()


def test_a_full_duplicate_stays_unkeyed():
    """Two requests with one prompt admitted before either keys: each fills
    its own first block, and the second to key it finds the key taken."""
    result = check(cache_scenario("prefix-cache", [{"prompt": 4}, {"prompt": 4}]))
    assert broken(result) == {}
    assert result.exploration.hits_range == (0, 1)   # block-aligned: the last block is recomputed


def test_an_allocation_evicts_the_cached_block_it_reuses():
    model, state = successors_of(cache_scenario("prefix-cache", [{"prompt": 3}, {"prompt": ["x0", "x1", "x2"], "after": "a"}], pool=2))
    state = take(model, state, *ADMIT, *FINISH_A)
    state = take(model, state, "b: lookup", "b: touch-hits")
    tr = next(t for t in model.successors(state) if t.action.step == "alloc-prompt")
    assert dict(tr.action.binds)["evicted"] == (0,)
    assert all(blk.key is None for blk in tr.state.blocks)


def test_an_atomic_admission_waits_holding_nothing_when_the_pool_is_short():
    model, state = successors_of(cache_scenario("prefix-cache", [{"prompt": 3}, {"prompt": ["x0", "x1", "x2"]}], pool=2))
    state = take(model, state, "a: lookup")
    # a holds the scheduler inside its admission; once a has both blocks, b cannot start
    state = take(model, state, "a: touch-hits", "a: alloc-prompt")
    assert not [t for t in model.successors(state) if t.action.actor == "b"]


def test_cache_invariants_are_not_listed_for_scenarios_without_a_cache():
    result = check(make_scenario(2, 3, [1, 1]))
    assert not {inv.id for inv in CACHE_INVARIANTS} & set(result.verdicts)
    asked = check(make_scenario(2, 3, [1, 1]), invariants=select(["no-stale-key"]))
    assert asked.verdicts["no-stale-key"].outcome == "unsupported"


SHIPPED = sorted(p for p in (Path(__file__).resolve().parent.parent / "specs" / "scenarios").glob("*.toml")
                 if load_scenario(p).cache)


def test_cow_keeps_its_own_tables_in_a_cache_scenario():
    scenario = cache_scenario("cow", [P3, P3])
    assert scenario.protocol.admit        # prefix-cache's admission
    assert [s.text for s in scenario.protocol.paths["in-place"].steps] == ["write", "wait-kernel"]
    assert broken(check(scenario)) == {}


# -- bad input --------------------------------------------------------------------
CACHE = 'block_size = 2\ncache = "prefix"\n'
REQ = '[[branch]]\nprompt = 3\nappends = 1\n'
BAD = {
    "cache-unknown": ('block_size = 2\nprompt = 3\ncache = "radix"\n' + REQ, ["cache", "radix", "allowed", "none", "prefix"]),
    "prompt-without-cache": ('block_size = 2\nprompt = 3\n[[branch]]\nprompt = 2\n', ["branch[0].prompt", "cache scenario"]),
    "after-without-cache": ('block_size = 2\nprompt = 3\n[[branch]]\nappends = 1\n[[branch]]\nafter = "a"\n',
                            ["branch[1].after", "cache scenario"]),
    "fork-in-cache": (CACHE + '[[branch]]\nprompt = 3\nprogram = ["fork b"]\n[[branch]]\nprompt = 3\n',
                      ["branch[0].program[0]", "fork", "cache scenario", "allowed"]),
    "parent-in-cache": (CACHE + REQ + '[[branch]]\nprompt = 3\nparent = "a"\n', ["branch[1].parent", "cache scenario"]),
    "after-unknown": (CACHE + REQ + '[[branch]]\nprompt = 3\nafter = "z"\n', ["branch[1].after", "'z'", "allowed"]),
    "after-itself": (CACHE + REQ + '[[branch]]\nprompt = 3\nafter = "b"\n', ["branch[1].after", "itself"]),
    "after-cycle": (CACHE + '[[branch]]\nprompt = 3\nafter = "b"\n[[branch]]\nprompt = 3\nafter = "a"\n', ["after", "cycle"]),
    "prompt-missing": (CACHE + '[[branch]]\nappends = 1\n', ["branch[0].prompt", "at least one token"]),
    "prompt-zero": (CACHE + '[[branch]]\nprompt = 0\n', ["branch[0].prompt", "at least one token"]),
    "prompt-empty-list": (CACHE + '[[branch]]\nprompt = []\n', ["branch[0].prompt", "1 to"]),
    "prompt-wrong-type": (CACHE + '[[branch]]\nprompt = "p0 p1"\n', ["branch[0].prompt", "integer", "list of token names"]),
    "prompt-empty-token": (CACHE + '[[branch]]\nprompt = ["p0", ""]\n', ["branch[0].prompt[1]", "non-empty"]),
    "prompt-non-string-token": (CACHE + '[[branch]]\nprompt = ["p0", 1]\n', ["branch[0].prompt[1]", "non-empty name"]),
    "pool-below-a-prompt": (CACHE + 'pool = 1\n' + REQ, ["pool", "1 blocks", "largest request's prompt", "at least 2"]),
    "cache-step-without-cache": ('block_size = 2\nprompt = 3\nprotocol = "vllm-v1"\n' + REQ.replace("prompt = 3\n", ""),
                                 ["protocol", "cache-full", "cache scenario"]),
    "no-append-without-cache": ('block_size = 2\nprompt = 3\nprotocol = "free-in-flight"\n[[branch]]\nappends = 1\n',
                                ["free-in-flight.toml", "append", "missing"]),
}
PROTOCOL_BAD = {
    "lookup-outside-admit": ('[append]\nrules = [{ when = "true", path = "p" }]\npaths.p = ["lookup", "write", "wait-kernel"]\n',
                             ["append.paths.p[0]", "lookup", "only in [admit]"]),
    "prefill-in-finish": ('[finish]\nsteps = ["prefill"]\n', ["finish.steps[0]", "prefill", "only in [admit]"]),
    "empty-admit": ('[admit]\nsteps = []\n', ["admit.steps", "non-empty"]),
    "admit-without-prefill": ('[admit]\nsteps = ["lookup", "touch-hits", "alloc-prompt", "publish"]\n', ["admit.steps", "prefill"]),
    "touch-hits-in-append": ('[append]\nrules = [{ when = "true", path = "p" }]\npaths.p = ["touch-hits", "write", "wait-kernel"]\n',
                             ["append.paths.p[0]", "touch-hits", "only in [admit]"]),
    "alloc-prompt-in-cancel": ('[cancel]\nsteps = ["alloc-prompt"]\n', ["cancel.steps[0]", "alloc-prompt", "only in [admit]"]),
    # what [admit] allows: the admission steps, and none that belongs in another table
    "unknown-in-admit": ('[admit]\nsteps = ["lookup", "fork", "prefill"]\n',
                         ["admit.steps[1]", "unknown step 'fork'", "allowed in [admit]", "lookup, touch-hits, alloc-prompt, prefill"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_cache_scenario(tmp_path, case):
    text, needles = BAD[case]
    path = write(tmp_path / f"{case}.toml", text)
    line = error_line(invoke("check", path, "--out", tmp_path / "cx"))
    assert_names(line, *needles)


@pytest.mark.parametrize("case", list(PROTOCOL_BAD))
def test_bad_cache_protocol(tmp_path, case):
    text, needles = PROTOCOL_BAD[case]
    write(tmp_path / "mine.toml", text)
    path = write(tmp_path / "s.toml", CACHE + 'protocol = "mine.toml"\n' + REQ)
    line = error_line(invoke("check", path, "--out", tmp_path / "cx"))
    assert_names(line, "mine.toml", *needles)
    if case == "unknown-in-admit":
        assert "write" not in line and "share" not in line and "rewind" not in line


def test_hits_in_the_closing_table_and_in_json(tmp_path):
    """The hits measure as a user reads it: `[fewest, most]` in --json
    (null in a scenario without a cache) and the closing table's column."""
    import json

    specs = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
    run = invoke("check", specs / "prefix-cache-warm.toml", specs / "spare-capacity.toml",
                 "--json", tmp_path / "r.json", "--out", tmp_path / "cx")
    assert run.exit_code == 0, run.output
    warm, spare = json.loads((tmp_path / "r.json").read_text())
    assert warm["hits"] == [2, 3] and warm["copies"] == [0, 0]
    assert spare["hits"] is None
    header, row = next((line, lines[i + 2]) for lines in [run.output.splitlines()] for i, line in enumerate(lines)
                       if line.startswith("scenario ") and "hits" in line)
    assert header.split()[-1] == "hits" and row.startswith("prefix-cache-warm") and row.split()[-1] == "2-3"


def test_make_scenario_refuses_like_a_file():
    with pytest.raises(SpecError):
        make_scenario(2, 3, [{"appends": 1, "after": "a"}])


# -- random cache scenarios -----------------------------------------------------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from conftest import cache_scenarios  # noqa: E402

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cache_scenarios())
def test_depth_first_agrees_with_breadth_first_on_cache_scenarios(scenario):
    """The depth-first cross-check (its own search, the same model) gives the
    explorer's verdicts on random cache scenarios."""
    from cowcheck.engines.depth_first import depth_first
    from cowcheck.engines.invariants import INVARIANTS
    bfs = check(scenario, max_states=4_000, symmetry=False, por=False)
    if not bfs.exploration.complete:
        return
    dfs = depth_first(ProtocolModel(scenario), INVARIANTS + CACHE_INVARIANTS)
    assert dfs.states == bfs.exploration.states
    assert dfs.violated == set(broken(bfs)), scenario


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cache_scenarios(protocols=("prefix-cache",), tight=False))
def test_prefix_cache_is_safe_and_disciplined_on_random_scenarios(scenario):
    result = check(scenario, max_states=20_000)
    if result.exploration.complete:
        assert broken(result) == {}, scenario


# -- sweeps and shrinking --------------------------------------------------------------
def test_the_shipped_cache_grid_expands_into_named_cache_scenarios():
    from cowcheck.sweeps.grid import expand, load_grid
    root = Path(__file__).resolve().parent.parent
    cells = expand([load_grid(root / "specs" / "grids" / "prefix-caching.toml")])
    assert len(cells) == 4 * 2 * 2 * 2 * 2
    named = {c.name: c for c in cells}
    cell = named["prefix-caching~vllm-v1-async-lifo-B2-P3+p0.p1.x2-2x1-prefix-after_a"]
    s = cell.scenario
    assert s.cache and [b.prompt for b in s.branches] == [("p0", "p1", "p2"), ("p0", "p1", "x2")]
    assert [b.after for b in s.branches] == [None, 0]


@pytest.mark.parametrize("axis,value,needles", [
    ("prompts", "[[0, 3]]", ["grid.prompts", "per request"]),
    ("prompts", "[3, 3]", ["grid.prompts", "alternatives"]),
    ("after", '[["", "ab"]]', ["grid.after", "request's name"]),
    ("cache", '"radix"', ["grid.cache", "radix", "none, prefix"]),
])
def test_bad_cache_axes_are_refused_in_one_line(tmp_path, axis, value, needles):
    from cowcheck.sweeps.grid import load_grid
    path = write(tmp_path / "g.toml", f'[grid]\nblock_size = 2\nprompt = 3\ncache = "prefix"\n{axis} = {value}\n'.replace(
        'cache = "prefix"\ncache', "cache"))
    with pytest.raises(SpecError) as err:
        load_grid(path)
    assert_names(str(err.value), *needles)


def test_prompts_in_a_cell_without_a_cache_is_that_cells_error(tmp_path):
    from cowcheck.sweeps.grid import expand, load_grid
    path = write(tmp_path / "g.toml", '[grid]\nblock_size = 2\nprompt = 3\ncache = ["none", "prefix"]\nprompts = [[3, 2]]\n')
    cells = expand([load_grid(path)])
    assert [c.scenario is None for c in cells] == [True, False]


def test_shrinking_a_cache_counterexample_keeps_what_it_needs(tmp_path):
    from cowcheck.sweeps.shrink import shrink, write_shrunk
    root = Path(__file__).resolve().parent.parent
    shrunk = shrink(root / "counterexamples" / "free-in-flight.faithful-output.json", workers=0)
    s = shrunk.scenario
    assert shrunk.smaller and s.cache and s.protocol.name == "free-in-flight"
    assert len(s.branches) == 2 and s.branches[0].may_cancel and s.branches[1].after == 0
    assert s.prompt_size < shrunk.original.prompt_size
    toml, cx = write_shrunk(shrunk, tmp_path)
    assert 'protocol = "free-in-flight"' in toml.read_text() and 'cache = "prefix"' in toml.read_text()
    again = check(load_scenario(toml))
    assert again.verdicts["faithful-output"].length == shrunk.counterexample.length


def test_shrinking_renames_the_tokens_other_prompts_name():
    from cowcheck.sweeps.shrink import candidates
    scenario = cache_scenario("prefix-cache", [{"prompt": 1, "appends": 1}, {"prompt": 2, "appends": 1},
                                               {"prompt": ["p0", "b1"], "after": "b"}])
    prompts = {tuple(b.prompt for b in c.branches) for c in candidates(scenario) if len(c.branches) == 2}
    assert (("p0", "p1"), ("p0", "a1")) in prompts        # a dropped, b renamed a: its token with it
    assert (("p0",), ("p0", "db1")) in prompts            # b dropped: its token a plain name
