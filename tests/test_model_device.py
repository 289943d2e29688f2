"""The device models as one type (model.device.Device): the questions every
engine asks of it, the names files and JSON give it, and an unknown name
refused in one line at every entry point (scenario files, grids, counterexample
files, --device, the API), never read as some default."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest
import z3
from click.testing import CliRunner

import cowcheck
from cowcheck.cli import main
from cowcheck.model.device import Device, OpKind
from cowcheck.model.errors import SpecError
from cowcheck.model.queue import ready
from cowcheck.model.scenario import DEVICES, make_scenario
from cowcheck.model.state import Copy, Kernel
from cowcheck.model.system import ProtocolModel
from cowcheck.schemas import load
from cowcheck.symbolic.state import COPY_KIND, KERNEL_KIND
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.sweeps.shrink import simpler_modes

ROOT = Path(__file__).resolve().parent.parent
COPY, KERNEL = OpKind.COPY, OpKind.KERNEL
GOOD = "block_size = 2\nprompt = 3\n[[branch]]\nappends = 2\n[[branch]]\nappends = 2\n"
NAMES = ["async", "stream", "streams"]


# -- the questions ---------------------------------------------------------------
def test_what_each_device_orders_before_what():
    device_ops = (OpKind.COPY, OpKind.KERNEL)       # transfers are ordered by the transfer model
    assert not any(Device.ASYNC.orders(a, b) for a, b in product(device_ops, device_ops))
    assert all(Device.STREAM.orders(a, b) for a, b in product(device_ops, device_ops))
    assert [Device.STREAMS.orders(a, b) for a, b in product(device_ops, device_ops)] == [True, False, False, True]
    assert [d for d in Device if d.unordered] == [Device.ASYNC]
    # the question the z3 lemmas ask: does a kernel launched after a copy see it complete first
    assert [d for d in Device if d.orders(COPY, KERNEL)] == [Device.STREAM]


def _queue_state(kinds: str):
    """A state whose queue holds a copy (c) or a kernel (k) per letter, in launch order."""
    state = ProtocolModel(make_scenario(2, 3, [1, 1])).init_state()
    ops = {"c": Copy(0, 1, 1), "k": Kernel(0, 3, "a1", (0, 1), ("p0", "p1", "p2", "a1"))}
    return state._replace(queue=tuple(ops[k] for k in kinds))


@pytest.mark.parametrize("kinds,expected", [
    ("", {"async": [], "stream": [], "streams": []}),
    ("ckck", {"async": [0, 1, 2, 3], "stream": [0], "streams": [0, 1]}),
    ("kkcc", {"async": [0, 1, 2, 3], "stream": [0], "streams": [0, 2]}),
    ("ccc", {"async": [0, 1, 2], "stream": [0], "streams": [0]}),
])
def test_ready_is_what_no_earlier_op_is_ordered_before(kinds, expected):
    assert {d.value: ready(_queue_state(kinds), d) for d in Device} == expected


@pytest.mark.parametrize("device", list(Device))
def test_the_z3_queue_order_is_the_models(device):
    """layout.ready agrees with model.queue.ready on every queue of copies
    and kernels that fills the symbolic queue."""
    system = SymbolicSystem(make_scenario(2, 3, [1, 1], device=device))
    s = system.fresh("t.")
    slots = len(s.q)
    assert slots >= 2
    for kinds in product("ck", repeat=slots):
        solver = z3.Solver()
        solver.add(s.qlen == slots, *[o.kind == (COPY_KIND if k == "c" else KERNEL_KIND) for o, k in zip(s.q, kinds)])
        expected = ready(_queue_state("".join(kinds)), device)
        for i in range(slots):
            assert solver.check(system.ready(s, i) != (i in expected)) == z3.unsat, (kinds, i)


def test_ranks_order_the_shrinkers_simpler_modes():
    assert sorted(Device, key=lambda d: d.rank) == [Device.STREAM, Device.STREAMS, Device.ASYNC]
    assert len({d.rank for d in Device}) == len(Device)
    modes = [(s.device, s.reuse) for s in simpler_modes(make_scenario(2, 3, [1, 1], device="async", reuse="fifo"))]
    assert modes == [(Device.STREAM, "lifo"), (Device.STREAM, "fifo"), (Device.STREAMS, "lifo"), (Device.STREAMS, "fifo"),
                     (Device.ASYNC, "lifo")]


def test_each_device_has_a_one_line_description_in_the_help():
    for d in Device:
        assert d.description and "\n" not in d.description
        assert f"{d.value}: {d.description}" in Device.help()
    result = CliRunner().invoke(main, ["check", "--help"])
    assert "async: any in-flight" in " ".join(result.output.split())


# -- names ------------------------------------------------------------------------
def test_files_and_json_name_a_device_by_its_value():
    assert list(DEVICES) == NAMES == [d.value for d in Device]
    for d in Device:
        assert Device(d.value) is d and str(d) == f"{d}" == d.value
        assert json.dumps(d) == json.dumps(d.value)
        assert pickle.loads(pickle.dumps(d)) is d
    scenario = make_scenario(2, 3, [1, 1], device="streams")
    assert scenario.device is Device.STREAMS
    assert type(scenario.definition()["device"]) is str and scenario.definition()["device"] == "streams"
    assert make_scenario(2, 3, [1, 1]).device is Device.ASYNC        # the documented default


def test_the_json_schemas_list_every_device():
    """A new device is one new value of Device, and the schemas' enums with it."""
    def enums(node):
        if isinstance(node, dict):
            device = node.get("properties", {}).get("device")
            if isinstance(device, dict):        # (false: no device, as in the actual engine's counterexamples)
                yield device["enum"]
            for value in node.values():
                yield from enums(value)
        elif isinstance(node, list):
            for value in node:
                yield from enums(value)
    from cowcheck.enginetest.explore import DEVICE      # imports no torch
    found = [e for name in ("result", "counterexample") for e in enums(load(name))]
    # besides them, an engine-test result's device: the real engine on the CPU, not a device model
    assert found and all([d for d in e if d != DEVICE] == NAMES for e in found)


