"""A toy P/D scheduler for the scheduler harness (tests/test_model_scheduler.py),
correct, and with the planted bugs of vLLM's P/D history one flag each:

- `free_at_abort`: an aborted receiving request's blocks go back at once,
  while its recvs still write them (vLLM 32255 before its fix);
- `eager_abort`: an aborted request's blocks go back at once, while the
  kernel of the step that scheduled it still runs (45357 before its
  deferred frees);
- `stale_report`: the connector asserts a finished request has a pending
  send when its report arrives (an exception: allocator-error).

The correct toy is vLLM 0.34.0's order: an aborted receiving request is
freed at its `finished_recving`, an aborted scheduled one at the output of
its step, a producer's blocks at `finished_sending`. Blocks come from a
LIFO free list; no prefix cache (so the cache invariants are not checked)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Req:
    tokens: tuple[str, ...]
    target: int                    # positions to compute: the prompt and the appends
    source: Optional[str]
    sink: Optional[str]
    status: str = "waiting"
    table: list[int] = field(default_factory=list)
    computed: int = 0              # positions scheduled
    recvs: set = field(default_factory=set)        # transfer ids not yet reported
    sends: set = field(default_factory=set)
    to_send: bool = False          # finished producer whose sends the next step launches
    retained: list[int] = field(default_factory=list)   # blocks kept past the request's end


class Toy:
    def __init__(self, pool: int, block_size: int, host_pool: int, *, free_at_abort: bool = False,
                 eager_abort: bool = False, stale_report: bool = False, plans_in_flight: int = 1,
                 early_kernel: Optional[str] = None):
        self.plans_in_flight = plans_in_flight
        self.B = block_size
        self.free = list(range(pool))
        self.reqs: dict[str, Req] = {}
        self.order: list[str] = []
        self.scheduled: list[set[str]] = []        # per outstanding plan, oldest first: the requests it computes
        self.deferred: list[str] = []              # aborted while scheduled: freed at the output of its last step
        self.free_at_abort, self.eager_abort, self.stale_report = free_at_abort, eager_abort, stale_report
        #: "blind": a consumer's prefill runs the step after its recvs launched, before they are reported;
        #: "waits": the same, its plan naming the recvs in `waits` (a worker that waits for them)
        self.early_kernel = early_kernel

    # -- the contract ---------------------------------------------------------
    def add(self, request, tokens, max_tokens, source, sink):
        self.reqs[request] = Req(tuple(tokens), len(tokens) + max_tokens, source, sink)
        self.order.append(request)

    def schedule(self):
        kernels, transfers, waits = [], [], []
        self.scheduled.append(set())
        for name in self.order:
            r = self.reqs[name]
            if r.status == "finished" and r.to_send:
                r.to_send = False
                for i, b in enumerate(r.retained):
                    tid = f"{name}-send{i}"
                    r.sends.add(tid)
                    transfers.append((tid, "send", name, b, None, i, False))
            if r.status == "waiting" and not r.table:
                need = -(-len(r.tokens) // self.B)
                if len(self.free) < need:
                    continue
                r.table = [self.free.pop(0) for _ in range(need)]
                if r.source is not None:
                    for i in range((len(r.tokens) - 1) // self.B):
                        tid = f"{name}-recv{i}"
                        r.recvs.add(tid)
                        transfers.append((tid, "recv", name, r.table[i], None, i, False))
                    if r.recvs:
                        continue
                r.status = "running"
            if r.status == "waiting" and r.table and r.recvs and self.early_kernel:
                r.status = "running"
                r.computed = (len(r.tokens) - 1) // self.B * self.B
                if self.early_kernel == "waits":
                    waits += sorted(r.recvs)
            if r.status == "waiting" and r.table and not r.recvs:
                r.status = "running"
                r.computed = (len(r.tokens) - 1) // self.B * self.B
            if r.status == "running" and r.computed < r.target:
                first = r.computed
                last = len(r.tokens) - 1 if first < len(r.tokens) else first
                if last // self.B >= len(r.table):
                    if not self.free:
                        continue
                    r.table.append(self.free.pop(0))
                kernels.append((name, first, last))
                r.computed = last + 1
                self.scheduled[-1].add(name)
        return {"kernels": kernels, "copies": [], "transfers": transfers, **({"waits": waits} if waits else {})}

    def output(self, plan, sampled, done):
        for tid, ok in done:
            name, _, kind = tid.partition("-")
            r = self.reqs[name]
            if kind.startswith("recv"):
                r.recvs.discard(tid)
                if r.status == "aborted" and not r.recvs:
                    self._release(r)
            elif kind.startswith("send"):
                if self.stale_report:
                    assert r.status != "finished" or r.to_send, f"stale finished_sending for {name}"
                r.sends.discard(tid)
                if not r.sends:
                    self._release(r)
        self.scheduled.pop(0)
        for name in list(self.deferred):
            if not any(name in step for step in self.scheduled):
                self.deferred.remove(name)
                self._release(self.reqs[name])
        for name, first, last in plan["kernels"]:
            r = self.reqs[name]
            if r.status == "running" and last + 1 == r.target:
                r.status = "finished"
                if r.sink is not None:
                    r.retained, r.table, r.to_send = r.table, [], True
                else:
                    self._free(r.table)
                    r.table = []

    def abort(self, request):
        r = self.reqs[request]
        r.status = "aborted"
        r.retained, r.table = r.table, []
        if r.recvs and not self.free_at_abort:
            return                                  # freed at finished_recving
        if any(request in step for step in self.scheduled) and not self.eager_abort:
            self.deferred.append(request)           # freed at the output of its step
            return
        self._release(r)

    def table(self, request):
        return list(self.reqs[request].table)

    def status(self, request):
        return self.reqs[request].status

    # -- the observers ------------------------------------------------------------
    def refcount(self, block):
        return sum(block in r.table or block in r.retained for r in self.reqs.values())

    def holds(self, block):
        """The connector's: the blocks of a request that has ended but
        waits for its recvs or sends (delay_free_blocks). A block kept for
        the kernel still in flight stays the request's own reference."""
        return sum(block in r.retained for r in self.reqs.values() if r.recvs or r.sends or r.to_send)

    def free_blocks(self):
        return list(self.free)

    # -- the toy's own --------------------------------------------------------------
    def _release(self, r: Req) -> None:
        self._free(r.retained)
        r.retained = []

    def _free(self, blocks: list[int]) -> None:
        self.free[:0] = reversed(blocks)


