/* The counterexample stepper: shows one frame (the state after a step) at a
   time. All wording is computed in Python (checker/html.py); this script only
   lays the data out and moves between frames. */
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("cowcheck-data").textContent);
  const frames = data.frames;
  const last = frames.length - 1;
  const B = data.scenario.block_size;
  const violation = data.violation;
  const tag = violation.tag || "PEAK";   // a trace without an invariant: its peak, or a call that did not return
  const el = CowPlayer.el;
  const $ = function (id) { return document.getElementById(id); };
  let current = 0;

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  /* -- what is in flight, per block ------------------------------------ */
  function inFlight(state) {
    const notes = {};      // block id -> list of sentences
    const pending = {};    // "block:slot" -> token a kernel will write there
    const incoming = {};   // block id -> number of slots a copy will fill
    function note(block, text) { (notes[block] = notes[block] || []).push(text); }
    state.queue.forEach(function (op) {
      if (op.copy) {
        const c = op.copy;
        note(c.src, "copy in flight → block " + c.dst + " (" + plural(c.n, "slot") + ")");
        note(c.dst, "copy in flight ← block " + c.src);
        incoming[c.dst] = Math.max(incoming[c.dst] || 0, c.n);
      } else if (op.transfer) {
        note(op.transfer.block, transferWords(op.transfer) + " in flight" + (op.transfer.reported ? " (LEASE EXPIRED: reported already)" : ""));
      } else {
        const k = op.kernel;
        /* a prefill writes positions from .. pos (its tokens are the expected sequence's) */
        const first = k.from === undefined ? k.pos : k.from;
        for (let p = first; p <= k.pos; p++) {
          const target = k.snapshot[Math.floor(p / B)];
          const written = p === k.pos ? k.token : k.expected[p];
          pending[target + ":" + (p % B)] = written;
          note(target, (k.from === undefined ? "kernel " : "prefill kernel ") + k.branch + "@" + k.pos +
            " in flight: will write " + written + " into slot " + (p % B));
        }
      }
    });
    (state.reports || []).forEach(function (r) {
      note(r.block, "report pending: " + transferWords(r) + (r.ok ? " ok" : " FAILED"));
    });
    return { notes: notes, pending: pending, incoming: incoming };
  }

  function mappedBy(state, id) {
    const parts = [];
    Object.keys(state.branches).forEach(function (name) {
      const br = state.branches[name];
      const tables = [];
      if (br.working.indexOf(id) >= 0) tables.push(data.harness ? "table" : "working");
      if (!data.harness && br.published.indexOf(id) >= 0) tables.push("published");
      if (tables.length) parts.push(name + ": " + tables.join(" + "));
    });
    return parts.length ? "mapped by " + parts.join("; ") : "in no table";
  }

  /* -- the pool ----------------------------------------------------------- */
  function slotCell(block, i, flight, mark) {
    const token = block.slots[i];
    const waiting = flight.pending[block.id + ":" + i];
    const copying = i < (flight.incoming[block.id] || 0);
    const marked = mark && mark.slot === i;
    const cell = el("span", {
      class: "slot" + (token === null ? " empty" : "") + (waiting || copying ? " pending" : "") + (marked ? " marked" : ""),
      "data-slot": i, title: "slot " + i,
    }, token === null ? "_" : token);
    if (waiting) cell.appendChild(el("span", { class: "incoming" }, "← " + waiting));
    else if (copying) cell.appendChild(el("span", { class: "incoming" }, "← copy"));
    return cell;
  }

  function blockCard(block, frame, flight) {
    const touched = frame.touched.indexOf(block.id) >= 0;
    const mark = current === violation.step && violation.mark && violation.mark.block === block.id ? violation.mark : null;
    const slots = el("div", { class: "slots" });
    block.slots.forEach(function (_, i) { slots.appendChild(slotCell(block, i, flight, mark)); });
    const markNote = mark ? el("p", { class: "mark-label" }, "✗ " + (mark.slot === undefined ? "" : "slot " + mark.slot + ": ") + mark.label) : null;
    const notes = el("ul", { class: "notes" }, el("li", {}, mappedBy(frame.state, block.id)));
    const keyed = Boolean(block.key);   // cache scenarios: in the prefix cache while it has a key
    (flight.notes[block.id] || []).forEach(function (text) { notes.appendChild(el("li", {}, text)); });
    return el("div", {
      class: "block" + (block.free ? " free" : "") + (keyed ? " keyed" : "") + (touched ? " changed" : "") + (mark ? " violating" : ""),
      "data-block": block.id, role: "group", "aria-label": "block " + block.id,
    },
      el("div", { class: "block-head" }, el("span", { class: "name" }, "block " + block.id),
        block.free ? el("span", { class: "tag free-tag" }, "FREE") : null,
        keyed ? el("span", { class: "tag keyed-tag" }, "KEYED") : null,
        touched ? el("span", { class: "tag changed-tag" }, "changed") : null,
        mark ? el("span", { class: "tag bad-tag" }, "✗ VIOLATION") : null),
      slots,
      keyed ? el("p", { class: "key" }, "key (" + block.key.join(" ") + ")" + (block.free ? ": free, still cached" : "")) : null,
      markNote,
      el("div", { class: "counts" }, el("span", { class: "refcount" }, "refcount " + block.refcount),
        data.harness && !block.holds ? null : " · ",
        data.harness && !block.holds ? null : el("span", { class: "holds" }, "holds " + block.holds)),  // allocator code: only the holds its holds() reports
      notes);
  }

  function renderPool(frame) {
    const pool = $("pool");
    const flight = inFlight(frame.state);
    pool.replaceChildren.apply(pool, frame.state.blocks.map(function (b) { return blockCard(b, frame, flight); }));
    const free = frame.state.free;
    if (data.harness) {   // allocator code: its own free list, in its own order
      $("free-list").textContent = free.length
        ? "Free blocks, as the allocator reports them: " + free.join(", ") + "."
        : "Free blocks: none — the allocator has no block to give (its next allocation waits).";
    } else {
      $("free-list").textContent = free.length
        ? "Free list (front first): " + free.join(" → ") + " — the next alloc takes block " + free[0] + "."
        : "Free list: empty — no block can be allocated.";
      const cached = free.filter(function (id) { return frame.state.blocks[id].key; });
      if (data.cache && cached.length) {
        $("free-list").textContent += " Free but still cached: " + cached.map(function (id) { return "block " + id; }).join(", ") +
          " (a request may hit " + (cached.length === 1 ? "it" : "them") + " until an allocation evicts " + (cached.length === 1 ? "it" : "them") + ").";
      }
    }
    renderHost(frame);
    drawArrows(frame.state);
  }

  /* -- the host tier and the connector (transfer scenarios) ------------- */
  function hostCard(h, frame) {
    const mark = current === violation.step && violation.mark && violation.mark.host === h.id ? violation.mark : null;
    const notes = el("ul", { class: "notes" });
    frame.state.queue.forEach(function (op) {
      if (op.transfer && op.transfer.host === h.id) notes.appendChild(el("li", {}, transferWords(op.transfer) + " in flight"));
    });
    (frame.state.reports || []).forEach(function (r) {
      if (r.host === h.id) notes.appendChild(el("li", {}, "report pending: " + transferWords(r) + (r.ok ? " ok" : " FAILED")));
    });
    const slots = el("div", { class: "slots" });
    h.slots.forEach(function (t, i) {
      slots.appendChild(el("span", { class: "slot" + (t === null ? " empty" : "") + (mark ? " marked" : ""), title: "slot " + i }, t === null ? "_" : t));
    });
    return el("div", {
      class: "block host" + (h.free ? " free" : "") + (h.key ? " keyed" : "") + (mark ? " violating" : ""),
      "data-host": h.id, role: "group", "aria-label": "host block h" + h.id,
    },
      el("div", { class: "block-head" }, el("span", { class: "name" }, "host h" + h.id),
        h.free ? el("span", { class: "tag free-tag" }, "FREE") : null,
        h.key ? el("span", { class: "tag keyed-tag" }, "KEYED") : null,
        mark ? el("span", { class: "tag bad-tag" }, "✗ VIOLATION") : null),
      slots,
      h.key ? el("p", { class: "key" }, "key (" + h.key.join(" ") + ")") : null,
      mark ? el("p", { class: "mark-label" }, "✗ " + mark.label) : null,
      el("div", { class: "counts" }, el("span", { class: "pins" }, "pins " + h.pins)),
      notes);
  }

  function renderHost(frame) {
    if (!data.transfers) return;
    const state = frame.state;
    if (state.host.length) $("host-tier").replaceChildren.apply($("host-tier"), state.host.map(function (h) { return hostCard(h, frame); }));
    const parts = [];
    if (state.host.length) {
      parts.push(state.host_free.length ? "Host free list (front first): " + state.host_free.map(function (h) { return "h" + h; }).join(" → ") + "."
        : "Host free list: empty — a store launches nothing more.");
    }
    const reports = state.reports || [];
    parts.push(reports.length ? "Reports pending (the connector has not processed them): " + reports.map(function (r) {
      return transferWords(r) + (r.ok ? " ok" : " FAILED");
    }).join("; ") + "." : "No report pending.");
    const expired = state.queue.filter(function (op) { return op.transfer && op.transfer.reported; });
    if (expired.length) {
      parts.push("LEASE EXPIRED: " + expired.map(function (op) { return transferWords(op.transfer); }).join("; ") +
        " reported as done, still in flight: the block may be reused before the remote reader reads it.");
    }
    $("connector").textContent = parts.join(" ");
  }

  /* Copy arrows, drawn only through the space between cards so that they
     cross no card (and no block heading): between two cards of one row,
     an arch from the source's top to the destination's top through the gap
     above the row; between rows (a narrow window stacks the cards), up
     into the gap above the source's row, along it to the gutter right of
     the cards, along the gutter to the gap above the destination's row, and
     down into the destination's top. Several copies take different heights
     and gutter lanes; a label that would overlap another is moved up. */
  function drawArrows(state) {
    const svg = $("arrows");
    const box = svg.getBoundingClientRect();
    const ns = "http://www.w3.org/2000/svg";
    function svgEl(tag, attrs) {
      const node = document.createElementNS(ns, tag);
      for (const k in attrs) node.setAttribute(k, attrs[k]);
      return node;
    }
    function card(id, shift) {
      const node = document.querySelector('.block[data-block="' + id + '"]');
      if (!node) return null;
      const r = node.getBoundingClientRect();
      return { x: r.left + r.width / 2 + shift - box.left, y: r.top - box.top, right: r.right - box.left };
    }
    const cards = [...document.querySelectorAll("#pool .block")].map(function (n) { return n.getBoundingClientRect(); });
    const gutter = Math.max.apply(null, cards.map(function (r) { return r.right - box.left; }).concat([0]));
    const marker = svgEl("marker", { id: "head", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto-start-reverse" });
    marker.appendChild(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: "copy-head" }));
    const defs = svgEl("defs", {});
    defs.appendChild(marker);
    if (data.transfers) {      // the transfers' arrowhead, in their colour
      const head = svgEl("marker", { id: "transfer-head", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto-start-reverse" });
      head.appendChild(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: "transfer-head" }));
      defs.appendChild(head);
    }
    const items = [defs];
    const labels = [], paths = [];
    let drawn = 0, lanes = 0;
    state.queue.forEach(function (op) {
      if (!op.copy) return;
      const p = card(op.copy.src, -12), q = card(op.copy.dst, 12);
      if (!p || !q) return;
      const lift = 14 + 12 * (drawn++ % 3);
      let d, lx, ly;
      if (Math.abs(p.y - q.y) < 4) {          // one row: an arch through the gap above it
        const my = Math.min(p.y, q.y) - lift * 4 / 3;
        d = "M" + p.x + "," + p.y + " C" + p.x + "," + my + " " + q.x + "," + my + " " + q.x + "," + q.y;
        lx = (p.x + q.x) / 2; ly = Math.min(p.y, q.y) - lift - 4;
      } else {                                  // rows apart: through the gaps and the gutter
        const gx = gutter + 8 + 9 * (lanes++ % 3), ps = p.y - lift, qs = q.y - lift, r = 6;
        const down = qs > ps ? 1 : -1;
        d = "M" + p.x + "," + p.y + " V" + (ps + r) + " Q" + p.x + "," + ps + " " + (p.x + r) + "," + ps
          + " H" + (gx - r) + " Q" + gx + "," + ps + " " + gx + "," + (ps + down * r)
          + " V" + (qs - down * r) + " Q" + gx + "," + qs + " " + (gx - r) + "," + qs
          + " H" + (q.x + r) + " Q" + q.x + "," + qs + " " + q.x + "," + (qs + r) + " V" + q.y;
        lx = (q.x + gx) / 2; ly = qs - 4;
      }
      const path = svgEl("path", { d: d, class: "copy-arrow", "marker-end": "url(#head)" });
      items.push(path);
      paths.push(path);
      const label = svgEl("text", { x: lx, y: ly, "text-anchor": "middle", class: "copy-label" });
      label.textContent = "copy " + op.copy.src + "→" + op.copy.dst;
      items.push(label);
      labels.push(label);
    });
    /* transfers: a straight arrow between a GPU block's card and a host
       block's (store down, load up), or the remote engine's (recv in, send out) */
    function edge(selector) {
      const node = document.querySelector(selector);
      if (!node) return null;
      const r = node.getBoundingClientRect();
      return { x: r.left + r.width / 2 - box.left, top: r.top - box.top, bottom: r.bottom - box.top };
    }
    state.queue.forEach(function (op, i) {
      const t = op.transfer;
      if (!t) return;
      const block = edge('#pool .block[data-block="' + t.block + '"]');
      const other = t.kind === "store" || t.kind === "load" ? edge('#host-tier .block[data-host="' + t.host + '"]') : edge("#remote");
      if (!block || !other) return;
      const shift = t.kind === "load" || t.kind === "send" ? 14 : -14;
      let from, to;
      if (t.kind === "store") { from = { x: block.x + shift, y: block.bottom }; to = { x: other.x + shift, y: other.top }; }
      else if (t.kind === "load") { from = { x: other.x + shift, y: other.top }; to = { x: block.x + shift, y: block.bottom }; }
      else if (t.kind === "recv") { from = { x: other.x + shift, y: other.bottom }; to = { x: block.x + shift, y: block.top }; }
      else { from = { x: block.x + shift, y: block.top }; to = { x: other.x + shift, y: other.bottom }; }
      const path = svgEl("path", { d: "M" + from.x + "," + from.y + " L" + to.x + "," + to.y,
        class: "transfer-arrow transfer-" + t.kind + (t.reported ? " expired" : ""), "marker-end": "url(#transfer-head)", "data-transfer": i });
      items.push(path);
      paths.push(path);
      const at = t.kind === "recv" || t.kind === "send" ? 0.75 : 0.5;      // a remote arrow's label near its block
      const near = t.kind === "recv" ? at : 1 - at;
      const label = svgEl("text", { x: from.x + near * (to.x - from.x) + 4, y: from.y + near * (to.y - from.y), "text-anchor": "start",
        class: "copy-label transfer-label" });
      label.textContent = t.kind + " " + (t.kind === "store" ? t.block + "→h" + t.host : t.kind === "load" ? "h" + t.host + "→" + t.block : t.block) +
        (t.reported ? " (lease expired)" : "");
      items.push(label);
      labels.push(label);
    });
    svg.replaceChildren.apply(svg, items);
    // a label that overlaps a label placed before it, or another copy's arc,
    // moves up until it is clear of both
    const arcs = paths.map(function (path) {
      const n = path.getTotalLength(), points = [];
      for (let i = 0; i <= n; i += 3) points.push(path.getPointAtLength(i));
      return points;
    });
    const placed = [];
    labels.forEach(function (label, own) {
      for (let tries = 0; tries < 24; tries++) {
        const b = label.getBBox();
        const onLabel = placed.some(function (o) {
          return b.x < o.x + o.width + 2 && o.x < b.x + b.width + 2 && b.y < o.y + o.height + 1 && o.y < b.y + b.height + 1;
        });
        const onArc = arcs.some(function (points, i) {
          return i !== own && points.some(function (q) { return q.x > b.x - 2 && q.x < b.x + b.width + 2 && q.y > b.y - 2 && q.y < b.y + b.height + 2; });
        });
        if (!onLabel && !onArc) break;
        label.setAttribute("y", String(Number(label.getAttribute("y")) - 3));
      }
      placed.push(label.getBBox());
    });
  }

  /* -- the prefix cache (cache scenarios) -------------------------------- */
  function renderCache(frame) {
    if (!data.cache) return;
    const cache = frame.state.cache || {};
    const keys = Object.keys(cache).sort(function (a, b) { return cache[a] - cache[b]; });
    const rows = keys.map(function (key) {
      const block = frame.state.blocks[cache[key]];
      const touched = frame.touched.indexOf(block.id) >= 0;
      return el("tr", { "data-block": block.id, class: touched ? "changed" : null },
        el("td", { class: "key" }, "(" + key + ")"), el("td", {}, "block " + block.id),
        el("td", {}, block.free ? "FREE, still cached: an allocation evicts it" : "in use (refcount " + block.refcount + ")"));
    });
    if (!rows.length) rows.push(el("tr", { class: "nothing" }, el("td", { colspan: "3" }, "empty: no block has a key")));
    $("cache-rows").replaceChildren.apply($("cache-rows"), rows);
  }

  /* -- branches and the device queue ------------------------------------ */
  function table(kind, blocks, state) {
    const row = el("div", { class: "table " + kind }, el("span", { class: "table-label" }, kind));
    if (!blocks.length) row.appendChild(el("span", { class: "empty-table" }, "(empty)"));
    blocks.forEach(function (id) {
      const free = state.blocks[id] && state.blocks[id].free;
      row.appendChild(el("span", { class: "chip" + (kind === "published" ? " chip-published" : "") + (free ? " chip-free" : ""),
        "data-block": id }, "block " + id + (free ? " (FREE!)" : "")));
    });
    return row;
  }

  /* A branch's sequence (tokens of positions 0 .. pos-1), shown where the
     scenario has branch programs: after a fork or a rollback pos alone no
     longer tells it. */
  function sequence(br) {
    const row = el("div", { class: "table sequence" }, el("span", { class: "table-label" }, "sequence"));
    br.sequence.forEach(function (token, i) { row.appendChild(el("span", { class: "token", title: "position " + i }, token)); });
    return row;
  }

  /* An unborn child has no tables and no pos yet: it says so, and what
     will bring it to life, instead of showing empty tables. */
  function renderBranches(frame) {
    const rows = Object.keys(frame.state.branches).map(function (name) {
      const br = frame.state.branches[name];
      const active = frame.actor === name;
      const unborn = br.status === "unborn" || br.status === "waiting";   // no tables yet
      return el("div", { class: "branch" + (active ? " active" : "") + (unborn ? " unborn" : ""), "data-branch": name },
        el("div", { class: "branch-head" }, el("b", { class: "branch-name" }, "branch " + name),
          " ", el("span", { class: "status" }, br.status), unborn ? null : " · ",
          unborn ? null : el("span", { class: "pos" }, "pos " + br.pos),
          unborn || br.verified === undefined ? null : el("span", { class: "verified" }, " · verified " + br.verified),
          active ? el("span", { class: "tag" }, "acted") : null),
        el("div", { class: "doing" }, frame.doing[name]),
        unborn ? null : table(data.harness ? "table" : "working", br.working, frame.state),   // allocator code: one table
        unborn || data.harness ? null : table("published", br.published, frame.state),
        unborn || !data.programs ? null : sequence(br));
    });
    $("branches").replaceChildren.apply($("branches"), rows);
  }

  /* a transfer in flight, in the engine's words: a store to or a load from
     the host tier, a recv into or a send from a block (docs/semantics.md#transfers) */
  function transferWords(t) {
    const host = t.host === undefined || t.host === null ? "" : "h" + t.host;
    if (t.kind === "store") return "store of block " + t.block + " → " + host + " (" + t.branch + ")";
    if (t.kind === "load") return "load of " + host + " → block " + t.block + " (" + t.branch + ")";
    if (t.kind === "recv") return "recv into block " + t.block + " (" + t.branch + ", from the remote prefill)";
    return t.kind + " of block " + t.block + " (" + t.branch + (t.kind === "send" ? ", to the remote reader)" : ")");
  }

  function renderQueue(frame) {
    const items = frame.state.queue.map(function (op) {
      if (op.copy) {
        const c = op.copy;
        return el("li", { class: "copy-op" }, "copy block " + c.src + " → block " + c.dst + " (" + plural(c.n, "slot") + "), not yet complete");
      }
      if (op.transfer) {
        return el("li", { class: "copy-op" }, transferWords(op.transfer) + ", not yet complete" +
          (op.transfer.reported ? " (LEASE EXPIRED: the connector reported it already)" : ""));
      }
      const k = op.kernel;
      const target = k.snapshot[Math.floor(k.pos / B)];
      if (k.from !== undefined) {
        return el("li", { class: "kernel-op" }, "prefill kernel " + k.branch + "@" + k.from + "–" + k.pos + ": will write " +
          k.expected.slice(k.from, k.pos + 1).join(" ") + " at positions " + k.from + " to " + k.pos + ", reading through [" +
          k.snapshot.join(", ") + "]");
      }
      return el("li", { class: "kernel-op" }, "kernel " + k.branch + "@" + k.pos + ": will write " + k.token +
        " into block " + target + ", slot " + (k.pos % B) + ", reading through [" + k.snapshot.join(", ") + "]");
    });
    if (!items.length) items.push(el("li", { class: "nothing" }, "nothing"));
    $("queue").replaceChildren.apply($("queue"), items);
  }

  /* -- the current action, the violation, the executor's output ----------- */
  /* The concrete executor's output at step n, if the page has it: what the
     kernel decoded on a real KV pool next to what it should have. */
  function decodedLine(n) {
    const d = data.decoded[String(n)];
    if (!d) return null;
    const differs = d.diverged !== undefined ? d.diverged : d.decoded !== d.expected;
    const what = d.kind === "check-output" ? "'s check-output read at position " :
      d.kind === "send" ? "'s send, read by the remote reader at position " : "'s kernel for position ";
    return el("p", { class: "decoded " + (differs ? "bad" : "good") },
      el("span", { class: "tag" }, differs ? "DIFFERS" : "MATCH"),
      " on a real pool, branch " + d.branch + what + d.pos + " gave ", el("b", { class: "decoded-token" }, d.decoded),
      d.against + ".");
  }

  function renderAction(frame) {
    const violating = frame.n === violation.step;
    const head = el("h2", {}, frame.n === 0 ? "Initial state" : "Step " + frame.n + " of " + last);
    if (violating) head.appendChild(el("span", { class: "tag " + (violation.invariant ? "bad-tag" : "") }, violation.invariant ? "✗ VIOLATION" : tag));
    const panel = $("action");
    panel.className = "panel" + (violating ? (violation.invariant ? " violating" : " peak") : "");
    const parts = [head, el("p", { class: "raw" }, el("code", {}, frame.text)), el("p", { class: "words" }, frame.words)];
    const decoded = violating && violation.invariant ? null : decodedLine(frame.n);   // else shown with the violation
    if (decoded) parts.push(decoded);
    panel.replaceChildren.apply(panel, parts);
  }

  /* Expected and read sequences side by side, the wrong positions marked
     by a "≠" and a heavy outline, not by colour alone. */
  function sequences(w) {
    const rows = [["position"], ["expected"], ["read"]];
    w.expected_sequence.forEach(function (e, i) {
      rows[0].push(String(i));
      rows[1].push(e);
      rows[2].push(w.read_sequence[i] === null ? "_" : w.read_sequence[i]);
    });
    const t = el("table", { class: "sequences" });
    rows.forEach(function (cells, r) {
      const tr = el("tr", {});
      cells.forEach(function (c, i) {
        const wrong = i > 0 && w.expected_sequence[i - 1] !== w.read_sequence[i - 1];
        tr.appendChild(el(i === 0 ? "th" : "td", { class: wrong ? "mismatch" : null, scope: i === 0 ? "row" : null },
          c + (wrong && r === 2 ? " ≠" : "")));
      });
      t.appendChild(tr);
    });
    return el("div", { class: "table-wrap" }, t);
  }

  function renderViolation() {
    const panel = $("violation");
    panel.hidden = current !== violation.step;
    if (panel.hidden) return;
    if (!violation.invariant) {
      panel.className = "panel peak";
      panel.replaceChildren(el("h2", {}, el("span", { class: "tag" }, tag), " " + violation.title));
      return;
    }
    panel.className = "panel violation";
    const w = violation.witness;
    const decoded = data.decoded[String(violation.step)];
    const parts = [
      el("h2", {}, el("span", { class: "tag bad-tag" }, "✗ VIOLATION"), " " + violation.title),
      el("p", { class: "holds-when" }, "It holds when: " + violation.holds_when),
      el("p", { class: "sentence" }, violation.sentence),
    ];
    if (w.expected_sequence !== undefined) {   // faithful-output (cache-immutable has an expected token only)
      parts.push(el("p", { class: "expected-read" }, "Expected ", el("b", { class: "expected" }, w.expected),
        " at position " + w.position + ", read ", el("b", { class: "read" }, w.read === null ? "_" : w.read),
        "."));
      if (decoded) parts.push(decodedLine(violation.step));
      parts.push(sequences(w));
    }
    if (w.traceback && w.traceback.length) {     // allocator-error: the allocator's own frames, innermost last
      parts.push(el("p", { class: "traceback-title" }, "The allocator's traceback (innermost last):"),
        el("pre", { class: "traceback" }, w.traceback.join("\n")));
    }
    panel.replaceChildren.apply(panel, parts);
  }

  function renderStepList() {
    const list = $("step-list");
    if (!list.children.length) {
      frames.slice(1).forEach(function (f) {
        const item = el("li", { "data-step": f.n }, el("button", { type: "button", class: "link" }, f.text),
          f.n === violation.step ? el("span", { class: "tag" }, violation.invariant ? "violation" : tag.toLowerCase()) : null);
        item.querySelector("button").addEventListener("click", function () { player.pause(); show(f.n); });
        list.appendChild(item);
      });
    }
    Array.prototype.forEach.call(list.children, function (item) {
      if (Number(item.dataset.step) === current) item.setAttribute("aria-current", "step");
      else item.removeAttribute("aria-current");
    });
  }

  /* -- moving between frames ----------------------------------------------- */
  function show(n) {
    current = Math.max(0, Math.min(last, n));
    const frame = frames[current];
    $("position").textContent = "step " + current + " of " + last;
    $("back").disabled = current === 0;
    $("step").disabled = current === last;
    renderAction(frame);
    renderViolation();
    renderPool(frame);
    renderCache(frame);
    renderBranches(frame);
    renderQueue(frame);
    renderStepList();
  }

  let carry = 0;   // playing: fractions of a step accumulated between ticks
  const player = CowPlayer.create($("play"), $("speed"), function (steps) {
    carry += steps;
    while (carry >= 1 && current < last) { carry -= 1; show(current + 1); }
    return current < last;
  }, function () { carry = 0; if (current === last) show(0); });

  function by(delta) { return function () { player.pause(); show(current + delta); }; }
  function to(n) { return function () { player.pause(); show(n); }; }
  $("reset").addEventListener("click", to(0));
  $("back").addEventListener("click", by(-1));
  $("step").addEventListener("click", by(1));
  $("goto-violation").addEventListener("click", to(violation.step));
  CowPlayer.keys({ ArrowRight: by(1), ArrowLeft: by(-1), " ": player.toggle, Home: to(0), End: to(last) });
  window.addEventListener("resize", function () { drawArrows(frames[current].state); });
  show(0);
})();
