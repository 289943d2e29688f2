"""The concrete executor: replay a trace on a real KV memory pool and compare
what every kernel computes with an independently computed reference.

The model tracks token ids; here each token id becomes key, value and query
vectors, the pool is a float32 array of shape [P, B, 2, H] (keys and values),
and each kernel runs a real single-head attention over the keys and values it
gathers through its table snapshot, then decodes the output to a token. The
reference for a kernel is the same attention over a contiguous, unpaged array
built from its branch's sequence as it was right after the kernel's write: it
shares nothing with the paged replay but the token-to-vector function, so a
divergence is evidence from memory, not from the model's own bookkeeping.
The sequences themselves are rebuilt here from the trace's branch actions
(`Sequences`), by the rules of docs/semantics.md#branch-programs, not read
from the model's states.

The pool forces no hardware race: the interleaving (which copy or kernel
completes when) comes from the trace. Only device completions touch memory;
branch steps only move block ids around, and those ids arrive with each
completion (a copy's source and destination, a kernel's table snapshot).

A transfer scenario keeps a host tier beside the pool, a second array of
the same shape per block: a store copies a GPU block into its host block
and a load copies back, each reading its source when it completes (as a
copy does); a recv writes the reference keys and values of its request's
prompt tokens (the remote prefill is faithful), and a send reads its
block's positions and is compared with the producer's sequence when the
send was launched (the remote reader). A failed transfer reads and writes
nothing. What a recv carries and what a send expects come from the
request's own steps (`Sequences`), not from the model's states.

A scheduler trace (scheduler code through the scheduler harness) is
replayed from what its actions say: each step's kernels (a request's
position range: its own sequence through the last) and transfers (their
blocks); a recv's tokens are its prompt's at the entry its table (the
state after the step) has the block at.

The array module is numpy by default; with CuPy (`--pool cupy`) the same
replay runs on a GPU, copies on one CUDA stream and kernels on another,
ordered by events exactly as the trace orders their completions.

One idea, though long: a trace's completions on real memory against a
reference that shares nothing with the paged replay but the token
vectors, whatever produced the trace (a protocol file, allocator or
scheduler code)."""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from cowcheck.model.errors import SpecError
from cowcheck.model.scenario import Scenario
from cowcheck.model.action import DEVICE, ENGINE, Action

#: a scheduler step's transfer as the harness names it in the step's binds
_LAUNCH = re.compile(r"^(?P<kind>\w+) .* \((?P<request>[^,]+), block (?P<block>\d+)(?:, host \d+)?\)$")
HEAD_DIM = 16
SEED = 20261129
TOLERANCE = 1e-5  # identical reads give bitwise-identical outputs on numpy; GPU rounding stays far below
KEY, VALUE = 0, 1
POOLS = ("numpy", "cupy")


