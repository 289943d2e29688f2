"""One schedule, run from scratch in transformers' continuous batching,
step by step through the manager's own calls (on the caller's thread, no
background loop), with the shadow watching (cowcheck.enginetest.shadow).

A step is the engine's loop body: `prepare_next_batch` (which drains the
submission and cancel queues and schedules), the forward
(`_generation_step`), then `update_batch`. A cancel lands in one of two
places. `after-update`: `cancel_request` after the step's update; the next
prepare drains it (the synchronous order). `in-flight`: `cancel_request`
between the forward and the update, drained there by the processor's own
drain (`_update_tp_group_state`, `clear_cancelled_requests`): the order
asynchronous batching applies on a GPU, where batch N+1 is prepared while
batch N's forward runs and N is updated after. A CPU has no streams: that
order is all the engine mode can show of asynchrony."""

from __future__ import annotations

import gc
import time
import traceback
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from cowcheck.enginetest.engine import SEED, build_model, modules
from cowcheck.enginetest.scenario import EngineScenario
from cowcheck.enginetest.shadow import Shadow, Violation, allocator_of, snapshot

IN_FLIGHT, AFTER_UPDATE = "in-flight", "after-update"
#: how far a sampled token's log-probability may be from the reference's
LOGPROB_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Schedule:
    """When each request is submitted (steps after 0, or after the request
    it waits for finished) and when each cancel lands."""
    submits: tuple[tuple[str, int], ...]
    cancels: tuple[tuple[str, int, str], ...]

    def events(self) -> list[str]:
        return ([f"submit {n} at +{k}" for n, k in self.submits if k] +
                [f"cancel {r} at step {s} {p}" for r, s, p in self.cancels])

    def length(self) -> int:
        return sum(k for _, k in self.submits) + sum(s + 1 for _, s, _ in self.cancels)


@dataclass
class Outcome:
    violations: list[Violation]
    steps: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, list[int]] = field(default_factory=dict)
    logprobs: dict[str, list[float]] = field(default_factory=dict)
    error: Optional[str] = None
    #: the engine's trace: which requests ran at each step
    fingerprint: tuple[Any, ...] = ()


class Harness:
    """The model and its no-cache reference, built once for many schedules."""

    def __init__(self, torch: Any, transformers: Any, model: Any, reference: Any):
        self.torch, self.transformers, self.model, self.reference = torch, transformers, model, reference
        self.memo: dict[tuple[int, ...], list[list[int]]] = {}
        self.lmemo: dict[tuple[int, ...], Any] = {}
        #: seconds spent per part of the runs (`run`: all of them; `setup`:
        #: the engine's manager and batch processor, new for each schedule;
        #: `forward`: the model's forwards in the engine; `monitor`: the
        #: shadow and the snapshots; `reference`: the forwards without a
        #: cache), for bench
        self.seconds: defaultdict[str, float] = defaultdict(float)

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] += time.perf_counter() - start

    def best(self, tokens: tuple[int, ...]) -> list[list[int]]:
        """For every position, the token ids of maximal logit of one full
        forward without a cache (ties within 1e-4 all count)."""
        if tokens not in self.memo:
            with self.torch.no_grad():
                logits = self.reference(self.torch.tensor([list(tokens)])).logits[0]
            top = logits.max(dim=-1).values
            self.memo[tokens] = [[int(i) for i in (row >= t - 1e-4).nonzero().flatten()] for row, t in zip(logits, top)]
        return self.memo[tokens]

    def logprob(self, tokens: tuple[int, ...], at: int, token: int) -> float:
        """The log-probability of `token` after tokens[:at + 1], from one full
        forward without a cache."""
        if tokens not in self.lmemo:
            with self.torch.no_grad():
                self.lmemo[tokens] = self.torch.log_softmax(self.reference(self.torch.tensor([list(tokens)])).logits[0], -1)
        return float(self.lmemo[tokens][at, token])


