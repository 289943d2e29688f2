"""Sweeps (docs/how-to/sweeps.md): grids expand in the documented order, each cell
is checked by the same code as `cowcheck check`, and the results are the
same serially, on an embedded LocalCluster of processes, and on a separate
`dask scheduler` with two `dask worker` processes; resuming, Ctrl-C, a
worker that dies, the HTML page, and bad input. Real Dask throughout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cowcheck
from cowcheck.api import as_scenario
from cowcheck.cli.common import scenario_files
from cowcheck.model.errors import SpecError
from cowcheck.sweeps.grid import AXES, expand, grid_from_dict, load_grid
from cowcheck.sweeps.runner import Runner, run_cell, task_for
from cowcheck.sweeps.sweep import read_done

ROOT = Path(__file__).resolve().parent.parent
#: what differs from run to run (timings, memory)
VOLATILE = ("seconds", "states_per_second", "bytes_per_state")

SMALL = """[grid]
name = "small"
protocol = ["cow", "premature-decrement"]
device = ["async", "stream"]
block_size = 2
prompt = 3
branches = 2
appends = [1, 2]
[budget]
max_states = 100000
"""


def stable(cells: list[dict]) -> list[dict]:
    """The cells without their timings (each search's seconds too)."""
    return [{k: [{**search, "seconds": None} for search in v] if k == "searches" else v
             for k, v in c.items() if k not in VOLATILE} for c in cells]


def cowcheck_cmd(*args: str, cwd: Path, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cowcheck", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


# -- grids ----------------------------------------------------------------------------
def test_expansion_order_and_names(small):
    grid = load_grid(small)
    cells = expand([grid])
    assert len(cells) == 8 and [c.index for c in cells] == list(range(8))
    # the axes in AXES order, the last varying fastest
    order = [(c.coordinates["protocol"], c.coordinates["device"], c.coordinates["appends"]) for c in cells]
    assert order == [(p, d, a) for p in ("cow", "premature-decrement") for d in ("async", "stream") for a in (1, 2)]
    assert list(cells[0].coordinates) == list(AXES)
    assert cells[3].name == "small~cow-stream-lifo-B2-L3-2x2"
    assert cells[3].scenario is not None and cells[3].scenario.pool == 2 + 4 * 1     # the default pool


def test_ranges_lists_and_per_branch_appends():
    grid = grid_from_dict({"grid": {"block_size": {"from": 1, "to": 5, "step": 2}, "prompt": [3, 1],
                                    "appends": [[2, 1], [0, 0]], "may_cancel": [0, 1], "pool": ["default", 4]}},
                          "g.toml", Path("."), "g")
    assert grid.axes["block_size"] == [1, 3, 5] and grid.axes["prompt"] == [3, 1]
    cells = expand([grid])
    assert len(cells) == 3 * 2 * 2 * 2 * 2
    assert cells[0].name == "g~cow-async-lifo-B1-L3-2+1"
    assert cells[3].name == "g~cow-async-lifo-B1-L3-2+1-c1-p4"
    assert [b.may_cancel for b in cells[3].scenario.branches] == [False, True]     # the last k branches


def test_a_program_axis_gives_forks_and_speculation():
    """One program for every branch, or one per branch, where a branch
    another's program forks is its child."""
    grid = grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "branches": 2, "may_cancel": [0, 1],
                                    "program": [["speculate 2", "append"], [["append", "fork b", "append"], ["append"]]]}},
                          "g.toml", Path("."), "g")
    cells = expand([grid])
    assert [c.name for c in cells] == ["g~cow-async-lifo-B2-L3-2xS2A", "g~cow-async-lifo-B2-L3-2xS2A-c1",
                                       "g~cow-async-lifo-B2-L3-AFbA+A", "g~cow-async-lifo-B2-L3-AFbA+A-c1"]
    same, forked = cells[0].scenario.branches, cells[3].scenario.branches
    assert [b.program for b in same] == [("speculate 2", "append")] * 2 and all(b.parent is None for b in same)
    assert forked[0].program == ("append", "fork b", "append") and forked[0].parent is None
    assert forked[1].parent == 0 and forked[1].may_cancel
    assert cells[0].coordinates["appends"] is None
    results = cowcheck.sweep([grid], workers=0)
    assert [c.verdict for c in results.cells] == ["safe and disciplined"] * 4


