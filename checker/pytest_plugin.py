"""A pytest plugin (docs/how-to/ci.md): scenario files with an `expect` as
test items, one per scenario, so that an engine team's own protocol and
allocator specs run in its own pytest suite:

    pytest --cowcheck specs/

Installed as the `cowcheck` entry point of `pytest11`, so pytest loads it
wherever cowcheck is installed; it stays off (collects nothing, imports
nothing of cowcheck) unless `--cowcheck` is given. An item passes when the
scenario meets its `expect` (what `cowcheck check` judges), and fails with
why not and the narrated shortest counterexample of an invariant that broke
against it. A file that does not load (bad input) is a collection error
naming the file and the key, as on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("cowcheck").addoption(
        "--cowcheck", action="store_true", default=False,
        help="collect cowcheck scenario files (*.toml with an `expect`) as tests, one per scenario")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix != ".toml" or not parent.config.getoption("cowcheck"):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


class ScenarioFile(pytest.File):
    """A TOML file: one item if it is a scenario with an `expect`; protocol
    files ([append]), grid files ([grid]) and scenarios that expect nothing
    are skipped, as `cowcheck check` tells them apart."""

    def collect(self) -> Iterator[pytest.Item]:
        from cowcheck.model.errors import SpecError
        from cowcheck.model.protocol import read_toml
        from cowcheck.model.scenario import load_scenario
        try:
            data = read_toml(self.path)
            if "append" in data or "grid" in data or "expect" not in data:
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
            raise ExpectNotMet(_why(result))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ExpectNotMet):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"cowcheck scenario {self.name}"


def _why(result: Any) -> str:
    """Why the expect is not met, then the shortest counterexample of an
    invariant that broke against it (none when an expected violation did
    not happen), narrated step by step."""
    from cowcheck import api
    from cowcheck.engines.results import Outcome
    failures = "\n".join(result.expectation_failures)
    lines = [f"{result.scenario.name}: expect not met", *(f"  {f}" for f in result.expectation_failures)]
    against = [v for v in result.verdicts.values()
               if v.outcome is Outcome.VIOLATED and v.counterexample is not None and v.invariant in failures]
    if against:
        shortest = min(against, key=lambda v: v.length or 0)
        lines += ["", f"shortest counterexample of {shortest.invariant} ({shortest.length} actions):",
                  api.explain(shortest.counterexample)]
    return "\n".join(lines)
