"""A state as one fixed-width row of small integers: the frontier engine's
layout (cowcheck.engines.frontier), and what it covers.

The row holds exactly what tells two states of the explicit model
(cowcheck.model.state) apart, so that two rows are equal exactly when the
states are: per block its refcount, holds and slots; the free list, front
first; per branch its status, pos, operations done, program (an append path,
`cancel`, `finish`, `fork`, `rollback` or `admit`), step, locals and both
tables; the device queue in launch order, each op as (kind, a, b, c,
snapshot): a copy's source, target and count, a kernel's branch, position,
span less one (0 but for a prefill) and the table it reads. What a
state holds that the row does not (a branch's write counter, its sequence, a
kernel's token and expected sequence) is a function of what it does, as long
as no branch speculates: a child is born at its parent's fork at a position
fixed by the programs, with its parent's sequence up to there (`tokens`).
Where a branch speculates, a rollback's `rewind` makes the sequence depend
on the run, and the row holds it: per branch its write counter, `rejected`
and its sequence (S cells), per kernel the sequence it must read (S cells).
Every unused cell is -1.

Tokens are small integers: 0 is an empty slot, the prompt's `p<k>` is 1 + k,
branch j's t-th token is 1 + L + j * T + (t - 1), T the most appends of any
branch; `tokens` gives each branch's sequence, position by position.

A cache scenario (`cache = "prefix"`, docs/semantics.md#prefix-caching)
adds, per block, its key (a cell after the free list), and per request its
`verified` count and its admission's `hits` (H = the most (L - 1) // B of
any prompt, cells after the speculation's); a waiting request has status
WAITING, and its admission is the program `admit`. Each request has its
own prompt, whose token names (any names) are numbered 1 .. L in order of
first appearance, L here their count (`vocab`); generated tokens follow as
above. A key is a prefix of some request's sequence at a block boundary,
known in advance from the prompts and programs (with speculation: the
prompt, then any increasing run of the request's tokens), so a key is a
small integer: its index in `keys`, ordered by `key_codes` (each prefix as
one base-V number) so that a sequence's prefix finds its key by a binary
search.

`refusal` says, in one line, what of a scenario the layout does not cover;
the engine refuses such a scenario as bad input, never with a silent gap:
allocator and scheduler code, transfers (a host tier, `source`, `sink` and
the transfer steps)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Optional

import numpy as np

from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Copy, Kernel, State, Status
from cowcheck.model.stepkinds import STEPS, Launch
from cowcheck.model.structure import Op

#: the step kinds the frontier engine applies to rows (docs/reference/engines.md#frontier)
SUPPORTED_STEPS = frozenset(("alloc", "incref", "decref", "hold", "release", "copy", "copy-block", "wait-copy", "append",
                             "replace", "publish", "write", "wait-kernel", "decref-all", "check-output", "incref-all", "share",
                             "rewind", "trim", "lookup", "touch-hits", "alloc-prompt", "prefill", "cache-full",
                             "cache-drafts", "alloc-no-evict"))
#: the statuses a row stores, by code
STATUSES = (Status.RUNNING, Status.FINISHED, Status.CANCELLED, Status.UNBORN, Status.WAITING)
RUNNING, FINISHED, CANCELLED, UNBORN, WAITING = 0, 1, 2, 3, 4
#: a queue entry's kind
EMPTY, COPY, KERNEL = -1, 1, 2
#: the cells of a branch before its two tables, and of a queue entry before its snapshot
BRANCH_FIELDS = ("status", "pos", "done", "prog", "step", "tail", "new", "wlen", "plen")
ENTRY_FIELDS = ("kind", "a", "b", "c")
#: where a queue entry's snapshot starts
SNAP = len(ENTRY_FIELDS)


def dtype_for(layout: "Layout") -> type:
    """int8 where every value fits (block ids, positions, tokens, counts
    under 128), else int16: half the bytes to hash, compare and store."""
    largest = max(layout.P, layout.L + layout.N * layout.T + 1, layout.L + layout.T + 1, layout.N + 1, len(layout.keys),
                  max(map(len, layout.tokens), default=0) + 1)
    return np.int8 if largest < 100 else np.int16


def refusal(scenario: Scenario) -> Optional[str]:
    """What the frontier engine lacks to check this scenario, in one line
    (None: it covers it)."""
    protocol = scenario.protocol
    if scenario.allocator is not None:
        return "allocator code (the engine harness) is checked by the explicit engine"
    if scenario.scheduler is not None:
        return "scheduler code (the scheduler harness) is checked by the explicit engine"
    if scenario.transfers:
        return ("a transfer scenario (a host tier, or a request with `source` or `sink`): the host tier, transfers in "
                "flight and the connector's reports are not in the row layout")
    ops = {o.op for spec in scenario.branches for o in spec.operations}
    used = [s for path in protocol.paths.values() for s in path.steps] + list(protocol.cancel + protocol.finish) \
        + list(protocol.fork if Op.FORK in ops else ()) + list(protocol.rollback if Op.ROLLBACK in ops else ()) \
        + list(protocol.admit if scenario.cache else ())
    step = next((s.op for s in used if s.op not in SUPPORTED_STEPS), None)
    if step is not None:
        return f"protocol {protocol.name!r} uses the step {step!r}, which the frontier engine does not apply yet"
    if scenario.cache and not Layout.of(scenario).codable:
        return "a cache scenario whose keys (prefixes of its sequences) do not fit in a 62-bit code"
    return None


@dataclass(frozen=True)
class Layout:
    """Where each part of a scenario's state lies in a row, and the sizes
    that bound it: P blocks of B slots, N branches with tables of at most W
    entries, a queue of at most Q ops."""
    P: int
    B: int
    L: int
    N: int
    T: int
    W: int
    Q: int
    appends: tuple[int, ...]
    #: the programs a branch may be inside: the append paths, then cancel, finish, fork, rollback and admit
    programs: tuple[tuple, ...]
    paths: tuple[str, ...]
    #: each branch's flattened program: per operation the child it forks, or -1 for an append or rollback
    forks: tuple[tuple[int, ...], ...]
    #: per operation the drafts a rollback verifies, 0 for an append or fork
    drafts: tuple[tuple[int, ...], ...]
    #: each branch's sequence as tokens, position by position, as long as it can grow (without speculation)
    tokens: tuple[tuple[int, ...], ...]
    #: the sequence cells of a branch and of a kernel: 0 without speculation (the sequences are `tokens`)
    S: int = 0
    #: a cache scenario: the prompts' token names, numbered 1 .. L (generated tokens are named as elsewhere)
    cache: bool = False
    vocab: tuple[str, ...] = ()
    #: per request its prompt as tokens
    prompts: tuple[tuple[int, ...], ...] = ()
    #: the cells of a request's hits
    H: int = 0
    #: every key a block may get, as tokens, ordered by `key_codes`
    keys: tuple[tuple[int, ...], ...] = ()

    @staticmethod
    def of(scenario: Scenario) -> "Layout":
        protocol = scenario.protocol
        cache = scenario.cache
        paths = tuple(protocol.paths)
        programs = tuple(protocol.paths[p].steps for p in paths) + (protocol.cancel, protocol.finish, protocol.fork,
                                                                    protocol.rollback, protocol.admit if cache else ())
        appends = tuple(spec.appends for spec in scenario.branches)
        per_path = max((sum(s.op == "append" for s in p) for p in programs[:len(paths)]), default=0)

        def launches(program: tuple) -> int:
            return sum(STEPS[s.op].launches is not None for s in program)
        per_append = max((launches(p) for p in programs[:len(paths)]), default=0)
        tables = launches(protocol.cancel + protocol.finish) + (launches(protocol.admit) if cache else 0)
        forks = tuple(tuple(o.arg if o.op is Op.FORK else -1 for o in spec.operations) for spec in scenario.branches)
        drafts = tuple(tuple(o.arg if o.op is Op.ROLLBACK else 0 for o in spec.operations) for spec in scenario.branches)
        T = max(appends, default=0) or 1
        B = scenario.block_size
        speculates = any(k > 0 for d in drafts for k in d)
        names = scenario.names
        vocab: tuple[str, ...] = ()
        prompts: tuple[tuple[int, ...], ...] = ()
        if cache:
            made = {t for j in range(len(names)) for t in scenario.own_tokens(j)}       # what some request writes
            vocab = tuple(dict.fromkeys(t for i in range(len(names)) for t in scenario.prompt_of(i) if t not in made))
        L = len(vocab) if cache else scenario.prompt

        def token(text: str) -> int:
            return _token(text, L, T, vocab, names)
        # a branch's sequence: its parent's up to the fork (a root: the prompt, a request: its own), then its own tokens
        tokens: list[tuple[int, ...]] = [()] * len(appends)
        table: list[int] = [0] * len(appends)        # the most entries its working table can reach
        for i in _parents_first(scenario):
            spec = scenario.branches[i]
            if cache:
                start = tuple(token(t) for t in scenario.prompt_of(i))
                table[i] = -(-len(start) // B)
            elif spec.parent is None:
                start, table[i] = tuple(range(1, scenario.prompt + 1)), scenario.prompt_blocks
            else:
                at = next(k for k, child in enumerate(forks[spec.parent]) if child == i)
                born = len(tokens[spec.parent]) - appends[spec.parent] + sum(o.op is Op.APPEND for o in
                                                                             scenario.branches[spec.parent].operations[:at])
                start, table[i] = tokens[spec.parent][:born], table[spec.parent]
            tokens[i] = start + tuple(1 + L + i * T + t for t in range(appends[i]))
            table[i] += appends[i] * per_path
        keys: tuple[tuple[int, ...], ...] = ()
        if cache:
            prompts = tuple(tokens[i][:len(scenario.prompt_of(i))] for i in range(len(appends)))
            found: set[tuple[int, ...]] = set()
            for i, start in enumerate(prompts):
                own = tokens[i][len(start):]
                for n in range(B, len(tokens[i]) + 1, B):
                    if n <= len(start) or not speculates:
                        found.add(tokens[i][:n])
                    else:       # after a rewind, later tokens take the rejected ones' places: any increasing run
                        found.update(start + run for run in combinations(own, n - len(start)))
            keys = tuple(sorted(found, key=lambda k: _code(k, L + len(appends) * T + 1)))
        return Layout(P=scenario.pool, B=B, L=L, N=len(appends), T=T, W=max(table, default=0) or 1,
                      Q=sum(a * per_append + tables for a in appends) + sum(c >= 0 for f in forks for c in f) * launches(protocol.fork)
                      + sum(k > 0 for d in drafts for k in d) * launches(protocol.rollback),
                      appends=appends, programs=programs, paths=paths, forks=forks, drafts=drafts, tokens=tuple(tokens),
                      S=max(map(len, tokens)) if speculates else 0, cache=cache, vocab=vocab, prompts=prompts,
                      H=max(((len(p) - 1) // B for p in prompts), default=0), keys=keys)

    @property
    def V(self) -> int:
        """The base of a key's code: one more than the largest token."""
        return self.L + self.N * self.T + 1

    @property
    def key_codes(self) -> np.ndarray:
        """Each key as one number (`_code`), ascending: the key's index is its place here."""
        return np.array([_code(k, self.V) for k in self.keys], dtype=np.int64)

    @property
    def key_tails(self) -> np.ndarray:
        """(keys, B): the tokens each key gives its block's slots (its last B)."""
        return np.array([k[-self.B:] for k in self.keys], dtype=np.int64).reshape(len(self.keys), self.B)

    @property
    def codable(self) -> bool:
        """Whether every key's code fits in 62 bits."""
        return self.V ** max(map(len, self.tokens), default=0) < 1 << 62

    # -- offsets ------------------------------------------------------------
    @property
    def RC(self) -> int:
        return 0

    @property
    def HO(self) -> int:
        return self.P

    @property
    def SL(self) -> int:
        return 2 * self.P

    @property
    def FREE(self) -> int:
        return 2 * self.P + self.P * self.B

    @property
    def KEY(self) -> int:
        """A cache scenario's key per block (its index in `keys`, -1: none)."""
        return self.FREE + self.P

    @property
    def BR(self) -> int:
        """Where the branches start."""
        return self.KEY + (self.P if self.cache else 0)

    @property
    def BW(self) -> int:
        """The cells of one branch."""
        return len(BRANCH_FIELDS) + 2 * self.W + (2 + self.S if self.S else 0) + (1 + self.H if self.cache else 0)

    def br(self, i: int, field: str) -> int:
        return self.BR + i * self.BW + BRANCH_FIELDS.index(field)

    def wt(self, i: int) -> int:
        return self.br(i, "plen") + 1

    def pt(self, i: int) -> int:
        return self.wt(i) + self.W

    def writes(self, i: int) -> int:
        """Branch i's write counter, then its `rejected`, then its sequence
        (S cells; only where a branch speculates)."""
        return self.pt(i) + self.W

    def rejected(self, i: int) -> int:
        return self.writes(i) + 1

    def seq(self, i: int) -> int:
        return self.writes(i) + 2

    def verified(self, i: int) -> int:
        """A request's verified count, then its hits (H cells; cache scenarios only)."""
        return self.writes(i) + (2 + self.S if self.S else 0)

    def hits(self, i: int) -> int:
        return self.verified(i) + 1

    @property
    def QU(self) -> int:
        return self.BR + self.N * self.BW

    @property
    def QW(self) -> int:
        """The cells of one queue entry."""
        return len(ENTRY_FIELDS) + self.W + self.S      # the snapshot, then (with speculation) the expected sequence

    def q(self, k: int, field: str) -> int:
        return self.QU + k * self.QW + (ENTRY_FIELDS.index(field) if field != "snap" else len(ENTRY_FIELDS))

    @property
    def width(self) -> int:
        return self.QU + self.Q * self.QW

    @property
    def cancel(self) -> int:
        return len(self.paths)

    @property
    def finish(self) -> int:
        return len(self.paths) + 1

    @property
    def fork(self) -> int:
        return len(self.paths) + 2

    @property
    def numbers(self) -> dict[tuple[Op, Optional[str]], int]:
        """Each program's number in a row's `prog` cell, by (operation, path)."""
        out: dict[tuple[Op, Optional[str]], int] = {(Op.APPEND, p): k for k, p in enumerate(self.paths)}
        out.update({(Op.CANCEL, None): self.cancel, (Op.FINISH, None): self.finish, (Op.FORK, None): self.fork,
                    (Op.ROLLBACK, None): self.rollback})
        if self.cache:
            out[Op.ADMIT, None] = self.admit
        return out

    @property
    def rollback(self) -> int:
        return len(self.paths) + 3

    @property
    def admit(self) -> int:
        return len(self.paths) + 4

    # -- tokens -------------------------------------------------------------
    def token_of(self, text: Optional[str], names: tuple[str, ...]) -> int:
        return 0 if text is None else _token(text, self.L, self.T, self.vocab if self.cache else None, names)

    # -- an explicit state as a row ----------------------------------------------
    def encode(self, state: State, names: tuple[str, ...]) -> np.ndarray:
        """The row of an explicit state (traces are rebuilt by matching it)."""
        row: np.ndarray = np.full(self.width, -1, dtype=dtype_for(self))
        for b, blk in enumerate(state.blocks):
            row[self.RC + b], row[self.HO + b] = blk.refcount, blk.holds
            row[self.SL + b * self.B:self.SL + (b + 1) * self.B] = [self.token_of(t, names) for t in blk.slots]
        row[self.FREE:self.FREE + len(state.free)] = state.free
        if self.cache:
            index = {k: n for n, k in enumerate(self.keys)}
            row[self.KEY:self.KEY + self.P] = [-1 if blk.key is None else index[tuple(self.token_of(t, names) for t in blk.key)]
                                               for blk in state.blocks]
        progs = self.numbers
        for i, br in enumerate(state.branches):
            cells: tuple[int, ...] = (STATUSES.index(br.status), br.pos, br.done, -1 if br.op is None else progs[br.op, br.path], br.step,
                     -1 if br.tail is None else br.tail, -1 if br.new is None else br.new, len(br.working),
                     len(br.published))
            row[self.br(i, "status"):self.br(i, "status") + len(cells)] = cells
            row[self.wt(i):self.wt(i) + len(br.working)] = br.working
            row[self.pt(i):self.pt(i) + len(br.published)] = br.published
            if self.S:
                row[self.writes(i)] = br.writes
                row[self.rejected(i)] = -1 if br.rejected is None else br.rejected
                row[self.seq(i):self.seq(i) + len(br.seq)] = [self.token_of(t, names) for t in br.seq]
            if self.cache:
                row[self.verified(i)] = br.verified
                row[self.hits(i):self.hits(i) + len(br.hits)] = br.hits
        for k, op in enumerate(state.queue):
            entry: tuple[int, ...]
            if type(op) is Copy:
                entry = (COPY, op.src, op.dst, op.n)
                snapshot: tuple[int, ...] = ()
            else:
                assert type(op) is Kernel
                entry, snapshot = (KERNEL, op.branch, op.pos, op.span - 1), op.snapshot
            row[self.q(k, "kind"):self.q(k, "kind") + len(entry)] = entry
            row[self.q(k, "snap"):self.q(k, "snap") + len(snapshot)] = snapshot
            if self.S and type(op) is Kernel:
                at = self.q(k, "snap") + self.W
                row[at:at + len(op.expected)] = [self.token_of(t, names) for t in op.expected]
        return row


def _token(text: str, L: int, T: int, vocab: Optional[tuple[str, ...]], names: tuple[str, ...]) -> int:
    """A token's number: a generated token's by its branch and count; a
    prompt's `p<k>` (or, in a cache scenario, its place in `vocab`: any
    token a prompt names and no request writes, `a1` of a request that
    writes nothing included, which symmetry must not rename)."""
    if vocab is not None and text in vocab:
        return vocab.index(text) + 1
    if vocab is None and text[0] == "p" and text[1:].isdigit() and "p" not in names:
        return int(text[1:]) + 1
    for j, name in enumerate(names):
        if text.startswith(name) and text[len(name):].isdigit():
            return 1 + L + j * T + int(text[len(name):]) - 1
    raise ValueError(f"token {text!r} is not in the layout")


def _code(key: tuple[int, ...], V: int) -> int:
    """A key (tokens of 1 .. V - 1) as one number, its first token lowest:
    keys of different lengths differ too (no token is 0)."""
    return sum(t * V ** k for k, t in enumerate(key))


def _parents_first(scenario: Scenario) -> list[int]:
    """The branches, each after its parent."""
    out: list[int] = []
    for root in scenario.roots:
        out += [root, *scenario.descendants(root)]
    return out
