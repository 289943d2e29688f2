"""Nothing lost, nothing half-written: interrupts (SIGINT, SIGTERM) at any
moment of any command, the memory bound, and two runs into one folder.

These run the installed `cowcheck` command as a separate process, as a user
(or `timeout`, or a CI runner) does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"
#: a scenario whose exhaustive search takes minutes: six branches of four appends
LONG = "block_size = 4\nprompt = 6\n" + "[[branch]]\nappends = 4\n" * 6


def command() -> list[str]:
    exe = shutil.which("cowcheck", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "cowcheck"]


def start(args: list, cwd: Path, quiet: bool = False) -> subprocess.Popen:
    """Run cowcheck; read its output with communicate() (or pass quiet, when
    it is only waited for: an unread pipe would fill and block it)."""
    where = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(command() + [str(a) for a in args], cwd=cwd, stdout=where, stderr=where, text=True)


def busy_for(proc: subprocess.Popen, seconds: float, limit: float = 300) -> None:
    """Wait until the process has used `seconds` of CPU (Linux's
    /proc/PID/stat), so that a signal lands in the search, not in the
    imports before it, however loaded the machine is."""
    tick = os.sysconf("SC_CLK_TCK")
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / tick >= seconds:    # utime + stime
            return
        time.sleep(0.1)


def no_trace_of_a_crash(out: str, err: str) -> None:
    assert "Traceback" not in out + err, err[-2000:]


def no_half_written_file(folder: Path) -> None:
    if folder.exists():
        assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")], "a temporary file was left behind"
        for path in folder.rglob("*.json"):
            json.loads(path.read_text())          # every file there is whole


def test_sigterm_gives_the_partial_results_and_143(tmp_path):
    (tmp_path / "long.toml").write_text(LONG)
    proc = start(["check", "long.toml", "--no-symmetry", "--json", "out.json", "--out", "cx"], tmp_path)
    busy_for(proc, 3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    no_trace_of_a_crash(out, err)
    (entry,) = json.loads((tmp_path / "out.json").read_text())
    assert entry["complete"] is False and entry["stopped"] == "interrupted (SIGTERM)" and entry["states"] > 0
    assert "partial: interrupted (SIGTERM)" in out and "interrupted:" in out
    no_half_written_file(tmp_path)


def test_the_memory_bound_stops_the_search_with_a_partial_result(tmp_path):
    (tmp_path / "long.toml").write_text(LONG)
    done = subprocess.run(command() + ["check", "long.toml", "--no-symmetry", "--max-memory", "150", "--json", "out.json",
                                       "--out", "cx"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr       # partial, and no expect to judge it by: not success
    (entry,) = json.loads((tmp_path / "out.json").read_text())
    assert entry["complete"] is False and entry["stopped"] == "--max-memory 150 MiB"
    assert "stopped by --max-memory 150 MiB" in done.stdout and "--fingerprints" in done.stdout


def test_running_out_of_memory_is_a_partial_result_not_a_traceback(tmp_path):
    """Under an address-space limit and without the memory bound, the search
    meets MemoryError; it reports what it found, like any other bound."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (500 << 20, 500 << 20))

    (tmp_path / "long.toml").write_text(LONG)
    done = subprocess.run(command() + ["check", "long.toml", "--no-symmetry", "--max-memory", "0", "--json", "out.json",
                                       "--out", "cx"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          preexec_fn=limit)
    no_trace_of_a_crash(done.stdout, done.stderr)
    assert done.returncode == 3, done.stderr       # partial
    (entry,) = json.loads((tmp_path / "out.json").read_text())
    assert entry["stopped"] == "out of memory (MemoryError)"


#: (arguments, whether it writes a --json file) for each kind of command
COMMANDS = {
    "check a folder": (["check", SCENARIOS, "--out", "cx", "--json", "out.json", "--html", "pages"], True),
    "check bmc": (["check", SCENARIOS / "premature-decrement.toml", "--engine", "bmc", "--depth", "14", "--out", "cx",
                   "--json", "out.json"], True),
    "check kind": (["check", SCENARIOS / "cow-two-writers.toml", "--engine", "kind", "--depth", "4", "--out", "cx",
                    "--json", "out.json"], True),
    "replay": (["replay", ROOT / "counterexamples" / "premature-decrement.faithful-output.json"], False),
    "html": (["html", ROOT / "counterexamples" / "premature-decrement.faithful-output.json", "-o", "pages/p.html"], False),
}


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.sampled_from(sorted(COMMANDS)), delay=st.floats(min_value=0.0, max_value=2.5))
def test_ctrl_c_at_any_moment_of_any_command(tmp_path_factory, which, delay):
    """SIGINT at a random moment: exit 130 (or the command's own status if
    it had already finished), never a traceback, no half-written file, and a
    --json file that parses."""
    work = tmp_path_factory.mktemp("interrupt")
    args, writes_json = COMMANDS[which]
    proc = start(args, work)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # Python itself was still starting (its standard streams, its site
    # import: "Fatal Python error: init_...", before any of cowcheck runs):
    # what happens then is the interpreter's, not ours
    assume(proc.returncode != -signal.SIGINT and "Fatal Python error: init_" not in err)
    no_trace_of_a_crash(out, err)
    assert proc.returncode in (0, 1, 130), (proc.returncode, err)
    no_half_written_file(work)
    if writes_json and (work / "out.json").exists():
        results = json.loads((work / "out.json").read_text())
        assert isinstance(results, list)
        if proc.returncode == 130 and results:
            assert any(not r["complete"] for r in results) or len(results) >= 1


