"""JSON Schemas (draft 2020-12) of every JSON cowcheck writes; each key's
"description" is its documentation:

- result.schema.json: one element of the list `cowcheck check --json` writes
  (all three engines);
- counterexample.schema.json: a counterexample or peak trace file
  (<out>/<scenario>.<invariant>.json, <out>/<scenario>.peak.json);
- replay.schema.json: what `cowcheck replay --json` prints;
- sweep.schema.json: what `cowcheck sweep --json` writes (each checked
  cell is also a result.schema.json object once its place in the grid,
  `cell`, `grid` and `coordinates`, is set aside);
- diff.schema.json: what `cowcheck diff --json` writes.

Read one with `load("result")`, or as data with
`importlib.resources.files("cowcheck.schemas") / "result.schema.json"`.
tests/test_schema.py validates everything the commands write against them."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = ("result", "counterexample", "replay", "sweep", "diff")


def load(name: str) -> dict[str, Any]:
    """The schema `name` (one of NAMES) as a dict."""
    if name not in NAMES:
        raise ValueError(f"unknown schema {name!r}; allowed: {', '.join(NAMES)}")
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data
