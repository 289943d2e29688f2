"""Self-contained HTML pages: the counterexample stepper and the index of a
`cowcheck check --html` run (the cache lab's page is in checker/views/lab.py).

Every page is one file a person opens from disk: the scripts, the styles and
the data are inline, and a Content-Security-Policy forbids any fetch, so a
page that worked on the author's machine works on a projector with no
network. The stepping and drawing run in the browser (checker/views/assets/*.js);
everything that needs the model's vocabulary (the action in words, what each
branch is doing, which block the violation is about) is computed here, once,
with the sentences of checker/views/words.py, so the JavaScript only displays
data.

A trace of allocator code (the engine harness) gets the same page: the
header names the allocator instead of a protocol, each host call is one
step, and a branch shows its one table (what `table(branch)` returns)."""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Optional

from cowcheck.engines.counterexample import CALL_DEADLINE, HOST_PEAK
from cowcheck.engines.results import CALL_DID_NOT_RETURN, Summary
from cowcheck.views.words import (action_words, against_reference, describe, doing, host_calls, initial_words, is_cache, is_harness,
                                  is_plain, key_text, program_summary, reuse_words, subject, token)
from cowcheck.engines.invariants import BY_ID
from cowcheck.model.code import code_from_json

def harness_description(scenario: dict) -> str:
    """What the header says of allocator or scheduler code, in place of a
    protocol's description: the host calls its scenario's kind makes."""
    if scenario.get("scheduler") is not None:
        return ("Scheduler code, driven through the scheduler harness: each call (add, schedule, output, abort) is one "
                "step; cowcheck plays the worker (the plan's kernels, copies and transfers), the device and the remote "
                "engine; a request's table is what the scheduler's table(request) returns.")
    return (f"Allocator code, driven through the engine harness: each host call ({', '.join(host_calls(scenario))}) "
            "is one step, its copies and the branch's kernel launched in that same step; a branch's table is "
            "what the allocator's table(branch) returns, and the refcounts and free list are as it reports them.")

#: Forbids every fetch (scripts, styles, images, frames, connections): a page
#: that needs the network fails loudly in the browser's console.
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


# -- page assembly ------------------------------------------------------------
def asset(name: str) -> str:
    """The text of checker/views/assets/NAME (shipped as package data)."""
    return resources.files("cowcheck.views").joinpath("assets", name).read_text(encoding="utf-8")