@pytest.mark.slow
def test_two_runs_into_one_folder_lose_nothing(tmp_path):
    """One run checks the whole specs folder while another checks one of its
    scenarios, both into the same --out: every file of both ends up whole
    and as committed."""
    out = tmp_path / "cx"
    everything = start(["check", "specs/scenarios", "--out", out], ROOT, quiet=True)
    for _ in range(3):
        one = start(["check", "specs/scenarios/premature-decrement.toml", "--out", out], ROOT, quiet=True)
        assert one.wait(timeout=120) == 0
    assert everything.wait(timeout=300) == 0
    committed = {p.name: p.read_bytes() for p in (ROOT / "counterexamples").glob("*.json")}
    written = {p.name: p.read_bytes() for p in out.glob("*.json")}
    assert written == committed
    no_half_written_file(out)


@pytest.mark.parametrize("engine", ["bmc", "kind"])
def test_ctrl_c_in_a_z3_engine_gives_what_was_decided(tmp_path, engine):
    """z3 answers "unknown (interrupted)" when Ctrl-C comes while it solves:
    that is the user's interrupt, so the table so far, exit 130, and --json."""
    scenario = SCENARIOS / ("premature-decrement.toml" if engine == "bmc" else "cow-two-writers.toml")
    proc = start(["check", scenario, "--engine", engine, "--depth", "30", "--json", "out.json", "--out", "cx"], tmp_path)
    busy_for(proc, 3)       # six times the imports' CPU: z3 is solving (depth 30 takes far longer)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    no_trace_of_a_crash(out, err)
    assert proc.returncode == 130, err
    (entry,) = json.loads((tmp_path / "out.json").read_text())
    assert entry["complete"] is False and entry["stopped"] == "interrupted (Ctrl-C)"
    assert "partial: interrupted (Ctrl-C)" in out


def test_a_z3_call_cancelled_by_a_signal_is_the_interrupt():
    """A signal cancels whatever z3 call is running; outside a check, z3
    says so by raising "canceled", which the engines must take as the
    interrupt (the table so far), not as a crash. Any other z3 error stays
    an error."""
    import z3
    from cowcheck.symbolic.terms import solving

    with pytest.raises(KeyboardInterrupt):
        with solving():
            raise z3.Z3Exception(b"canceled")
    with pytest.raises(z3.Z3Exception, match="invalid argument"):
        with solving():
            raise z3.Z3Exception(b"invalid argument")