class TokenSpace:
    """Deterministic vectors for every token of a scenario, and the fixed
    projection that decodes an attention output back to one of them.

    A slot holds its token's key and value and nothing else; the kernel adds
    each position's code to the keys as it reads them (rotary applied inside
    attention), and the query of position pos looks for the key of position
    pos - 1: the head is a previous-token head, so the reference output
    decodes to the token just before the kernel's own, and a kernel that
    reads a wrong token there decodes that wrong token, a real entry of the
    vocabulary. A wrong token elsewhere in the context still moves the
    output (max |diff|), even where the decoded token survives it.

    Slots hold exactly what the model's slots hold, a token, so the pool
    diverges exactly where faithful-output breaks: a slot that holds the
    right token written for another position (a freed block reused by a
    prompt with the same token there) is the same data here as in the
    model. An engine that rotates keys before caching them would read a
    wrong key there; docs/semantics.md#replay-on-a-real-pool says so."""

    POSITION_WEIGHT = 4.0   # the norm of a positional code: the query finds position pos - 1 ...
    CONTENT_WEIGHT = 0.5    # ... while token content in keys and queries only tilts the weights

    def __init__(self, scenario: Scenario, head_dim: int = HEAD_DIM, seed: int = SEED):
        self.head_dim = head_dim
        self.seed = seed
        own = [t for i in range(len(scenario.branches)) for t in scenario.own_tokens(i)]
        self.vocabulary: list[str] = list(dict.fromkeys(scenario.prompt_tokens + tuple(own)))
        self._vectors: dict[str, np.ndarray] = {}
        longest = max(scenario.max_pos(i) for i in range(len(scenario.branches))) + 1
        codes = self._draw("positions", longest)
        self.positions = self.POSITION_WEIGHT * codes / np.linalg.norm(codes, axis=1, keepdims=True)
        values = np.stack([self.vectors(t)[VALUE] for t in self.vocabulary]) if self.vocabulary else np.zeros((0, head_dim))
        self.unembed = values  # tied: the output projection is the value table

    def _draw(self, label: str, rows: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, zlib.crc32(label.encode())])
        return rng.standard_normal((rows, self.head_dim)).astype(np.float32)

    def vectors(self, token: str) -> np.ndarray:
        """The token's own [key, value, query], before positions are added."""
        if token not in self._vectors:
            self._vectors[token] = self._draw(token, 3)
        return self._vectors[token]

    def key_value(self, token: str) -> np.ndarray:
        """What a kernel writes into a slot for `token`: [key, value]."""
        key, value, _ = self.vectors(token)
        return np.stack([self.CONTENT_WEIGHT * key, value])

    def rotate(self, xp, keys):
        """Keys of positions 0 .. len(keys)-1 as attention sees them: each
        with its position's code."""
        return keys + xp.asarray(self.positions[:keys.shape[0]])

    def query(self, token: str, pos: int) -> np.ndarray:
        return self.CONTENT_WEIGHT * self.vectors(token)[2] + self.positions[max(pos - 1, 0)]

    def decode(self, output: np.ndarray) -> str:
        return self.vocabulary[int(np.argmax(self.unembed @ output))]

    def nearest(self, value: np.ndarray) -> Optional[str]:
        """Which token a slot holds, from its value (None for a zeroed,
        never-used slot)."""
        if not np.any(value):
            return None
        return self.vocabulary[int(np.argmin(np.abs(self.unembed - value).sum(axis=1)))]


def attention(xp, query, keys, values):
    """softmax(q K^T / sqrt(H)) V for one query."""
    scores = keys @ query / np.float32(np.sqrt(query.shape[-1]))
    weights = xp.exp(scores - scores.max())
    return (weights / weights.sum()) @ values


def reference_output(space: TokenSpace, sequence: tuple[str, ...], pos: int) -> np.ndarray:
    """What the kernel at `pos` must compute: attention over a contiguous
    array of its sequence (positions 0 .. pos), nothing paged."""
    stacked = np.stack([space.key_value(t) for t in sequence[:pos + 1]])
    return attention(np, space.query(sequence[pos], pos), space.rotate(np, stacked[:, KEY]), stacked[:, VALUE])


@dataclass
class KernelReplay:
    """One kernel (or check-output) replayed on the pool."""
    step: int
    kind: str                 # kernel | check-output | send (the remote reader)
    branch: str
    pos: int                  # a send: the first position it reads
    max_diff: float           # largest |paged - reference|
    decoded: Optional[str]    # the paged output decoded (kernel), or the token read at the first wrong position
    expected: Optional[str]   # the reference decoded, or the reference token there
    diverged: bool
    position: Optional[int] = None  # check-output, send: the first position read wrong

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class PoolReplay:
    pool: str
    head_dim: int
    kernels: list[KernelReplay] = field(default_factory=list)

    @property
    def first_divergence(self) -> Optional[KernelReplay]:
        return next((k for k in self.kernels if k.diverged), None)

    def to_json(self) -> dict:
        first = self.first_divergence
        return {"pool": self.pool, "head_dim": self.head_dim, "first_divergence": first.step if first else None,
                "kernels": [k.to_json() for k in self.kernels]}


def array_module(pool: str):
    if pool == "numpy":
        return np
    if pool not in POOLS:
        raise SpecError("--pool", "pool", f"unknown pool {pool!r}; allowed: {', '.join(POOLS)}")
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # ImportError, or CUDA without a device
        reason = "CuPy is not installed (pip install \".[gpu]\")" if isinstance(err, ImportError) else f"no usable GPU ({type(err).__name__})"
        raise SpecError("--pool", "pool", f"cupy needs CuPy and a CUDA GPU: {reason}; allowed here: numpy") from None
    return cupy