def _script_json(data: dict) -> str:
    """JSON safe inside a <script> element: '</' cannot end it early."""
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def document(title: str, body: str, *, styles: tuple[str, ...], scripts: tuple[str, ...] = (),
             data: Optional[dict] = None) -> str:
    """One self-contained HTML document: BODY (trusted markup) with the named
    assets inlined and DATA embedded as JSON for the scripts to read."""
    css = "\n".join(asset(name) for name in styles)
    js = "\n".join(f"<script>\n{asset(name)}\n</script>" for name in scripts)
    embedded = ("" if data is None else
                f'<script type="application/json" id="cowcheck-data">{_script_json(data)}</script>\n')
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>
{css}
</style>
</head>
<body>
{body}
{embedded}{js}
</body>
</html>
"""


# -- the stepper ----------------------------------------------------------------
def _touched(action: dict, before: dict, after: dict) -> list[int]:
    """The blocks a step changed or named, to mark on the pool."""
    changed = {b["id"] for b, a in zip(before["blocks"], after["blocks"]) if a != b}
    named = {v for k, v in action["binds"].items()
             if k in ("tail", "new", "src", "dst", "block") and isinstance(v, int) and not isinstance(v, bool)}
    named |= {b for k, v in action["binds"].items() if k in ("copy_src", "copy_dst") for b in v}   # a host call's copies
    named |= {b for k, v in action["binds"].items() if k in ("hits", "blocks", "keyed", "evicted")   # a cache step's blocks
              for b in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(b, int) and not isinstance(b, bool)}
    return sorted(changed | named)


def _marked(witness: dict, block_size: int) -> dict:
    """The block (and, for wrong output, the slot) a violation is about."""
    table = witness.get("snapshot", witness.get("table"))
    if "position" in witness and table:
        position = witness["position"]
        if position // block_size < len(table):
            return {"block": table[position // block_size], "slot": position % block_size,
                    "label": f"expected {token(witness['expected'])}, read {token(witness['read'])}"}
    if witness.get("via") == "send" and isinstance(witness.get("block"), int):      # the remote reader of a send
        return {"block": witness["block"], "slot": witness["position"] % block_size,
                "label": f"sent {token(witness['read'])}, expected {token(witness['expected'])}"}
    if isinstance(witness.get("host"), int):       # host-key-content: a host block
        return {"host": witness["host"], "label": f"holds {' '.join(map(token, witness['slots']))} ≠ key"}
    if isinstance(witness.get("block"), int) and isinstance(witness.get("slot"), int) and "key" in witness:   # cache-immutable
        return {"block": witness["block"], "slot": witness["slot"],
                "label": f"keyed {key_text(witness['key'])}: must keep {token(witness['expected'])}, written {token(witness['written'])}"}
    if isinstance(witness.get("block"), int):
        return {"block": witness["block"], "label": "the violation is about this block"}
    return {}


def _violation(cx: dict, holds_when: Optional[str] = None) -> dict:
    """The highlighted last step: what broke, the peak the trace reaches, or
    the call that did not return from its last state (`tag`: the page's
    word for it)."""
    if cx["kind"] == CALL_DEADLINE:
        return {"step": cx["length"], "call": cx["call"], "tag": "DID NOT RETURN",
                "title": f"After step {cx['length']}, the call {cx['call']} did not return within {cx['deadline']:g} s."}
    if cx["kind"] == HOST_PEAK:
        return {"step": cx["length"], "peak": cx["host_peak_blocks"], "tag": "HOST PEAK",
                "title": f"This trace reaches the host peak of {cx['host_peak_blocks']} allocated host blocks at step {cx['length']}."}
    if cx["kind"] != "counterexample":
        return {"step": cx["length"], "peak": cx.get("peak_blocks"),
                "title": f"This trace reaches the peak of {cx.get('peak_blocks')} allocated blocks at step {cx['length']}."}
    inv_id, kind, witness = cx["invariant"], cx["invariant_kind"], cx.get("witness", {})
    builtin = BY_ID.get(inv_id)
    holds_when = holds_when or (builtin.holds_when if builtin else "")
    B = cx["scenario"]["block_size"]
    return {"step": cx["length"], "invariant": inv_id, "kind": kind, "holds_when": holds_when,
            "title": f"{inv_id} ({kind}) breaks at step {cx['length']}.",
            "sentence": describe(witness), "witness": witness, "mark": _marked(witness, B)}


def trace_label(violation: dict) -> str:
    """What a page (or picture) of a trace is of, after the scenario's
    name: the invariant, the peak, or the call deadline."""
    return violation.get("invariant") or (CALL_DEADLINE if "call" in violation else HOST_PEAK if violation.get("tag") == "HOST PEAK"
                                          else "peak")


def _against(output: dict) -> str:
    """What the page says after the token an executor's output gave."""
    return against_reference(output.get("decoded"), output.get("expected"), output.get("max_diff"), output.get("kind", "kernel"))


def _code(cx: dict) -> dict:
    """The engine code a file records, in words ("vLLM 0.33.0 (from
    /src/vllm, 1a2b3c4d5e6f)"), as the page's `code`; none recorded, no key."""
    code = code_from_json(cx.get("allocator_version"), cx.get("allocator_code"), "the page's trace")
    return {"code": str(code)} if code is not None else {}


