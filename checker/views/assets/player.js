/* Play/Pause with a speed control, and keyboard bindings: shared by the
   stepper and the cache lab, so both pages behave the same way. */
"use strict";
window.CowPlayer = (function () {
  /* A clock that, while playing, calls advance(elapsed seconds x speed)
     twenty times a second. advance returns false to stop playing; start,
     if given, runs before playing begins (e.g. rewind when at the end). */
  function create(button, speedSelect, advance, start) {
    let timer = null;
    let last = 0;
    function show(playing) {
      button.setAttribute("aria-pressed", playing ? "true" : "false");
      button.textContent = playing ? "⏸ Pause" : "▶ Play";
    }
    function pause() {
      if (timer !== null) { clearInterval(timer); timer = null; }
      show(false);
    }
    function play() {
      if (timer !== null) return;
      if (start) start();
      last = performance.now();
      timer = setInterval(function () {
        const now = performance.now();
        const seconds = (now - last) / 1000;
        last = now;
        if (advance(seconds * Number(speedSelect.value)) === false) pause();
      }, 50);
      show(true);
    }
    function toggle() { if (timer === null) play(); else pause(); }
    button.addEventListener("click", toggle);
    return { play: play, pause: pause, toggle: toggle, playing: function () { return timer !== null; } };
  }

  /* Page-wide keys (bindings: key name -> function). Ignored while typing
     in a field, and Space or Enter on a focused button or summary stays that
     element's own action, as a keyboard user expects. */
  function keys(bindings) {
    document.addEventListener("keydown", function (event) {
      if (event.altKey || event.ctrlKey || event.metaKey) return;
      const tag = event.target && event.target.tagName;
      if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
      if ((event.key === " " || event.key === "Enter") && (tag === "BUTTON" || tag === "SUMMARY")) return;
      const action = bindings[event.key];
      if (action) { event.preventDefault(); action(); }
    });
  }

  /* A DOM element: el("li", {class: "x", "data-block": 3}, "text", child, ...).
     Text is always set as text, never parsed as markup. */
  function el(tag, attrs) {
    const node = document.createElement(tag);
    for (const name in attrs || {}) {
      const value = attrs[name];
      if (value === false || value === null || value === undefined) continue;
      node.setAttribute(name, value === true ? "" : String(value));
    }
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  return { create: create, keys: keys, el: el };
})();