# -- an unknown name, at every entry point ----------------------------------------
def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result) -> str:
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def assert_names(line: str, *needles: str) -> None:
    for needle in ("gpu", *NAMES, *needles):
        assert needle in line, f"{needle!r} not in: {line}"


@pytest.mark.parametrize("value", ['"gpu"', '"GPU"', '""', "3", '["stream"]'])
def test_a_scenario_file(tmp_path, value):
    path = tmp_path / "s.toml"
    path.write_text(f"device = {value}\n" + GOOD)
    line = one_line(invoke("check", path, "--out", tmp_path / "cx"))
    for needle in ("s.toml", "device", "allowed", *NAMES):
        assert needle in line, line


def test_a_grid_file(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[grid]\nblock_size = 2\nprompt = 3\ndevice = ["async", "gpu"]\n')
    assert_names(one_line(invoke("sweep", path, "--workers", "0", "--json", tmp_path / "r.json")), "g.toml", "grid.device[1]")


def test_the_command_line(tmp_path):
    """Click's usage error, one line and exit 2 from the real executable."""
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    exe = shutil.which("cowcheck")
    proc = subprocess.run(([exe] if exe else [sys.executable, "-m", "cowcheck"]) + ["check", str(path), "--device", "gpu"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and not proc.stdout, proc.stderr
    assert_names(lines[0], "--device")


@pytest.mark.parametrize("command", ["replay", "explain"])
def test_a_counterexample_file(tmp_path, command):
    data = json.loads((ROOT / "counterexamples" / "premature-decrement.exclusive-write.json").read_text())
    data["scenario"]["device"] = "gpu"
    path = tmp_path / "bad-device.json"
    path.write_text(json.dumps(data))
    assert_names(one_line(invoke(command, path)), "bad-device.json", "device")


def test_make_scenario():
    with pytest.raises(SpecError) as err:
        make_scenario(2, 3, [1, 1], device="gpu")
    assert err.value.key == "device"
    assert_names(str(err.value), "allowed")


@pytest.mark.parametrize("value", ["gpu", ""])
def test_the_apis_override(value):
    """with_overrides (what --device and check's callers use) refuses a name it
    does not know; it used to keep it, and the device then ran as streams."""
    scenario = make_scenario(2, 3, [1, 1])
    with pytest.raises(SpecError) as err:
        cowcheck.with_overrides(scenario, device=value)
    assert err.value.key == "device"
    assert_names(str(err.value).replace("''", "gpu"), "allowed")
    assert cowcheck.with_overrides(scenario, device="stream").device is Device.STREAM


def test_check_takes_no_device_keyword():
    """check() overrides nothing: a device keyword is refused, not ignored."""
    with pytest.raises(SpecError, match="device"):
        cowcheck.check(make_scenario(2, 3, [1, 1]), device="gpu")


def test_a_scenario_changed_in_code_takes_the_device_by_name():
    """dataclasses.replace(scenario, device="stream") names the device as a
    file does: checked as that Device; an unknown name is one line."""
    import dataclasses
    import cowcheck
    from cowcheck.model.errors import SpecError
    from cowcheck.model.scenario import load_scenario
    racy = load_scenario(Path(__file__).resolve().parent.parent / "specs" / "scenarios" / "premature-decrement.toml")
    on_stream = dataclasses.replace(racy, device="stream")
    assert on_stream.device is Device.STREAM
    assert str(cowcheck.check(on_stream).summary) == "safe but undisciplined"
    with pytest.raises(SpecError, match="unknown value 'gpu'; allowed: async, stream, streams"):
        dataclasses.replace(racy, device="gpu")