def stepper_data(cx: dict, decoded: Optional[dict] = None, holds_when: Optional[str] = None) -> dict:
    """What the stepper page displays, one frame per step (frame 0: the
    initial state). `decoded` is the concrete executor's optional per-step
    output: {step: {"branch", "pos", "decoded", "expected"}}, each given
    the words that say how its token stands beside the reference's."""
    scenario = cx["scenario"]
    harness = is_harness(scenario)
    protocol = None if harness else scenario["protocol"]
    specs = dict(zip(cx["initial"]["branches"], scenario["branch"]))

    def frame(n: int, state: dict, text: str, words: str, touched: list[int], **extra) -> dict:
        where = {name: doing(protocol, specs[name], br, state) for name, br in state["branches"].items()}
        return {"n": n, "text": text, "words": words, "state": state, "touched": touched, "doing": where, **extra}

    frames = [frame(0, cx["initial"], "initial state", initial_words(scenario, cx["initial"]), [])]
    state = cx["initial"]
    for step in cx["steps"]:
        after = step["state"]
        frames.append(frame(step["n"], after or state, step["text"], action_words(step["action"], state, after, scenario),
                            _touched(step["action"], state, after) if after else [], actor=step["action"]["actor"]))
        state = after or state
    return {
        "scenario": {k: scenario[k] for k in ("name", "block_size", "prompt", "pool", "device", "reuse")},
        "cache": is_cache(scenario),     # a prefix cache: keys on blocks, the cache map, requests that wait
        **_transfers(scenario, cx["initial"]),
        "protocol": ({"name": subject(scenario)[1], "description": harness_description(scenario)} if protocol is None else
                     {"name": protocol["name"], "description": " ".join(protocol.get("description", "").split())}),
        "subject": "allocator" if harness else "protocol",
        **_code(cx),     # allocator code: the engine code the trace was found in (release, tree)
        "harness": harness,     # one table per branch: what table(branch) returns
        "branches": [{"name": name, "summary": program_summary(spec), "parent": spec.get("parent")}
                     for name, spec in specs.items()],
        "programs": not all(map(is_plain, specs.values())),   # show sequences: pos alone does not tell them
        "violation": _violation(cx, holds_when),
        "frames": frames,
        "decoded": {str(k): {**v, "against": _against(v)} for k, v in (decoded or {}).items()},
    }


def _transfers(scenario: dict, initial: dict) -> dict:
    """A transfer scenario's keys of the page data (none elsewhere, so other
    pages' data stay as they were): `transfers`, its host tier drawn beside
    the pool, and `remote`, a P/D request's remote engine."""
    if "host" not in initial:
        return {}
    return {"transfers": True, "host_tier": bool(initial["host"]),
            "remote": any("source" in b or "sink" in b for b in scenario["branch"])}


def _host_tier(data: dict) -> str:
    """A transfer scenario's host tier, under the pool inside its drawing,
    so one layer of arrows joins them; stepper.js fills it."""
    if not data.get("host_tier"):
        return ""
    return '<h3 class="tier-title">Host tier</h3><div class="pool host-tier" id="host-tier"></div>'


def _remote_engine(data: dict) -> str:
    """A P/D request's remote engine, above the pool: recvs come from it,
    sends go to it."""
    if not data.get("remote"):
        return ""
    return ('<div class="remote-engine" id="remote" role="group" aria-label="remote engine"><b>remote engine</b>: '
            "its NIC writes recvs into this device's blocks and reads sends from them; nothing on this device orders it</div>")


def _transfers_legend(data: dict) -> str:
    if not data.get("transfers"):
        return ""
    return ("\n · arrows: transfers in flight (store GPU → host, load host → GPU"
            + (", recv remote → GPU, send GPU → remote" if data.get("remote") else "") + ")")


def _tables_legend(data: dict) -> str:
    if data.get("harness"):
        return ('<p class="legend"><span class="chip">table</span> the branch\'s block table, what the allocator\'s '
                'table(branch) returns (its next kernel uses it)</p>')
    return ('<p class="legend"><span class="chip">solid</span> working table (the scheduler\'s) ·\n'
            ' <span class="chip chip-published">dashed</span> published table (what the next kernel uses)</p>')


def _cache_legend(cache: bool) -> str:
    return ('\n · <span class="swatch keyed-swatch">KEYED</span> in the prefix cache, its key shown (a FREE keyed block '
            'is still cached until an allocation evicts it)') if cache else ""


def _cache_panel(cache: bool) -> str:
    """A cache scenario's prefix cache: each key and the block it maps to;
    stepper.js fills the table."""
    if not cache:
        return ""
    return """
<section class="panel" aria-labelledby="cache-title" id="cache-panel">
<h2 id="cache-title">Prefix cache</h2>
<p class="legend">Each key (the tokens of every position up to the block's end) and the block it maps to; a key names one block,
 and a block is in the cache exactly while it has a key.</p>
<div class="table-wrap"><table id="cache-map"><thead><tr><th scope="col">key</th><th scope="col">block</th><th scope="col">block's state</th></tr></thead>
<tbody id="cache-rows"></tbody></table></div>
</section>"""


