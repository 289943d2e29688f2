"""Issue 34: what an engine engineer met (each test fails without its fix)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"


# -- 1. Ctrl-C while z3's main context is being built ------------------------------------

#: run the command with a Ctrl-C landing at the first line of z3.Context.__init__
#: (where a real one landed about 0.9 s into a bmc run), or just after it
INTERRUPTED_INIT = textwrap.dedent("""
    import signal, sys
    import z3
    real = z3.Context.__init__
    moment = sys.argv[1]
    def init(self, *args, **kws):
        if moment == "before":
            signal.raise_signal(signal.SIGINT)
        real(self, *args, **kws)
        if moment == "after":
            signal.raise_signal(signal.SIGINT)
    z3.Context.__init__ = init
    sys.argv = ["cowcheck"] + sys.argv[2:]
    from cowcheck.__main__ import run
    run()
""")


@pytest.mark.parametrize("engine", ["bmc", "kind"])
@pytest.mark.parametrize("moment", ["before", "after"])
def test_ctrl_c_while_z3_builds_its_context_leaves_no_half_built_context(tmp_path, engine, moment):
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_INIT, moment, "check",
                           str(SCENARIOS / "premature-decrement.toml"), "--engine", engine, "--depth", "3",
                           "--out", str(tmp_path / "cx")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
