"""The cache lab (docs/semantics.md#cache-lab): an LRU cache of capacity C fed
a cyclic request stream, request k asking for identity (k * s) mod 16. After
t seconds of play it has served N = min(4096, 16 + floor(2t)) requests.

`cowcheck lab` prints a run; `cowcheck lab --html` writes the interactive page
(checker/views/assets/lab.js runs the same cache in the browser, and the tests check
that both agree)."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from html import escape

from cowcheck.views.html import document

IDENTITIES = 16     # the request stream cycles through identities 0 .. 15
FIRST = 16          # the hits "among the first sixteen requests"
MAX_REQUESTS = 4096
LIMITS = ("The lab leaves out everything that makes the KV cache hard: it has no branches, no aliases "
          "(two tables naming one block), no copy-on-write and no asynchronous completion; "
          "every request is served at once, in order.")


def served(t: float) -> int:
    """N: the requests served after t seconds of play."""
    return min(MAX_REQUESTS, FIRST + math.floor(2 * t))


def identity(k: int, stride: int) -> int:
    """The identity request k asks for."""
    return (k * stride) % IDENTITIES


@dataclass
class LabRun:
    capacity: int
    stride: int
    time: float
    requests: list[int]
    hits: list[bool]
    cache: list[int]    # the identities cached at the end, most recently used first

    @property
    def n(self) -> int:
        return len(self.requests)

    @property
    def hits_first(self) -> int:
        return sum(self.hits[:FIRST])

    @property
    def total_hits(self) -> int:
        return sum(self.hits)


def run(capacity: int, stride: int, time: float = 0.0) -> LabRun:
    """Serve the first N(time) requests through an LRU cache of CAPACITY
    identities, starting empty: a hit refreshes the identity, a miss brings it
    in and evicts the least recently used one when the cache is full."""
    cache: OrderedDict[int, None] = OrderedDict()
    requests, hits = [], []
    for k in range(served(time)):
        ident = identity(k, stride)
        hit = ident in cache
        if hit:
            cache.move_to_end(ident)
        else:
            cache[ident] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
        requests.append(ident)
        hits.append(hit)
    return LabRun(capacity, stride, time, requests, hits, list(reversed(cache)))


def report(lab: LabRun) -> str:
    """The run as text: the stream sixteen requests a line, each hit (H) or
    miss (M), and the two hit counts."""
    lines = [f"cache lab: LRU cache of capacity {lab.capacity}, stride {lab.stride}, t = {lab.time:g} s: "
             f"N = min({MAX_REQUESTS}, {FIRST} + floor(2t)) = {lab.n} requests",
             f"request k asks for identity (k * {lab.stride}) mod {IDENTITIES}; H = hit, M = miss"]
    for start in range(0, lab.n, 16):
        cells = " ".join(f"{lab.requests[k]:2d} {'H' if lab.hits[k] else 'M'}" for k in range(start, min(start + 16, lab.n)))
        lines.append(f"{start:>5}-{min(start + 16, lab.n) - 1:<5} {cells}")
    lines.append(f"hits among the first {FIRST} requests: {lab.hits_first} of {FIRST}")
    lines.append(f"hits over all N = {lab.n} requests: {lab.total_hits} of {lab.n} ({lab.total_hits / lab.n:.1%})")
    lines.append(f"cached at the end, most recent first: {' '.join(map(str, lab.cache))}")
    return "\n".join(lines)


def lab_html(capacity: int = 4, stride: int = 2) -> str:
    """The interactive lab, starting from C = CAPACITY and s = STRIDE."""
    body = f"""<header>
<h1>Cache lab</h1>
<p>An LRU cache of capacity <i>C</i> is fed a cyclic request stream: request <i>k</i> asks for identity
(<i>k</i> × <i>s</i>) mod {IDENTITIES}. After <i>t</i> seconds of play it has served
<i>N</i> = min({MAX_REQUESTS}, {FIRST} + ⌊2<i>t</i>⌋) requests. Step serves one request at a time;
changing <i>C</i> or <i>s</i> keeps <i>t</i> and replays the same requests from an empty cache.</p>
<p class="limits" id="limits"><b>Not modelled:</b> {escape(LIMITS)}</p>
</header>
<form class="controls" id="controls" aria-label="Lab controls">
<label>capacity <i>C</i> <input type="number" id="capacity" min="1" max="{MAX_REQUESTS}" step="1" value="{capacity}" required></label>
<label>stride <i>s</i> <input type="number" id="stride" min="0" max="{MAX_REQUESTS}" step="1" value="{stride}" required></label>
<button type="button" id="reset">Reset</button>
<button type="button" id="play" aria-pressed="false">▶ Play</button>
<button type="button" id="step">Step ▶</button>
<label>clock <select id="speed">
<option value="1" selected>1× (real time)</option><option value="4">4×</option><option value="16">16×</option><option value="128">128×</option>
</select></label>
</form>
<p class="error" id="error" role="alert" hidden></p>
<p class="keys">Keys: → step, Space play/pause, Home reset (outside the number fields).</p>
<main>
<section class="panel counters" aria-label="Clock and hits">
<p class="big"><i>t</i> = <span id="t">0.0</span> s · <i>N</i> = <span id="n">0</span> requests served</p>
<p>hits among the first sixteen requests: <b id="hits16">0</b> of <span id="served16">0</span></p>
<p>hits over all <i>N</i> requests: <b id="hits">0</b> of <span id="n-again">0</span> <span id="rate"></span></p>
<p id="next"></p>
</section>
<section class="panel" aria-labelledby="cache-title">
<h2 id="cache-title">Cache contents (most recently used first)</h2>
<ol class="cache" id="cache"></ol>
</section>
<section class="panel" aria-labelledby="ids-title">
<h2 id="ids-title">Identities</h2>
<p class="legend"><span class="ident cached">cached</span> in the cache ·
 <span class="ident">not cached</span> · <span class="ident never">never asked</span> by this stride</p>
<div class="identities" id="identities"></div>
</section>
<section class="panel" aria-labelledby="stream-title">
<h2 id="stream-title">Request stream (the last 32 served, newest last)</h2>
<p class="legend"><span class="req hit">3 HIT</span> solid · <span class="req miss">3 MISS</span> hatched</p>
<ol class="stream" id="stream"></ol>
</section>
</main>"""
    data = {"capacity": capacity, "stride": stride, "identities": IDENTITIES, "first": FIRST, "max": MAX_REQUESTS}
    return document("Cache lab (cowcheck)", body, styles=("base.css", "lab.css"), scripts=("player.js", "lab.js"), data=data)
