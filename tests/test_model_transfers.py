"""Transfers (docs/semantics.md#transfers; DESIGN.md "Transfers: KV that
moves between tiers and engines"): every number of the section's two
tables, "Scenarios and expected verdicts" and "Reference numbers for
transfer scenarios" (verdicts and shortest lengths per transfer model and
device, peak, host peak, transfers, hits), its bad inputs, and the engines
that refuse transfers in one line."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cowcheck.api import load_counterexample, replay
from cowcheck.cli import main
from cowcheck.engines.explicit import explore
from cowcheck.engines.options import SearchOptions
from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = ROOT / "specs" / "protocols"
EW, RW, UAF, CBU, FO, HKC, CI = ("exclusive-write", "refcount-write", "no-use-after-free", "copy-before-use",
                                 "faithful-output", "host-key-content", "cache-immutable")
T = ("stream", "own-stream", "own-stream-fenced", "nic")
DEVICES = ("stream", "streams", "async")


def _s(**kw: Any) -> dict[str, Any]:
    return {"cache": "prefix", "block_size": 2, "reuse": "lifo", **kw}


A3 = {"prompt": 3}
X = {"prompt": ["x0", "x1", "x2"], "after": "a"}
S1_BRANCHES = [A3, X, {"prompt": 3, "after": "b"}]
SCENARIOS = {
    "S1": _s(pool=2, host_pool=2, branch=S1_BRANCHES),
    "S2": _s(pool=2, host_pool=2, branch=[A3, {**X, "appends": 1, "may_cancel": True}, {"prompt": 3, "after": "b"}]),
    "S3": _s(pool=2, branch=[{"prompt": 3, "source": "remote", "may_cancel": True}, {**X, "appends": 1}]),
    "S4": _s(pool=2, branch=[{"prompt": 3, "appends": 1, "may_cancel": True},
                             {"prompt": ["q0", "q1", "q2"], "after": "a", "source": "remote"}]),
    "S4-local": _s(pool=2, branch=[{"prompt": 3, "appends": 1, "may_cancel": True}, {"prompt": ["q0", "q1", "q2"], "after": "a"}]),
    "S5": _s(pool=2, lease=True, branch=[{"prompt": 3, "sink": "remote"}, X]),
    "S6": _s(pool=3, host_pool=3, branch=[{"prompt": 3, "appends": 1, "may_cancel": True}, X,
                                          {"prompt": ["p0", "p1", "p2", "a1", "c0"], "after": "b"}]),
    "S7": _s(pool=2, host_pool=2, faults=["store"], branch=S1_BRANCHES),
    "S8": _s(pool=2, host_pool=2, faults=["load", "store"], branch=[A3, X, {"prompt": 3, "after": "b", "appends": 1}]),
    "S8-recv": _s(pool=3, faults=["recv"], branch=[{"prompt": 5, "source": "remote", "appends": 1, "may_cancel": True},
                                                   {"prompt": 3, "after": "a"}]),
}


def _protocol(name: str) -> dict[str, Any]:
    return tomllib.loads((PROTOCOLS / f"{name}.toml").read_text())


def _moved(steps: list[str], step: str, after: str) -> list[str]:
    out = [s for s in steps if s != step]
    out.insert(out.index(after) + 1, step)
    return out


def _with_moved(base: str, name: str, step: str, after: str) -> dict[str, Any]:
    """Shipped protocol `base` with `step` moved after `after` in admit and every append path."""
    p = copy.deepcopy(_protocol(base))
    p["name"] = name
    p["admit"]["steps"] = _moved(p["admit"]["steps"], step, after)
    p["append"]["paths"] = {k: _moved(v, step, after) for k, v in p["append"]["paths"].items()}
    return p


def _s6_variant() -> dict[str, Any]:
    """kv-connector-lazy with V1's early keys and a cancel that frees before its kernel lands."""
    p = _with_moved("kv-connector-lazy", "s6-variant", "wait-kernel", "cache-full")
    p["cancel"]["steps"] = ["wait-transfers", "decref-all", "store-free"]
    return p


