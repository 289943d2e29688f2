"""Every JSON cowcheck writes validates against its JSON Schema, shipped in
the package (cowcheck.schemas, checker/schemas/*.schema.json): a result of
`check --json` from each engine, every counterexample and peak trace file
(committed and freshly written), and `replay --json`. The schemas pin the
keys (additionalProperties / unevaluatedProperties false), so a key added
to the output without being documented in its schema fails here.

The whole file runs in about fifteen seconds: one explicit check of specs/,
one BMC run to depth 8, one k-induction on a one-branch scenario."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
import jsonschema_rs
from jsonschema import Draft202012Validator

from cowcheck.cli import main
from cowcheck.schemas import NAMES, load

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted((ROOT / "counterexamples").glob("*.json"))
#: the engine test's (cowcheck engine-test), beside specs/engine
COMMITTED_ENGINE = sorted((ROOT / "counterexamples" / "engine").rglob("*.json"))

TINY = """block_size = 2
prompt = 1
[[branch]]
appends = 1
"""


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


class Schema:
    """One schema's two validators. jsonschema-rs (compiled to native code)
    says whether a document is valid: the committed counterexamples take
    about a second instead of eight in jsonschema's Python validator, which
    names what is wrong and where once either finds a fault."""

    def __init__(self, schema: dict):
        Draft202012Validator.check_schema(schema)
        self.full = Draft202012Validator(schema)
        self.fast = jsonschema_rs.Draft202012Validator(schema)

    def problems(self, data: Any) -> list[str]:
        """Every error, each with where it is, for an assertion message."""
        if self.fast.is_valid(data):
            return []
        named = [f"{e.json_path}: {e.message[:300]}" for e in self.full.iter_errors(data)]
        return named or [f"/{'/'.join(map(str, e.instance_path))}: {e.message[:300]}" for e in self.fast.iter_errors(data)]


@pytest.fixture(scope="module")
def validators() -> dict[str, Schema]:
    return {name: Schema(load(name)) for name in NAMES}


def assert_valid(validator: Schema, data: Any, what: str) -> None:
    errors = validator.problems(data)
    assert not errors, f"{what}:\n" + "\n".join(errors)


def check_run(tmp_path: Path, *args: Any, exit_codes: tuple[int, ...] = (0,)) -> tuple[list[dict], Path]:
    """`cowcheck check ARGS --json FILE --out DIR`: the results and DIR."""
    out, written = tmp_path / "results.json", tmp_path / "cx"
    result = invoke("check", *args, "--json", out, "--out", written)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in exit_codes, result.output
    return json.loads(out.read_text()), written


def validate_run(validators: dict[str, Schema], results: list[dict], written: Path) -> int:
    """Validate every result and every file written; each path a result
    names must be one of those files. Returns the number of files."""
    files = sorted(written.glob("*.json"))
    names = {str(f) for f in files}
    assert_valid(validators["check"], results, "the --json file, a list")
    for r in results:
        assert_valid(validators["result"], r, f"result of {r.get('scenario')}")
        for inv, v in r["verdicts"].items():
            assert v["counterexample"] is None or v["counterexample"] in names, (r["scenario"], inv)
        assert r.get("peak_trace") is None or r["peak_trace"] in names, r["scenario"]
    for f in files:
        assert_valid(validators["counterexample"], json.loads(f.read_text()), str(f))
    return len(files)


# -- the schemas themselves --------------------------------------------------------
def test_schemas_are_shipped_and_valid(validators):
    shipped = {p.name for p in resources.files("cowcheck.schemas").iterdir() if p.name.endswith(".schema.json")}
    assert {f"{n}.schema.json" for n in NAMES} <= shipped
    for name in NAMES:
        schema = load(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema.get("title") and schema.get("description")


def _documented(sub: Any, defs: dict) -> bool:
    """A property schema with a description, beside it or on the
    definition it refers to."""
    if not isinstance(sub, dict):
        return False
    ref = sub.get("$ref", "")
    target = defs.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/$defs/") else {}
    return "description" in sub or "description" in target


def _property_docs(node: Any, defs: dict, where: str, known: frozenset = frozenset()) -> Iterator[str]:
    """The keys (as paths) under `properties` anywhere in a schema that have
    no description. A conditional part of an object's schema (allOf, then,
    else) may constrain a key that the object documents further up without
    repeating its description; `if` and `not` only test, and are skipped."""
    if isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _property_docs(sub, defs, f"{where}[{i}]", known)
        return
    if not isinstance(node, dict):
        return
    props = node.get("properties") or {}
    for key, sub in props.items():
        if key not in known and not _documented(sub, defs):
            yield f"{where}.{key}"
    here = known | {k for k, sub in props.items() if _documented(sub, defs)}
    for key, sub in node.items():
        if key in ("if", "not"):
            continue
        if key == "properties":
            for name, prop in sub.items():
                yield from _property_docs(prop, defs, f"{where}.{name}")
        elif key in ("allOf", "anyOf", "oneOf", "then", "else"):
            yield from _property_docs(sub, defs, f"{where}/{key}", here)
        else:
            yield from _property_docs(sub, defs, f"{where}/{key}")


@pytest.mark.parametrize("name", NAMES)
def test_every_key_is_documented(name):
    schema = load(name)
    undocumented = list(_property_docs(schema, schema.get("$defs", {}), name))
    assert not undocumented, undocumented


# -- counterexample files ----------------------------------------------------------
def test_committed_counterexamples(validators):
    assert len(COMMITTED) > 20
    kinds = set()
    for path in COMMITTED + COMMITTED_ENGINE:
        data = json.loads(path.read_text())
        assert_valid(validators["counterexample"], data, str(path.relative_to(ROOT)))
        kinds.add(data["kind"])
    assert kinds == {"counterexample", "peak", "host-peak", "engine"}


# -- check --json: the three engines -----------------------------------------------
def test_explicit_check_of_specs(validators, shipped):
    """The session's one check of specs/ (conftest.shipped): every result and file it wrote."""
    results = shipped.results
    assert len(results) >= 20 and {r["engine"] for r in results} == {"explicit"}
    assert {r["summary"] for r in results} == {"unsafe", "safe but undisciplined", "safe and disciplined"}
    assert validate_run(validators, results, shipped.out) > 20