# -- signals held, then delivered (issue 27, item 3) ----------------------------------------
@pytest.fixture
def sigint_raises():
    """These tests send SIGINT to the test process itself and expect
    Python's KeyboardInterrupt. A process started in the background by a
    non-interactive shell (`pytest ... &`, as a script or a CI step may
    start it) inherits SIGINT ignored, and Python then leaves it ignored
    (`held` rightly re-raises a held signal through the handler that was
    there, SIG_IGN, and it is gone): so each test puts Python's handler in
    place for its duration."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _kill_once_held(signum: int = signal.SIGINT) -> None:
    """Send `signum` to this process from a thread as soon as
    interrupts.held has put its own handler in place (deterministic: the
    signal arrives while it is held)."""
    import threading

    def fire() -> None:
        while signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            time.sleep(0.005)
        os.kill(os.getpid(), signum)
    threading.Thread(target=fire, daemon=True).start()


def test_a_signal_while_held_is_delivered_on_leaving_not_lost(sigint_raises):
    from cowcheck import interrupts
    left_inside = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            left_inside = True
    assert left_inside, "the signal was raised inside, not held"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_signal_from_another_thread_while_held_is_delivered_on_leaving(sigint_raises):
    from cowcheck import interrupts
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held(signal.SIGINT):
            _kill_once_held()
            time.sleep(0.3)


def test_ctrl_c_while_the_cluster_starts_stops_the_run_and_workers_ignore_it(sigint_raises):
    """The embedded cluster starts inside interrupts.held: a Ctrl-C then
    comes out of connect() once it has started, and its worker processes
    were started with SIGINT blocked (a terminal's Ctrl-C reaches them too)."""
    from cowcheck.sweeps.runner import Runner
    runner = Runner(1)
    try:
        _kill_once_held()
        with pytest.raises(KeyboardInterrupt):
            runner.connect(1)
        pids = list(runner.client.run(os.getpid).values())
        for pid in pids:
            blocked = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigBlk"))
            assert int(blocked.split()[1], 16) & (1 << (signal.SIGINT - 1)), blocked
    finally:
        runner.close()


def _search_meeting(error: SystemError):
    """An exhaustive search whose every successor call raises `error`."""
    from cowcheck.engines.explorer import Explorer
    from cowcheck.engines.invariants import INVARIANTS
    from cowcheck.model.scenario import load_scenario
    from cowcheck.model.system import ProtocolModel

    class Raising(ProtocolModel):
        def successors(self, state):
            raise error

    return Explorer(Raising(load_scenario(SCENARIOS / "cow-two-writers.toml")), INVARIANTS).run()


@pytest.mark.parametrize("message", ["error return without exception set",
                                     "<function Ample.__call__ at 0x7f03409a7f60> returned NULL without setting an exception"])
def test_a_memory_error_lost_in_c_code_stops_the_search_as_out_of_memory(message):
    """With no memory left, C code can fail before it sets its MemoryError;
    CPython raises a SystemError in either of these wordings in its place.
    The search reports it as out of memory, never as a traceback."""
    result = _search_meeting(SystemError(message))
    assert result.complete is False and result.stopped == "out of memory (MemoryError)"


def test_a_system_error_of_another_kind_is_not_taken_for_out_of_memory():
    with pytest.raises(SystemError):
        _search_meeting(SystemError("bad argument to internal function"))


def test_a_progress_line_without_memory_for_its_thread_is_left_out(monkeypatch):
    """A search that fills the address space may leave no room for the
    progress line's refresh thread ("can't start new thread"): the run goes
    on without the line; nothing is raised or printed in the timer's thread."""
    from rich.live import Live
    from cowcheck.cli.check import Progress

    def no_thread(self):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(Live, "start", no_thread)
    progress = Progress("long")
    progress.timer.cancel()
    progress._show()
    assert progress.closed and progress.live is None
    progress._show()                   # asked again (the explorer's next report): still nothing
    progress.close()