def _store_after_wait() -> dict[str, Any]:
    """store-ahead with "store" after "wait-kernel"."""
    return _with_moved("store-ahead", "store-after-wait", "store", "wait-kernel")


def run(name: str, protocol: Any, transfer: str = "own-stream", device: str = "stream", **extra: Any):
    data = {**SCENARIOS[name], "protocol": protocol, "transfer": transfer, "device": device, **extra}
    result = explore(scenario_from_dict(data, name, PROTOCOLS, name))
    broken = {v.invariant: v.length for v in result.verdicts.values() if v.outcome.value == "violated"}
    return broken, result.x


def _cells() -> list[tuple]:
    cells: list[tuple] = []

    def cell(s: str, p: Any, transfers, devices, want: dict[str, int], **kw: Any) -> None:
        cells.extend((s, p, t, d, want, kw) for t in transfers for d in devices)

    sa1, l2, s4, s6 = {EW: 12, RW: 12}, {UAF: 37, RW: 38, EW: 44, CBU: 46}, {UAF: 17, RW: 18, EW: 22, CBU: 25, FO: 26}, {UAF: 17, RW: 18, EW: 19}
    sa2 = {**sa1, HKC: 13, FO: 52}
    both = ("stream", "streams")
    cell("S1", "store-ahead", ("stream", "own-stream-fenced"), both, sa1)
    cell("S1", "store-ahead", ("own-stream", "nic"), both, sa2)
    cell("S1", "store-ahead", ("stream", "own-stream", "nic"), ("async",), sa2)
    cell("S1", "store-ahead", ("own-stream-fenced",), ("async",), sa1)
    cell("S1", _store_after_wait(), T, DEVICES, {})
    for p in ("kv-connector", "kv-connector-lazy"):
        cell("S1", p, T, DEVICES, {})
        cell("S2", p, T, DEVICES, {})
    cell("S2", "load-over-in-flight", ("stream",), both, {UAF: 37, RW: 39, EW: 44, CBU: 46})
    cell("S2", "load-over-in-flight", ("own-stream", "nic"), both, {**l2, FO: 47})
    cell("S2", "load-over-in-flight", ("own-stream-fenced",), both, l2)
    cell("S2", "load-over-in-flight", ("stream", "own-stream", "nic"), ("async",), {**l2, FO: 47, CI: 54})
    cell("S3", "free-at-abort", T, DEVICES, {UAF: 9, EW: 14, CBU: 19, CI: 22, FO: 26})
    cell("S3", "kv-connector", T, DEVICES, {})
    cell("S4", "load-over-in-flight", T, both, s4)
    cell("S4", "load-over-in-flight", T, ("async",), {**s4, CI: 32})
    cell("S4-local", "load-over-in-flight", T, both, {UAF: 17, RW: 18, EW: 22})
    cell("S4-local", "load-over-in-flight", T, ("async",), {UAF: 17, RW: 18, EW: 22, FO: 28, CI: 30})
    cell("S4", "kv-connector", T, DEVICES, {})
    cell("S4-local", "kv-connector", T, DEVICES, {})
    cell("S5", "kv-connector", T, DEVICES, {UAF: 19, EW: 29, FO: 30})
    cell("S5", "kv-connector", T, DEVICES, {}, lease=False)
    cell("S6", _s6_variant(), ("stream", "own-stream-fenced"), both, s6)
    cell("S6", _s6_variant(), ("own-stream",), both, {**s6, HKC: 20, FO: 54})
    cell("S6", _s6_variant(), ("nic",), both, {**s6, HKC: 20, FO: 53})
    cell("S6", _s6_variant(), ("stream", "nic"), ("async",), {**s6, HKC: 20, FO: 31, CBU: 47})
    cell("S6", _s6_variant(), ("own-stream",), ("async",), {**s6, HKC: 20, FO: 31, CBU: 48})
    cell("S6", "kv-connector-lazy", T, DEVICES, {})
    cell("S7", "host-key-at-store", T, DEVICES, {HKC: 14, FO: 52})
    for s in ("S7", "S8", "S8-recv"):
        cell(s, "kv-connector", T, DEVICES, {})
    return cells


