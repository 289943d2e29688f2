"""The engine harness: allocator *code* as a transition system
(docs/semantics.md#engine-harness).

A protocol file is a model of an allocator; the harness checks the
allocator itself. The user's block manager, wrapped in a small adapter,
plays the host side; cowcheck plays the scheduler and the device. Each host
call (`append`, `fork`, `rollback`, `free`) is one atomic action, as in a
single-threaded engine scheduler; the copies an `append` returns and the
branch's kernel are launched in that same action and complete later, under
the scenario's device model, into a pool of token contents the harness
keeps itself. So every harm invariant is judged on what the engine would
have computed, whatever the allocator believes.

`HarnessModel` implements the same TransitionSystem as the protocol model
(cowcheck.model.system), with the same State: blocks (refcounts from the
adapter's `refcount`, slots from the harness's pool), the free list (the
adapter's `free_blocks`), branches (one table each, `table(branch)`, both
working and published) and the device queue. The state's `code` field is a
`Snapshot` of the adapter: states are equal when their snapshots are.

The adapter (what `module:factory` returns, called with the pool size and
B) answers `start(branches, L)`, `append(branch, token) -> [(src, dst)]`,
`fork(parent, child)`, `rollback(branch, n)`, `free(branch)`,
`table(branch)`, and optionally `refcount(block)`, `free_blocks()` and
`snapshot()`. It raises `OutOfBlocks` when it has no block to give: the
call is then not enabled (the branch waits, as an engine's scheduler
would).

In a cache scenario (requests that share full blocks through a prefix
cache) the adapter answers `admit(branch, tokens)` in place of `start`:
how many prompt tokens the engine already holds, or that and the copies it
must run first; the harness launches them and one prefill kernel for the
rest of the prompt. `append(branch, token, draft)` says whether the token
is a speculative draft, `rollback(branch, n)` follows every verify, and the
optional observer `cached()` (`{block: its B tokens}`) lets the harness
judge the cache invariants (docs/semantics.md#engine-harness).

Engines that wait and allocators that hold (docs/semantics.md#engines-that-wait-and-allocators-that-hold),
all optional: `waits_for_copies = True` declares that the engine orders
each kernel after the copies its call returned (an event wait), so such a
kernel completes only after them; `copy_done(src, dst)` and
`kernel_done(branch)` are host calls the harness makes at any later point
once the device has completed that op (the engine learning of it at a
fence), so an allocator can keep a block until then; `holds(block)` says
how many of the references `refcount(block)` counts are the allocator's
own, which every invariant counts as holds, not as a table's reference.

One idea, though long: the host calls of the adapter as the actions of a
transition system, and what each observes and launches; split, the call,
its checks of what the adapter returned and the state it leads to would
each need the others' state."""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import pickle
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Optional, cast

from cowcheck.model import queue
from cowcheck.model.action import Action, Transition, completion
from cowcheck.model.block import Allocated, AllocatorRaised, Draft, Fact, Freed, Keyed, OutputChecked, TableMiss
from cowcheck.model.errors import KindMismatch, SpecError, error_text
from cowcheck.model.memo import DETERMINISTIC, OUT_OF_BLOCKS, After, Memo, Outcome
from cowcheck.model.branches import Operation
from cowcheck.model.code import Code, code_from_json
from cowcheck.model.scenario import HARNESS_NO_TRANSFERS, Scenario
from cowcheck.model.state import (UNBORN, WAITING, Block, Branch, Copy, Kernel, State, Status, born, cancel_unborn, is_final,
                                  is_quiescent, is_steady, prompt, prompt_slots, read)
from cowcheck.model.structure import Op
from cowcheck.model.system import TransitionSystem

#: the prefix of the module name a file named by path is imported under
PATH_MODULE = "cowcheck_allocator_"
_STANDARD = tuple(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib"))
_SITE = tuple(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))


def _standard(path: str) -> bool:
    """A file of the standard library, or no file (`<frozen ...>`, `<string>`)."""
    return path.startswith("<") or (path.startswith(_STANDARD) and not path.startswith(_SITE))


REQUIRED = ("start", "append", "fork", "rollback", "free", "table")
#: what a cache scenario's adapter answers: admit in place of start, no fork
CACHE_REQUIRED = ("admit", "append", "rollback", "free", "table")
#: the invariants an optional observer is needed for, and why they are not checked without it
NEEDS = {"refcount": ("refcount-write", "refcount-exact"), "free_blocks": ("no-leak", "no-use-after-free")}
#: the same, in a cache scenario only
CACHE_NEEDS = {"cached": ("no-stale-key", "cache-immutable", "verified-only-cached")}
#: the host calls that tell the allocator a device op completed, each
#: made only when the adapter has the method
NOTIFICATIONS = ("copy_done", "kernel_done")
#: the adapter attribute that declares an engine which orders each kernel
#: after the copies its call returned
WAITS = "waits_for_copies"
#: the optional adapter method that names the engine code it runs and its
#: release ("vLLM 0.33.0"), recorded in counterexamples
VERSION = "version"
#: the optional adapter method that says which code exactly, beside its
#: release: {"source": the folder its sources came from (None: the
#: installed package), "digest": "sha256:..." of the files it loaded}
CODE = "code"
#: a request's `after` request is done once it is one of these
_DONE = (Status.FINISHED, Status.CANCELLED)


