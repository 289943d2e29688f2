/* The cache lab: the LRU cache and request stream of checker/lab.py, run in
   the browser. The clock t advances while playing; N = min(max, 16 + floor(2t))
   requests have then been served (16 at t = 0, where the page opens). Step serves one request (moving t forward
   once past the first sixteen, so that N(t) always equals the requests
   served). Editing C or s keeps t and replays the same number of requests
   from an empty cache. */
"use strict";
(function () {
  const cfg = JSON.parse(document.getElementById("cowcheck-data").textContent);
  const el = CowPlayer.el;
  const $ = function (id) { return document.getElementById(id); };
  const lab = { C: cfg.capacity, s: cfg.stride, t: 0, cache: [], hits: [], requests: [] };

  function servedAt(t) { return Math.min(cfg.max, cfg.first + Math.floor(2 * t)); }
  function identity(k) { return (k * lab.s) % cfg.identities; }

  /* Serve the next request through the LRU cache (most recent first). */
  function serveOne() {
    if (lab.requests.length >= cfg.max) return false;
    const id = identity(lab.requests.length);
    const at = lab.cache.indexOf(id);
    if (at >= 0) lab.cache.splice(at, 1);
    lab.cache.unshift(id);
    if (lab.cache.length > lab.C) lab.cache.pop();
    lab.requests.push(id);
    lab.hits.push(at >= 0);
    return true;
  }

  function replay(n) {
    lab.cache = []; lab.hits = []; lab.requests = [];
    while (lab.requests.length < n && serveOne()) { /* serve */ }
  }

  function count(list) { return list.filter(Boolean).length; }

  /* -- drawing ------------------------------------------------------------ */
  /* Slot i of the cache, most recent first; the least recent one of a full
     cache is the one the next miss evicts. */
  function cacheSlot(i) {
    const id = lab.cache[i];
    if (id === undefined) return el("li", { class: "slot empty" }, "empty");
    const newest = i === 0;
    const evicted = lab.cache.length === lab.C && i === lab.C - 1 && !newest;
    return el("li", { class: "slot" + (newest ? " newest" : "") + (evicted ? " oldest" : ""), "data-id": id },
      el("b", {}, "id " + id), newest ? " most recent" : evicted ? " least recent" : "");
  }

  function render() {
    const n = lab.requests.length;
    $("t").textContent = lab.t.toFixed(1);
    $("n").textContent = n;
    $("n-again").textContent = n;
    const first = lab.hits.slice(0, cfg.first);
    $("hits16").textContent = count(first);
    $("served16").textContent = first.length < cfg.first ? first.length + " served so far" : String(cfg.first);
    const hits = count(lab.hits);
    $("hits").textContent = hits;
    $("rate").textContent = n ? "(" + (100 * hits / n).toFixed(1) + "%)" : "";
    $("next").textContent = n >= cfg.max ? "All " + cfg.max + " requests served."
      : "Next: request " + n + " asks for identity " + identity(n) + ".";

    const slots = [];
    for (let i = 0; i < Math.min(lab.C, 64); i++) slots.push(cacheSlot(i));
    if (lab.C > 64) slots.push(el("li", { class: "slot more" }, "… " + (lab.C - 64) + " more slots"));
    $("cache").replaceChildren.apply($("cache"), slots);

    const asked = new Set();
    for (let k = 0; k < cfg.identities; k++) asked.add(identity(k));
    const last = lab.requests[n - 1];
    const ids = [];
    for (let id = 0; id < cfg.identities; id++) {
      const cached = lab.cache.indexOf(id) >= 0;
      ids.push(el("span", { class: "ident" + (cached ? " cached" : "") + (asked.has(id) ? "" : " never") + (id === last ? " last" : ""),
        "data-id": id }, String(id), el("small", {}, cached ? "cached" : asked.has(id) ? "—" : "never"),
        id === last ? el("small", {}, "last asked") : null));
    }
    $("identities").replaceChildren.apply($("identities"), ids);

    const from = Math.max(0, n - 32);
    const stream = [];
    for (let k = from; k < n; k++) {
      stream.push(el("li", { class: "req " + (lab.hits[k] ? "hit" : "miss") },
        el("small", {}, "k=" + k), el("b", {}, String(lab.requests[k])), lab.hits[k] ? "HIT" : "MISS"));
    }
    $("stream").replaceChildren.apply($("stream"), stream);
    $("step").disabled = n >= cfg.max;
  }

  /* -- controls ------------------------------------------------------------- */
  function readInputs() {
    const C = Number($("capacity").value), s = Number($("stride").value);
    const ok = Number.isInteger(C) && C >= 1 && C <= cfg.max && Number.isInteger(s) && s >= 0 && s <= cfg.max;
    $("error").hidden = ok;
    $("error").textContent = ok ? "" : "C must be a whole number from 1 to " + cfg.max + ", s one from 0 to " + cfg.max + ".";
    if (ok) { lab.C = C; lab.s = s; }
    return ok;
  }

  function step() {
    player.pause();
    if (!serveOne()) return;
    const n = lab.requests.length;
    if (n > servedAt(lab.t)) lab.t = (n - cfg.first) / 2;   // keep N(t) equal to the requests served
    render();
  }

  /* t = 0: N(0) = 16 requests already served, as the formula and `cowcheck lab` say. */
  function reset() {
    player.pause();
    lab.t = 0;
    replay(servedAt(0));
    render();
  }

  const player = CowPlayer.create($("play"), $("speed"), function (seconds) {
    lab.t += seconds;
    const target = servedAt(lab.t);
    while (lab.requests.length < target && serveOne()) { /* catch up with the clock */ }
    render();
    return lab.requests.length < cfg.max;
  });

  ["capacity", "stride"].forEach(function (id) {
    $(id).addEventListener("input", function () {
      if (readInputs()) { replay(lab.requests.length); render(); }
    });
  });
  $("controls").addEventListener("submit", function (event) { event.preventDefault(); });
  $("reset").addEventListener("click", reset);
  $("step").addEventListener("click", step);
  CowPlayer.keys({ ArrowRight: step, " ": player.toggle, Home: reset });
  readInputs();
  replay(servedAt(lab.t));
  render();
})();