CELLS = _cells()


@pytest.mark.parametrize("scenario,protocol,transfer,device,want,extra", CELLS,
                         ids=[f"{c[0]}-{c[1] if isinstance(c[1], str) else c[1]['name']}-{c[2]}-{c[3]}{'-' + str(c[5]) if c[5] else ''}"
                              for c in CELLS])
def test_the_verdicts_and_shortest_lengths_of_the_section(scenario, protocol, transfer, device, want, extra):
    broken, _ = run(scenario, protocol, transfer, device, **extra)
    assert broken == want


# (protocol, scenario, extra) -> peak, host peak, transfers, hits (B = 2, stream, lifo, own-stream)
REFERENCE = [
    ("kv-connector", "S1", {}, 2, 1, (3, 3), (0, 0)),
    ("store-ahead", "S1", {}, 2, 1, (3, 3), (0, 0)),
    ("load-over-in-flight", "S2", {}, 2, 2, (1, 4), (0, 1)),
    ("free-at-abort", "S3", {}, 2, 0, (0, 1), (0, 0)),
    ("load-over-in-flight", "S4", {}, 2, 0, (1, 1), (0, 0)),
    ("kv-connector", "S5", {}, 2, 0, (2, 2), (0, 0)),
    ("host-key-at-store", "S7", {}, 2, 1, (3, 3), (0, 0)),
    ("kv-connector", "S8", {}, 2, 2, (4, 5), (0, 0)),
]


@pytest.mark.parametrize("protocol,scenario,extra,peak,host_peak,transfers,hits", REFERENCE)
def test_the_reference_measures(protocol, scenario, extra, peak, host_peak, transfers, hits):
    _, x = run(scenario, protocol, **extra)
    assert (x.peak, x.host_peak, x.transfers_range, x.hits_range, x.cost_range) == (peak, host_peak, transfers, hits, (0, 0))


def test_outside_transfer_scenarios_the_new_measures_are_null():
    result = explore(scenario_from_dict(_s(pool=2, branch=[A3, {"prompt": 3, "after": "a"}]), "plain", PROTOCOLS, "plain"))
    figures = result.figures()
    assert figures["host_peak"] is None and figures["transfers"] is None


@pytest.mark.parametrize("change,message", [
    ({"cache": None, "host_pool": 2}, "only a cache scenario"),
    ({"cache": None, "lease": True}, "only a cache scenario"),
    ({"host_pool": 2000}, "host_pool"),
    ({"host_pool": "2"}, "host_pool"),
    ({"transfer": "dma"}, "transfer"),
    ({"faults": ["store", "zap"]}, "faults"),
    ({"faults": ["store", "store"]}, "twice"),
    ({"faults": "store"}, "faults"),
    ({"lease": "yes"}, "lease"),
])
def test_bad_scenario_keys_are_one_line(change, message):
    data = {**SCENARIOS["S1"], **change}
    if change.get("cache", "x") is None:
        del data["cache"]
        data["branch"] = [{"appends": 1}]
        data["prompt"] = 3
    with pytest.raises(SpecError, match=message) as err:
        scenario_from_dict(data, "s.toml", PROTOCOLS, "s")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("branch,message", [
    ({"prompt": 3, "source": "local"}, "source"),
    ({"prompt": 3, "sink": True}, "sink"),
])
def test_bad_roles_are_one_line(branch, message):
    with pytest.raises(SpecError, match=message):
        scenario_from_dict(_s(pool=2, branch=[branch]), "s.toml", PROTOCOLS, "s")


def test_a_role_outside_a_cache_scenario_is_refused():
    with pytest.raises(SpecError, match="only a cache scenario"):
        scenario_from_dict({"block_size": 2, "prompt": 3, "branch": [{"appends": 1, "source": "remote"}]}, "s.toml", PROTOCOLS, "s")