class OutOfBlocks(Exception):
    """Raised by an adapter whose allocator has no free block: the call is
    not enabled now (the branch waits)."""


class CallDeadline(BaseException):
    """Raised inside an adapter call that ran past its deadline, by the
    checker's guard (cowcheck.adapters.deadline, through `HarnessModel.guard`).
    A BaseException, as KeyboardInterrupt is, so that the allocator's own
    `except Exception` does not take it for an error of its code."""

    def __init__(self, adapter: str, call: str, seconds: float):
        self.adapter, self.call, self.seconds = adapter, call, seconds
        super().__init__(str(self))

    def __str__(self) -> str:
        return past_deadline(f"{self.adapter} {self.call}", self.seconds)


def past_deadline(call: str, seconds: float) -> str:
    """A call (its adapter and the call as written) that did not return
    within its deadline, in words: the exception's, and the search's it
    stopped (cowcheck.engines.stop)."""
    return f"call deadline: {call} did not return within {seconds:g} s"


#: which host call launched an in-flight op: (branch index, the position
#: of that call's kernel); a kernel and the copies its call returned share it
Tag = tuple[int, int]
#: a completion the allocator has not been told of yet: (branch index of the
#: call that launched the op, the method, its arguments)
Note = tuple[int, str, tuple[Any, ...]]


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The allocator inside a state: `blob` restores it (a pickled deep
    copy), `key` is what makes two states one (the blob itself, exact, or
    the adapter's coarser `snapshot()`, for which the adapter answers).

    With an engine that waits or an allocator told of completions, the
    harness's own books ride along: `tags`, one per in-flight op of the
    state's queue, in its order (which call launched it), and `pending`,
    the completions the allocator has not been told of yet. Both are part
    of the state's identity; without those adapter parts they stay empty."""
    key: Hashable
    blob: bytes
    tags: tuple[Tag, ...] = ()
    pending: tuple[Note, ...] = ()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Snapshot) and self.key == other.key and self.tags == other.tags
                and self.pending == other.pending)

    def __hash__(self) -> int:
        return hash((self.key, self.tags, self.pending))

    def __repr__(self) -> str:
        return f"Snapshot({len(self.blob)} bytes)"


def allocator_label(ref: str) -> str:
    """A short name for allocator code in a scenario's name (an override's,
    a sweep cell's): the module's last part or the file's stem, and the
    factory, so that two allocators that both export `factory` get
    different names, and so different counterexample files."""
    where, _, name = ref.rpartition(":")
    stem = Path(where).stem if where.endswith(".py") else where.rpartition(".")[2]
    return f"{stem}.{name}" if stem else name


def allocator_file(ref: str, base: Path) -> Optional[Path]:
    """The file a `path/file.py:factory` reference names, resolved from
    `base`; None for a `module:factory` one (it is imported by name)."""
    where = ref.rpartition(":")[0]
    return (Path(base) / where).resolve() if where.endswith(".py") or "/" in where else None


