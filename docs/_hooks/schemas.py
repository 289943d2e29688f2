"""MkDocs hook: key tables generated from the JSON Schemas in
checker/schemas/, so the manual's JSON reference is the schemas' own
descriptions and cannot drift from them.

A page writes `<!-- schema: result -->` on a line of its own; the hook
replaces it with the schema's title and description, a table of its
top-level keys, a table per conditional branch that adds keys (e.g. the
explorer's figures, `if engine == "explicit"`), and a table per `$defs`
entry that has keys of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "checker" / "schemas"
MARKER = re.compile(r"^<!-- schema: ([a-z_-]+) -->$", re.M)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(spec: dict) -> str:
    if "$ref" in spec:     # a $defs entry ("#/$defs/x") or another schema by $id ("urn:cowcheck:schema:x:1")
        ref = spec["$ref"]
        return "`" + (ref.split(":")[-2] if ref.startswith("urn:") else ref.split("/")[-1]) + "`"
    if "const" in spec:
        return "`" + json.dumps(spec["const"]) + "`"
    if "enum" in spec:
        return " or ".join("`" + json.dumps(v) + "`" for v in spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array of {_type(spec['items'])}"
    if kind is None and "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    if kind is None and "oneOf" in spec:
        return " or ".join(_type(s) for s in spec["oneOf"])
    return kind or "any"


def _table(properties: dict, required: list) -> list[str]:
    rows = ["| key | type | required | meaning |", "| --- | --- | --- | --- |"]
    for key, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        rows.append(f"| `{key}` | {_cell(_type(spec))} | {'yes' if key in required else ''} | {_cell(spec.get('description', ''))} |")
    return rows


def _condition(test: dict) -> str | None:
    parts = []
    for key, spec in test.get("properties", {}).items():
        if isinstance(spec, dict) and "const" in spec:
            parts.append(f"`{key}` is `{json.dumps(spec['const'])}`")
        elif isinstance(spec, dict) and "enum" in spec:
            parts.append(f"`{key}` is one of " + ", ".join(f"`{json.dumps(v)}`" for v in spec["enum"]))
    return " and ".join(parts) or None


def render(name: str) -> str:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    out = [f"Schema: `checker/schemas/{name}.schema.json` (installed as `cowcheck.schemas`), "
           f"*{_cell(schema.get('title', name))}*. {_cell(schema.get('description', ''))}", ""]
    if schema.get("type") == "array":     # a file that is a list: what each element is, no keys of its own
        out.append(f"A list; each element: {_type(schema['items'])}.")
    else:
        out += _table(schema.get("properties", {}), schema.get("required", []))
    for branch in schema.get("allOf", []):
        then, when = branch.get("then", {}), _condition(branch.get("if", {}))
        added = {k: v for k, v in then.get("properties", {}).items()
                 if isinstance(v, dict) and "description" in v}
        if when and added:
            out += ["", f"When {when}, also:", ""] + _table(added, then.get("required", []))
    for def_name, spec in schema.get("$defs", {}).items():
        if isinstance(spec, dict) and spec.get("properties"):
            lead = _cell(spec.get("description", ""))
            out += ["", f"`{def_name}`" + (f": {lead}" if lead else ""), ""]
            out += _table(spec["properties"], spec.get("required", []))
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    return MARKER.sub(lambda m: render(m.group(1)), markdown)
