"""Shared helpers for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.scenario import make_scenario
from checker.check import check

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


def run(protocol: str, B: int, L: int, branches, **kw):
    """Check a scenario built in code; no files written."""
    opts = {k: kw.pop(k) for k in ("max_depth", "max_states", "first", "invariants") if k in kw}
    return check(make_scenario(B, L, branches, protocol, **kw), **opts)


def broken(result) -> dict[str, int]:
    return {k: v.length for k, v in result.verdicts.items() if v.holds is False}


@pytest.fixture
def specs() -> Path:
    return SPECS
