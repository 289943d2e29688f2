"""MkDocs hook: the shipped scenarios' tables, generated from
specs/scenarios/ and the committed counterexamples/, so the manual lists
every scenario and cannot fall behind them.

A page writes `<!-- scenarios: GROUP -->` on a line of its own, GROUP one
of `append-only`, `branch-programs`, `prefix-caching`, `transfers`,
`allocator-code`;
the hook replaces it with a table of the scenarios of that group. A page
that names one group must name them all, so no scenario is left out.

Each row is read from the scenario file, loaded as `cowcheck check` loads
it (defaults included): its protocol (or allocator code), device model,
shape and `expect`. What breaks, with the shortest length, and the peak of
allocated blocks come from the counterexample files `cowcheck check
specs/` writes (`<scenario>.<invariant>.json`, `<scenario>.peak.json`;
`<scenario>+<digest>.…` for an engine's own code),
which CI keeps equal to what the checker writes. Where they do not meet the
scenario's `expect` (a new scenario checked but not committed), the build
stops and says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "specs" / "scenarios"
COUNTEREXAMPLES = ROOT / "counterexamples"
MARKER = re.compile(r"^<!-- scenarios: ([a-z-]+) -->$", re.M)
GROUPS = ("append-only", "branch-programs", "prefix-caching", "transfers", "allocator-code")
#: the verdict a scenario's broken invariants give (docs/semantics.md#summaries)
VERDICTS = {"harm": "unsafe", "discipline": "safe but undisciplined", None: "safe and disciplined"}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def group(scenario) -> str:
    """Which table a scenario is listed in."""
    if scenario.code_ref is not None:       # allocator or scheduler code
        return "allocator-code"
    if scenario.transfers:
        return "transfers"
    if scenario.cache:
        return "prefix-caching"
    return "append-only" if scenario.plain else "branch-programs"


def shape(scenario) -> str:
    """B, L and pool, then each branch (request) as `check` labels it."""
    names = scenario.names
    sizes = f"B={scenario.block_size}" + ("" if scenario.cache else f" L={scenario.prompt}") + f" pool={scenario.pool}"
    branches = []
    for name, spec in zip(names, scenario.branches):
        of = f" (child of {names[spec.parent]})" if spec.parent is not None else ""
        branches.append(f"{name}{of}: `{spec.label}`")
    return sizes + "; " + ", ".join(branches)


def broken(name: str) -> tuple[list[tuple[str, str, int]], int | None]:
    """The invariants with a committed counterexample (id, kind, length), in
    the report's order, and the peak of allocated blocks."""
    from cowcheck.engines.invariants import IDS
    found, peak = [], None
    for path in [*COUNTEREXAMPLES.glob(f"{name}.*.json"), *COUNTEREXAMPLES.glob(f"{name}+*.json")]:
        coded = re.fullmatch(re.escape(name) + r"(\+[0-9a-f]+)?\.(.+)\.json", path.name)   # +digest: engine code's
        what = coded.group(2) if coded else "."
        if "." in what:
            continue                        # another scenario's, whose name starts with this one's and a dot
        data = json.loads(path.read_text())
        if data.get("kind") == "peak":
            peak = data.get("peak_blocks")
        elif data.get("kind") == "counterexample":     # not a host peak's trace
            found.append((data["invariant"], data["invariant_kind"], data["length"]))
    order = {inv: n for n, inv in enumerate(IDS)}
    return sorted(found, key=lambda f: (order.get(f[0], len(order)), f[0])), peak


def stale(scenario, found: list[tuple[str, str, int]], peak: int | None) -> str | None:
    """Why the committed counterexamples cannot be this scenario's, if they
    cannot: no peak file, or an `expect` they do not meet."""
    ids = {inv for inv, _, _ in found}
    harm = {inv for inv, kind, _ in found if kind == "harm"}
    unmet = [e for e in scenario.expect
             if (e == "holds" and ids) or (e == "safe" and harm) or (e.startswith("violates ") and e.split()[1] not in ids)]
    if peak is None:
        return "no peak file"
    return f"expect not met: {', '.join(unmet)}" if unmet else None


def row(scenario) -> str:
    found, peak = broken(scenario.name)
    why = stale(scenario, found, peak)
    if why:
        raise PluginError(f"counterexamples/{scenario.name}.*.json: {why}; run `cowcheck check specs/` and commit what it writes")
    kinds = {kind for _, kind, _ in found}
    verdict = VERDICTS["harm" if "harm" in kinds else "discipline" if kinds else None]
    lengths = ", ".join(f"{inv} ({n})" for inv, _, n in found) or "none"
    subject = f"`{scenario.subject}`"
    device = scenario.device + ("" if scenario.code_ref is not None or scenario.reuse == "lifo" else f", {scenario.reuse} reuse")
    if scenario.transfers:
        device += f", transfer {scenario.transfer}" + (f", host pool {scenario.host_pool}" if scenario.host_pool else "")
    expect = ", ".join(scenario.expect) or "none"
    cells = [f"`{scenario.name}`", subject, device, shape(scenario), expect, verdict, lengths, str(peak), scenario.description]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def tables() -> dict[str, str]:
    """Each group's table, every shipped scenario in one of them, by name."""
    from cowcheck.model.scenario import load_scenario
    scenarios = sorted((load_scenario(path) for path in SCENARIOS.glob("*.toml")), key=lambda s: s.name)
    head = ["| scenario | protocol or allocator | device | shape | expect | verdict | broken (shortest length) | peak | what it is |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    return {name: "\n".join(head + [row(s) for s in scenarios if group(s) == name]) for name in GROUPS}


def on_page_markdown(markdown, page, config, files):
    named = MARKER.findall(markdown)
    if not named:
        return markdown
    unknown = sorted(set(named) - set(GROUPS))
    missing = [g for g in GROUPS if g not in named]
    if unknown or missing:
        raise PluginError(f"{page.file.src_path}: scenario tables: unknown group(s) {unknown}, missing {missing}; "
                         f"the groups are {', '.join(GROUPS)}")
    made = tables()
    return MARKER.sub(lambda m: made[m.group(1)], markdown)