@pytest.mark.parametrize("table,step", [("finish", "host-lookup"), ("cancel", "load"), ("finish", "recv")])
def test_admission_steps_outside_admit_are_refused(table, step):
    protocol = _protocol("kv-connector")
    protocol[table]["steps"] = [step] + protocol[table]["steps"]
    with pytest.raises(SpecError, match="allowed only in"):
        scenario_from_dict({**SCENARIOS["S1"], "protocol": protocol}, "s.toml", PROTOCOLS, "s")


def test_a_transfer_step_outside_a_cache_scenario_is_refused():
    protocol = _protocol("cow") if (PROTOCOLS / "cow.toml").exists() else None
    assert protocol is not None
    protocol["finish"] = {"steps": ["store", "decref-all"]}
    with pytest.raises(SpecError, match="cache"):
        scenario_from_dict({"block_size": 2, "prompt": 3, "protocol": protocol, "branch": [{"appends": 1}]}, "s.toml", PROTOCOLS, "s")


def test_defaults_a_transfer_scenario_takes_kv_connector():
    s = scenario_from_dict(SCENARIOS["S1"], "s.toml", PROTOCOLS, "s")
    assert s.transfers and s.protocol.name == "kv-connector" and s.transfer == "nic" and s.faults == () and not s.lease
    partial = {"name": "only-cancel", "cancel": {"steps": ["wait-transfers", "wait-kernel", "decref-all"]}}
    s = scenario_from_dict({**SCENARIOS["S1"], "protocol": partial}, "s.toml", PROTOCOLS, "s")
    assert [step.op for step in s.protocol.admit] == _protocol("kv-connector")["admit"]["steps"]
    plain = scenario_from_dict(_s(pool=2, branch=[A3]), "s.toml", PROTOCOLS, "s")
    assert not plain.transfers and plain.protocol.name == "prefix-cache"


def test_in_a_cache_scenario_without_transfers_the_transfer_steps_launch_nothing():
    data = _s(pool=2, protocol="kv-connector", branch=[A3, {"prompt": 3, "after": "a"}])
    broken, x = run_data(data)
    assert broken == {} and x.host_peak is None


def run_data(data):
    result = explore(scenario_from_dict(data, "s", PROTOCOLS, "s"))
    return {v.invariant: v.length for v in result.verdicts.values() if v.outcome.value == "violated"}, result.x


@pytest.mark.parametrize("engine", ["bmc", "kind"])
def test_the_z3_engines_refuse_transfers_in_one_line(engine):
    result = CliRunner().invoke(main, ["check", "--engine", engine, str(ROOT / "specs" / "scenarios" / "failed-load.toml")])
    assert result.exit_code == 2 and "do not encode" in result.output and result.output.strip().count("\n") == 0


def test_the_engine_harness_refuses_transfer_keys():
    with pytest.raises(SpecError, match="engine harness"):
        scenario_from_dict({**SCENARIOS["S1"], "allocator": "m:f"}, "s.toml", PROTOCOLS, "s")


def test_transfer_scenarios_are_reduced_by_symmetry_and_by_partial_order_on_request():
    """Symmetry renames blocks and host blocks by default; on the async
    device under `nic` the default applies partial-order reduction with
    settled completions, on the stream device it leaves it off (no
    completion is settled) and says so, and --por applies it there
    (tests/test_model_reduce_transfers.py checks that every reduction
    reports what the unreduced search does)."""
    scenario = scenario_from_dict(SCENARIOS["S1"], "s", PROTOCOLS, "s")     # async, nic
    result = explore(scenario)
    assert result.x.reductions[0] == "block-id symmetry" and "settled completions" in result.x.reductions[1]
    assert "no violation" in result.choice
    streamed = scenario_from_dict({**SCENARIOS["S1"], "device": "stream"}, "s", PROTOCOLS, "s")
    result = explore(streamed)
    assert result.x.reductions == ("block-id symmetry",) and "on the stream device" in result.choice
    ordered = explore(streamed, SearchOptions(por=True))
    assert ordered.x.reductions[1].startswith("partial-order")