_harnesses: dict[Optional[str], Harness] = {}


def harness(fresh: bool = False) -> Harness:
    """The engine's model and the reference, from the transformers
    engine.modules() picks; built once per source tree in a process (the
    models hold no state between runs, and building them takes seconds),
    or, `fresh`, anew (no reference memoized yet: bench)."""
    torch, transformers, release = modules()
    if fresh or release.source not in _harnesses:
        _harnesses[release.source] = Harness(torch, transformers, build_model(torch, transformers),
                                             build_model(torch, transformers, "eager"))
        # The engine's batch processor runs gc.collect() when it is deleted, once per schedule; over
        # torch's and transformers' objects that was 90 % of a run. Frozen, the collector skips them.
        gc.freeze()
    return _harnesses[release.source]


def _manager(h: Harness, sc: EngineScenario) -> Any:
    forks = sc.num_return_sequences > 1
    gen = h.transformers.GenerationConfig(max_new_tokens=sc.max_new_tokens, do_sample=forks, eos_token_id=-1,
                                          num_return_sequences=sc.num_return_sequences,
                                          **({"top_k": None, "top_p": None, "temperature": 1.0} if forks else {}))
    config = h.transformers.ContinuousBatchingConfig
    known = set(getattr(config, "__dataclass_fields__", {}))
    # releases that know `page_size` warn at every run that `block_size` is deprecated
    page = "page_size" if "page_size" in known else "block_size"
    settings = {"num_blocks": sc.pool, page: sc.block_size, "use_async_batching": False, "allow_block_sharing": True,
                "use_cuda_graph": False, "max_batch_tokens": 256, "seed": SEED, "return_logprobs": True,
                # only where the release has it (5.25): never trade the paged attention for flash attention
                "auto_switch_to_flash": False}
    cb = config(**{k: v for k, v in settings.items() if k != "auto_switch_to_flash" or k in known})
    return h.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)


def run(h: Harness, sc: EngineScenario, schedule: Schedule) -> Outcome:
    """Run the schedule; the violations found, the engine's state per step,
    the outputs and (an engine exception) its traceback."""
    with h.timed("run"):
        return _run(h, sc, schedule)


def _run(h: Harness, sc: EngineScenario, schedule: Schedule) -> Outcome:
    with h.timed("setup"):
        manager = _manager(h, sc)
        bp = manager._create_batch_processor()
        manager.batch_processor = bp
    cache = bp.cache
    shadow = Shadow(sc.block_size)
    out = Outcome(shadow.violations)
    copy = cache.perform_cache_copy

    def watched_copy(pairs: Any) -> Any:
        shadow.copies(pairs)
        return copy(pairs)
    cache.perform_cache_copy = watched_copy
    deliver = bp.output_router.deliver_batch

    def watched_deliver(outputs: list[Any]) -> Any:
        for o in outputs:
            out.outputs[o.request_id] = list(o.generated_tokens)
            out.logprobs[o.request_id] = [float(x) for x in (o.logprobs or [])]
        return deliver(outputs)
    bp.output_router.deliver_batch = watched_deliver

    submits, trace = dict(schedule.submits), []
    finished_at: dict[str, int] = {}
    waiting = {r.name: r for r in sc.requests}
    step = 0
    try:
        for step in range(sc.max_steps):
            events = []
            for name, r in list(waiting.items()):
                base = 0 if r.after is None else finished_at.get(r.after)
                if base is not None and step >= base + submits.get(name, 0):
                    manager.add_request(list(r.prompt), request_id=name, max_new_tokens=sc.max_new_tokens)
                    events.append(f"submit {name}")
                    del waiting[name]
            cancels = [(rid, p) for rid, s, p in schedule.cancels if s == step]
            events += [f"cancel {rid} {p}" for rid, p in cancels]
            if not bp.prepare_next_batch():
                if not waiting and not bp.has_pending_requests():
                    break
                out.steps.append({"step": step, "events": events, "batch": [], **snapshot(cache)})
                continue
            batch = list(bp.inputs_and_outputs.requests_in_batch)
            trace.append(tuple((f.state.request_id, f.query_length) for f in batch))
            with h.timed("monitor"):
                out.steps.append({"step": step, "events": events,
                                  "batch": [[f.state.request_id, f.query_length] for f in batch], **snapshot(cache)})
                shadow.forward(cache, batch, step)
            with h.timed("forward"):
                manager._generation_step()
            flights = [rid for rid, p in cancels if p == IN_FLIGHT]
            if flights:
                for rid in flights:
                    manager.cancel_request(rid)
                bp._update_tp_group_state()
                bp.scheduler.clear_cancelled_requests()
            bp.update_batch()
            for rid in out.outputs:
                finished_at.setdefault(rid, step + 1)
            for rid, p in cancels:
                if p == AFTER_UPDATE:
                    manager.cancel_request(rid)
            with h.timed("monitor"):
                shadow.ledger(cache, step)
        else:
            step = sc.max_steps
        if not waiting and not bp.has_pending_requests():
            shadow.end(cache, sc.pool, step)
    except Exception as error:
        out.error = traceback.format_exc()
        last = out.error.strip().splitlines()[-1]
        shadow.violations.append(Violation("allocator-error", step, last,
                                           {"error": last, "traceback": engine_frames(error)}))
    with h.timed("reference"):
        _outputs(h, sc, out, step)
    out.fingerprint = (tuple(trace), tuple(sorted((k, tuple(v)) for k, v in out.outputs.items())))
    return out


