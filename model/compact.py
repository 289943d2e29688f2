"""A compact, fixed-width encoding of states, for the explorer's visited set.

A State is a tree of tuples (hundreds of bytes of Python objects once shared
parts are counted); its encoding is one `bytes` object of the same length for
every state of a scenario, with every field at a fixed offset. The widths
come from the scenario: P blocks of B slots, branch tables of at most T
blocks, a device queue of at most Q operations, sequences of at most S
tokens. Every value fits one byte
when the scenario is small enough (the usual case), else two.

The encoding is lossless (`decode` inverts it, which the tests check), so a
visited set of encodings is exact, unlike fingerprints."""

from __future__ import annotations

from array import array
from typing import cast

from cowcheck.model.protocol import Step
from cowcheck.model.stepkinds import COPIES
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Block, Branch, Copy, Kernel, State, Status
from cowcheck.model.structure import Op

STATUSES = tuple(Status)
OPS = (None, *Op)
NONE = 0  # an absent token, local or queue entry; present values are stored + 1


class Compact:
    def __init__(self, scenario: Scenario):
        protocol = scenario.protocol
        self.B = scenario.block_size
        self.P = scenario.pool
        self.paths = [None] + list(protocol.paths)
        n = len(scenario.branches)
        self.tokens = [None] + list(dict.fromkeys(scenario.prompt_tokens + tuple(t for i in range(n) for t in scenario.own_tokens(i))))
        #: a cache scenario also stores each block's key, each branch's
        #: verified count and hits, and each kernel's count
        self.cache = scenario.cache
        self.token_id = {t: i for i, t in enumerate(self.tokens)}
        steps = [p.steps for p in protocol.paths.values()]
        appends_per_path = max(sum(s.op == "append" for s in p) for p in steps)
        copies_per_path = max(sum(s.op in COPIES for s in p) for p in steps)

        def count(steps: tuple[Step, ...], ops: tuple[str, ...]) -> int:
            return sum(s.op in ops for s in steps)

        spec = scenario.branches
        programs = sum(b.forks for b in spec) * count(protocol.fork, ("append",)) \
            + sum(b.speculates for b in spec) * count(protocol.rollback, ("append",))
        #: the longest a table can grow: the prompt's blocks plus every `append` step (a child inherits its parent's)
        prompt_blocks = max(-(-len(scenario.prompt_of(i)) // self.B) for i in range(n))
        self.T = prompt_blocks + sum(b.appends for b in spec) * appends_per_path + programs
        #: the most ops in flight: every write and copy launched, none completed
        self.Q = sum(b.appends for b in spec) * (1 + copies_per_path) \
            + sum(b.forks for b in spec) * count(protocol.fork, COPIES) + sum(b.speculates for b in spec) * count(protocol.rollback, COPIES) \
            + (n if scenario.cache else 0)      # a prefill per request
        #: the longest sequence
        self.S = max(scenario.max_pos(i) for i in range(n))
        self.branches = n
        bound = max(self.P, len(self.tokens), self.S, self.T, self.Q, len(self.paths), self.B) + 2
        self.code = "B" if bound < 100 else "H"  # leaves headroom for refcounts and holds
        self.width = self._fields() * array(self.code).itemsize

    def _fields(self) -> int:
        extra = (1 + self.S, 1 + 1 + self.T, 1) if self.cache else (0, 0, 0)
        block = 2 + self.B + extra[0]
        branch = 10 + 2 * (1 + self.T) + 1 + self.S + extra[1]
        op = 4 + 1 + self.T + 1 + self.S + extra[2]
        return self.P * block + 1 + self.P + self.branches * branch + 1 + self.Q * op

    def _seq(self, out: list[int], seq: tuple[str, ...]) -> None:
        tid = self.token_id
        out.append(len(seq))
        out.extend(tid[t] for t in seq)
        out.extend([NONE] * (self.S - len(seq)))

    def _table(self, out: list[int], table: tuple[int, ...]) -> None:
        out.append(len(table))
        out.extend(b + 1 for b in table)
        out.extend([NONE] * (self.T - len(table)))

    def encode(self, state: State) -> bytes:
        out: list[int] = []
        tid = self.token_id
        cache = self.cache
        for blk in state.blocks:
            out.append(blk.refcount)
            out.append(blk.holds)
            out.extend(tid[t] if t is not None else NONE for t in blk.slots)
            if cache:
                self._seq(out, blk.key or ())
        out.append(len(state.free))
        out.extend(b + 1 for b in state.free)
        out.extend([NONE] * (self.P - len(state.free)))
        for br in state.branches:
            out.extend((STATUSES.index(br.status), br.pos, br.done, OPS.index(br.op), self.paths.index(br.path),
                        br.step, NONE if br.tail is None else br.tail + 1, NONE if br.new is None else br.new + 1,
                        br.writes, NONE if br.rejected is None else br.rejected + 1))
            self._table(out, br.working)
            self._table(out, br.published)
            self._seq(out, br.seq)
            if cache:
                out.append(br.verified)
                self._table(out, br.hits)
        out.append(len(state.queue))
        for op in state.queue:
            if type(op) is Copy:
                out.extend((1, op.src, op.dst, op.n))
                self._table(out, ())
                self._seq(out, ())
                if cache:
                    out.append(0)
            else:
                assert type(op) is Kernel   # no transfers: a transfer scenario is not encoded
                out.extend((2, op.branch, op.pos, tid[op.token]))
                self._table(out, op.snapshot)
                self._seq(out, op.expected)
                if cache:
                    out.append(op.span)
        out.extend([NONE] * ((self.Q - len(state.queue)) * (4 + 1 + self.T + 1 + self.S + (1 if cache else 0))))
        return array(self.code, out).tobytes()

    def decode(self, data: bytes) -> State:
        values = array(self.code)
        values.frombytes(data)
        it = iter(values)

        def take(n: int) -> list[int]:
            return [next(it) for _ in range(n)]

        def table() -> tuple[int, ...]:
            n, entries = next(it), take(self.T)
            return tuple(b - 1 for b in entries[:n])

        def seq() -> tuple[str, ...]:
            n, entries = next(it), take(self.S)
            return tuple(cast(str, self.tokens[t]) for t in entries[:n])

        cache = self.cache
        blocks = []
        for _ in range(self.P):
            refcount, holds = next(it), next(it)
            slots = tuple(self.tokens[t] for t in take(self.B))
            key = seq() if cache else ()
            blocks.append(Block(refcount, holds, slots, key or None))
        n = next(it)
        free = tuple(b - 1 for b in take(self.P)[:n])
        branches = []
        for _ in range(self.branches):
            status, pos, done, op, path, step, tail, new, writes, rejected = take(10)
            working, published, sequence = table(), table(), seq()
            verified, hits = (next(it), table()) if cache else (0, ())
            branches.append(Branch(STATUSES[status], pos, done, OPS[op], self.paths[path], step,
                                   None if tail == NONE else tail - 1, None if new == NONE else new - 1, working, published,
                                   writes, sequence, None if rejected == NONE else rejected - 1, verified, hits))
        queue = []
        for _ in range(next(it)):
            kind, a, b, c = take(4)
            snapshot, expected = table(), seq()
            span = next(it) if cache else 1
            queue.append(Copy(a, b, c) if kind == 1 else Kernel(a, b, cast(str, self.tokens[c]), snapshot, expected, span))
        return State(tuple(blocks), free, tuple(branches), tuple(queue))
