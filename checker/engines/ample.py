"""Partial-order reduction for the frontier engine: the explicit engine's
ample sets (cowcheck.model.reduce.ample) chosen for a whole chunk of rows
at once, as masks.

Per row, the rule is the explorer's, read off the row instead of the state:
the first branch (in row order) that stands at a branch-local step meeting
its condition and has a move keeps only its own moves; else, with settled
completions, the first op in the queue that is settled keeps only its
completion; else the row keeps every move. The conditions, and why they keep
every verdict and measure (with completions: whether some violation is
reachable), are in cowcheck.model.reduce.ample; here they are the same
sentences over one-hot maps of blocks:

- who reaches a block: per branch its locals and both tables, per queue
  entry a copy's source and target or a kernel's snapshot, and the free list;
- *private* to branch i: not free, reached by no other branch and by no
  queue entry (but the one a settled completion asks about);
- its *uses*: its working table and its published table below
  ceil(pos / B) (`Frontier._uses`);
- in a cache scenario a keyed block, or one in another request's hits,
  is private to no one, and a step that leads into the atomic admission's
  locking steps (its wait before `cache-full`) is never chosen.

The frontier engine applies the choice after it has generated a chunk's
moves (`keep`): the moves generated and then dropped cost time, not
states. Rows are renamed (symmetry), so a row's branch order is its
representative's: the branch chosen may differ from the explorer's for
the same orbit, which changes the states stored but not what the
reduction keeps."""

from __future__ import annotations

from typing import Any

import numpy as np

from cowcheck.model.reduce.ample import Ample
from cowcheck.model.system import ProtocolModel
from cowcheck.engines.rows import COPY, KERNEL, RUNNING, SNAP, Layout

#: the chosen actor where a row keeps every move
ALL = -1


