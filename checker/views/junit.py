"""`cowcheck check --junit-xml FILE`: the results as the JUnit XML that CI
systems read (docs/how-to/ci.md#junit-xml).

One <testsuite> per scenario, holding one <testcase> for the scenario
itself (named `expect`: it fails exactly when the scenario makes the exit
status 1, and is skipped when a partial run left it unjudged) and one per
invariant. An invariant's case fails when it breaks, unless the scenario's
`expect` says it should ("violates ..."): then it passes and its output
holds the explanation. A failure's message names the shortest trace's
length and the counterexample file; its text is that trace explained.
An invariant a partial run did not see broken, or one the engine cannot
check, is skipped, with why."""

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
    expected = {item.split()[1] for item in result.scenario.expect if item.startswith("violates ")}
    for verdict in result.verdicts.values():
        suite.append(_invariant_case(name, verdict, verdict.invariant in expected))
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return suite


def _scenario_case(result: Result, overridden: bool) -> ET.Element:
    """The scenario as one case: its `expect` (under an override: safety)."""
    case = ET.Element("testcase", classname=result.scenario.name, name="expect", time=f"{result.seconds:.3f}")
    if overridden and result.summary is Summary.UNSAFE:
        broken = ", ".join(v.invariant for v in result.violated() if v.kind == "harm")
        ET.SubElement(case, "failure", message=f"unsafe under the override: {broken} broke", type="unsafe")
    elif not overridden and not result.expect_met:
        ET.SubElement(case, "failure", message="; ".join(result.expectation_failures), type="expect")
    elif result.undecided:
        ET.SubElement(case, "skipped", message=f"partial run, nothing to judge it by (stopped: {result.stopped})")
    return case


def _invariant_case(scenario: str, verdict: Verdict, expected: bool) -> ET.Element:
    case = ET.Element("testcase", classname=scenario, name=verdict.invariant)
    if verdict.outcome is Outcome.VIOLATED:
        message = (f"{verdict.invariant} ({verdict.kind}) broke in {verdict.length} actions; counterexample: "
                   f"{verdict.path or 'not written'}")
        text = _explained(verdict)
        if expected:
            ET.SubElement(case, "system-out").text = f"broke, as the scenario's expect says: {message}\n\n{text}"
        else:
            failure = ET.SubElement(case, "failure", message=message, type=str(verdict.kind))
            failure.text = text
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