def test_explicit_partial_compact_fingerprints(validators, tmp_path, monkeypatch):
    """A partial run (copies null, stopped given) with --compact and
    --fingerprints (encoding and collision_probability set)."""
    monkeypatch.chdir(tmp_path)
    results, written = check_run(tmp_path, ROOT / "specs/scenarios/premature-decrement.toml", "--max-states", 200,
                                 "--compact", "--fingerprints", exit_codes=(0, 1))
    [r] = results
    assert not r["complete"] and r["stopped"] and r["copies"] is None
    assert r["encoding"] == "fixed-width" and isinstance(r["collision_probability"], float)
    assert "not seen" in {v["outcome"] for v in r["verdicts"].values()}
    validate_run(validators, results, written)


def test_bmc_check(validators, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results, written = check_run(tmp_path, ROOT / "specs/scenarios/premature-decrement.toml",
                                 "--engine", "bmc", "--depth", 8, exit_codes=(0, 1))
    [r] = results
    assert r["engine"] == "bmc" and "violated" in {v["outcome"] for v in r["verdicts"].values()}
    assert validate_run(validators, results, written) >= 1


def test_kind_check(validators, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY)
    results, written = check_run(tmp_path, tmp_path / "tiny.toml", "--engine", "kind", "--depth", 3)
    [r] = results
    assert r["engine"] == "kind" and r["complete"]
    validate_run(validators, results, written)


# -- replay --json ------------------------------------------------------------------
@pytest.mark.parametrize("name, pool", [
    ("premature-decrement.faithful-output.json", "numpy"),
    ("premature-decrement.peak.json", "numpy"),
    ("premature-decrement.faithful-output.json", "none"),
    ("premature-decrement.peak.json", "none"),
    ("pd-producer-lease.faithful-output.json", "numpy"),       # a send: the remote reader's row
    ("offload-load-reuse.host-peak.json", "numpy"),
])
def test_replay_json(validators, name, pool):
    result = invoke("replay", ROOT / "counterexamples" / name, "--json", "--pool", pool)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert_valid(validators["replay"], data, f"replay {name} --pool {pool}")
    assert (data["pool"] is None) == (pool == "none")
    if pool != "none":
        assert data["pool"]["kernels"]


# -- the schemas pin the keys ---------------------------------------------------------
@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Any]:
    """One real document of each kind to break."""
    tmp = tmp_path_factory.mktemp("samples")
    scenario = tmp / "tiny.toml"
    scenario.write_text(TINY)
    result = invoke("check", scenario, "--json", tmp / "r.json", "--out", tmp / "cx")
    assert result.exit_code == 0, result.output
    replayed = invoke("replay", ROOT / "counterexamples/premature-decrement.faithful-output.json", "--json")
    return {
        "result": json.loads((tmp / "r.json").read_text())[0],
        "counterexample": json.loads((ROOT / "counterexamples/premature-decrement.faithful-output.json").read_text()),
        "peak": json.loads((ROOT / "counterexamples/premature-decrement.peak.json").read_text()),
        "replay": json.loads(replayed.stdout),
        "engine": json.loads(COMMITTED_ENGINE[0].read_text()),
    }


def _set(data: dict, path: tuple, key: str, value: Any) -> None:
    node: Any = data
    for step in path:
        node = node[step]
    node[key] = value