def test_an_allocator_axis_checks_code_through_the_harness():
    grid = grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "device": "stream",
                                    "allocator": ["cowcheck.specs.allocators.engine:correct",
                                                  "cowcheck.specs.allocators.engine:double_free_after_cow"]}},
                          "g.toml", Path("."), "g")
    cells = expand([grid])
    assert [c.name for c in cells] == ["g~engine.correct-stream-B2-L3-2x1",
                                       "g~engine.double_free_after_cow-stream-B2-L3-2x1"]
    result = cowcheck.sweep([grid], workers=0)
    assert [c.verdict for c in result.cells] == ["safe and disciplined", "unsafe"]
    assert "allocator-error" in result.cells[1].broken()
    with pytest.raises(SpecError) as err:
        grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "protocol": "cow", "allocator": "m:f"}}, "g.toml", Path("."), "g")
    assert err.value.key == "grid.allocator"
    # reuse belongs to the allocator (issue 27, item 15): a grid cannot give it
    with pytest.raises(SpecError) as err:
        grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "reuse": ["lifo", "fifo"], "allocator": "m:f"}}, "g.toml", Path("."), "g")
    assert err.value.key == "grid.reuse" and "its own order" in err.value.message


def test_a_scheduler_axis_checks_code_through_the_scheduler_harness():
    """`scheduler` takes the place of `protocol` as `allocator` does; its
    path is relative to the grid file. The toy scheduler whose abort frees
    at once under two plans in flight breaks no-use-after-free where the
    request may be cancelled; a cell without a cache is that cell's error."""
    tests = Path(__file__).resolve().parent
    table = {"block_size": 2, "prompt": 3, "device": "stream", "cache": "prefix", "pool": 2, "may_cancel": 1,
             "prompts": [[3, ["q0", "q1", "q2"]]], "after": [["", "a"]],
             "scheduler": ["toy_schedulers.py:correct", "toy_schedulers.py:ahead_eager_abort"]}
    grid = grid_from_dict({"grid": table}, str(tests / "g.toml"), tests, "g")
    assert [c.name for c in expand([grid])] == ["g~toy_schedulers.correct-stream-B2-P3+q0.q1.q2-2x1-prefix-after_a-c1-p2",
                                                "g~toy_schedulers.ahead_eager_abort-stream-B2-P3+q0.q1.q2-2x1-prefix-after_a-c1-p2"]
    result = cowcheck.sweep([grid], workers=0)
    assert result.cells[0].verdict == "safe and disciplined"
    assert result.cells[1].verdict == "safe but undisciplined" and "no-use-after-free" in result.cells[1].broken()
    assert result.cells[0].data["scheduler"] == "toy_schedulers.py:correct"
    for extra, key in (({"protocol": "cow"}, "grid.scheduler"), ({"allocator": "m:f"}, "grid.scheduler"),
                       ({"reuse": "fifo"}, "grid.reuse")):
        with pytest.raises(SpecError) as err:
            grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "scheduler": "m:f", **extra}}, "g.toml", Path("."), "g")
        assert err.value.key == key, extra
    [cell] = expand([grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "scheduler": "m:f"}}, "g.toml", Path("."), "g")])
    assert cell.data is not None and "cache" in cell.data["error"]


def test_a_program_cell_that_makes_no_scenario_is_invalid_and_says_why():
    grid = grid_from_dict({"grid": {"block_size": 2, "prompt": 3, "branches": 3,
                                    "program": [[["fork b"], ["append"]], [["fork z"]]]}}, "g.toml", Path("."), "g")
    first, second = expand([grid])
    assert "2 programs given for 3 branches" in first.error
    assert "program" in second.error


