"""What the pages are drawn from: a counterexample as the model replays it
(`page_data`), its kernels' output on a numpy KV pool (`decoded_on_pool`),
and the pages of one `cowcheck check --html DIR` run (`write_check_pages`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from cowcheck import atomic
from cowcheck.engines import counterexample as trace
from cowcheck.model.errors import SpecError
from cowcheck.traces.pool import replay_on_pool
from cowcheck.traces.replay import Replayed, load_replayed
from cowcheck.views.html import index_html, stepper_html


def load_for_page(path: Path) -> tuple[trace.Counterexample, dict]:
    """A counterexample file and the JSON the pages are drawn from.

    The pages read every recorded state, so they are drawn from what the
    model makes of the file's actions, not from the file: a file that does
    not replay is bad input (load_replayed), and one that does gives exactly
    its own JSON back."""
    cx, replayed = load_replayed(path)
    return cx, page_data(cx, replayed)


def page_data(cx: trace.Counterexample, replayed: Replayed) -> dict:
    """The JSON a page is drawn from: the model's replay of the trace."""
    drawn = trace.Counterexample.from_run(cx.scenario, replayed.states[0],
                                          [(t.action, t.state) for t in replayed.transitions],
                                          invariant=cx.invariant, invariant_kind=cx.invariant_kind,
                                          witness=replayed.witness, peak=cx.peak, allocator_code=cx.allocator_code,
                                          call=cx.call, deadline=cx.deadline, host_peak=cx.host_peak)
    drawn.origin = cx.origin       # where it was checked from, not where the file was read
    return json.loads(json.dumps(drawn.to_json()))     # tuples as lists, as in the file


def decoded_on_pool(cx: trace.Counterexample) -> dict:
    """The trace replayed by the concrete executor on a numpy KV pool, in the
    form of stepper_html's `decoded` hook: {step: {branch, pos, decoded,
    expected, diverged, max_diff}} for every kernel (and check-output that
    found a wrong position)."""
    replayed = replay_on_pool(cx.scenario, cx.actions, "numpy", initial=cx.initial, states=cx.states)
    return {k.step: {"branch": k.branch, "pos": k.pos if k.position is None else k.position, "kind": k.kind,
                     "decoded": k.decoded, "expected": k.expected, "diverged": k.diverged, "max_diff": round(k.max_diff, 4)}
            for k in replayed.kernels if k.decoded is not None}


def _pages_for(result) -> list[str]:
    """The counterexample files one check result wrote (peak, host-peak and call-deadline traces included)."""
    paths = [v.path for v in result.verdicts.values() if v.path]
    return paths + [path for path in (getattr(result, "peak_path", None), getattr(result, "host_peak_path", None),
                                      getattr(result, "deadline_path", None)) if path]


def write_check_pages(results: list, out_dir: Path, skipped: Optional[list[SpecError]] = None) -> list[Path]:
    """For one `cowcheck check` run (a list of cowcheck.engines.results.Result):
    one stepper page per counterexample file, named after it, and index.html
    with each scenario's verdict table linking to them. Returns the pages,
    the index last. A file that cannot be drawn (its allocator code gone,
    or not deterministic) gets no page and no link, and its one-line reason
    goes to `skipped`: the other pages are still written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    written: list[Path] = []
    for result in results:
        for path in _pages_for(result):
            target = out_dir / (Path(path).stem + ".html")
            try:
                cx, data = load_for_page(Path(path))
            except SpecError as error:
                if skipped is None:
                    raise
                skipped.append(error)
                continue
            atomic.write_text(target, stepper_html(data, decoded_on_pool(cx)))
            links[path] = target.name
            written.append(target)
    index = out_dir / "index.html"
    atomic.write_text(index, index_html([r.to_json() for r in results], links))
    return written + [index]