def load_factory(ref: str, base: Path, source: str, key: str = "allocator") -> Callable[..., Any]:
    """`module:factory` (imported) or `path/file.py:factory` (relative to
    `base`, the scenario's folder); `key`, the scenario key that named it
    (`allocator`, or `scheduler` for the scheduler harness), in messages."""
    where, _, name = ref.rpartition(":")
    if not where or not name:
        raise SpecError(source, key, f"must be \"module:factory\" or \"path/to/file.py:factory\", got {ref!r}")
    path = allocator_file(ref, base)
    if path is not None:
        if not path.is_file():
            raise SpecError(source, key, f"{ref!r}: file {str(path)!r} not found (a path is relative to the scenario's folder; "
                              f"given with --{key}, to the working folder)")
        # registered under a stable name, so the adapter's classes pickle
        module_name = PATH_MODULE + "".join(c if c.isalnum() else "_" for c in str(path))
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as err:
                del sys.modules[module_name]
                raise SpecError(source, key, f"{ref!r}: importing {path.name} failed ({type(err).__name__}: {err})") from None
    else:
        try:
            module = importlib.import_module(where)
        except Exception as err:
            raise SpecError(source, key, f"{ref!r}: module {where!r} cannot be imported ({type(err).__name__}: {err})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise SpecError(source, key, f"{ref!r}: {where} has no callable {name!r}")
    return cast(Callable[[int, int], Any], factory)


class HarnessModel(TransitionSystem):
    """A scenario run with allocator code through the engine harness."""

    #: its states hold the allocator's snapshot, whose block ids and branch
    #: names the checker cannot rename
    irreducible = "allocator code cannot be reduced"

    def __init__(self, scenario: Scenario, factory: Optional[Callable[[int, int], Any]] = None):
        if scenario.transfers:
            raise SpecError(scenario.source, "allocator", HARNESS_NO_TRANSFERS)
        self.scenario = scenario
        self.B = scenario.block_size
        self.P = scenario.pool
        self.device = scenario.device
        self.names, self.operations, self.descendants = scenario.names, scenario.operations, scenario.lineage
        self.adapter: str = str(scenario.allocator or getattr(factory, "__qualname__", "allocator"))
        if factory is None:
            assert scenario.allocator is not None, "a harness needs allocator code"
            factory = load_factory(scenario.allocator, Path(scenario.allocator_base or Path(scenario.source).parent), scenario.source)
        self.factory = factory
        #: a cache scenario: requests admitted with their own prompts
        self.cache = scenario.cache
        self.prompts = tuple(scenario.prompt_of(i) for i in range(len(scenario.branches)))
        self.after_of = tuple(spec.after for spec in scenario.branches)
        self.drafts = tuple(spec.drafts for spec in scenario.branches)
        adapter = self._make()
        needs = {**NEEDS, **CACHE_NEEDS} if self.cache else NEEDS
        self.observes = {name: callable(getattr(adapter, name, None)) for name in (*NEEDS, *CACHE_NEEDS, "holds")}
        if self.observes["holds"] and not self.observes["refcount"]:
            raise self._bad("holds", "holds(block) says how many of the references refcount(block) counts are the "
                            "allocator's own: the adapter needs refcount(block) too")
        self.coarse = callable(getattr(adapter, "snapshot", None))
        #: the engine orders each kernel after the copies its call returned
        self.waits = getattr(adapter, WAITS, False)
        if type(self.waits) is not bool:
            raise self._bad(WAITS, f"must be True or False (whether the engine orders each kernel after the copies "
                            f"its call returned), got {self.waits!r}")
        #: the engine code the adapter runs: its release (its version()) and
        #: which tree (its code()), or None
        self.code = self._code(adapter)
        self.version = self.code.release if self.code is not None else None
        #: the completions the allocator is told of (its copy_done, kernel_done)
        self.told = {name: callable(getattr(adapter, name, None)) for name in NOTIFICATIONS}
        self.tagged = self.waits or any(self.told.values())
        #: host calls already made, replayed (cowcheck.model.memo); None: the adapter is not deterministic
        deterministic = getattr(adapter, DETERMINISTIC, True)
        if type(deterministic) is not bool:
            raise self._bad(DETERMINISTIC, f"must be True or False (whether its calls depend on its pickle alone), got {deterministic!r}")
        self.memo: Optional[Memo] = Memo() if deterministic else None
        #: invariant id -> why it is not checked (an observer is missing)
        self.unsupported = {inv: f"not checked: the adapter has no {name}()"
                            for name, invs in needs.items() if not self.observes[name] for inv in invs}

    # -- the adapter ----------------------------------------------------------
    def _bad(self, method: str, message: str) -> SpecError:
        return SpecError(self.adapter, method, message)

    def _version(self, adapter: Any) -> Optional[str]:
        """What the adapter's version() says, a non-empty string, or None
        when it has none."""
        if not callable(getattr(adapter, VERSION, None)):
            return None
        with self.guard(f"{VERSION}()"):
            version = adapter.version()
        if not isinstance(version, str) or not version.strip():
            raise self._bad(VERSION, f"must return the engine code and its release as a non-empty string "
                            f"(such as 'vLLM 0.33.0'), got {version!r}")
        return version

    def _code(self, adapter: Any) -> Optional[Code]:
        """The release (version()) and, where the adapter has code(), the
        folder and digest of the sources it loaded."""
        version = self._version(adapter)
        if not callable(getattr(adapter, CODE, None)):
            return None if version is None else Code(version)
        if version is None:
            raise self._bad(CODE, "says which tree of a release the adapter runs: the adapter needs version() too")
        with self.guard(f"{CODE}()"):
            raw = adapter.code()
        try:
            code = code_from_json(version, raw, self.adapter)
        except SpecError:
            raise self._bad(CODE, f'must return {{"source": a folder or None, "digest": "sha256:..."}}, got {raw!r}') from None
        return code

    def _make(self) -> Any:
        try:
            with self.guard(f"factory({self.P}, {self.B})"):
                adapter = self.factory(self.P, self.B)
        except TypeError as err:
            raise self._bad("factory", f"must accept (pool, block_size) and return the adapter ({err})") from None
        required = CACHE_REQUIRED if self.cache else REQUIRED
        missing = [m for m in required if not callable(getattr(adapter, m, None))]
        if missing:
            if self.cache:
                message = (f"the adapter has no {missing[0]}(); in a cache scenario (cache = \"prefix\") an adapter "
                           f"answers {', '.join(required)}: admit(branch, tokens) in place of start, returning the prompt "
                           "tokens the engine already holds (and optionally refcount, free_blocks, cached, snapshot)")
            else:
                message = (f"the adapter has no {missing[0]}(); an adapter answers {', '.join(REQUIRED)} "
                           "(and optionally refcount, free_blocks, snapshot)")
            other = REQUIRED if self.cache else CACHE_REQUIRED
            if all(callable(getattr(adapter, m, None)) for m in other):    # an adapter for the other kind of scenario
                why = ("the adapter answers start and fork, not admit: a fork adapter" if self.cache
                       else "the adapter answers admit, not start and fork: a prefix-cache adapter")
                raise KindMismatch(self.adapter, missing[0], message, "cache" if self.cache else "fork", why)
            raise self._bad(missing[0], message)
        return adapter

    def _freeze(self, adapter: Any, tags: tuple[Tag, ...] = (), pending: tuple[Note, ...] = ()) -> Snapshot:
        if type(adapter) is After:      # after a memoized call: its snapshot, taken once
            outcome = adapter.outcome
            if outcome.frozen is None:
                snap = self._freeze(outcome.live, tags, pending)
                outcome.frozen, outcome.live = (snap.key, snap.blob), None
            return Snapshot(outcome.frozen[0], outcome.frozen[1], tags, pending)
        try:
            blob = pickle.dumps(adapter, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            raise self._bad("snapshot", f"the adapter cannot be pickled, so states cannot be copied ({type(err).__name__}: {err})") from None
        return Snapshot(self._key(adapter, blob), blob, tags, pending)

    def _key(self, adapter: Any, blob: bytes) -> Hashable:
        """What makes two states one: the pickle itself, or the adapter's
        coarser `snapshot()`, for which the adapter answers."""
        if not self.coarse:
            return blob
        key = adapter.snapshot()
        try:
            hash(key)
        except TypeError:
            raise self._bad("snapshot", f"must return a hashable value, got {type(key).__name__}") from None
        return cast(Hashable, key)

    @staticmethod
    def _thaw(state: State) -> Any:
        return pickle.loads(state.code.blob)

    def _block_id(self, method: str, value: Any, what: str) -> int:
        if type(value) is not int or not 0 <= value < self.P:
            raise self._bad(method, f"{what} must be a block id, an integer from 0 to {self.P - 1} (the pool), got {value!r}")
        return value

    def _table(self, adapter: Any, name: str) -> tuple[int, ...]:
        table = adapter.table(name)
        if not isinstance(table, (list, tuple)):
            raise self._bad("table", f"must return a list of block ids, got {type(table).__name__}")
        return tuple(self._block_id("table", b, "every entry") for b in table)

    def _observe(self, adapter: Any, before: State, branches: list[Branch], d: Draft, tag: Tag = (-1, -1),
                 told: Optional[int] = None) -> State:
        """The state after a host call: every live branch's table, the
        adapter's counters and free list, the harness's own slots and queue;
        blocks the call freed become facts. `tag`: the call's, for the ops it
        launched (appended to the queue); `told`: the pending completion the
        call told the allocator of."""
        for i, br in enumerate(branches):
            if br.status is Status.RUNNING:
                table = self._table(adapter, self.names[i])
                branches[i] = br._replace(working=table, published=table)
        blocks, free = self._read_pool(adapter, before, d)
        tags: tuple[Tag, ...] = ()
        pending: tuple[Note, ...] = ()
        if self.tagged and before.code is not None:
            tags = before.code.tags + (tag,) * (len(d.queue) - len(before.queue))   # a host call only adds to the queue
            pending = before.code.pending
            if told is not None:
                pending = pending[:told] + pending[told + 1:]
        return State(tuple(blocks), free, tuple(branches), tuple(d.queue), self._freeze(adapter, tags, pending))

    def _read_pool(self, adapter: Any, before: State, d: Draft) -> tuple[list[Block], tuple[int, ...]]:
        """The pool as the adapter's observers show it after a call: each
        block's refcount, holds and key (the harness's own slots kept), and
        the free list; each block the call freed becomes a fact. An observer
        the adapter lacks leaves that part as it was."""
        blocks = list(before.blocks)
        if self.observes["refcount"]:
            for b in range(self.P):
                count = adapter.refcount(b)
                if type(count) is not int:
                    raise self._bad("refcount", f"must return an integer, got {count!r} for block {b}")
                held = adapter.holds(b) if self.observes["holds"] else 0
                if type(held) is not int or not 0 <= held <= max(count, 0):
                    raise self._bad("holds", f"must return how many of block {b}'s {count} references (refcount) are the "
                                    f"allocator's own, an integer from 0 to {max(count, 0)}, got {held!r}")
                if (count - held, held) != blocks[b][:2]:
                    blocks[b] = blocks[b]._replace(refcount=count - held, holds=held)
        free = before.free
        if self.observes["free_blocks"]:
            raw = adapter.free_blocks()
            if not isinstance(raw, (list, tuple)):
                raise self._bad("free_blocks", f"must return a list of block ids, got {type(raw).__name__}")
            free = tuple(self._block_id("free_blocks", b, "every entry") for b in raw)
            was = set(before.free)
            d.facts.extend(Freed(b) for b in free if b not in was)
        if self.cache and self.observes["cached"]:
            keys = self._cached(adapter)
            for b in range(self.P):
                if blocks[b].key != keys.get(b):
                    blocks[b] = blocks[b]._replace(key=keys.get(b))
        return blocks, free

    def _cached(self, adapter: Any) -> dict[int, tuple[str, ...]]:
        """The blocks the engine could serve as hits, with the tokens of
        their own B slots that their keys name (a State's Block.key in a
        harness trace: the harness sees no chain)."""
        raw = adapter.cached()
        if not isinstance(raw, dict):
            raise self._bad("cached", f"must return a dict {{block: tokens}}, got {type(raw).__name__}")
        out = {}
        for block, tokens in raw.items():
            b = self._block_id("cached", block, "every key")
            if not isinstance(tokens, (list, tuple)) or len(tokens) != self.B or not all(isinstance(t, str) for t in tokens):
                raise self._bad("cached", f"must map each block to the {self.B} token names of its slots that its key names "
                                f"(a tuple of {self.B} strings), got {tokens!r} for block {b}")
            out[b] = tuple(tokens)
        return out

    def _own_tokens(self, j: int, br: Branch) -> tuple[str, ...]:
        """The tokens branch j's table stands for, which a key on one of its
        blocks may name (no-stale-key): the sequence it has written. The
        scheduler harness knows more (SchedulerModel)."""
        return tuple(br.seq)

    def _cache_facts(self, before: State, after: State, hits: tuple[int, int], d: Draft) -> None:
        """The facts the cache invariants judge after a host call, from
        what `cached()` reports: each block that joined a table other than
        as one of admit's reported hits (`hits`: the branch and how many of
        its first entries) is an allocation (no-stale-key: its key after
        the call, if any, must be its new owner's own B tokens at an entry
        that maps it); each
        block whose key is new is keyed by a branch that maps it
        (verified-only-cached, against that branch's verified count after
        the call)."""
        if not self.observes["cached"]:
            return
        B = self.B
        for j, br in enumerate(after.branches):
            if br.status is not Status.RUNNING:
                continue
            was = before.branches[j]
            old = set(was.working) if was.status is Status.RUNNING else set()
            seq = self._own_tokens(j, br)
            own: dict[int, list[tuple[str, ...]]] = {}     # block -> its B tokens at each entry the sequence covers whole
            for k, b in enumerate(br.working[:len(seq) // B]):
                own.setdefault(b, []).append(tuple(seq[k * B:(k + 1) * B]))
            for k, b in enumerate(br.working):
                if (j == hits[0] and k < hits[1]) or b in old:
                    continue
                d.facts.append(Allocated(b, tuple(own.get(b, ()))))
        for b, blk in enumerate(after.blocks):
            if blk.key is None or blk.key == before.blocks[b].key:
                continue
            keyed: Optional[Keyed] = None
            for j, br in enumerate(after.branches):
                if br.status is Status.RUNNING and b in br.working:
                    length = (br.working.index(b) + 1) * B
                    if keyed is None or length > br.verified:
                        keyed = Keyed(j, b, length, br.verified)
                    if length > br.verified:
                        break
            if keyed is not None:
                d.facts.append(keyed)

    # -- the TransitionSystem interface ---------------------------------------
    def init_state(self) -> State:
        try:
            return self._init_state()
        except CallDeadline as late:    # nothing to explore without a start
            raise self._bad(late.call.partition("(")[0], str(late)) from None

    def _init_state(self) -> State:
        if self.cache:      # nothing has happened: every request waits for its admission
            adapter = self._make()
            empty = State(tuple(Block(0, 0, (None,) * self.B) for _ in range(self.P)), (), (), ())
            with self.guard("refcount(...), free_blocks(), cached() before any call"):
                return self._observe(adapter, empty, [WAITING] * len(self.names), Draft(empty, "lifo"))
        adapter = self._make()
        roots = [self.names[i] for i in self.scenario.roots]
        try:
            with self.guard(f"start({roots!r}, {self.scenario.prompt})"):
                adapter.start(roots, self.scenario.prompt)
        except SpecError:
            raise
        except Exception as err:     # nothing to explore without a start
            raise self._bad("start", f"start({roots}, {self.scenario.prompt}) raised {error_text(err)}") from None
        s = self.scenario
        branches = [born(s.prompt, prompt(s), ()) if spec.parent is None else UNBORN for spec in s.branches]
        empty = State(tuple(Block(0, 0, (None,) * self.B) for _ in range(self.P)), (), (), ())
        with self.guard("table(...), refcount(...), free_blocks() after start"):
            state = self._observe(adapter, empty, branches, Draft(empty, "lifo"))
        table = state.branches[s.roots[0]].working
        if len(table) < s.prompt_blocks:
            raise self._bad("start", f"start({roots}, {s.prompt}) must give the roots the prompt's {s.prompt_blocks} blocks, table(a) is {list(table)}")
        blocks = list(state.blocks)
        for k, b in enumerate(table[:s.prompt_blocks]):         # the prompt's tokens, in the blocks the allocator chose
            blocks[b] = blocks[b]._replace(slots=prompt_slots(s, k))
        return state._replace(blocks=tuple(blocks))

    # final, steady and quiescent each also need the allocator told of every
    # completion: until then its books are not settled (a deferred release
    # has not happened)
    def is_final(self, state: State) -> bool:
        return is_final(state) and not state.code.pending

    def is_steady(self, state: State) -> bool:
        return is_steady(state, self.operations) and not state.code.pending

    def is_quiescent(self, state: State) -> bool:
        return is_quiescent(state) and not state.code.pending

    @staticmethod
    def is_copy_launch(action: Action) -> int:
        """The copies a host call launched (an append may launch several)."""
        sources = dict(action.binds).get("copy_src")
        return len(sources) if action.op in (Op.APPEND, Op.ADMIT) and isinstance(sources, tuple) else 0

    @staticmethod
    def hits(action: Action) -> int:
        """The prompt blocks an admission served from the cache: the
        computed count it returned, // B (the first entries of its table)."""
        if action.op is not Op.ADMIT:
            return 0
        hits = dict(action.binds).get("hits")
        return len(hits) if isinstance(hits, tuple) else 0

    def where(self, br: Branch) -> str:
        if br.status is Status.UNBORN:
            return "unborn (its parent has not forked it)"
        if br.status is Status.WAITING:
            return "waiting for admission"
        return "between host calls"

    def successors(self, state: State) -> list[Transition]:
        out: list[Transition] = []
        in_flight = {op.branch for op in state.queue if type(op) is Kernel}
        for i, br in enumerate(state.branches):
            if br.status is Status.WAITING:
                self._waiting(state, i, out)
                continue
            if br.status is not Status.RUNNING:
                continue
            ops = self.operations[i]
            if i not in in_flight:      # a token depends on the last: the next call waits for the kernel
                if br.done < len(ops):
                    self._operation(state, i, br, ops[br.done], out)
                else:
                    self._call(state, i, Op.FINISH, "free", out)
            # pruning: between operations, even with a kernel in flight (but
            # not while a request's prefill is: the admission's wait is not a
            # cancellation point, as in the protocol model)
            if self.scenario.branches[i].may_cancel and not (
                    self.cache and any(type(op) is Kernel and op.branch == i and op.pos < len(self.prompts[i]) for op in state.queue)):
                self._call(state, i, Op.CANCEL, "free", out)
        for k in range(len(state.code.pending)):
            self._notify(state, k, out)
        for index in queue.ready(state, self.device):
            op = state.queue[index]
            if self.waits and type(op) is Kernel and self._copies_ahead(state, index):
                continue        # the engine's event wait: its call's copies first
            d = Draft(state, "lifo")
            queue.complete(d, index, self.B)
            after = d.freeze()
            if self.tagged:
                after = after._replace(code=self._completed(state.code, index, op))
            out.append(Transition(completion(op, self.B, self.names), after, tuple(d.facts)))
        return out

    @staticmethod
    def _copies_ahead(state: State, index: int) -> bool:
        """Whether a copy the same call returned as the kernel at `index`
        is still in flight."""
        tags = state.code.tags
        return any(type(op) is Copy and tags[j] == tags[index] for j, op in enumerate(state.queue))

    def _completed(self, code: Snapshot, index: int, op: Any) -> Snapshot:
        """The harness's books after the op at `index` completed: its tag
        gone, and the completion pending for the allocator if it is told."""
        owner = code.tags[index]
        pending = code.pending
        if type(op) is Copy and self.told["copy_done"]:
            pending += ((owner[0], "copy_done", (op.src, op.dst)),)
        elif type(op) is Kernel and self.told["kernel_done"]:
            pending += ((op.branch, "kernel_done", (self.names[op.branch],)),)
        return Snapshot(code.key, code.blob, code.tags[:index] + code.tags[index + 1:], pending)

    def _notify(self, state: State, k: int, out: list[Transition]) -> None:
        """The engine learns, at a fence, of the k-th pending completion:
        one host call, `copy_done(src, dst)` or `kernel_done(branch)`."""
        i, method, args = state.code.pending[k]
        name = self.names[i]
        adapter = self._thaw(state)
        d = Draft(state, "lifo")
        call = f"{method}({', '.join(map(repr, args))})"
        binds: tuple[tuple[str, Any], ...] = (("src", args[0]), ("dst", args[1])) if method == "copy_done" else ()
        try:
            with self.guard(call):
                getattr(adapter, method)(*args)
                after = self._observe(adapter, state, list(state.branches), d, told=k)
                if self.cache:
                    self._cache_facts(state, after, (-1, 0), d)
        except SpecError:
            raise
        except Exception as err:        # OutOfBlocks too: a completion is no allocation
            raised, facts = self.raised(d, 0, i, call, err)
            out.append(Transition(Action(name, Op.FENCE, method, binds + (("call", call), ("raised", raised))), None, facts))
            return
        out.append(Transition(Action(name, Op.FENCE, method, binds), after, tuple(d.facts)))

    def _waiting(self, state: State, i: int, out: list[Transition]) -> None:
        """A waiting request of a cache scenario: its admission, once its
        `after` request is done, and (may_cancel) a cancel without any call:
        it owns nothing."""
        after = self.after_of[i]
        if after is None or state.branches[after].status in _DONE:
            self._call(state, i, Op.ADMIT, "admit", out)
        if self.scenario.branches[i].may_cancel:
            branches = list(state.branches)
            branches[i] = branches[i]._replace(status=Status.CANCELLED)
            out.append(Transition(Action(self.names[i], Op.CANCEL, "cancel", ()), state._replace(branches=tuple(branches)), ()))

    def _operation(self, state: State, i: int, br: Branch, operation: Operation, out: list[Transition]) -> None:
        if operation.op is Op.APPEND:
            self._call(state, i, Op.APPEND, "append", out)
        elif operation.op is Op.FORK:
            self._call(state, i, Op.FORK, "fork", out, child=operation.arg)
        else:
            for accepted in range(operation.arg + 1):       # verify: each accepted count its own successor
                self._call(state, i, Op.ROLLBACK, "rollback", out, rejected=operation.arg - accepted)

    def _call(self, state: State, i: int, op: Op, method: str, out: list[Transition],
              child: Optional[int] = None, rejected: int = 0) -> None:
        """One host call of branch i and what follows from it in the same
        action (copies and kernel launched, output checked, children born
        or cancelled)."""
        name, br = self.names[i], state.branches[i]
        d = Draft(state, "lifo")
        branches = list(state.branches)
        binds: list[tuple[str, Any]] = []
        token = f"{name}{br.writes + 1}"
        if op is Op.FINISH:     # check-output, then free
            d.facts.append(OutputChecked(i, read(state.blocks, br.working, br.pos, self.B), br.seq))
        args: tuple[Any, ...] = {Op.APPEND: (name, token), Op.FORK: (name, self.names[child] if child is not None else ""),
                                 Op.ROLLBACK: (name, rejected), Op.ADMIT: (name, list(self.prompts[i]))}.get(op, (name,))
        if op is Op.APPEND and self.cache:      # whether the token is a speculative draft
            args += (self.drafts[i][br.done],)
        call = f"{method}({', '.join(map(repr, args))})"
        known = len(d.facts)
        try:
            with self.guard(call):      # the observers right after it count in its time
                outcome = self._host_call(state, method, args, call)
                if outcome.returned is OUT_OF_BLOCKS:
                    return      # not enabled: the branch waits for a block
                out.append(self._after(state, After(outcome), i, op, method, outcome.returned, d, branches, binds, token,
                                       child, rejected))
        except SpecError:
            raise
        except Exception as err:  # the call itself, or an observer right after it
            raised, facts = self.raised(d, known, i, call, err)
            out.append(Transition(Action(name, op, method, (("call", call), ("raised", raised))), None, facts))

    def _host_call(self, state: State, method: str, args: tuple[Any, ...], call: str) -> Outcome:
        """The call on the state's adapter, or, made before on the same
        adapter pickle, its outcome from the memo. Only a call that returns
        or raises OutOfBlocks is kept; any other exception propagates."""
        key = (state.code.blob, call)
        known = self.memo.get(key) if self.memo is not None else None
        if known is not None:
            return known
        adapter = self._thaw(state)
        try:
            outcome = Outcome(getattr(adapter, method)(*args), adapter)
        except OutOfBlocks:
            outcome = Outcome(OUT_OF_BLOCKS, None)
        if self.memo is not None:
            self.memo.put(key, outcome)
        return outcome

    def _after(self, state: State, adapter: Any, i: int, op: Op, method: str, returned: Any, d: Draft,
               branches: list[Branch], binds: list[tuple[str, Any]], token: str, child: Optional[int],
               rejected: int) -> Transition:
        """What follows a host call in the same action."""
        name, br = self.names[i], state.branches[i]
        if op is Op.ADMIT:
            return self._admitted(state, adapter, i, returned, d, branches)
        if op is Op.APPEND:
            copies = self._copies(returned)
            binds += [("token", token), ("copy_src", tuple(s for s, _ in copies)), ("copy_dst", tuple(t for _, t in copies))]
            if self.cache and self.drafts[i][br.done]:
                binds.append(("draft", True))
            d.queue.extend(Copy(src, dst, self.B) for src, dst in copies)
            table = self._table(adapter, name)
            if len(table) <= br.pos // self.B:
                d.facts.append(TableMiss(i, br.pos))
                return Transition(Action(name, op, method, tuple(binds) + (("table", table),)), None, tuple(d.facts))
            seq = br.seq + (token,)
            d.queue.append(Kernel(i, br.pos, token, table, seq))
            # a draft's position stays unverified until its verify
            verified = br.pos + 1 if self.cache and not self.drafts[i][br.done] else br.verified
            branches[i] = br._replace(pos=br.pos + 1, writes=br.writes + 1, seq=seq, done=br.done + 1, verified=verified)
        elif op is Op.FORK:
            assert child is not None
            binds.append(("child", self.names[child]))
            branches[child] = born(br.pos, br.seq, ())          # its table is read from the allocator below
            branches[i] = br._replace(done=br.done + 1)
        elif op is Op.ROLLBACK:
            binds += [("accepted", self.operations[i][br.done].arg - rejected), ("rejected", rejected)]
            pos = br.pos - rejected          # the accepted drafts are verified now, the rejected ones gone
            branches[i] = br._replace(pos=pos, seq=br.seq[:pos], done=br.done + 1, verified=pos if self.cache else br.verified)
        else:                   # finish or cancel: the branch is done with, and so are its unborn children
            branches[i] = br._replace(status=Status.FINISHED if op is Op.FINISH else Status.CANCELLED, working=(), published=())
            if op is Op.CANCEL:
                cancel_unborn(branches, self.descendants[i])
        after = self._observe(adapter, state, branches, d, (i, br.pos))
        if self.cache:
            self._cache_facts(state, after, (i, 0), d)
        if op is Op.FINISH:     # what check-output read, for a replay on a real pool
            binds.append(("pos", br.pos))
        binds.append(("table", after.branches[i].working if op not in (Op.FINISH, Op.CANCEL) else br.working))
        return Transition(Action(name, op, method, tuple(binds)), after, tuple(d.facts))

    def _admitted(self, state: State, adapter: Any, i: int, returned: Any, d: Draft, branches: list[Branch]) -> Transition:
        """What follows an admission in the same action: the copies it
        returned, then one prefill kernel for positions computed .. L - 1
        through the request's table (none when it holds the whole prompt)."""
        name, prompt, B = self.names[i], self.prompts[i], self.B
        L = len(prompt)
        computed, copies = self._computed(returned, L)
        d.queue.extend(Copy(src, dst, B) for src, dst in copies)
        table = self._table(adapter, name)
        hits = table[:computed // B]
        binds: list[tuple[str, Any]] = [("computed", computed), ("hits", hits), ("copy_src", tuple(s for s, _ in copies)),
                                        ("copy_dst", tuple(t for _, t in copies)), ("from", computed), ("to", L - 1)]
        if computed < L:
            if len(table) <= (L - 1) // B:
                d.facts.append(TableMiss(i, max(computed, len(table) * B)))
                return Transition(Action(name, Op.ADMIT, "admit", tuple(binds) + (("table", table),)), None, tuple(d.facts))
            d.queue.append(Kernel(i, L - 1, prompt[-1], table, prompt, L - computed))
        branches[i] = WAITING._replace(status=Status.RUNNING, pos=L, seq=prompt, verified=L)
        after = self._observe(adapter, state, branches, d, (i, L - 1))
        self._cache_facts(state, after, (i, len(hits)), d)
        binds.append(("table", after.branches[i].working))
        return Transition(Action(name, Op.ADMIT, "admit", tuple(binds)), after, tuple(d.facts))

    def _computed(self, returned: Any, length: int) -> tuple[int, list[tuple[int, int]]]:
        """admit's answer: a count, or (count, copies)."""
        shape = ("must return how many prompt tokens the engine already holds (an integer), or that and the copies "
                 "to run first, (count, [(src, dst), ...])")
        copies: Any = None
        if isinstance(returned, (list, tuple)) and len(returned) == 2:
            returned, copies = returned
        if type(returned) is not int:
            raise self._bad("admit", f"{shape}, got {returned!r}")
        if not 0 <= returned <= length:
            raise self._bad("admit", f"returned {returned} tokens computed, outside 0 .. {length} (the prompt's length)")
        return returned, self._copies(copies, "admit")

    def raised(self, d: Draft, known: int, branch: int, call: str, err: Exception) -> tuple[str, tuple[Fact, ...]]:
        """The error text and the facts of a transition whose call raised:
        the first `known` facts of `d` (what was checked before the call,
        as a finish's output) and AllocatorRaised. What the call or the
        observers after it had recorded is dropped: there is no state
        after a raise to judge it on, and allocator-error is the verdict."""
        raised = error_text(err)
        return raised, (*d.facts[:known], AllocatorRaised(branch, call, raised, self.user_frames(err)))

    def user_frames(self, err: BaseException, keep: int = 6) -> tuple[str, ...]:
        """The allocator's own frames of the traceback (its innermost
        `keep`), without the harness's and the standard library's, each as
        `label:line in function: code`. A file the scenario names by path is
        labelled by its path relative to the scenario's folder (its file name
        when outside it), any other module by its name: the same on every
        machine, so committed counterexamples regenerate byte for byte."""
        base = Path(self.scenario.allocator_base or Path(self.scenario.source).parent).resolve()
        out = []
        for frame, line in traceback.walk_tb(err.__traceback__):
            module = str(frame.f_globals.get("__name__", ""))
            path = frame.f_code.co_filename
            if (module.startswith("cowcheck.") and not module.startswith("cowcheck.specs")) or _standard(path):
                continue
            if module.startswith(PATH_MODULE) or module in ("", "__main__"):
                try:
                    label = Path(path).resolve().relative_to(base).as_posix()
                except ValueError:
                    label = Path(path).name
            else:
                label = module
            code = linecache.getline(path, line).strip()
            out.append(f"{label}:{line} in {frame.f_code.co_name}" + (f": {code}" if code else ""))
        return tuple(out[-keep:])

    def _copies(self, returned: Any, method: str = "append") -> list[tuple[int, int]]:
        if returned is None:
            return []
        if not isinstance(returned, (list, tuple)):
            raise self._bad(method, f"must return the copies as a list of (src, dst) block-id pairs, got {type(returned).__name__}")
        out = []
        for pair in returned:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise self._bad(method, f"must return the copies as a list of (src, dst) block-id pairs, got {returned!r}")
            out.append((self._block_id(method, pair[0], "a copy's source"), self._block_id(method, pair[1], "a copy's destination")))
        return out