def _stepper_body(data: dict) -> str:
    """The page's fixed markup; stepper.js fills the parts marked by id."""
    s, v = data["scenario"], data["violation"]
    branches = ", ".join(f"{b['name']} ({b['summary']})" for b in data["branches"])
    cache = bool(data.get("cache"))
    # a cache scenario's requests each have their own prompt
    prompt, who = ("prefix cache", "requests") if cache else (f"L={s['prompt']}", "branches")
    last = len(data["frames"]) - 1
    verdict_class = "verdict-bad" if "invariant" in v or "call" in v else "verdict-peak"
    code = f" · {escape(data['code'])}" if data.get("code") else ""
    return f"""<header>
<h1>{escape(s['name'])} <span class="sub">{escape(trace_label(v))}</span></h1>
<p class="meta">{data.get('subject', 'protocol')} <b>{escape(data['protocol']['name'])}</b>{code} · device {escape(s['device'])} · reuse {escape(reuse_words(s['reuse'], bool(data.get('harness'))))}
 · B={s['block_size']} · {prompt} · pool {s['pool']} blocks · {who} {escape(branches)}</p>
<p class="description">{escape(data['protocol']['description'])}</p>
<p class="verdict {verdict_class}" id="verdict"><span class="tag">{'VIOLATION' if 'invariant' in v else v.get('tag', 'PEAK')}</span>
 {escape(v['title'])} <button type="button" id="goto-violation">Go to step {v['step']}</button></p>
</header>
<nav class="controls" aria-label="Step controls">
<button type="button" id="reset">Reset</button>
<button type="button" id="back">◀ Step back</button>
<button type="button" id="step">Step ▶</button>
<button type="button" id="play" aria-pressed="false">▶ Play</button>
<label>speed <select id="speed">
<option value="0.5">0.5 steps/s</option><option value="1" selected>1 step/s</option>
<option value="2">2 steps/s</option><option value="4">4 steps/s</option><option value="10">10 steps/s</option>
</select></label>
<span class="position" id="position" aria-live="polite">step 0 of {last}</span>
</nav>
<p class="keys">Keys: → step, ← step back, Space play/pause, Home reset, End last step.</p>
<main>
<section id="action" class="panel" aria-label="Current step"></section>
<section id="violation" class="panel violation" hidden></section>
<section class="panel" aria-labelledby="pool-title">
<h2 id="pool-title">Pool</h2>
<p class="legend"><span class="swatch free-swatch">FREE</span> free block (greyed, hatched)
 · <span class="swatch changed-swatch">changed</span> touched by this step
 · <span class="swatch pending-swatch">← a1</span> write or copy in flight
 · arrows: copies in flight{_cache_legend(cache)}{_transfers_legend(data)}</p>
<div class="pool-wrap">{_remote_engine(data)}<div class="pool" id="pool"></div>{_host_tier(data)}<svg class="arrows" id="arrows" aria-hidden="true"></svg></div>
<p id="free-list" class="free-list"></p>{'<p id="connector" class="free-list"></p>' if data.get("transfers") else ""}
</section>{_cache_panel(cache)}
<section class="panel" aria-labelledby="branches-title">
<h2 id="branches-title">Branches</h2>
{_tables_legend(data)}
<div id="branches"></div>
</section>
<section class="panel" aria-labelledby="queue-title">
<h2 id="queue-title">In flight on the device</h2>
<ul id="queue"></ul>
</section>
<details class="panel" id="all-steps"><summary>All {last} steps</summary><ol id="step-list"></ol></details>
</main>"""


def stepper_html(counterexample_json: dict, decoded: Optional[dict] = None, holds_when: Optional[str] = None) -> str:
    """The stepper page for one counterexample file's JSON. `decoded` is the
    hook for the concrete executor: {step: {"branch", "pos", "decoded",
    "expected"}}, shown at that step and next to the expected token."""
    data = stepper_data(counterexample_json, decoded, holds_when)
    title = f"{data['scenario']['name']}: {trace_label(data['violation'])} (cowcheck)"
    return document(title, _stepper_body(data), styles=("base.css", "stepper.css"),
                    scripts=("player.js", "stepper.js"), data=data)


# -- the index of a check run -------------------------------------------------------
def _verdict_cell(verdict: dict) -> str:
    if verdict["holds"] is False:
        return f'<td class="bad"><span class="tag">VIOLATED</span> {escape(verdict["kind"])}</td>'
    if verdict["holds"]:
        return '<td class="good">holds</td>'
    return '<td>not seen (partial)</td>'