class RowAmple:
    """The ample-set rule over rows; `of` gives None where it does not apply."""

    def __init__(self, model: ProtocolModel, lay: Layout, ample: Ample, xp: Any):
        self.lay, self.xp, self.ample = lay, xp, ample
        self.may_cancel = tuple(spec.may_cancel for spec in model.scenario.branches)
        self.completions = ample.completions
        # the places of the programs, as program * longest + step, where each local step stands
        self.longest = max(len(program) for program in lay.programs)
        self.places: dict[str, list[tuple[int, Any]]] = {}
        # where an op's owner may be parked for a settled completion: every wait, the locking ones too
        self.parks: dict[str, list[tuple[int, Any]]] = {}
        numbers = lay.numbers
        locking = {numbers[place.op, place.path] * self.longest + place.step for place in model.structure.locking_places
                   if (place.op, place.path) in numbers} if ample.admission_lock else set()
        for p, program in enumerate(lay.programs):
            for k, step in enumerate(program):
                code = p * self.longest + k
                if step.op in ("wait-copy", "wait-kernel") and step.op in ample.local_steps:
                    self.parks.setdefault(step.op, []).append((code, step))
                if code + 1 in locking and code not in locking and k + 1 < len(program):
                    continue        # the step takes the scheduler lock: it disables every other branch
                if step.op in ample.local_steps:
                    self.places.setdefault(step.op, []).append((code, step))

    @staticmethod
    def of(model: ProtocolModel, lay: Layout, xp: Any, completions: bool) -> "RowAmple | None":
        ample = Ample(model, completions=completions)
        return RowAmple(model, lay, ample, xp) if ample.enabled else None

    def describe(self) -> list[str]:
        return self.ample.describe()

    # -- the choice -------------------------------------------------------------
    def choose(self, F: Any, has: Any, free: Any, uses: Any) -> Any:
        """Per row, the actor whose moves alone are kept: a branch i, or N + k
        for the completion of queue entry k; ALL where none. `has`: (n, N + Q),
        which actors have a move in the row; `free`: (n, P) the free map;
        `uses`: (n, N * W) each branch's published uses (-1 elsewhere). Only
        the rows where two actors or more have a move are looked at."""
        xp, lay = self.xp, self.lay
        N, W, P, Q = lay.N, lay.W, lay.P, lay.Q
        chosen = xp.full(len(F), ALL, dtype=np.int64)
        rows = xp.nonzero(has.sum(axis=1) >= 2)[0]
        if not len(rows):
            return chosen
        F, has, free, uses = F[rows], has[rows], free[rows], uses[rows]
        n = len(F)
        ar = xp.arange(n)
        reach = xp.stack([self._onehot(F[:, self._cells(i)]) for i in range(N)], axis=1)         # (n, N, P)
        count = reach.sum(axis=1, dtype=np.int8)
        kinds = F[:, lay.QU:lay.QU + Q * lay.QW:lay.QW]
        owners = F[:, lay.QU + 1:lay.QU + Q * lay.QW:lay.QW]
        busy = int((kinds != -1).sum(axis=1).max()) if Q else 0      # the queue is kept front first
        entry = [self._entry_reach(F, kinds, k) for k in range(busy)]
        queued = sum((e.astype(np.int8) for e in entry), xp.zeros((n, P), dtype=np.int8))
        working = F[:, [lay.wt(i) + t for i in range(N) for t in range(W)]].reshape(n, N, W).astype(np.int64)
        published = xp.stack([self._onehot(uses[:, i * W:(i + 1) * W]) for i in range(N)], axis=1)
        used = xp.stack([self._onehot(working[:, i]) for i in range(N)], axis=1) | published
        kernels = xp.stack([((kinds == KERNEL) & (owners == i)).sum(axis=1) for i in range(N)], axis=1)   # (n, N)
        undecided = xp.ones(n, dtype=bool)
        # a keyed block is reached through the cache (another request's lookup): private to no one
        keyed = F[:, lay.KEY:lay.KEY + P] >= 0 if lay.cache else xp.zeros((n, P), dtype=bool)
        for i in range(N):
            private = ~free & ~keyed & (count - reach[:, i] == 0) & (queued == 0)
            local = self._local(F, i, private, used[:, i], published[:, i], working[:, i], kernels[:, i] > 0) \
                & has[:, i] & undecided
            chosen[rows[local]] = i
            undecided &= ~local
        if self.completions and busy and bool(undecided.any()):
            sub = xp.nonzero(undecided)[0]
            settled = self._settled(F[sub], kinds[sub], owners[sub], free[sub], keyed[sub], reach[sub], count[sub], queued[sub],
                                    [e[sub] for e in entry], used[sub], kernels[sub], has[sub])
            pick = settled >= 0
            chosen[rows[sub[pick]]] = N + settled[pick]
        return chosen

    def _local(self, F: Any, i: int, private: Any, used: Any, published: Any, working: Any, kernel: Any) -> Any:
        """Branch i's next step is local and meets its condition (Ample._local);
        `kernel`: the branch has a kernel in flight."""
        xp, lay = self.xp, self.lay
        n = len(F)
        out = xp.zeros(n, dtype=bool)
        status, prog = F[:, lay.br(i, "status")], F[:, lay.br(i, "prog")]
        running = (status == RUNNING) & (prog >= 0)
        if not bool(running.any()):
            return out
        at = xp.where(running, prog.astype(np.int64) * self.longest + F[:, lay.br(i, "step")], -1)
        for op, places in self.places.items():
            for code, step in places:
                idx = xp.nonzero(at == code)[0]
                if not len(idx):
                    continue
                if op == "wait-kernel":
                    if not (code // self.longest < lay.cancel and self.may_cancel[i]):
                        out[idx] = True
                    continue
                R, mine, uses, table = F[idx], private[idx], used[idx], working[idx]
                ar = xp.arange(len(idx))
                if op == "publish":
                    ok = ~((self._onehot(table) ^ self._onehot(R[:, lay.pt(i):lay.pt(i) + lay.W])) & ~mine).any(axis=1)
                elif op in ("wait-copy", "append"):
                    ok = _at(mine, self._bound(R, i, step.args[0]), ar)
                elif op == "replace":
                    x, y = (self._bound(R, i, name) for name in step.args)
                    in_working = (table == x[:, None]) & (x[:, None] >= 0)
                    ok = in_working.any(axis=1) & _at(mine, y, ar) & (
                        _at(published[idx], x, ar) | (in_working.sum(axis=1) > 1) | _at(mine, x, ar))
                elif op == "write":
                    cells = R[:, lay.pt(i):lay.pt(i) + lay.W].astype(np.int64)
                    safe = xp.maximum(cells, 0)
                    fine = (cells < 0) | uses[ar[:, None], safe] | mine[ar[:, None], safe]
                    ok = ~kernel[idx] & (R[:, lay.br(i, "plen")] > R[:, lay.br(i, "pos")] // lay.B) & fine.all(axis=1)
                elif op == "prefill":       # like a write, for the prompt's last position
                    cells = R[:, lay.pt(i):lay.pt(i) + lay.W].astype(np.int64)
                    safe = xp.maximum(cells, 0)
                    fine = (cells < 0) | uses[ar[:, None], safe] | mine[ar[:, None], safe]
                    ok = ~kernel[idx] & (R[:, lay.br(i, "plen")] > (len(lay.prompts[i]) - 1) // lay.B) & fine.all(axis=1)
                elif op in ("copy", "copy-block"):
                    x, y = (self._bound(R, i, name) for name in step.args)
                    ok = ~kernel[idx] & _at(mine, y, ar) & (_at(uses, x, ar) | _at(mine, x, ar))
                else:       # a launch the rows do not hold (transfers): refused by rows.refusal
                    continue
                out[idx] |= ok
        return out

    def _settled(self, F: Any, kinds: Any, owners: Any, free: Any, keyed: Any, reach: Any, count: Any, queued: Any, entry: list,
                 used: Any, kernels: Any, has: Any) -> Any:
        """Per row, the first queue entry that is settled (Ample._settled) and
        whose completion is a move, -1 where none."""
        xp, lay = self.xp, self.lay
        n, N, B, P = len(F), lay.N, lay.B, lay.P
        ar = xp.arange(n)
        out = xp.full(n, -1, dtype=np.int64)
        # per branch that may own a settled op: parked at `wait-copy` (the block it waits for) or at `wait-kernel`
        waits_for = xp.full((n, N), -2, dtype=np.int64)
        parked = xp.zeros((n, N), dtype=bool)
        for i in range(N):
            if self.may_cancel[i]:
                continue
            prog = F[:, lay.br(i, "prog")]
            at = xp.where((F[:, lay.br(i, "status")] == RUNNING) & (prog >= 0),
                          prog.astype(np.int64) * self.longest + F[:, lay.br(i, "step")], -1)
            for code, step in self.parks.get("wait-copy", []):
                waits_for[:, i] = xp.where(at == code, self._bound(F, i, step.args[0]), waits_for[:, i])
            for code, _ in self.parks.get("wait-kernel", []):
                parked[:, i] |= at == code
        news = self._onehot(F[:, [lay.br(j, "new") for j in range(N)]].reshape(n * N, 1)).reshape(n, N, P)
        new_count = news.sum(axis=1, dtype=np.int8)
        into = [self._onehot(xp.where(kinds[:, q] == COPY, F[:, lay.QU + q * lay.QW + 2], -1)[:, None])
                for q in range(len(entry))]
        into_count = sum((m.astype(np.int8) for m in into), xp.zeros((n, P), dtype=np.int8))
        for k in range(len(entry)):
            base = lay.QU + k * lay.QW
            is_copy, is_kernel = kinds[:, k] == COPY, kinds[:, k] == KERNEL
            dst = xp.where(is_copy, F[:, base + 2].astype(np.int64), -1)
            # the owner: a copy's, the first branch waiting for its target; a kernel's, its branch
            waiting = (waits_for == dst[:, None]) & is_copy[:, None]
            owner = xp.where(is_copy, xp.where(waiting.any(axis=1), xp.argmax(waiting, axis=1), -1),
                             xp.where(is_kernel, owners[:, k].astype(np.int64), -1))
            mine = (owner >= 0) & (out < 0) & has[:, N + k]
            if not bool(mine.any()):
                continue
            who = xp.maximum(owner, 0)
            private = ~free & ~keyed & (count - reach[ar, who] == 0) & (queued - entry[k] == 0)
            stable = ~free & (into_count - into[k] == 0) & (new_count - news[ar, who] == 0)
            use = used[ar, who]
            src = xp.where(is_copy, F[:, base + 1].astype(np.int64), -1)
            copy = is_copy & _at(use, src, ar) & _at(stable, src, ar) & _at(private, dst, ar)
            snap = F[:, base + SNAP:base + SNAP + lay.W].astype(np.int64)
            safe = xp.maximum(snap, 0)
            fine = ((snap < 0) | (use[ar[:, None], safe] & stable[ar[:, None], safe])).all(axis=1)
            # the blocks it writes (a prefill: its positions pos - more .. pos) are private to it
            last, more = F[:, base + 2].astype(np.int64), xp.where(is_kernel, F[:, base + 3].astype(np.int64), 0)
            written = xp.ones(n, dtype=bool)
            for back in range(int(more.max()) + 1 if n else 0):
                target = snap[ar, xp.where(is_kernel, xp.maximum(last - back, 0) // B, 0)]
                written &= (back > more) | _at(private, target, ar)
            kernel = is_kernel & parked[ar, who] & (kernels[ar, who] == 1) & fine & written
            out = xp.where(mine & (copy | kernel), k, out)
        return out

    # -- maps of blocks ---------------------------------------------------------
    def _cells(self, i: int) -> list[int]:
        """The cells of branch i that name a block: its locals and both tables (and its hits)."""
        lay = self.lay
        return [lay.br(i, "tail"), lay.br(i, "new"), *range(lay.wt(i), lay.wt(i) + lay.W), *range(lay.pt(i), lay.pt(i) + lay.W),
                *(range(lay.hits(i), lay.hits(i) + lay.H) if lay.cache else ())]

    def _entry_reach(self, F: Any, kinds: Any, k: int) -> Any:
        """(n, P): the blocks queue entry k reaches (a copy's source and
        target, a kernel's snapshot)."""
        lay, xp = self.lay, self.xp
        base = lay.QU + k * lay.QW
        cells = xp.concatenate((F[:, base + 1:base + 3], F[:, base + SNAP:base + SNAP + lay.W]), axis=1).astype(np.int64)
        is_copy, is_kernel = (kinds[:, k] == COPY)[:, None], (kinds[:, k] == KERNEL)[:, None]
        which = xp.concatenate((xp.repeat(is_copy, 2, axis=1), xp.repeat(is_kernel, lay.W, axis=1)), axis=1)
        return self._onehot(xp.where(which, cells, -1))

    def _onehot(self, cells: Any) -> Any:
        """(n, P): which blocks the cells name (-1: none)."""
        xp, P = self.xp, self.lay.P
        cells = cells.astype(np.int64)
        out = xp.zeros((len(cells), P + 1), dtype=bool)
        out[xp.arange(len(cells))[:, None], xp.where(cells < 0, P, cells)] = True
        return out[:, :P]

    def _bound(self, F: Any, i: int, name: str) -> Any:
        """The block a step's argument names (-1: unbound)."""
        return F[:, self.lay.br(i, "tail" if name == "tail" else "new")].astype(np.int64)


def _at(blocks: Any, b: Any, ar: Any) -> Any:
    """(n,): blocks[r, b[r]], False where b[r] is -1."""
    return blocks[ar, b.clip(0)] & (b >= 0)
