"""`cowcheck html` of an engine counterexample: one self-contained page that
steps through the engine's own steps, showing at each the schedule's
events, the batch the engine's scheduler chose, every request's block table
and the pool (each block's shared ref count, hashed, free), as read from the
engine before the step's forward; the last step carries the violation
(and, for an engine exception, its traceback). The page is built like the
other counterexample pages (cowcheck.views.html.document: inline assets, no
fetch); checker/views/assets/engine.js only lays the data out."""

from __future__ import annotations

from html import escape
from typing import Any

from cowcheck.enginetest.trace import EngineTrace
from cowcheck.views.html import document


def page_data(trace: EngineTrace) -> dict[str, Any]:
    """What the page displays: one frame per engine step."""
    d = trace.data
    used = sorted({b for s in d["steps"] for t in s["tables"].values() for b in t} |
                  {b for s in d["steps"] for b in s["free"] + s["hashed"]} |
                  {int(b) for s in d["steps"] for b in s["ref_counts"]})
    return {"scenario": trace.scenario.name, "invariant": trace.invariant, "witness": d["witness"],
            "blocks": used, "frames": d["steps"], "schedule": d["schedule"]["events"], "outputs": d["outputs"]}


def engine_page(trace: EngineTrace) -> str:
    d, w = trace.data, trace.data["witness"]
    sc = trace.scenario
    frames = d["steps"]
    body = f"""<header>
<h1>{escape(sc.name)} <span class="sub">{escape(trace.invariant)}</span></h1>
<p class="meta">the real engine: <b>{escape(trace.release_line())}</b> · block size {sc.block_size} · pool {sc.pool} blocks
 · {sc.num_return_sequences} sequence{'s' if sc.num_return_sequences != 1 else ''} per request · {escape(d['engine']['sampling'])}</p>
<p class="description">{escape(sc.description)}</p>
<p class="description">Schedule: {escape('; '.join(d['schedule']['events']) or 'every request at once, no cancel')}</p>
<p class="verdict verdict-bad" id="verdict"><span class="tag">VIOLATION</span>
 {escape(trace.invariant)} ({escape(d['invariant_kind'])}) breaks at engine step {w['step']}: {escape(w['message'])}
 <button type="button" id="goto-violation">Go to it</button></p>
</header>
<nav class="controls" aria-label="Step controls">
<button type="button" id="reset">Reset</button>
<button type="button" id="back">◀ Step back</button>
<button type="button" id="step">Step ▶</button>
<span class="position" id="position" aria-live="polite">step 1 of {len(frames)}</span>
</nav>
<p class="keys">Keys: → step, ← step back, Home first step, End last step.</p>
<main>
<section id="action" class="panel" aria-label="Current step"></section>
<section class="panel" aria-labelledby="tables-title">
<h2 id="tables-title">Block tables</h2>
<p class="legend">Each request's block table as the engine's allocator holds it, before the step's forward.</p>
<div class="table-wrap"><table><thead><tr><th scope="col">request</th><th scope="col">blocks</th><th scope="col">in the batch</th></tr></thead>
<tbody id="tables"></tbody></table></div>
</section>
<section class="panel" aria-labelledby="pool-title">
<h2 id="pool-title">Pool</h2>
<p class="legend">Every block the run touched: its shared ref count (the ledger's; 1 when it does not count it),
 HASHED (in the prefix cache), FREE (free or evictable).</p>
<div class="table-wrap"><table><thead><tr><th scope="col">block</th><th scope="col">ref count</th><th scope="col">state</th><th scope="col">mapped by</th></tr></thead>
<tbody id="pool"></tbody></table></div>
</section>
<section id="violation" class="panel violation" hidden></section>
</main>"""
    return document(f"{sc.name}: {trace.invariant} (engine)", body, styles=("base.css", "stepper.css"),
                    scripts=("engine.js",), data=page_data(trace))