class Pool:
    """The KV pool and the device's two queues. With numpy every operation is
    immediate; with CuPy copies go to one stream and kernels to another, and
    each waits on an event recorded after the previous completion, so the GPU
    executes them in exactly the trace's order. Everything that touches
    device memory, host transfers included, runs inside `_on`: the streams
    are non-blocking, so nothing on the null stream would be ordered with
    them (tests/fake_cupy.py checks this without a GPU)."""

    def __init__(self, xp, scenario: Scenario, space: TokenSpace, initial: Optional[dict] = None):
        self.xp = xp
        self.B = scenario.block_size
        self.space = space
        memory = np.zeros((scenario.pool, self.B, 2, space.head_dim), np.float32)
        #: the host tier: host memory, a numpy array on either pool (CuPy copies to and from it)
        self.host = np.zeros((scenario.host_pool if scenario.transfers else 0, self.B, 2, space.head_dim), np.float32)
        for hb in (initial or {}).get("host", []):
            for slot, token in enumerate(hb["slots"]):
                if token is not None:
                    self.host[hb["id"], slot] = space.key_value(token)
        if initial is None:
            # the fork: the prompt fills blocks 0 .. in order (a cache scenario starts empty)
            for i in range(0 if scenario.cache else scenario.prompt):
                memory[i // self.B, i % self.B] = space.key_value(f"p{i}")
        else:       # where the trace's initial state has them (allocator code chooses the prompt's blocks)
            for block in initial["blocks"]:
                for slot, token in enumerate(block["slots"]):
                    if token is not None:
                        memory[block["id"], slot] = space.key_value(token)
        self.gpu = xp is not np
        if self.gpu:
            self.copy_stream, self.compute_stream = xp.cuda.Stream(non_blocking=True), xp.cuda.Stream(non_blocking=True)
            self.last = None
        with self._on("copy"):
            self.memory = xp.asarray(memory)

    def _on(self, stream_name: str):
        """Run on a stream after everything the trace completed before."""
        if not self.gpu:
            return _Immediate()
        stream = self.copy_stream if stream_name == "copy" else self.compute_stream
        if self.last is not None:
            stream.wait_event(self.last)
        return _Ordered(self, stream)

    def copy(self, src: int, dst: int, n: int) -> None:
        with self._on("copy"):
            self.memory[dst, :n] = self.memory[src, :n]

    def store(self, block: int, host: int) -> None:
        """GPU block -> host block, all B slots as they are now."""
        with self._on("copy") as queue:
            self.host[host] = queue.fetch(self.memory[block])

    def load(self, host: int, block: int) -> None:
        """Host block -> GPU block, all B slots as they are now."""
        with self._on("copy"):
            self.memory[block] = self.xp.asarray(self.host[host])

    def recv(self, block: int, tokens: tuple[str, ...]) -> None:
        """The remote prefill's keys and values of `tokens` into a GPU block."""
        with self._on("copy"):
            self.memory[block, :len(tokens)] = self.xp.asarray(np.stack([self.space.key_value(t) for t in tokens]))

    def send(self, block: int, n: int) -> np.ndarray:
        """What the remote reader gets: the first n slots of a GPU block."""
        with self._on("copy") as queue:
            return np.array(queue.fetch(self.memory[block, :n]))

    def kernel(self, token: str, pos: int, snapshot: tuple[int, ...], before: tuple[tuple[int, str], ...] = ()) -> np.ndarray:
        """Write `token` at `pos` (a prefill first writes `before`, its
        earlier (position, token) pairs), then attend over 0 .. pos."""
        xp = self.xp
        with self._on("compute") as queue:
            for p, t in before + ((pos, token),):
                self.memory[snapshot[p // self.B], p % self.B] = xp.asarray(self.space.key_value(t))
            blocks, slots = self._gather_index(snapshot, pos + 1)
            gathered = self.memory[blocks, slots]
            out = attention(xp, xp.asarray(self.space.query(token, pos)), self.space.rotate(xp, gathered[:, KEY]),
                            gathered[:, VALUE])
            return queue.fetch(out)

    def read(self, table: tuple[int, ...], count: int) -> np.ndarray:
        """Keys and values of positions 0 .. count-1 through a table; zeros
        past its end (nothing there to read)."""
        rows = np.zeros((count, 2, self.space.head_dim), np.float32)
        covered = min(count, len(table) * self.B)
        if covered:
            with self._on("compute") as queue:
                blocks, slots = self._gather_index(table, covered)
                rows[:covered] = queue.fetch(self.memory[blocks, slots])
        return rows

    def _gather_index(self, table: tuple[int, ...], count: int):
        positions = np.arange(count)
        blocks = np.asarray(table, dtype=np.int64)[positions // self.B]
        return self.xp.asarray(blocks), self.xp.asarray(positions % self.B)


class _Immediate:
    """numpy: the host is the device."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def fetch(self, array):
        return array


class _Ordered:
    """CuPy: work on one stream, then an event for the next completion to wait on."""

    def __init__(self, pool: Pool, stream):
        self.pool, self.stream = pool, stream

    def __enter__(self):
        self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        self.pool.last = self.stream.record()
        self.stream.__exit__(*exc)
        return False

    def fetch(self, array) -> np.ndarray:
        """The array on the host, once the stream has computed it (whatever
        stream a CuPy version copies on, the data is complete by then)."""
        self.stream.synchronize()
        return self.pool.xp.asnumpy(array)


class Sequences:
    """Each branch's sequence, rebuilt from the trace's branch actions alone
    (docs/semantics.md#branch-programs): a root starts with the prompt, a
    child with its parent's sequence at `share`; a `write` appends the
    branch's next token (its k-th write writes `<name>k`, the action's
    `token`), and a `rewind` drops the last `rejected` tokens. A rewound
    draft's token stays in its slot on the pool, but no sequence has it any
    more, so no reference is ever built from that garbage.

    Each kernel is remembered with the sequence its branch had right after
    its write (tokens are never reused, so the token names the kernel): what
    it must read even if the branch rewinds or is cancelled before it
    completes."""

    def __init__(self, scenario: Scenario):
        prompt = tuple(f"p{i}" for i in range(scenario.prompt))
        names = [scenario.branch_name(i) for i in range(len(scenario.branches))]
        # children: from their birth; a cache scenario's requests: from their prefill
        self.of: dict[str, tuple[str, ...]] = {names[i]: () if scenario.cache else prompt for i in scenario.roots}
        self.prompts = {names[i]: scenario.prompt_of(i) for i in scenario.roots}
        self.writes = dict.fromkeys(names, 0)
        #: (branch, token) -> its kernel's expected sequence (a token names a
        #: write's kernel; a prefill is named by the prompt's last token)
        self.kernel: dict[tuple[str, str], tuple[str, ...]] = {}
        self.block_size = scenario.block_size
        #: a request's table as its admission builds it: its hits, then the blocks it allocates
        self.table: dict[str, tuple[int, ...]] = {}
        #: (branch, block) -> the prompt tokens of each recv launched into it, in launch order
        self.recvs: dict[tuple[str, int], list[tuple[str, ...]]] = {}
        #: (branch, table entry) -> each send's first position and the tokens it must read, in launch order
        self.sends: dict[tuple[str, int], list[tuple[int, tuple[str, ...]]]] = {}
        #: scheduler code: each request's whole sequence (its prompt, then its own tokens), how far its
        #: scheduled kernels reach, and (request, block) -> that reach at each send's launch, in launch order
        self.whole = {names[i]: scenario.prompt_of(i) + scenario.own_tokens(i) for i in range(len(names))}
        self.reach = dict.fromkeys(names, 0)
        self.launched: dict[tuple[str, int], list[int]] = {}

    def apply(self, action: Action) -> None:
        """Follow one branch action (device completions change no sequence).
        Allocator code's host calls (the engine harness) count too: an
        `append` writes, a `fork` bears the child, a `rollback` rewinds."""
        who, binds = action.actor, dict(action.binds)
        if "raised" in binds:
            return
        if action.step == "write" or (action.step == "append" and "token" in binds):
            self.writes[who] += 1
            token = str(binds.get("token") or f"{who}{self.writes[who]}")
            self.of[who] += (token,)
            self.kernel[who, token] = self.of[who]
        elif action.step in ("prefill", "admit") and "from" in binds:     # a protocol's prefill, allocator code's admit
            self.of[who] = self.prompts[who]
            self.kernel[who, self.of[who][-1]] = self.of[who]
        elif action.step in ("share", "fork"):
            self.of[str(binds["child"])] = self.of[who]
        elif action.step == "rewind" or (action.step == "rollback" and "rejected" in binds):
            rejected = binds["rejected"]
            assert isinstance(rejected, int)
            self.of[who] = self.of[who][:len(self.of[who]) - rejected]
        elif action.step in ("touch-hits", "alloc-prompt", "recv", "send"):
            self._transfer_step(who, action.step, binds)

    def schedule(self, binds: dict, after: Optional[dict]) -> None:
        """A scheduler's step (docs/semantics.md#scheduler-harness), from
        its plan as the action gives it: each kernel computes its request's
        positions first..last (its sequence then: the request's own, to
        last); a recv into a block carries the request's prompt tokens of
        the entry its table (`after`: the state the step leads to) has the
        block at; a send's tokens are read at its completion, through the
        positions the request's kernels reached at the launch."""
        for kernel in binds.get("kernels", ()):
            who, _, span = str(kernel).rpartition(" ")
            last = int(span.partition("..")[2])
            self.kernel[who, self.whole[who][last]] = self.whole[who][:last + 1]
            self.reach[who] = max(self.reach[who], last + 1)
        B = self.block_size
        for launched in binds.get("transfers", ()):
            found = _LAUNCH.match(str(launched))
            assert found is not None, f"a scheduler step's transfer {launched!r} is not in the harness's form"
            kind, who, block = found["kind"], found["request"], int(found["block"])
            if kind == "recv":
                assert after is not None, "a scheduler trace's recv needs the state after its step"
                entry = list(after["branches"][who]["working"]).index(block)
                self.recvs.setdefault((who, block), []).append(self.prompts[who][entry * B:entry * B + B])
            elif kind == "send":
                self.launched.setdefault((who, block), []).append(self.reach[who])

    def sent(self, who: str, block: int, entry: int) -> tuple[int, tuple[str, ...]]:
        """What a send of entry `entry` of request `who`'s table must read:
        its first position and tokens, from the request's own steps."""
        if self.sends.get((who, entry)):
            return self.sends[who, entry].pop(0)
        reach, B = self.launched[who, block].pop(0), self.block_size
        return entry * B, self.whole[who][entry * B:min(entry * B + B, reach)]

    def _transfer_step(self, who: str, step: str, binds: dict) -> None:
        """What a request's recvs carry and its sends expect, from its own
        steps: a recv into a block of its table carries the prompt's tokens
        of that entry (the table is its hits, then the blocks it allocated);
        a send of entry i reads positions i * B .. while the sequence (now,
        at the launch) lasts."""
        B = self.block_size
        if step == "touch-hits":
            self.table[who] = tuple(binds["hits"]) + self.table.get(who, ())
        elif step == "alloc-prompt":
            self.table[who] = self.table.get(who, ()) + tuple(binds["blocks"])
        elif step == "recv":
            for block in binds.get("blocks", ()):
                entry = self.table[who].index(block)
                self.recvs.setdefault((who, block), []).append(self.prompts[who][entry * B:entry * B + B])
        else:
            seq = self.of[who]
            for entry, _ in enumerate(binds.get("blocks", ())):
                self.sends.setdefault((who, entry), []).append((entry * B, seq[entry * B:entry * B + B]))


def replay_on_pool(scenario: Scenario, actions: list[Action], pool: str = "numpy", head_dim: int = HEAD_DIM,
                   initial: Optional[dict] = None, states: Optional[list[Optional[dict]]] = None) -> PoolReplay:
    """Apply a trace's device completions (and check-output reads) to a real
    pool and compare each with the reference: a kernel's with its
    remembered sequence, a check-output's with the branch's sequence then,
    a send's with its producer's sequence at the send's launch.
    `initial`: the trace's initial state (JSON), where the prompt's tokens
    lie (default: blocks 0, 1, ... in order, as the protocol model puts them).
    `states`: the state after each action (JSON), which a scheduler
    trace's recvs need (the table a recv's block is an entry of)."""
    xp = array_module(pool)
    space = TokenSpace(scenario, head_dim)
    memory = Pool(xp, scenario, space, initial)
    sequences = Sequences(scenario)
    result = PoolReplay(pool, head_dim)
    for step, action in enumerate(actions, 1):
        binds: dict[str, Any] = dict(action.binds)
        if action.actor == ENGINE and action.step == "schedule":
            if "raised" not in binds and "table" not in binds:      # a step that raised or missed its table launched nothing
                sequences.schedule(binds, states[step - 1] if states is not None else None)
        elif action.actor != DEVICE:
            sequences.apply(action)
        if action.actor == DEVICE and action.op == "copy-complete":
            memory.copy(binds["src"], binds["dst"], binds["n"])
        elif action.actor == DEVICE and action.op in ("transfer-complete", "transfer-fail"):
            sent = _transfer(memory, sequences, binds, action.op == "transfer-complete")
            if sent is not None:
                result.kernels.append(_sent(space, step, binds["branch"], *sent))
        elif action.actor == DEVICE and action.op == "kernel-complete":
            branch, pos = binds["branch"], binds["pos"]
            expected = sequences.kernel[branch, binds["token"]]
            before = tuple((p, expected[p]) for p in range(binds.get("from", pos), pos))    # a prefill's earlier positions
            paged = memory.kernel(binds["token"], pos, tuple(binds["snapshot"]), before)
            reference = reference_output(space, expected, pos)
            diff = float(np.max(np.abs(paged - reference)))
            result.kernels.append(KernelReplay(step, "kernel", branch, pos, diff, space.decode(paged),
                                               space.decode(reference), diff > TOLERANCE))
        elif action.step == "check-output" or (action.op == "finish" and action.step == "free" and "pos" in binds):
            result.kernels.append(_check_output(memory, space, step, action.actor, sequences.of[action.actor], binds))
    return result


def _transfer(memory: Pool, sequences: Sequences, binds: dict, ok: bool) -> Optional[tuple[int, tuple[str, ...], np.ndarray]]:
    """A transfer leaves the queue: on success it reads and writes the pool,
    a failure (`ok` False) touches nothing. A send that succeeds returns its
    first position, the tokens it must read and what it read."""
    kind, branch, block = binds["kind"], binds["branch"], binds["block"]
    if kind == "recv":
        tokens = sequences.recvs[branch, block].pop(0)
        if ok:
            memory.recv(block, tokens)
    elif kind == "send":
        first, tokens = sequences.sent(branch, block, binds["index"])
        if ok:
            return first, tokens, memory.send(block, len(tokens))
    elif ok and kind == "store":
        memory.store(block, binds["host"])
    elif ok:
        memory.load(binds["host"], block)
    return None


def _sent(space: TokenSpace, step: int, branch: str, first: int, expected: tuple[str, ...], paged: np.ndarray) -> KernelReplay:
    """A send's read (the remote reader) against the producer's tokens at
    the send's launch: positions first .. first + len(expected) - 1."""
    reference = np.stack([space.key_value(t) for t in expected])
    diffs = np.abs(paged - reference).reshape(len(expected), -1).max(axis=1)
    wrong = np.flatnonzero(diffs > TOLERANCE)
    at = int(wrong[0]) if wrong.size else None
    return KernelReplay(step, "send", branch, first, float(diffs.max()),
                        space.nearest(paged[at, VALUE]) if at is not None else None,
                        expected[at] if at is not None else None, at is not None, first + at if at is not None else None)


def _check_output(memory: Pool, space: TokenSpace, step: int, branch: str, expected: tuple[str, ...], binds: dict) -> KernelReplay:
    """Positions 0 .. pos-1 read through the working table, against the
    branch's sequence (pos tokens long)."""
    pos, table = binds["pos"], tuple(binds["table"])
    paged = memory.read(table, pos)
    reference = np.stack([space.key_value(t) for t in expected]) if expected else paged
    diffs = np.abs(paged - reference).reshape(pos, -1).max(axis=1) if pos else np.zeros(0)
    wrong = np.flatnonzero(diffs > TOLERANCE)
    first = int(wrong[0]) if wrong.size else None
    return KernelReplay(step, "check-output", branch, pos, float(diffs.max()) if pos else 0.0,
                        space.nearest(paged[first, VALUE]) if first is not None else None,
                        expected[first] if first is not None else None, first is not None, first)