@pytest.mark.parametrize("data, key, words", [
    ({"grid": {"block_size": 2, "prompt": 3, "colour": 1}}, "grid.colour", "unknown key"),
    ({"grid": {"block_size": 2, "prompt": 3}, "cells": 1}, "cells", "unknown key"),
    ({"grid": {"block_size": 2, "prompt": {"from": 4, "to": 3}}}, "grid.prompt", "empty range"),
    ({"grid": {"block_size": [], "prompt": 3}}, "grid.block_size", "empty list"),
    ({"grid": {"block_size": 2, "prompt": 3, "device": ["async", "gpu"]}}, "grid.device[1]", "unknown value 'gpu'"),
    ({"grid": {"block_size": 2, "prompt": 3, "protocol": "nope"}}, "grid.protocol", "unknown built-in protocol"),
    ({"grid": {"block_size": 2, "prompt": 3}, "budget": {"seconds": 0}}, "budget.seconds", "above 0"),
    ({"grid": {"block_size": 2, "prompt": 3}, "budget": {"states": 5}}, "budget.states", "unknown key"),
    ({"grid": {"block_size": 2}}, "grid.prompt", "missing"),
    ({"grid": {"block_size": [2, 2], "prompt": 3}}, "grid.block_size[1]", "listed twice"),
    ({"block_size": 2}, "grid", "missing"),
    ({"grid": {"block_size": 2, "prompt": 3, "appends": 1, "program": [["append"]]}}, "grid.program", "either 'appends' or 'program'"),
    ({"grid": {"block_size": 2, "prompt": 3, "program": ["append"]}}, "grid.program", "list of alternatives"),
    ({"grid": {"block_size": 2, "prompt": 3, "program": [[1]]}}, "grid.program[0]", "a program is a list of operations"),
])
def test_bad_grids_name_the_key(data, key, words):
    with pytest.raises(SpecError) as err:
        grid_from_dict(data, "g.toml", Path("."), "g")
    assert err.value.key == key and words in err.value.message and err.value.source == "g.toml"


def test_check_skips_grid_files():
    found = scenario_files((str(ROOT / "specs"),))
    assert found and not any("grids" in p.parts for p in found)
    assert list((ROOT / "specs" / "grids").glob("*.toml"))


# -- one cell is one `cowcheck check` -------------------------------------------------------
def test_a_cell_is_the_result_check_gives(small):
    cell = expand([load_grid(small)])[5]          # premature-decrement async 2x2
    answer = run_cell(task_for(cell.scenario, {}))
    direct = cowcheck.check(cell.scenario)
    assert stable([answer["result"]]) == stable([direct.to_json()])
    assert set(answer["counterexamples"]) == {"faithful-output", "exclusive-write", "no-use-after-free"}
    assert answer["counterexamples"]["faithful-output"] == direct.verdicts["faithful-output"].counterexample.to_json()


def test_the_api_and_its_json(small, tmp_path):
    assert callable(cowcheck.sweep) and callable(cowcheck.shrink)
    result = cowcheck.sweep(small, workers=0, json_path=tmp_path / "r.json", out=tmp_path / "cx")
    assert result.complete and not result.interrupted and len(result.cells) == 8
    cell = result.cells[5]
    assert cell.verdict == "unsafe" and cell.broken() == {"faithful-output": 27, "exclusive-write": 7, "no-use-after-free": 8}
    assert cell.verdicts["faithful-output"].outcome is cowcheck.Outcome.VIOLATED
    assert cowcheck.replay(cell.counterexample("faithful-output")).ok
    count, smallest = result.by_invariant()["exclusive-write"]
    assert count == 4 and smallest.name == "small~premature-decrement-stream-lifo-B2-L3-2x1"   # stream before async
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["format"] == 1 and data["kind"] == "sweep" and data["complete"] and len(data["cells"]) == 8
    # every cell is check --json's object (the result schema) plus its coordinates
    from jsonschema import Draft202012Validator
    from cowcheck.schemas import load
    validator = Draft202012Validator(load("result"))
    for entry in data["cells"]:
        assert entry["coordinates"]["protocol"] in ("cow", "premature-decrement")
        plain = {k: v for k, v in entry.items() if k not in ("cell", "grid", "coordinates")}
        assert not list(validator.iter_errors(plain))
        for v in entry["verdicts"].values():
            assert v["counterexample"] is None or Path(v["counterexample"]).is_file()


