"""`cowcheck check --junit-xml FILE`: the results as the JUnit XML that CI
systems read (docs/how-to/ci.md#junit-xml).

One <testsuite> per scenario, holding one <testcase> for the scenario
itself (named `expect`) and one per invariant. The XML's verdict is the
run's: only the `expect` case fails, exactly when the scenario makes the
exit status 1 (its `expect` is not met; under an override, it is unsafe),
and it is skipped when a partial run left it unjudged. A broken invariant
never fails its own case: that case passes with the break in its
`system-out` (the message, then the trace explained), whether or not the
`expect` names it; the `expect` case's failure text explains the breaks
its `expect` does not name, and when it passes its `system-out` lists
them. An invariant a partial run did not see broken, or one the engine
cannot check, is skipped, with why."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Optional

from cowcheck.engines.results import Outcome, Result, Summary, Verdict
from cowcheck.model.errors import SpecError
from cowcheck.views.explain import explain_text


def junit_xml(results: list[Result], overridden: bool = False) -> str:
    """The whole document, for a list of check results (`overridden`: the
    scenarios' `expect` was dropped, so the scenario case fails when unsafe)."""
    root = ET.Element("testsuites", name="cowcheck")
    for result in results:
        root.append(_suite(result, overridden))
    for key in ("tests", "failures", "skipped"):
        root.set(key, str(sum(int(suite.get(key, "0")) for suite in root)))
    root.set("time", f"{sum(r.seconds for r in results):.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(result: Result, overridden: bool) -> ET.Element:
    name = result.scenario.name
    suite = ET.Element("testsuite", name=name, time=f"{result.seconds:.3f}")
    properties = ET.SubElement(suite, "properties")
    for key, value in (("source", result.scenario.source), ("subject", result.scenario.subject),
                       ("device", result.scenario.device), ("engine", str(result.engine)),
                       ("summary", result.summary_line)):
        ET.SubElement(properties, "property", name=key, value=value)
    suite.append(_scenario_case(result, overridden))
    expected = _named(result)
    for verdict in result.verdicts.values():
        suite.append(_invariant_case(name, verdict, verdict.invariant in expected))
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return suite


def _scenario_case(result: Result, overridden: bool) -> ET.Element:
    """The scenario as one case, the only one that can fail: its `expect`
    (under an override: safety). The breaks the `expect` does not name are
    the failure's text, explained, or else listed in its output."""
    case = ET.Element("testcase", classname=result.scenario.name, name="expect", time=f"{result.seconds:.3f}")
    named = set() if overridden else _named(result)
    unnamed = [v for v in result.violated() if v.invariant not in named]
    failure: Optional[ET.Element] = None
    if overridden and result.summary is Summary.UNSAFE:
        broken = ", ".join(v.invariant for v in result.violated() if v.kind == "harm")
        failure = ET.SubElement(case, "failure", message=f"unsafe under the override: {broken} broke", type="unsafe")
    elif not overridden and not result.expect_met:
        failure = ET.SubElement(case, "failure", message="; ".join(result.expectation_failures), type="expect")
    elif result.undecided:
        ET.SubElement(case, "skipped", message=f"partial run, nothing to judge it by (stopped: {result.stopped})")
    if failure is not None and unnamed:
        failure.text = "\n\n".join(_told(v) for v in unnamed)
    elif failure is None and unnamed:
        what = "an override drops the scenario's expect" if overridden else "the scenario's expect does not name them"
        ET.SubElement(case, "system-out").text = (f"also broke ({what}; they do not fail the run, their cases hold "
                                                  "the traces):\n" + "\n".join(_broke(v) for v in unnamed))
    return case


def _named(result: Result) -> set[str]:
    """The invariants the scenario's `expect` says break."""
    return {item.split()[1] for item in result.scenario.expect if item.startswith("violates ")}


def _broke(verdict: Verdict) -> str:
    return (f"{verdict.invariant} ({verdict.kind}) broke in {verdict.length} actions; counterexample: "
            f"{verdict.path or 'not written'}")


def _told(verdict: Verdict) -> str:
    """A break, then its trace explained (when there is one)."""
    text = _explained(verdict)
    return _broke(verdict) + (f"\n\n{text}" if text else "")


def _invariant_case(scenario: str, verdict: Verdict, expected: bool) -> ET.Element:
    """An invariant as one case, which never fails (the `expect` case is the
    scenario's verdict): a break passes, explained in its output."""
    case = ET.Element("testcase", classname=scenario, name=verdict.invariant)
    if verdict.outcome is Outcome.VIOLATED:
        why = "as the scenario's expect says" if expected else "which the scenario's expect case judges"
        ET.SubElement(case, "system-out").text = f"broke, {why}: {_told(verdict)}"
    elif verdict.outcome is Outcome.NOT_SEEN:
        ET.SubElement(case, "skipped", message="not seen broken, but the run was partial")
    elif verdict.outcome is Outcome.UNSUPPORTED:
        ET.SubElement(case, "skipped", message=verdict.note or "this engine cannot check it")
    return case


def _explained(verdict: Verdict) -> Optional[str]:
    """The shortest counterexample narrated, or why it cannot be."""
    if verdict.counterexample is None:
        return None
    try:
        return explain_text(verdict.counterexample)
    except SpecError as error:        # allocator code gone since, say: the message still names the file
        return f"cannot be explained: {error}"
