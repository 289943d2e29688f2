"""JSON Schemas (draft 2020-12) of every JSON cowcheck writes; each key's
"description" is its documentation:

- check.schema.json: the file `cowcheck check --json` writes, a list of
  results;
- result.schema.json: one element of that list (all three engines);
- counterexample.schema.json: a counterexample, peak or host-peak trace file
  (<out>/<scenario>.<invariant>.json, <out>/<scenario>.peak.json,
  <out>/<scenario>.host-peak.json);
- replay.schema.json: what `cowcheck replay --json` prints;
- sweep.schema.json: what `cowcheck sweep --json` writes (each checked
  cell is also a result.schema.json object once its place in the grid,
  `cell`, `grid` and `coordinates`, is set aside);
- diff.schema.json: what `cowcheck diff --json` writes;
- fuzz.schema.json: what `cowcheck fuzz --json` writes.

Read one with `load("result")`, or as data with
`importlib.resources.files("cowcheck.schemas") / "result.schema.json"`. A
schema that refers to another by its `$id` (check's items are results)
comes from `load` with that one bundled in its `$defs`, so a validator
needs nothing else; read as data, register the other file beside it.
tests/test_schemas.py validates everything the commands write against them."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

NAMES = ("check", "result", "counterexample", "replay", "sweep", "diff", "fuzz")
#: how a schema names another: its `$id`, `urn:cowcheck:schema:<name>:1`
REFERENCE = re.compile(r'"urn:cowcheck:schema:([a-z]+):1"')


def load(name: str) -> dict[str, Any]:
    """The schema `name` (one of NAMES) as a dict, with every schema it
    refers to by `$id` bundled in its `$defs` (a compound schema document:
    draft 2020-12 resolves the reference to the embedded `$id`)."""
    if name not in NAMES:
        raise ValueError(f"unknown schema {name!r}; allowed: {', '.join(NAMES)}")
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    for other in dict.fromkeys(REFERENCE.findall(text)):
        if other != name:
            data.setdefault("$defs", {})[other] = load(other)
    return data