BREAKS = [
    # (sample, schema, where, key, value): setting it must make the document invalid
    ("result", "result", (), "extra", 1),
    ("result", "result", (), "z3_seconds", 0.5),                        # a bmc key in an explicit result
    ("result", "result", ("verdicts", "no-leak"), "extra", 1),
    ("result", "result", ("verdicts", "no-leak"), "holds", False),      # contradicts outcome holds
    ("result", "result", (), "summary", "safe"),
    ("result", "result", (), "stopped", "--max-states 9"),              # but complete
    ("result", "result", (), "copies", [1]),
    ("counterexample", "counterexample", (), "extra", 1),
    ("counterexample", "counterexample", (), "peak_blocks", 5),         # a peak key in a counterexample
    ("counterexample", "counterexample", ("witness",), "extra", 1),
    ("counterexample", "counterexample", ("scenario",), "extra", 1),
    ("counterexample", "counterexample", ("scenario", "protocol"), "extra", 1),
    ("counterexample", "counterexample", ("initial",), "extra", 1),
    ("counterexample", "counterexample", ("initial", "blocks", 0), "extra", 1),
    ("counterexample", "counterexample", ("initial", "branches", "a"), "extra", 1),
    ("counterexample", "counterexample", ("initial", "branches", "a"), "status", "done"),
    ("counterexample", "counterexample", ("steps", 0), "extra", 1),
    ("counterexample", "counterexample", ("steps", 0, "action"), "op", "launch"),
    ("counterexample", "counterexample", ("steps", 0, "action", "binds"), "extra", 1),
    ("engine", "counterexample", (), "extra", 1),
    ("engine", "counterexample", (), "protocol", "cow"),                # a check's key in an engine trace
    ("engine", "counterexample", (), "invariant", "no-deadlock"),       # not judged in the engine
    ("engine", "counterexample", ("scenario",), "protocol", {}),
    ("engine", "counterexample", ("steps", 0), "state", None),
    ("engine", "counterexample", ("witness",), "extra", 1),
    ("engine", "counterexample", ("schedule",), "cancels", [["a", 0, "later"]]),
    ("counterexample", "counterexample", (), "schedule", {}),           # an engine key in a check's trace
    ("peak", "counterexample", (), "invariant", "no-leak"),
    ("peak", "counterexample", (), "device", "gpu"),
    ("replay", "replay", (), "extra", 1),
    ("replay", "replay", ("pool",), "extra", 1),
    ("replay", "replay", ("pool", "kernels", 0), "extra", 1),
]


@pytest.mark.parametrize("sample, schema, where, key, value", BREAKS,
                         ids=[f"{s}:{'.'.join(map(str, (*w, k)))}={v!r}" for s, _, w, k, v in BREAKS])
def test_schema_refuses(validators, samples, sample, schema, where, key, value):
    assert_valid(validators[schema], samples[sample], f"the untouched {sample}")
    data = copy.deepcopy(samples[sample])
    _set(data, where, key, value)
    assert validators[schema].problems(data), f"{sample} with {'.'.join(map(str, (*where, key)))}={value!r} validated"


@pytest.mark.parametrize("sample, schema, key", [
    ("result", "result", "verdicts"), ("result", "result", "peak_blocks"), ("result", "result", "format"),
    ("counterexample", "counterexample", "witness"), ("peak", "counterexample", "peak_blocks"),
    ("counterexample", "counterexample", "initial"), ("engine", "counterexample", "engine"),
    ("engine", "counterexample", "schedule"), ("engine", "counterexample", "witness"),
    ("replay", "replay", "pool"),
])
def test_schema_requires(validators, samples, sample, schema, key):
    data = copy.deepcopy(samples[sample])
    del data[key]
    assert validators[schema].problems(data), f"{sample} without {key} validated"


# -- sweep --json ----------------------------------------------------------------------
def test_sweep_json(validators, tmp_path):
    """A fresh serial sweep with an invalid cell: the wrapper against sweep.schema.json, each checked cell (its place
    in the grid set aside) against result.schema.json, each counterexample
    it wrote against counterexample.schema.json."""
    grid = tmp_path / "g.toml"
    grid.write_text('[grid]\nprotocol = ["cow", "premature-decrement"]\nblock_size = 2\nprompt = 3\n'
                    'appends = 1\npool = ["default", 1]\n')
    result = invoke("sweep", grid, "--workers", "0", "--json", tmp_path / "s.json", "--out", tmp_path / "cx")
    assert result.exit_code == 2, result.output          # the pool-1 cells are invalid; the others ran
    fresh = json.loads((tmp_path / "s.json").read_text())
    assert_valid(validators["sweep"], fresh, "sweep")
    for cell in fresh["cells"]:
        if "error" not in cell:
            result_part = {k: v for k, v in cell.items() if k not in ("cell", "grid", "coordinates")}
            assert_valid(validators["result"], result_part, f"cell {cell['cell']}")
    assert {c.get("verdict") for c in fresh["cells"] if "error" in c} == {"invalid"}
    written = list((tmp_path / "cx").glob("*.json"))
    assert written
    for path in written:
        assert_valid(validators["counterexample"], json.loads(path.read_text()), path.name)
