"""`cowcheck bench`'s replay line: how fast the model and the numpy pool
re-run counterexamples, over the files in a folder and on one long
(100+-action) run. One idea: replay speed, measured in this process (no
child, no search), apart from exploration; the tests check only that it
replays every committed counterexample, never its figures."""

from __future__ import annotations

import time

from cowcheck.model.scenario import make_scenario


def _long_walk(seed: int = 0):
    """A complete run of a larger scenario (over 100 actions), for timing a
    single long replay."""
    import random

    from cowcheck.model.system import ProtocolModel

    scenario = make_scenario(2, 3, [5, 5, 5], "cow", name="walk")
    model, rnd = ProtocolModel(scenario), random.Random(seed)
    state, actions = model.init_state(), []
    while not model.is_final(state):
        tr = rnd.choice(model.successors(state))
        assert tr.state is not None          # cow never misses its table
        actions.append(tr.action)
        state = tr.state
    return scenario, actions


def replayable(folder) -> list:
    """The counterexample files in `folder` the line measures: scheduler
    code's traces are left out (their model replay re-drives the
    scheduler, vLLM loaded and called, which is not replay speed)."""
    from pathlib import Path

    from cowcheck.traces.replay import load_replayed

    loaded = [load_replayed(f)[0] for f in sorted(Path(folder).glob("*.json"))]
    return [cx for cx in loaded if cx.scenario.scheduler is None]


def replay_figures(traces: list) -> dict:
    """Replays per second (model and numpy pool) over counterexamples, and
    the time of one replay of a 100+-action run."""
    from cowcheck.traces.pool import replay_on_pool
    from cowcheck.traces.replay import replay

    start = time.perf_counter()
    for cx in traces:
        replay(cx)
        replay_on_pool(cx.scenario, cx.actions, initial=cx.initial)
    spent = time.perf_counter() - start
    scenario, actions = _long_walk()
    start = time.perf_counter()
    replay_on_pool(scenario, actions)
    long_seconds = time.perf_counter() - start
    return {
        "benchmark": f"replay {len(traces)} counterexamples (model + numpy pool)",
        "replays": len(traces),
        "actions": sum(len(cx.actions) for cx in traces),
        "seconds": round(spent, 3),
        "replays_per_second": round(len(traces) / spent) if spent else None,
        "long_trace_actions": len(actions),
        "long_trace_pool_seconds": round(long_seconds, 4),
    }