def engine_frames(error: BaseException) -> list[str]:
    """The engine's own frames of a traceback (transformers', not torch's
    or cowcheck's), innermost six at most, outermost first, as
    `transformers/path.py:line in function: code`: relative to the package's
    folder, so a file regenerates byte for byte on any machine."""
    frames = []
    for f in traceback.extract_tb(error.__traceback__):
        parts = f.filename.replace("\\", "/").split("/")
        if "transformers" in parts:
            where = "/".join(parts[len(parts) - 1 - parts[::-1].index("transformers"):])
            frames.append(f"{where}:{f.lineno} in {f.name}: {(f.line or '').strip()}")
    return frames[-6:]


def _outputs(h: Harness, sc: EngineScenario, out: Outcome, step: int) -> None:
    """faithful-output on the tokens, each delivered output against one
    forward of its prompt and tokens without a cache: greedy tokens must be
    an argmax there; sampled tokens (forks) must have the log-probability
    the engine reports, within LOGPROB_TOLERANCE (teacher-forced)."""
    prompts = {r.name: r.prompt for r in sc.requests}
    for rid, generated in sorted(out.outputs.items()):
        prompt = prompts.get(rid.split("__child#")[0])
        if prompt is None or not generated:
            continue
        tokens = prompt + tuple(generated)
        logprobs = out.logprobs.get(rid, [])
        for i, token in enumerate(generated):
            at = len(prompt) - 1 + i
            if sc.num_return_sequences > 1:
                if i >= len(logprobs):       # a sampled token without its log-probability cannot be judged
                    break
                want = h.logprob(tokens, at, token)
                wrong = abs(want - logprobs[i]) > LOGPROB_TOLERANCE
                why = f"log-probability {logprobs[i]:.5f}; a forward without cache gives {want:.5f}"
                facts: dict[str, Any] = {"logprob": round(logprobs[i], 5), "reference_logprob": round(want, 5)}
            else:
                wrong = token not in h.best(tokens)[at]
                why = f"{token}; a forward without cache gives {h.best(tokens)[at]}"
                facts = {"reference": h.best(tokens)[at]}
            if wrong:
                if all(v.invariant != "faithful-output" for v in out.violations):
                    out.violations.append(Violation("faithful-output", step, f"{rid}'s token {i} is {why}",
                                                    {"request": rid, "token_index": i, "token": token, **facts}))
                break
