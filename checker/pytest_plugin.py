"""A pytest plugin (docs/how-to/ci.md): scenario files with an `expect` as
test items, one per scenario, so that an engine team's own protocol and
allocator specs run in its own pytest suite:

    pytest --cowcheck specs/

Installed as the `cowcheck` entry point of `pytest11`, so pytest loads it
wherever cowcheck is installed; it stays off (collects nothing, imports
nothing of cowcheck) unless `--cowcheck` is given. An item passes when the
scenario meets its `expect` (what `cowcheck check` judges), and fails with
why not, led by the harm: the narrated shortest counterexample of a harm
invariant that broke against it (wrong output, a leak, a crash) comes
first, the discipline breaks that explain it after. The failing item's
counterexample files are written, as `cowcheck check --out` writes them,
into `--cowcheck-out DIR` (a CI artifact) or else a `cowcheck` folder under
pytest's `--basetemp`, and the failure says where. A file that does not
load (bad input) is a collection error naming the file and the key, as on
the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("cowcheck").addoption(
        "--cowcheck", action="store_true", default=False,
        help="collect cowcheck scenario files (*.toml with an `expect`) as tests, one per scenario")
    parser.getgroup("cowcheck").addoption(
        "--cowcheck-out", metavar="DIR", default=None,
        help="write a failing scenario's counterexample files into DIR (keep it as a CI artifact); "
             "default: a cowcheck folder under pytest's --basetemp")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix != ".toml" or not parent.config.getoption("cowcheck"):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


class ScenarioFile(pytest.File):
    """A TOML file: one item if it is a scenario with an `expect`; protocol
    files ([append]), grid files ([grid]), engine scenarios ([engine]:
    `cowcheck engine-test`) and scenarios that expect nothing are skipped,
    as `cowcheck check` tells them apart."""

    def collect(self) -> Iterator[pytest.Item]:
        from cowcheck.model.errors import SpecError
        from cowcheck.model.protocol import read_toml
        from cowcheck.model.scenario import load_scenario
        try:
            data = read_toml(self.path)
            if "append" in data or "grid" in data or "engine" in data or "expect" not in data:
                return
            scenario = load_scenario(self.path)
        except SpecError as err:      # bad input: its one line, not a traceback
            raise self.CollectError(f"cowcheck: error: {err}") from None
        yield ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)


class ExpectNotMet(AssertionError):
    """The scenario's `expect` is not met; the message says why."""


class ScenarioItem(pytest.Item):
    """One scenario, checked with `cowcheck.api.check` as `cowcheck check`
    checks it (default engine and bounds)."""

    def __init__(self, *, scenario: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.scenario = scenario

    def runtest(self) -> None:
        from cowcheck import api
        result = api.check(self.scenario)
        if not result.expect_met:
            raise ExpectNotMet(_why(result, _write(result, _out_dir(self.config))))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ExpectNotMet):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"cowcheck scenario {self.name}"


def _out_dir(config: pytest.Config) -> Path:
    """Where failing scenarios' counterexample files go: --cowcheck-out
    (relative to where pytest was started), else `cowcheck` under the
    session's base temporary folder (--basetemp, or pytest's own numbered
    one; each xdist worker has its own)."""
    chosen = config.getoption("cowcheck_out")
    if chosen:
        return config.invocation_params.dir / chosen
    factory = getattr(config, "_tmp_path_factory", None)     # set by pytest's tmpdir plugin, for plugins to use
    if factory is None:                                        # -p no:tmpdir
        import tempfile
        return Path(tempfile.mkdtemp(prefix="cowcheck-"))
    return Path(factory.getbasetemp()) / "cowcheck"


def _write(result: Any, out_dir: Path) -> str:
    """Write the result's counterexample files into `out_dir` (each
    verdict records its path); the line that says where, or why not."""
    from cowcheck.model.errors import SpecError
    from cowcheck.traces.output import write_result
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_result(result, out_dir, peak=False)
    except (OSError, SpecError) as err:
        return f"counterexample files not written to {out_dir}: {err}"
    return f"counterexample files in {out_dir} (cowcheck explain FILE narrates one, cowcheck html FILE steps through it)"


def _why(result: Any, written: str) -> str:
    """Why the expect is not met, then the harm: the shortest counterexample
    of a harm invariant that broke against it, narrated step by step (a
    discipline break's when no harm broke; none when an expected violation
    did not happen); then every other break, harm first, with its file."""
    from cowcheck import api
    from cowcheck.engines.invariants import Kind
    from cowcheck.engines.results import Outcome
    failures = "\n".join(result.expectation_failures)
    lines = [f"{result.scenario.name}: expect not met", *(f"  {f}" for f in result.expectation_failures)]
    broken = sorted((v for v in result.verdicts.values() if v.outcome is Outcome.VIOLATED),
                    key=lambda v: (v.kind is not Kind.HARM, v.length or 0))
    against = [v for v in broken if v.counterexample is not None and v.invariant in failures]
    if against:
        lead = against[0]
        lines += ["", f"shortest counterexample of {_broken(lead)}", api.explain(lead.counterexample)]
    others = [v for v in broken if not against or v is not against[0]]
    if others:
        lines += ["", "also broken:", *(f"  {_broken(v)}" for v in others)]
    return "\n".join(lines + ["", written])


def _broken(verdict: Any) -> str:
    """A broken invariant, its kind, its shortest length and its file."""
    actions = "1 action" if verdict.length == 1 else f"{verdict.length} actions"
    return f"{verdict.invariant} ({verdict.kind}, {actions}): {verdict.path or 'not written'}"