def _link(path: Optional[str], links: dict[str, str], text: str) -> str:
    page_name = links.get(path or "")
    return f'<a href="{escape(page_name)}">{escape(text)}</a>' if page_name else ""


def _verdict_row(invariant: str, verdict: dict, links: dict[str, str]) -> str:
    length = verdict["length"]
    watch = _link(verdict["counterexample"], links, f"watch its {length} steps")
    return (f'<tr><th scope="row">{escape(invariant)}</th>{_verdict_cell(verdict)}'
            f'<td class="num">{length or ""}</td><td>{watch}</td></tr>')


def _measures(summary: dict, links: dict[str, str]) -> str:
    """The explorer's measures (the z3 engines have none: their bound instead)."""
    if "states" not in summary:
        return f'<p class="measures">engine {escape(summary["engine"])} · bound {summary.get("bound")}</p>'
    copies = "n/a" if not summary["copies"] else f"{summary['copies'][0]}-{summary['copies'][1]}"
    steady = "n/a" if summary["steady_blocks"] is None else summary["steady_blocks"]
    peak_link = _link(summary["peak_trace"], links, "watch the peak trace")
    host = ""
    if summary.get("host_peak") is not None:       # a transfer scenario
        host_link = _link(summary.get("host_peak_trace"), links, "watch the host peak trace")
        host = f' · host peak {summary["host_peak"]} host blocks {host_link}'.rstrip()
    return (f'<p class="measures">peak {summary["peak_blocks"]} blocks / steady {steady} · copies {copies} · '
            f'{summary["states"]:,} states {peak_link}{host}</p>')


def _scenario_section(summary: dict, links: dict[str, str]) -> str:
    rows = "\n".join(_verdict_row(inv, v, links) for inv, v in summary["verdicts"].items())
    unsafe = '<span class="tag bad">UNSAFE</span> ' if summary["summary"] == Summary.UNSAFE else ""
    headline = f"<b>{escape(summary['summary'])}</b>"
    hung = summary.get("call_deadline")
    if hung is not None and summary["summary"] != Summary.UNSAFE:     # the call, not "safe so far"
        watch = _link(hung["counterexample"], links, f"watch its {hung['length']} steps")
        headline = (f"<b>{escape(CALL_DID_NOT_RETURN)}</b>: <code>{escape(hung['call'])}</code> did not return "
                    f"within {hung['deadline']:g} s {watch}")
    expect = ("" if not summary["expect"] else
              f"<p>expect {escape(', '.join(summary['expect']))}: "
              + ("<b>met</b>" if summary["expect_met"] else
                 "<b class=\"bad-text\">NOT met</b> (" + escape("; ".join(summary["expect_failures"])) + ")") + "</p>")
    return f"""<section class="panel scenario" id="{escape(summary['scenario'])}">
<h2>{escape(summary['scenario'])}</h2>
<p class="meta">{'allocator' if summary.get('allocator') else 'protocol'} <b>{escape(summary['protocol'])}</b> · device {escape(summary['device'])} · reuse {escape(reuse_words(summary['reuse'], summary.get('allocator') is not None))}</p>
<p class="summary">{unsafe}{headline}</p>
<div class="table-wrap"><table>
<thead><tr><th scope="col">invariant</th><th scope="col">verdict</th><th scope="col">shortest</th><th scope="col">counterexample</th></tr></thead>
<tbody>
{rows}
</tbody></table></div>
{_measures(summary, links)}
{expect}
</section>"""


def index_html(summaries: list[dict], links: dict[str, str]) -> str:
    """The index of one check run: each scenario's verdict table (the JSON
    of Result.to_json()), its counterexamples linked to their stepper
    pages through LINKS (counterexample file path -> page file name)."""
    met = sum(1 for s in summaries if s["expect_met"])
    contents = " · ".join(f'<a href="#{escape(s["scenario"])}">{escape(s["scenario"])}</a>' for s in summaries)
    body = f"""<header>
<h1>cowcheck check <span class="sub">{len(summaries)} scenario(s), {met} met their expect</span></h1>
<nav class="contents" aria-label="Scenarios">{contents}</nav>
</header>
<main>
{"".join(_scenario_section(s, links) for s in summaries)}
</main>"""
    return document("cowcheck check", body, styles=("base.css", "index.css"))
