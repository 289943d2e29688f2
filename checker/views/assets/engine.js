/* The engine counterexample page (checker/enginetest/page.py): one frame per
   engine step, the engine's own tables and pool; the wording is in the data. */
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("cowcheck-data").textContent);
  const frames = data.frames;
  const last = frames.length - 1;
  const $ = function (id) { return document.getElementById(id); };
  let current = last;

  function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); return td; }

  function show(i) {
    current = Math.max(0, Math.min(last, i));
    const f = frames[current];
    $("position").textContent = "step " + (current + 1) + " of " + frames.length + " (engine step " + f.step + ")";
    $("action").textContent = "Engine step " + f.step + ": " + f.text;
    const inBatch = {};
    f.batch.forEach(function (b) { inBatch[b[0]] = b[1]; });
    const tables = $("tables");
    tables.textContent = "";
    Object.keys(f.tables).forEach(function (rid) {
      const row = document.createElement("tr");
      cell(row, rid);
      cell(row, "[" + f.tables[rid].join(", ") + "]");
      cell(row, rid in inBatch ? inBatch[rid] + " token" + (inBatch[rid] === 1 ? "" : "s") : "no");
      tables.appendChild(row);
    });
    const pool = $("pool");
    pool.textContent = "";
    data.blocks.forEach(function (id) {
      const row = document.createElement("tr");
      const mappers = Object.keys(f.tables).filter(function (rid) { return f.tables[rid].indexOf(id) >= 0; });
      const states = [];
      if (f.hashed.indexOf(id) >= 0) states.push("HASHED");
      if (f.free.indexOf(id) >= 0) states.push("FREE");
      cell(row, String(id));
      cell(row, String(f.ref_counts[String(id)] !== undefined ? f.ref_counts[String(id)] : (mappers.length ? 1 : 0)));
      cell(row, states.join(", ") || "in use");
      cell(row, mappers.join(", ") || "no table");
      if (data.witness.block === id && current === last) row.className = "bad";
      pool.appendChild(row);
    });
    const v = $("violation");
    v.hidden = current !== last;
    if (current === last) {
      v.textContent = "";
      const h = document.createElement("h2");
      h.textContent = data.invariant + " breaks here";
      h.className = "bad";
      v.appendChild(h);
      const p = document.createElement("p");
      p.textContent = data.witness.message;
      v.appendChild(p);
      if (data.witness.traceback) {
        const pre = document.createElement("pre");
        pre.textContent = data.witness.traceback.join("\n");
        pre.style.whiteSpace = "pre-wrap";
        v.appendChild(pre);
      }
    }
    $("back").disabled = current === 0;
    $("step").disabled = current === last;
  }

  $("reset").addEventListener("click", function () { show(0); });
  $("back").addEventListener("click", function () { show(current - 1); });
  $("step").addEventListener("click", function () { show(current + 1); });
  $("goto-violation").addEventListener("click", function () { show(last); });
  document.addEventListener("keydown", function (e) {
    if (e.key === "ArrowRight") show(current + 1);
    else if (e.key === "ArrowLeft") show(current - 1);
    else if (e.key === "Home") show(0);
    else if (e.key === "End") show(last);
  });
  show(last);
})();