def test_an_invalid_cell_is_reported_and_the_others_run(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[grid]\nblock_size = 2\nprompt = 4\nbranches = 2\nmay_cancel = [0, 3]\npool = [1, "default"]\n')
    result = cowcheck.sweep(path, workers=0)
    verdicts = [c.verdict for c in result.cells]
    assert verdicts == ["invalid", "safe and disciplined", "invalid", "invalid"]
    assert "pool" in result.cells[0].error and "cannot hold the prompt" in result.cells[0].error
    assert "may_cancel" in result.cells[2].error and "the cell has 2" in result.cells[2].error
    run = cowcheck_cmd("sweep", str(path), "--workers", "0", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("cowcheck: error:")]
    assert len(lines) == 3 and "cell 0 (g~cow-async-lifo-B2-L4-2x1-p1)" in lines[0]


def test_resume_skips_the_cells_already_done(small, tmp_path):
    out = tmp_path / "r.json"
    first = cowcheck.sweep(small, workers=0, json_path=out)
    data = json.loads(out.read_text())
    data["cells"] = data["cells"][:5]
    out.write_text(json.dumps(data))
    again = cowcheck.sweep(small, workers=0, json_path=out)
    assert [c.resumed for c in again.cells] == [True] * 5 + [False] * 3
    assert stable([c.data for c in again.cells]) == stable([c.data for c in first.cells])
    out.write_text("[1, 2]")
    with pytest.raises(SpecError, match="not the --json of a sweep"):
        cowcheck.sweep(small, workers=0, json_path=out)


# -- Dask ---------------------------------------------------------------------------------------
def test_a_local_cluster_of_processes_gives_the_serial_results(small, tmp_path):
    serial = cowcheck.sweep(small, workers=0)
    with Runner(workers=2) as runner:
        parallel = cowcheck.sweep(small, runner=runner)
        pids = set(runner.client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids
    assert stable([c.data for c in parallel.cells]) == stable([c.data for c in serial.cells])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_external_scheduler_and_two_workers(small, tmp_path):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1, a
    sweep through --scheduler, the same results as the serial run."""
    dask = str(Path(sys.executable).parent / "dask")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler", "w"), cwd=tmp_path)]
    try:
        for i in range(2):
            procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=open(logs / f"worker{i}", "w"), cwd=tmp_path))
        from distributed import Client
        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        run = cowcheck_cmd("sweep", str(small), "--scheduler", address, "--json", "remote.json", cwd=tmp_path)
        assert run.returncode == 1, run.stderr        # premature-decrement is unsafe
        assert "Traceback" not in run.stderr
        remote = json.loads((tmp_path / "remote.json").read_text())["cells"]
        serial = cowcheck.sweep(small, workers=0)
        assert stable(remote) == stable([c.data for c in serial.cells])
        assert "scheduler tcp://127.0.0.1" in run.stdout
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_an_unreachable_scheduler_is_one_line(small, tmp_path):
    start = time.perf_counter()
    run = cowcheck_cmd("sweep", str(small), "--scheduler", f"tcp://127.0.0.1:{_free_port()}", cwd=tmp_path)
    assert time.perf_counter() - start < 20
    assert run.returncode == 2 and run.stdout == "" or "cell" not in run.stdout
    errors = [line for line in run.stderr.splitlines() if "cowcheck: error:" in line]
    assert len(errors) == 1 and "cannot reach the Dask scheduler" in errors[0], run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.splitlines() == ["8 cell(s) in 1 grid(s)", *errors], "no progress bar before the error line (issue 27, item 25)"


def test_a_grid_of_a_hundred_million_cells_is_counted_and_refused(tmp_path):
    """The count comes first, and a grid over the bound is one line and
    exit 2, at once, instead of growing memory in silence (issue 27, item 5)."""
    (tmp_path / "huge.toml").write_text('[grid]\nblock_size = {from = 1, to = 10}\nprompt = {from = 0, to = 59}\n'
                                        'branches = {from = 1, to = 4}\nappends = [0, 1, 2, 3, 4]\n'
                                        f'pool = {list(range(10, 60))}\n'
                                        'device = ["async", "stream", "streams"]\n'
                                        'reuse = ["lifo", "fifo", "any"]\nmay_cancel = [0, 1, 2, 3]\n'
                                        'protocol = ["cow", "premature-decrement", "double-decrement", "holds", "fork-no-incref"]\n')
    start = time.perf_counter()
    run = cowcheck_cmd("sweep", "huge.toml", "--workers", "0", cwd=tmp_path, timeout=60)
    assert time.perf_counter() - start < 30
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and lines[0] == "108,000,000 cell(s) in 1 grid(s)", run.stderr
    assert lines[1:] == ["cowcheck: error: huge.toml: key 'grid': 108,000,000 cells; a sweep takes at most 100,000: "
                         "give an axis fewer values, or split the grid"]


def test_shrink_with_an_unreachable_scheduler_is_one_line(tmp_path):
    cx = ROOT / "counterexamples" / "premature-decrement.exclusive-write.json"
    run = cowcheck_cmd("shrink", str(cx), "--scheduler", f"tcp://127.0.0.1:{_free_port()}", "--out", "shrunk", cwd=tmp_path)
    assert run.returncode == 2 and "cannot reach the Dask scheduler" in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr


@pytest.mark.slow
def test_a_cluster_whose_every_worker_died_stops_with_what_finished(tmp_path):
    """An external cluster (`dask scheduler`, one `dask worker`) whose only
    worker is killed mid-sweep: the sweep says so in one line, writes the
    cells that finished and exits 3 (incomplete), instead of waiting
    forever (issue 27, item 12)."""
    path = tmp_path / "g.toml"
    path.write_text('[grid]\nname = "long"\nblock_size = 4\nprompt = 6\nbranches = [1, 2, 6]\nappends = [1, 4]\n')  # 6x4: minutes
    dask = [sys.executable, "-m", "distributed.cli.dask_{}"]    # this Python's Dask, whatever the `dask` script's first line says
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([*dask[:2], dask[2].format("scheduler"), "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                               "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)]
    try:
        procs.append(subprocess.Popen([*dask[:2], dask[2].format("worker"), address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                                       "--no-nanny"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path))
        from distributed import Client
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
        sweep = subprocess.Popen([sys.executable, "-m", "cowcheck", "sweep", str(path), "--scheduler", address, "--json", "r.json",
                                  "--no-workers-timeout", "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 10
        while time.time() < deadline and not (tmp_path / "r.json").exists():
            time.sleep(0.1)            # until a checkpoint is written, or the quick cells are surely done
        procs[1].kill()
        try:
            out, err = sweep.communicate(timeout=60)
        finally:
            sweep.kill()
        assert sweep.returncode == 3, out + err
        assert "Traceback" not in err, err
        (line,) = [line for line in out.splitlines() if line.startswith("incomplete")]
        assert f"no worker left on {address} for 2 s" in line
        done = json.loads((tmp_path / "r.json").read_text())
        assert not done["complete"] and 1 <= len(done["cells"]) < 6
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(timeout=20)


def test_a_worker_that_dies_has_its_cells_rerun(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[grid]\nname = "w"\nprotocol = ["cow", "premature-decrement"]\nblock_size = 2\nprompt = 3\n'
                    'appends = [1, 2]\nmay_cancel = [0, 1]\ndevice = ["async", "streams"]\n')
    killed: list[int] = []
    with Runner(workers=2) as runner:
        def kill_one(result, cell) -> None:
            if not killed:
                pid = next(iter(runner.client.run(os.getpid).values()))
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        parallel = cowcheck.sweep(path, runner=runner, progress=kill_one)
    assert killed and parallel.complete and all(c.verdict != "failed" for c in parallel.cells)
    serial = cowcheck.sweep(path, workers=0)
    assert stable([c.data for c in parallel.cells]) == stable([c.data for c in serial.cells])


def test_ctrl_c_writes_what_finished_and_a_rerun_goes_on(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[grid]\nname = "slow"\nprotocol = "cow"\nblock_size = 2\nprompt = 3\nbranches = 3\n'
                    'appends = 1\nmay_cancel = [0, 1, 2]\ndevice = ["async", "stream", "streams"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "cowcheck", "sweep", str(path), "--workers", "2", "--json", "r.json"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:          # wait until some cells are written
        time.sleep(0.3)
        try:
            if len(json.loads((tmp_path / "r.json").read_text())["cells"]) >= 2:
                break
        except (OSError, ValueError):
            pass
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in out
    done = json.loads((tmp_path / "r.json").read_text())
    assert done["interrupted"] and not done["complete"] and 2 <= len(done["cells"]) < 9
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # a rerun with the same file keeps every finished cell
    assert len(read_done(tmp_path / "r.json", [load_grid(path)])) == len(done["cells"])


# -- the page ----------------------------------------------------------------------------------
def test_the_html_page_labels_every_cell_and_links_the_violations(small, tmp_path):
    (tmp_path / "page").mkdir()
    run = cowcheck_cmd("sweep", str(small), "--workers", "0", "--html", "page/grid.html", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    text = (tmp_path / "page" / "grid.html").read_text()
    assert "Content-Security-Policy" in text and "<script src" not in text
    for label in ("UNSAFE", "UNDISCIPLINED", "SAFE"):
        assert f'<span class="tag">{label}</span>' in text
    import re
    links = re.findall(r'href="([^"]+\.html)"', text)
    assert len(links) == 4            # the four premature-decrement cells
    for link in links:
        page = tmp_path / "page" / link
        assert page.is_file() and "cowcheck-data" in page.read_text()
    assert (tmp_path / "page" / "grid" / "small~premature-decrement-async-lifo-B2-L3-2x2.faithful-output.json").is_file()


TWO_CELLS = '[grid]\nname = "g"\nprotocol = ["cow", "premature-decrement"]\nblock_size = 2\nprompt = 3\nbranches = 2\nappends = 1\n'


def test_the_progress_bar_is_there_before_the_cells_are_made(tmp_path, monkeypatch):
    """Issue 27, item 5: a big grid's cells take a while to make; the bar
    counts them from the start, then the cells checked."""
    from click.testing import CliRunner
    from cowcheck.cli import main, sweep as sweep_cli
    (tmp_path / "g.toml").write_text(TWO_CELLS)
    events: list = []
    real_init, real_expand, real_checking = sweep_cli.SweepProgress.__init__, sweep_cli.expand, sweep_cli.SweepProgress.checking

    def init(self, console, total):
        real_init(self, console, total)
        events.append(("bar", total))

    def expand(grids, made=None):
        events.append("making")
        return real_expand(grids, made=lambda n: (events.append(("made", n)), made(n) if made else None))

    def checking(self, total):
        events.append(("checking", self.bar.tasks[0].completed, self.bar.tasks[0].fields["phase"]))
        real_checking(self, total)

    monkeypatch.setattr(sweep_cli.SweepProgress, "__init__", init)
    monkeypatch.setattr(sweep_cli.SweepProgress, "checking", checking)
    monkeypatch.setattr(sweep_cli, "expand", expand)
    result = CliRunner().invoke(main, ["sweep", str(tmp_path / "g.toml"), "--workers", "0"])
    assert result.exit_code == 0, result.output
    assert events == [("bar", 2), "making", ("made", 2), ("checking", 2, "made")]
    assert result.stderr.splitlines()[0] == "2 cell(s) in 1 grid(s)"


def test_summary_leaves_the_per_cell_table_out_and_so_does_a_big_grid(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from cowcheck.cli import main, sweep as sweep_cli
    (tmp_path / "g.toml").write_text(TWO_CELLS)

    def run(*flags: str) -> str:
        result = CliRunner().invoke(main, ["sweep", str(tmp_path / "g.toml"), "--workers", "0", *flags])
        assert result.exit_code == 0, result.output
        return result.stdout

    full = run()
    assert "per cell" in full and "g~cow-async-lifo-B2-L3-2x1 " in full and "left out" not in full
    summary = run("--summary")
    assert "per invariant" in summary and "exclusive-write" in summary and "per cell" not in summary
    assert "g~cow-async-lifo-B2-L3-2x1 " not in summary
    assert "per-cell table left out (--summary): --per-cell prints it; --json and --html keep every cell" in summary
    assert summary.rstrip().splitlines()[-1].startswith("2 cell(s): 1 safe and disciplined, 1 safe but undisciplined")
    monkeypatch.setattr(sweep_cli, "PER_CELL_MAX", 1)
    big = run()
    assert "per cell" not in big and "per-cell table left out (2 cells, more than 1): --per-cell prints it" in big
    assert "per cell" in run("--per-cell")


# -- the page of several grids, in the browser ----------------------------------------------
#: the longest list of broken invariants a cell of the shipped grids shows, in every other cell
WORST = {"faithful-output": 27, "no-underflow": 17, "exclusive-write": 18, "refcount-write": 12, "no-use-after-free": 10,
         "refcount-exact": 12, "copy-before-use": 14}


def shipped_grids_sweep():
    """The shipped grids' cells with made-up verdicts (checking them all
    takes a while): every other cell unsafe with the longest list of
    broken invariants."""
    from cowcheck.sweeps.grid import grid_files
    from cowcheck.sweeps.sweep import Sweep
    grids = [load_grid(p) for p in grid_files(ROOT / "specs" / "grids")]
    cells = expand(grids)
    for c in cells:
        broken = WORST if c.index % 2 else {}
        c.data = {"summary": "unsafe" if broken else "safe and disciplined", "complete": True,
                  "verdicts": {i: {"outcome": "violated", "length": n, "kind": "harm"} for i, n in broken.items()}}
    return Sweep(grids, cells)


def test_the_page_of_several_grids_has_a_table_per_grid_with_its_own_axes():
    from cowcheck.sweeps.page import COLUMNS_PER_TABLE, sweep_html
    import re
    result = shipped_grids_sweep()
    text = sweep_html(result, {})
    sections = re.findall(r'<section class="grid-section" id="grid-([^"]+)">(.*?)</section>', text, re.S)
    assert [name for name, _ in sections] == [g.name for g in result.grids]
    for name, body in sections:
        heads = re.findall(r"<thead><tr>(.*?)</tr></thead>", body, re.S)
        assert heads and all(h.count('scope="col"') - 1 <= COLUMNS_PER_TABLE for h in heads)
        axes = set(re.findall(r'<span class="axis">([a-z_]+)</span>', body))
        grid = next(g for g in result.grids if g.name == name)
        assert axes == {a for a, values in grid.axes.items() if len(values) > 1} - {"protocol", "allocator", "device", "reuse"}
        cells = sum(len(re.findall(r'<td class="v-', t)) for t in re.findall(r"<tbody>(.*?)</tbody>", body, re.S))
        assert cells == grid.size, name
    append_only = dict(sections)["append-only"]
    assert "In every cell: reuse lifo · block_size 2 · prompt 3 · branches 2 · pool default" in append_only
    assert "program" not in append_only and "prompts" not in append_only
    assert "In every cell: reuse the allocator&#x27;s" in dict(sections)["engine-code"]


def test_the_page_of_several_grids_reads_in_a_window_1400_px_wide(browser, tmp_path):
    """Issue 27, item 6: no column squeezed to a letter's width, no word
    broken down a column, nothing cut off or sticking out, and not 21,000 px tall."""
    from conftest import fits, opened, screenshot
    from cowcheck.sweeps.page import sweep_html
    path = tmp_path / "grids.html"
    path.write_text(sweep_html(shipped_grids_sweep(), {}))
    with opened(browser, path, width=1400) as page:
        assert fits(page, 1400)
        seen = page.evaluate("""() => [...document.querySelectorAll('table.cells')].map(t => ({
            width: t.getBoundingClientRect().width, room: t.parentElement.clientWidth,
            columns: [...t.querySelectorAll('thead th')].map(th => th.getBoundingClientRect().width),
            words: [...t.querySelectorAll('.inv, .tag')].map(e => [e.textContent, e.getBoundingClientRect().width,
                                                                              e.getBoundingClientRect().height]),
        }))""")
        assert len(seen) >= 5
        for table in seen:
            assert table["width"] <= table["room"], table            # nothing cut off behind a scroll bar
            assert min(table["columns"]) >= 120, table["columns"]    # 8rem: a word and its length on a line
        for text, width, height in (w for t in seen for w in t["words"]):
            assert width >= 40 and height < 60, (text, width, height)   # no word stacked letter by letter
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height < 12000, height       # every other cell with seven broken invariants; the real page is about 6,000
        screenshot(page, "sweep-several-grids")


FREE_IN_FLIGHT_GRID = """[grid]
name = "g"
protocol = "free-in-flight"
device = "async"
cache = "prefix"
block_size = 2
prompt = 0
branches = 2
appends = 1
prompts = [[3, 3]]
after = [["b", ""]]
may_cancel = 1
"""


def test_a_cache_cell_runs_the_protocol_a_scenario_file_runs(tmp_path):
    """A cache protocol that leaves out [finish] and [rollback] takes
    prefix-cache's; inlined into a cell it must still (free-in-flight's
    reference row: faithful-output at 26, not cow's finish order's 27)."""
    grid = tmp_path / "g.toml"
    grid.write_text(FREE_IN_FLIGHT_GRID)
    scenario = tmp_path / "s.toml"
    scenario.write_text('cache = "prefix"\nprotocol = "free-in-flight"\nblock_size = 2\n'
                        '[[branch]]\nprompt = 3\nappends = 1\nafter = "b"\n'
                        '[[branch]]\nprompt = 3\nappends = 1\nmay_cancel = true\n')
    cell = expand([load_grid(grid)])[0].scenario
    direct = as_scenario(scenario)
    assert (cell.protocol.finish, cell.protocol.rollback) == (direct.protocol.finish, direct.protocol.rollback)
    result = cowcheck.check(cell)
    assert result.verdicts["faithful-output"].length == 26
    assert result.verdicts["faithful-output"].length == cowcheck.check(direct).verdicts["faithful-output"].length


def test_sweep_shrink_writes_files_that_name_the_protocol_and_the_cells_length(tmp_path):
    (tmp_path / "g.toml").write_text(FREE_IN_FLIGHT_GRID)
    run = cowcheck_cmd("sweep", "g.toml", "--workers", "0", "--shrink", "--shrink-out", "shrunk", "--out", "cx", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    toml = next((tmp_path / "shrunk").glob("*-shrunk-faithful-output.toml"))
    text = toml.read_text()
    assert "faithful-output in 26 actions" in text and 'protocol = "free-in-flight"' in text
    again = cowcheck.check(as_scenario(toml))
    assert again.expect_met


def test_the_manuals_cell_counts_are_the_shipped_grids():
    """The manual's figures for the shipped grids come from them: each
    grid's cells in the sweeps how-to, and the total there and on the speed
    page (a grid that grows without its docs fails here)."""
    import re
    counts = {path.stem: len(expand([load_grid(path)])) for path in (ROOT / "specs" / "grids").glob("*.toml")}
    total = sum(counts.values())
    howto = (ROOT / "docs" / "how-to" / "sweeps.md").read_text()
    opening = howto.split("```")[0]
    order = ("append-only", "beam-forks", "speculation", "prefix-caching", "engine-code")
    assert set(order) == set(counts)
    assert [int(n) for n in re.findall(r"(\d+) cells", opening)] == [counts[g] for g in order]
    assert f"({total} cells, more than 200)" in howto and f"\n{total} cell(s): " in howto
    speed = (ROOT / "docs" / "explanation" / "speed.md").read_text()
    assert f"`time cowcheck sweep specs/grids/`, {total} cells" in " ".join(speed.split())


@pytest.mark.slow
def test_the_manuals_sweep_output_is_a_runs(tmp_path):
    """The output the sweeps how-to prints under `cowcheck sweep
    specs/grids/` is what the command prints (but for its seconds and how
    many workers ran it)."""
    import re
    howto = (ROOT / "docs" / "how-to" / "sweeps.md").read_text()
    printed = re.search(r"```\n(per invariant:.*?)```", howto, re.S).group(1).splitlines()
    run = cowcheck_cmd("sweep", str(ROOT / "specs" / "grids"), "--workers", "0", "--out", "cx", cwd=tmp_path, timeout=300)
    assert run.returncode == 1, run.stderr
    lines = [line.rstrip() for line in run.stdout.splitlines()]
    ran = lines[lines.index(printed[0].rstrip()):]
    timing = re.compile(r"in [\d.]+ s, .*\)$")
    assert [timing.sub("", line.rstrip()) for line in printed] == [timing.sub("", line) for line in ran]


def test_cells_share_their_parsed_protocol(small):
    """A grid of thousands of cells parses each protocol once (parsing
    compiles every rule's condition): cells with one protocol hold one
    object, and it is the one a scenario naming the protocol gets."""
    cells = expand([load_grid(small)])
    by_name: dict[str, set[int]] = {}
    for c in cells:
        by_name.setdefault(c.scenario.protocol.name, set()).add(id(c.scenario.protocol))
    assert set(by_name) == {"cow", "premature-decrement"} and all(len(ids) == 1 for ids in by_name.values())
    again = expand([load_grid(small)])
    assert again[0].scenario.protocol is cells[0].scenario.protocol