def correct(pool, block_size, host_pool): return Toy(pool, block_size, host_pool)
def free_at_abort(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, free_at_abort=True)
def eager_abort(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, eager_abort=True)
def stale_report(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, stale_report=True)
def ahead(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, plans_in_flight=2)
def ahead_eager_abort(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, eager_abort=True, plans_in_flight=2)
def early_kernel(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, early_kernel="blind")
def early_kernel_waits(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, early_kernel="waits")


class BadKind(Toy):
    def schedule(self):
        plan = super().schedule()
        plan["transfers"] = [(tid, "fetch", *rest) for tid, _, *rest in plan["transfers"]]
        return plan


class OutsidePool(Toy):
    def schedule(self):
        plan = super().schedule()
        plan["transfers"] = [(tid, kind, name, 99, host, i, sync) for tid, kind, name, _, host, i, sync in plan["transfers"]]
        return plan


class SendWithoutSink(Toy):
    def schedule(self):
        plan = super().schedule()
        plan["transfers"] += [("x", "send", name, 0, None, 0, False) for name, _, _ in plan["kernels"]]
        return plan


class NotAPlan(Toy):
    def schedule(self):
        super().schedule()
        return 3


def bad_kind(pool, block_size, host_pool): return BadKind(pool, block_size, host_pool)
def outside_pool(pool, block_size, host_pool): return OutsidePool(pool, block_size, host_pool)
def send_without_sink(pool, block_size, host_pool): return SendWithoutSink(pool, block_size, host_pool)
def not_a_plan(pool, block_size, host_pool): return NotAPlan(pool, block_size, host_pool)


class WaitsUnknown(Toy):
    def schedule(self):
        return {**super().schedule(), "waits": ["nope"]}


def waits_unknown(pool, block_size, host_pool): return WaitsUnknown(pool, block_size, host_pool)
def three_in_flight(pool, block_size, host_pool): return Toy(pool, block_size, host_pool, plans_in_flight=3)


class HostCachedRaises(Toy):
    """A host observer that fails after an abort, read once the GPU pool
    has been read (and what the abort freed noted): the call's transition
    has no after-state, whatever it had observed."""
    def host_cached(self):
        if any(r.status == "aborted" for r in self.reqs.values()):
            raise RuntimeError("host_cached() after an abort")
        return {}


def host_cached_raises(pool, block_size, host_pool): return HostCachedRaises(pool, block_size, host_pool, free_at_abort=True)