TRANSFER_FILES = sorted(p for p in (ROOT / "counterexamples").glob("*.json")
                        if json.loads(p.read_text()).get("scenario", {}).get("host_pool") is not None
                        or any("source" in b or "sink" in b for b in json.loads(p.read_text()).get("scenario", {}).get("branch", [])))


@pytest.mark.parametrize("path", TRANSFER_FILES, ids=[p.name for p in TRANSFER_FILES])
def test_the_views_read_transfer_counterexamples(path, tmp_path):
    cx = load_counterexample(str(path))
    assert replay(cx).ok
    runner = CliRunner()
    for args in (["explain", str(path)], ["graph", str(path), "-o", str(tmp_path / "g.svg")],
                 ["html", str(path), "-o", str(tmp_path / "p.html")], ["replay", str(path)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)


@pytest.mark.parametrize("name,said", [
    ("offload-eager-store.host-key-content", ["The store of block 0 to h0 completes before a's prefill lands: it copied block 0 as it is now, [_ _], into h0.",
                                              "h0 is now keyed (p0 p1) but holds [_ _]: its key names tokens it does not hold."]),
    ("offload-eager-store.faithful-output", ["The load of h0 into block 0 completes: block 0 now holds [_ _]. h0 is keyed (p0 p1) but held [_ _]: a stale load."]),
    ("failed-store.faithful-output", ["The store of a's block 0 fails: it reads and writes nothing; the connector will report the failure. "
                                      "h0 keeps the key (p0 p1) it was given at launch, holding [_ _] (its key names tokens it does not hold)."]),
    ("pd-consumer-abort.faithful-output", ["Block 0 is b's now (a freed it before its recv landed): the remote prefill's tokens overwrite [x0 x1]."]),
    ("offload-load-reuse.faithful-output", ["Still in flight and reading block 0: b's kernel for position 3, which will read these tokens."]),
    ("pd-producer-lease.faithful-output", ["a had p0 p1 there when the send was launched: block 0 was reused (a's lease expired before the send completed).",
                                           "what happened: the remote reader of branch a's send of block 0: at position 0 it expected p0 and read x2"]),
])
def test_explain_tells_what_a_transfer_did_wrong_in_the_engines_words(name, said):
    from cowcheck.api import explain
    text = explain(load_counterexample(str(ROOT / "counterexamples" / f"{name}.json")))
    for sentence in said:
        assert sentence in text, sentence


@pytest.mark.parametrize("name,host_peak", [("offload-kv-connector", 1), ("offload-eager-store", 1), ("offload-load-reuse", 2),
                                             ("failed-store", 1), ("failed-load", 2)])
def test_a_host_tier_has_a_shortest_host_peak_trace(name, host_peak, tmp_path):
    """`cowcheck check` writes <scenario>.host-peak.json beside the peak
    trace, as it writes the peak's: a shortest run to the host peak of
    DESIGN.md's table (no run one action shorter reaches it), which
    replays, and which the result's JSON names; a scenario without a host
    tier has none."""
    from cowcheck.api import check
    from cowcheck.engines.counterexample import HOST_PEAK
    from cowcheck.model.scenario import load_scenario
    from cowcheck.model.state import host_allocated
    from cowcheck.traces.output import write_result
    scenario = load_scenario(ROOT / "specs" / "scenarios" / f"{name}.toml")
    result = check(scenario)
    write_result(result, tmp_path)
    path = tmp_path / f"{name}.host-peak.json"
    assert result.figures()["host_peak_trace"] == str(path)
    cx = load_counterexample(str(path))
    committed = load_counterexample(str(ROOT / "counterexamples" / path.name))
    assert (cx.actions, cx.states, cx.host_peak) == (committed.actions, committed.states, committed.host_peak)
    assert (cx.kind, cx.host_peak, cx.invariant) == (HOST_PEAK, host_peak, None)
    replayed = replay(cx)
    assert replayed.ok and "host peak of" in replayed.model.message
    assert check(scenario, max_depth=cx.length - 1).x.host_peak < host_peak
    reached = [host_allocated(s) for s in replayed.model.states]
    assert reached[-1] == host_peak and max(reached[:-1]) < host_peak      # first reached at the last step


def test_no_host_tier_no_host_peak_trace(tmp_path):
    from cowcheck.api import check
    from cowcheck.model.scenario import load_scenario
    from cowcheck.traces.output import write_result
    result = check(load_scenario(ROOT / "specs" / "scenarios" / "pd-producer-lease.toml"))
    write_result(result, tmp_path)
    assert result.figures()["host_peak_trace"] is None and not list(tmp_path.glob("*.host-peak.json"))


# -- each bug: found, minimal, replayed in the model and on the pool, named ------------
#: the shipped scenario of each transfer bug: DESIGN.md's shortest lengths there, and the
#: real reports its protocol (or, for the lease, its scenario) names
BUGS = {
    "offload-eager-store": ({EW: 12, RW: 12, HKC: 13, FO: 52}, ("31341", "46278")),                  # S1, store-ahead
    "offload-eager-store-fenced": ({EW: 12, RW: 12}, ("31341", "46278")),                            # S1 fenced
    "offload-load-reuse": ({UAF: 37, RW: 38, EW: 44, CBU: 46, FO: 47}, ("47291",)),                  # S2, load-over-in-flight
    "pd-consumer-abort": ({UAF: 9, EW: 14, CBU: 19, CI: 22, FO: 26}, ("32255", "32564", "35049")),   # S3, free-at-abort
    "pd-consumer-ahead": ({UAF: 17, RW: 18, EW: 22, CBU: 25, FO: 26}, ("45357",)),                   # S4, load-over-in-flight
    "pd-consumer-ahead-local": ({UAF: 17, RW: 18, EW: 22}, ("45357",)),                              # S4-local
    "pd-producer-lease": ({UAF: 19, EW: 29, FO: 30}, ("52234",)),                                    # S5, the lease
    "early-key-lazy-offload": ({UAF: 17, RW: 18, EW: 19, HKC: 20, FO: 54}, ("46278",)),              # S6's variant
    "failed-store": ({HKC: 14, FO: 52}, ("LMCache 4991",)),                                           # S7, host-key-at-store
}


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_transfer_bug_is_found_minimal_replayed_and_named(name):
    """The bug's shipped scenario breaks exactly the invariants of DESIGN.md's
    table at its shortest lengths; no trace one action shorter breaks them;
    the committed counterexample is that trace and replays in the model and
    on a numpy KV pool (a faithful-output one goes wrong there at the same
    step); and the real report it stands for is named in its description."""
    from cowcheck.api import check
    from cowcheck.engines.invariants import select
    from cowcheck.model.scenario import load_scenario
    from cowcheck.traces.pool import replay_on_pool
    lengths, reports = BUGS[name]
    scenario = load_scenario(ROOT / "specs" / "scenarios" / f"{name}.toml")
    result = check(scenario)
    assert {v.invariant: v.length for v in result.verdicts.values() if v.holds is False} == lengths
    for inv, length in lengths.items():
        shorter = check(scenario, invariants=select([inv]), max_depth=length - 1)
        assert shorter.verdicts[inv].holds is not False, f"{inv} broke in fewer than {length} actions"
        cx = load_counterexample(str(ROOT / "counterexamples" / f"{name}.{inv}.json"))
        assert cx.length == length and cx.actions == result.verdicts[inv].counterexample.actions
        replayed = replay(cx)
        assert replayed.ok and replayed.model.step == length, (replayed.model.message, replayed.pool_message)
        first = replay_on_pool(cx.scenario, cx.actions, initial=cx.initial).first_divergence
        if inv == FO:
            assert first is not None and first.step == length
        else:
            assert first is None or first.step > length       # a discipline breaks before the output does
    named = f"{scenario.description} {scenario.protocol.description}"
    missing = [r for r in reports if r not in named]
    assert not missing, f"{name}'s descriptions do not name {missing}"


def test_every_transfer_bug_protocol_has_a_bug_scenario_above():
    from cowcheck.model.scenario import load_scenario
    covered = {load_scenario(ROOT / "specs" / "scenarios" / f"{name}.toml").protocol.name for name in BUGS}
    assert {"free-at-abort", "store-ahead", "load-over-in-flight", "host-key-at-store"} <= covered


# -- the transfer model as an override and a sweep axis ------------------------------
def test_transfer_overrides_the_model_and_names_it_in_the_scenario_and_the_json(tmp_path):
    """`--transfer` beside `--device`: the scenario is renamed with its
    transfer model, its expect is dropped, and the JSON names the model
    (null in a scenario that is not a transfer scenario)."""
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["check", str(ROOT / "specs/scenarios/offload-eager-store.toml"),
                                       str(ROOT / "specs/scenarios/cow-stream.toml"), "--transfer", "own-stream-fenced",
                                       "--json", str(out), "--out", str(tmp_path / "cx"), "-q"])
    assert result.exit_code == 2 and "--transfer" in result.output      # a fork scenario named: bad input
    result = CliRunner().invoke(main, ["check", str(ROOT / "specs/scenarios/offload-eager-store.toml"),
                                       str(ROOT / "specs/scenarios/prefix-cache-warm.toml"), "--transfer", "own-stream-fenced",
                                       "--json", str(out), "--out", str(tmp_path / "cx"), "-q"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    moved, plain = json.loads(out.read_text())
    assert moved["scenario"] == "offload-eager-store~store-ahead-stream-lifo-own-stream-fenced"
    assert moved["transfer"] == "own-stream-fenced" and moved["expect"] == []
    assert plain["scenario"].startswith("prefix-cache-warm~") and plain["transfer"] is None
    bad = CliRunner().invoke(main, ["check", str(ROOT / "specs/scenarios/offload-eager-store.toml"), "--transfer", "pcie"])
    assert bad.exit_code == 2 and "pcie" in bad.output


def test_a_folder_skips_the_fork_scenarios_under_a_transfer_override(tmp_path):
    (tmp_path / "fork.toml").write_text("block_size = 2\nprompt = 1\n[[branch]]\nappends = 1\n")
    (tmp_path / "t.toml").write_text((ROOT / "specs/scenarios/offload-kv-connector.toml").read_text())
    result = CliRunner().invoke(main, ["check", str(tmp_path), "--transfer", "stream", "--out", str(tmp_path / "cx"), "-q"])
    assert result.exit_code == 0, result.output
    assert "skipped 1 fork scenario(s): --transfer applies to cache scenarios only" in " ".join(result.output.split())


def test_a_sweep_grid_has_transfer_and_host_pool_axes():
    """`transfer` and `host_pool` are axes of cache grids; each cell is the
    scenario a file with those keys would be, named by its off-default
    values; a cell without a cache that sets one is that cell's error."""
    from cowcheck.sweeps.grid import expand, grid_from_dict
    grid = grid_from_dict({"grid": {"cache": ["prefix", "none"], "block_size": 2, "prompt": 3, "device": "stream",
                                    "protocol": "kv-connector", "transfer": ["nic", "stream"], "host_pool": 2,
                                    "prompts": [[3, ["x0", "x1", "x2"], 3]], "branches": 3, "appends": 0,
                                    "after": [["", "a", "b"]], "pool": 2}}, "g.toml", Path("."), "g")
    cells = expand([grid])
    names = [c.name for c in cells]
    assert names[0].endswith("-prefix-after_ab-p2-h2") and names[2].endswith("-prefix-after_ab-p2-h2-stream")
    nic, stream = cells[0].scenario, cells[2].scenario
    assert nic.transfers and str(nic.transfer) == "nic" and str(stream.transfer) == "stream" and stream.host_pool == 2
    assert cells[1].scenario is None and "cache" in cells[1].error
    with pytest.raises(SpecError) as err:
        grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "transfer": ["nic", "pcie"]}}, "g.toml", Path("."), "g")
    assert err.value.key == "grid.transfer[1]" and "own-stream-fenced" in err.value.message
