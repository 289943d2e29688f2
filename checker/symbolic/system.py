"""The transition system of model.system, encoded for z3: `SymbolicSystem`.

The symbolic state is cowcheck.symbolic.state's `Sym`. The transition
relation is built by *symbolically executing* each action instance:
`SymbolicSystem.execute` mirrors model.system, model.steps, model.block and
model.queue on a `Sym` whose fields are z3 expressions (each protocol step
by its handler in cowcheck.symbolic.steps), and returns the action's guard,
its successor and its facts (model.block's types, `Guarded` by the condition
under which they happen), so the invariants can be judged on facts exactly
as cowcheck.engines.invariants does. `values` maps an explicit State onto the same
fields, which is how the tests compare the two engines state by state, and
how a z3 model is checked against the explicit model when a trace is decoded.

Places, the scheduler lock, the places where a cancel may start and the end
of each operation come from the protocol's Structure, as they do for the
explicit model. Supported: every step kind, decide with the protocol's rules
(cowcheck.symbolic.conditions), atomic paths, cancellation, finish, the
three device models and the three reuse orders (`any`: one alloc instance
per block id, the free list kept sorted as model.block keeps it), and
branch programs (docs/semantics.md#branch-programs): forks and
speculation, unborn children, the write counter and the sequence each
branch and kernel carries.

Branch programs add fields (`SymBranch.writes`, `.rejected`, `.seq`,
`SymOp.kseq`) that a plain scenario does not need: there the write counter
is pos - L and every sequence is a prefix of the branch's reference, so a
plain scenario's encoding has none of them and stays as small as before
(`self.programs` says which encoding a scenario gets).

Cache scenarios (docs/semantics.md#prefix-caching) use the program
fields with L = 0 and add keys, `verified`, `hits` and kernel spans
(cowcheck.symbolic.state says how they are encoded). A request is
`waiting` until its admission's first step, which needs its `after`
request finished or cancelled and, for an atomic [admit], the steps up to
its first wait each enabled in turn, each with its first choice
(`admissible` runs their handlers symbolically, as model.system._admissible
applies them); a waiting request may also be cancelled. Under `any` reuse
`alloc-prompt` is one instance per ordered choice of its blocks (for every
count of hits it can need), as `alloc` is one per block: the instances grow
as P! / (P - n)!, so `any` is for small pools.

The sizes T (table entries) and Q (queue slots) come from
cowcheck.symbolic.bounds: tight bounds derived from the scenario, since
every unused slot costs fields in every state of an unrolling.

One idea, though long: the symbolic transition system, its variables for
one state and its transition relation built from the step handlers; cache
scenarios add their fields to the same state."""

from __future__ import annotations

from itertools import permutations
from types import MappingProxyType
from typing import NamedTuple, Optional

import z3

from cowcheck.model.action import DEVICE, Transition, completion
from cowcheck.model.condition import Condition
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Copy, Kernel, State, Status
from cowcheck.model.errors import SpecError
from cowcheck.model.stepkinds import ALLOCATING, TRANSFER_STEPS, WAITS
from cowcheck.model.structure import Op, Place
from cowcheck.model.system import ProtocolModel

from cowcheck.symbolic import bounds, steps
from cowcheck.symbolic.conditions import formula
from cowcheck.symbolic.layout import Layout
from cowcheck.symbolic.state import COPY_KIND, EMPTY, KERNEL_KIND, STATUS_CODE, Sym, SymBranch, SymOp
from cowcheck.symbolic.steps import Executed
from cowcheck.symbolic.terms import Term, all_of, any_of, by_value, select


class Instance(NamedTuple):
    """One action instance of the transition relation."""
    branch: Optional[int]          # None: a device completion
    kind: str                      # decide | verify | step | start (the first step of finish, cancel or fork) | complete
    place: Optional[Place]         # the step it takes (decide: the first of the path its rule chooses; verify: the rollback's first)
    label: str
    rule: Optional[int] = None     # decide: the rule
    slot: Optional[int] = None     # complete: the queue slot
    choice: steps.Choice = None    # under `any` reuse: the free block an `alloc` takes, the blocks an `alloc-prompt` takes
    operation: Optional[int] = None  # a fork's steps and a verify: the index of its operation in the flattened program
    accepted: Optional[int] = None   # verify: how many drafts it keeps



def refuse_transfers(scenario: Scenario) -> None:
    """The z3 engines do not encode transfers (docs/semantics.md#transfers):
    a transfer scenario, or a protocol with a transfer step, is refused in
    one line (exit 2) rather than checked with a silent gap."""
    used = [s.op for s in scenario.protocol.admit] + [s.op for _, s in scenario.protocol.steps()]
    step = next((op for op in used if op in TRANSFER_STEPS), None)
    if scenario.transfers or step is not None:
        what = "a transfer scenario" if scenario.transfers else f"protocol {scenario.protocol.name!r} uses the transfer step {step!r}"
        raise SpecError(scenario.source, "engine", f"{what}: the z3 engines (bmc, kind) do not encode the host tier, "
                        "transfers, reports or leases yet; check it with --engine explicit")

class SymbolicSystem:
    """A scenario's transition system over symbolic states: the sizes of the
    state, its action instances, the scheduling rules, and what each
    instance does (`execute`); `model` is the explicit ProtocolModel it
    mirrors, `structure` that model's Structure."""

    def __init__(self, scenario: Scenario):
        refuse_transfers(scenario)
        self.scenario = scenario
        self.model = ProtocolModel(scenario)
        self.structure = self.model.structure
        self.protocol = scenario.protocol
        #: a cache scenario: requests with their own prompts, keys on blocks (see the module docstring)
        self.cache = scenario.cache
        # a cache scenario's sequences are all fields (L = 0): a request has none until its prefill
        self.B, self.L, self.P = scenario.block_size, 0 if self.cache else scenario.prompt, scenario.pool
        self.N = len(scenario.branches)
        #: forks or speculation somewhere, or a cache scenario: the program fields are encoded
        self.programs = not scenario.plain or self.cache
        self.operations = [spec.operations for spec in scenario.branches]
        self.appends = [b.appends for b in scenario.branches]          # writes, drafts included
        # where each operation can begin, and the furthest each branch gets (plain: L + appends)
        where = [bounds.positions(scenario, j) for j in range(self.N)]
        self.maxpos = [max(p for at in where[j] for p in at) for j in range(self.N)]
        # the rules the append at each operation can choose, and bounds that no run can exceed (cowcheck.symbolic.bounds says why)
        self.rules_at = [[sorted({r for p in at for r in bounds.possible_rules(scenario, p)}) if o.op is Op.APPEND else []
                          for o, at in zip(ops, where[j])]
                         for j, ops in enumerate(self.operations)]
        by_branch = (lambda j: self.rules_at[j].__getitem__)
        self.T = max(1, max(bounds.table_bound(scenario, self.structure, j, by_branch) for j in range(self.N)))
        self.Q = max(1, sum(bounds.branch_queue_bound(scenario, self.structure, j, by_branch(j)) for j in range(self.N)))
        memo: dict = {}
        self.earliest_own = [bounds.earliest(scenario, self.structure, j, by_branch, memo) for j in range(self.N)]
        # token ids: the prompt's p_i is i, then each branch's own tokens (its k-th write's is offset + k - 1)
        self.token_ids: dict[str, int] = {f"p{i}": i for i in range(self.L)}
        for j in range(self.N):
            for t in scenario.own_tokens(j):
                self.token_ids.setdefault(t, len(self.token_ids))
        if self.cache:      # a branch's own tokens keep consecutive ids; then the prompts' other names
            for t in scenario.prompt_tokens:
                self.token_ids.setdefault(t, len(self.token_ids))
        self.offset = [self.token_ids[scenario.own_tokens(j)[0]] if self.appends[j] else 0 for j in range(self.N)]
        #: sequence fields per branch and per kernel (positions L .. maxpos-1), with programs only
        self.S = [m - self.L if self.programs else 0 for m in self.maxpos]
        self.KS = max(self.S)
        #: the most drafts of any speculate
        self.K = max((o.arg for ops in self.operations for o in ops if o.op is Op.ROLLBACK), default=0)
        # program counters: 0 is "between operations", then the places of the operations the scenario has
        used = {Op.APPEND, Op.FINISH, Op.CANCEL} | {o.op for ops in self.operations for o in ops} | ({Op.ADMIT} if self.cache else set())
        self.pcs: list[Optional[Place]] = [None, *(p for p in self.structure.places if p.op in used)]
        self.pc_of = {place: i for i, place in enumerate(self.pcs) if place is not None}
        #: the branches a cancel of each branch cancels with it while unborn
        self.descendants = [scenario.descendants(j) for j in range(self.N)]
        #: cache scenarios: each request's prompt (token ids), its most hits, and the key fields per block
        self.prompts = [tuple(self.token_ids[t] for t in scenario.prompt_of(j)) for j in range(self.N)] if self.cache else []
        self.H = [(len(p) - 1) // self.B for p in self.prompts]
        self.KL = max((m // self.B * self.B for m in self.maxpos), default=0) if self.cache else 0
        self.instances = self._instances()
        # B * T: an entry's first position (no-use-after-free compares it with
        # a kernel's); B and the conditions' integers: compared with fill
        largest = max(self.P, self.T, self.Q, len(self.token_ids), len(self.pcs), max(self.maxpos) + 1, self.N + 1,
                      self.B * self.T, *(len(ops) + 1 for ops in self.operations), *bounds.condition_integers(self.protocol),
                      self.KL + 1, STATUS_CODE[Status.WAITING] + 1)
        self.width = (2 * largest).bit_length() + 1   # signed, room for -3 .. 2 * largest
        #: what the step handlers need of this system (cowcheck.symbolic.layout says why it is apart)
        self.layout = Layout(
            B=self.B, L=self.L, P=self.P, N=self.N, T=self.T, KS=self.KS, width=self.width,
            maxpos=tuple(self.maxpos), offset=tuple(self.offset), programs=self.programs,
            reuse=scenario.reuse, device=scenario.device, structure=self.structure,
            pc_of=MappingProxyType(self.pc_of), descendants=tuple(self.descendants),
            references=tuple(tuple(self.token_ids[t] for t in scenario.tokens(j)) for j in range(self.N)),
            cache=self.cache, KL=self.KL, prompts=tuple(self.prompts), H=tuple(self.H),
            drafts=tuple(spec.drafts for spec in scenario.branches))

    def num(self, value: int) -> Term:
        return self.layout.num(value)

    def paths_at(self, pos: int) -> set[str]:
        """The paths a decide at `pos` can choose."""
        return {self.protocol.rules[r].path for r in bounds.possible_rules(self.scenario, pos)}

    def condition(self, when: Condition, boundary: Term, fill: Term, rc: Term, hd: Term) -> Term:
        return formula(when, boundary, fill, self.B, rc, hd)

    def token(self, j: int, pos: Term) -> Term:
        """Branch j's token at a (possibly symbolic) position (plain scenarios: its reference)."""
        return self.layout.token(j, pos)

    def expected(self, branch: Term, i: int) -> Term:
        """Position i of a (possibly symbolic) branch's reference sequence (plain scenarios)."""
        return self.layout.expected(branch, i)

    def sequence(self, seq: list, i: int) -> Term:
        """Position i of a sequence stored as program fields: the prompt's
        token below L, else its field (past its fields: never a token)."""
        return self.layout.sequence(seq, i)

    def kernel_expected(self, o: SymOp, i: int) -> Term:
        """What position i of queue slot o's kernel must read: its own
        remembered sequence with programs, its branch's reference without."""
        return self.sequence(o.kseq, i) if self.programs else self.expected(o.br, i)

    def branch_expected(self, s: Sym, j: int, i: int) -> Term:
        """Position i of branch j's sequence now."""
        return self.layout.branch_expected(s, j, i)

    # -- explicit <-> symbolic ------------------------------------------------
    def fresh(self, prefix: str) -> Sym:
        def v(name: str) -> Term:
            return z3.BitVec(f"{prefix}{name}", self.width)

        def branch(j: int) -> SymBranch:
            b = SymBranch(v(f"b{j}st"), v(f"b{j}pos"), v(f"b{j}done"), v(f"b{j}pc"), v(f"b{j}tail"), v(f"b{j}new"),
                          [v(f"b{j}wk{t}") for t in range(T)], v(f"b{j}wlen"),
                          [v(f"b{j}pb{t}") for t in range(T)], v(f"b{j}plen"))
            if self.programs:
                b.writes, b.rejected = v(f"b{j}writes"), v(f"b{j}rej")
                b.seq = [v(f"b{j}seq{i}") for i in range(self.S[j])]
            if self.cache:
                b.verified, b.hlen = v(f"b{j}ver"), v(f"b{j}hlen")
                b.hits = [v(f"b{j}hit{i}") for i in range(self.H[j])]
            return b

        T = self.T
        cache = self.cache
        return Sym(
            klen=[v(f"kl{b}") for b in range(self.P)] if cache else [],
            key=[[v(f"key{b}_{i}") for i in range(self.KL)] for b in range(self.P)] if cache else [],
            rc=[v(f"rc{b}") for b in range(self.P)], hd=[v(f"hd{b}") for b in range(self.P)],
            slot=[[v(f"sl{b}_{s}") for s in range(self.B)] for b in range(self.P)],
            free=[v(f"fr{i}") for i in range(self.P)], flen=v("flen"),
            br=[branch(j) for j in range(self.N)],
            q=[SymOp(v(f"q{i}kind"), v(f"q{i}src"), v(f"q{i}dst"), v(f"q{i}n"), v(f"q{i}br"), v(f"q{i}kpos"),
                     [v(f"q{i}snap{t}") for t in range(T)], v(f"q{i}slen"),
                     [v(f"q{i}kseq{n}") for n in range(self.KS)], v(f"q{i}span") if cache else None) for i in range(self.Q)],
            qlen=v("qlen"))

    def values(self, state: State) -> list[int]:
        """An explicit state as the integers of `Sym.flat`, in the same order."""
        T = self.T

        def none(x: Optional[int]) -> int:
            return -1 if x is None else x

        def pad(table: tuple[int, ...]) -> list[int]:
            return list(table) + [-1] * (T - len(table))

        def tokens(seq: tuple[str, ...], size: int) -> list[int]:
            """A sequence's positions L .. L+size-1 as token ids, -1 past its end."""
            own = [self.token_ids[t] for t in seq[self.L:self.L + size]]
            return own + [-1] * (size - len(own))

        out = [b.refcount for b in state.blocks] + [b.holds for b in state.blocks]
        out += [-1 if c is None else self.token_ids[c] for b in state.blocks for c in b.slots]
        if self.cache:
            keys = [() if b.key is None else b.key for b in state.blocks]
            out += [len(k) for k in keys]
            out += [t for k in keys for t in [self.token_ids[x] for x in k] + [-1] * (self.KL - len(k))]
        out += list(state.free) + [-1] * (self.P - len(state.free)) + [len(state.free)]
        for j, br in enumerate(state.branches):
            place = self.model.place(br)
            out += [STATUS_CODE[br.status], br.pos, br.done, 0 if place is None else self.pc_of[place], none(br.tail),
                    none(br.new), *pad(br.working), len(br.working), *pad(br.published), len(br.published)]
            if self.programs:
                out += [br.writes, none(br.rejected), *tokens(br.seq, self.S[j])]
            if self.cache:
                out += [br.verified, len(br.hits), *br.hits, *[-1] * (self.H[j] - len(br.hits))]
        if len(state.queue) > self.Q:
            raise AssertionError(f"queue bound {self.Q} exceeded")
        for op in state.queue:
            if type(op) is Copy:
                out += [COPY_KIND, op.src, op.dst, op.n, -1, -1, *pad(()), 0, *tokens((), self.KS)] + [0] * self.cache
            else:
                assert type(op) is Kernel   # no transfers: the z3 engines refuse transfer scenarios
                out += [KERNEL_KIND, -1, -1, -1, op.branch, op.pos, *pad(op.snapshot), len(op.snapshot),
                        *tokens(op.expected, self.KS)] + [op.span] * self.cache
        out += ([EMPTY, -1, -1, -1, -1, -1, *pad(()), 0, *tokens((), self.KS)] + [0] * self.cache) * (self.Q - len(state.queue))
        return out + [len(state.queue)]

    def equals(self, sym: Sym, state: State) -> Term:
        return all_of(x == v for x, v in zip(sym.flat(), self.values(state)))

    def substitution(self, sym: Sym, state: State) -> list:
        return [(x, self.num(v)) for x, v in zip(sym.flat(), self.values(state))]

    def same(self, a: Sym, b: Sym) -> Term:
        return all_of(x == y for x, y in zip(a.flat(), b.flat()))

    def domain(self, s: Sym) -> Term:
        """Type invariants every reachable state satisfies by construction (T
        and Q are upper bounds, a path has exactly one write, counters never
        go below 0). k-induction assumes them of arbitrary states; the tests
        check them on random reachable states."""
        def within(x: Term, low: int, high: int) -> Term:
            return z3.And(x >= low, x <= high)

        def block(x: Term) -> Term:
            return within(x, -1, self.P - 1)

        def token(x: Term) -> Term:
            return within(x, -1, len(self.token_ids) - 1)

        parts = [within(s.flen, 0, self.P), within(s.qlen, 0, self.Q)]
        parts += [z3.And(s.rc[b] >= 0, s.hd[b] >= 0) for b in range(self.P)]
        parts += [block(x) for x in s.free]
        for j, b in enumerate(s.br):
            parts += [within(b.pc, 0, len(self.pcs) - 1), block(b.tail), block(b.new),
                      within(b.wlen, 0, self.T), within(b.plen, 0, self.T)] + [block(x) for x in b.wk + b.pb]
            if not self.programs:
                parts += [within(b.status, 0, 2), within(b.pos, self.L, self.maxpos[j]), within(b.done, 0, self.appends[j])]
                continue
            pos = within(b.pos, self.L, self.maxpos[j])
            child = self.scenario.branches[j].parent is not None    # unborn, or cancelled unborn: pos 0
            if self.cache:
                parts += [within(b.verified, 0, self.maxpos[j]), within(b.hlen, 0, self.H[j])] + [block(x) for x in b.hits]
            parts += [within(b.status, 0, 4 if self.cache else 3), z3.Or(pos, b.pos == 0) if child else pos,
                      within(b.done, 0, len(self.operations[j])), within(b.writes, 0, self.appends[j]),
                      within(b.rejected, -1, self.K)] + [token(x) for x in b.seq]
        for o in s.q:
            parts += [within(o.kind, -1, 1), block(o.src), block(o.dst), within(o.slen, 0, self.T)] + [block(x) for x in o.snap]
            parts += [token(x) for x in o.kseq]
            if self.cache:
                parts.append(within(o.span, 0, self.KS))
        for x in range(len(s.klen)):
            parts += [z3.Or([s.klen[x] == n for n in range(0, self.KL + 1, self.B)])] + [token(t) for t in s.key[x]]
        return all_of(parts)

    def init(self, sym: Sym) -> Term:
        return self.equals(sym, self.model.init_state())

    # -- action instances -------------------------------------------------------
    def _instances(self) -> list[Instance]:
        """Every action instance, branch by branch in branch order (the
        reductions rely on that order), then the device's. A fork's steps
        get one instance per fork in the program, since `share` must know
        its child; a verify one per speculate and per count it accepts."""
        out: list[Instance] = []
        structure = self.structure
        for j in range(self.N):
            name = self.model.names[j]
            ops = self.operations[j]
            if any(o.op is Op.APPEND for o in ops):
                for r, rule in enumerate(self.protocol.rules):
                    out.append(Instance(j, "decide", Place(Op.APPEND, rule.path, 0), f"{name}: decide {rule.path}", rule=r))
            for place in structure.places:
                if place.op is Op.APPEND:
                    out += self._choices(Instance(j, "step", place, f"{name} ({place.path}): {structure.step(place).text}"))
            for k, o in enumerate(ops):
                if o.op is Op.FORK:
                    for place in bounds.places(structure, Op.FORK):
                        kind = "start" if place.step == 0 else "step"
                        label = f"{name} (fork {self.model.names[o.arg]}): {structure.step(place).text}"
                        out += self._choices(Instance(j, kind, place, label, operation=k))
                elif o.op is Op.ROLLBACK:
                    first = Place(Op.ROLLBACK, None, 0)
                    for accepted in range(o.arg + 1):
                        out.append(Instance(j, "verify", first, f"{name} (rollback {k}): verify, accept {accepted}",
                                            operation=k, accepted=accepted))
            if any(o.op is Op.ROLLBACK for o in ops):
                for place in bounds.places(structure, Op.ROLLBACK):
                    out += self._choices(Instance(j, "step", place, f"{name} (rollback): {structure.step(place).text}"))
            if self.cache:      # the admission: its first step starts it
                program = bounds.places(structure, Op.ADMIT)
                for place in program:
                    kind = "start" if place.step == 0 else "step"
                    out += self._choices(Instance(j, kind, place, f"{name} (admit): {structure.step(place).text}"))
            for op in (Op.FINISH, Op.CANCEL):
                if op is Op.CANCEL and not self.scenario.branches[j].may_cancel:
                    continue
                program = bounds.places(structure, op)
                for place in program[1:]:
                    out += self._choices(Instance(j, "step", place, f"{name} ({op}): {structure.step(place).text}"))
                out += self._choices(Instance(j, "start", program[0], f"{name} ({op}): {structure.step(program[0]).text}"))
        for i in range(self.Q):
            out.append(Instance(None, "complete", None, f"device: complete queue[{i}]", slot=i))
        return out

    def _choices(self, inst: Instance) -> list[Instance]:
        """Under `any` reuse an `alloc` may take any free block, each a
        separate successor (model.block.free_choices): one instance per block
        id, enabled when that block is free. A constant block id keeps each
        instance's effect on the state small (it sets one refcount), where a
        symbolic choice would touch them all. Every other step: itself."""
        assert inst.place is not None
        op = self.structure.step(inst.place).op
        if op not in ALLOCATING or self.scenario.reuse != "any":
            return [inst]
        if op == "alloc-prompt":    # every ordered choice of the blocks it can need (one per count of hits)
            assert inst.branch is not None
            blocks = -(-len(self.prompts[inst.branch]) // self.B)
            counts = sorted({blocks - h for h in range(self.H[inst.branch] + 1)})
            return [inst._replace(choice=c, label=f"{inst.label} [blocks {' '.join(map(str, c))}]")
                    for n in counts for c in permutations(range(self.P), n)]
        return [inst._replace(choice=b, label=f"{inst.label} [block {b}]") for b in range(self.P)]

    def earliest(self, inst: Instance) -> Optional[int]:
        """The fewest actions any run from the initial state takes before
        this instance can fire (None: it never can), from the branches' own
        programs (cowcheck.symbolic.bounds.earliest). A completion of queue
        slot i needs i + 1 launches before it."""
        if inst.branch is None:
            assert inst.slot is not None
            first = [e.launch for e in self.earliest_own if e.launch is not None]
            return min(first) + inst.slot + 1 if first else None
        own = self.earliest_own[inst.branch]
        if inst.kind == "decide":
            assert inst.rule is not None
            return own.decide.get(inst.rule)
        assert inst.place is not None
        if inst.operation is not None:          # a verify, or a fork's step
            begins = own.ops.get(inst.operation)
            return None if begins is None else begins + (inst.place.step if inst.kind != "verify" else 0)
        return own.steps.get(inst.place)

    # -- scheduling (the structure's) ---------------------------------------------
    def starts_from(self, op: Op) -> list[int]:
        """The program counters where a branch may start `op`: between
        operations, and for a cancel at the structure's cancel places (a
        finish also needs every operation done, a fork its own turn in
        the program, see `execute`)."""
        if op is not Op.CANCEL:
            return [0]
        return [0] + [self.pc_of[place] for place in self.structure.cancel_places]

    def locked(self, s: Sym, j: int) -> Term:
        """Branch j holds the scheduler lock (the structure's locking places)."""
        return any_of(s.br[j].pc == self.pc_of[place] for place in self.structure.locking_places if place in self.pc_of)

    def next_is(self, b: SymBranch, j: int, op: Op) -> Term:
        """Branch j's next operation (by `done`) is an `op` (FINISH: its program is done)."""
        ops = self.operations[j]
        if op is Op.FINISH:
            return b.done >= len(ops)
        if not self.programs:        # appends only: the next is an append while any is left
            return b.done < len(ops) if op is Op.APPEND else z3.BoolVal(False)
        return any_of(b.done == k for k, o in enumerate(ops) if o.op is op)

    def may_act(self, s: Sym, j: int) -> Term:
        """Branch j is active and nobody else holds the lock (a cache
        scenario's waiting request acts too: its admission or its cancel)."""
        b = s.br[j]
        active = z3.Or(b.has(Status.RUNNING), b.has(Status.WAITING)) if self.cache else b.has(Status.RUNNING)
        return z3.And(active, all_of(z3.Not(self.locked(s, i)) for i in range(self.N) if i != j))

    def admissible(self, s: Sym, j: int) -> Term:
        """A waiting request may start its admission (model.system._admit):
        its `after` request is done and, for an atomic [admit], its steps up
        to the first wait can each run, one after another (a
        kernel-table-miss ends the test: the admission starts)."""
        after = self.scenario.branches[j].after
        out = [s.br[j].has(Status.WAITING), s.br[j].pc == 0]
        if after is not None:
            out.append(z3.Or(s.br[after].has(Status.FINISHED), s.br[after].has(Status.CANCELLED)))
        if self.protocol.atomic_admit:
            chain, cur = [], s
            for place in bounds.places(self.structure, Op.ADMIT):
                if self.structure.step(place).op in WAITS:
                    break
                x = steps.take(self.layout, cur, j, place, z3.BoolVal(True))
                chain.append(x)
                cur = x.post
            ok: Term = z3.BoolVal(True)
            for x in reversed(chain):
                ok = z3.And(x.guard, z3.Or(z3.Not(x.leads), ok))
            out.append(ok)
        return all_of(out)

    def ready(self, s: Sym, i: int) -> Term:
        """Queue slot i may complete under the scenario's device model."""
        return self.layout.ready(s, i)

    def in_free(self, s: Sym, b: Term) -> Term:
        return self.layout.in_free(s, b)

    def target(self, o: SymOp) -> Term:
        """The block a kernel writes: snapshot[pos // B] (cowcheck.engines.invariants._target)."""
        return self.layout.target(o)

    # -- executing one action instance ---------------------------------------
    def execute(self, s: Sym, inst: Instance) -> Executed:
        if inst.branch is None:
            assert inst.slot is not None
            return steps.complete(self.layout, s, inst.slot)
        j = inst.branch
        b = s.br[j]
        if inst.kind == "decide":
            return self._decide(s, j, inst)
        if inst.kind == "verify":
            return self._verify(s, j, inst)
        assert inst.place is not None
        if inst.kind == "start" and inst.place.op is Op.ADMIT:
            guard = z3.And(self.may_act(s, j), self.admissible(s, j))
        elif inst.kind == "start":
            at = any_of(b.pc == pc for pc in self.starts_from(inst.place.op))
            turn = z3.BoolVal(True) if inst.place.op is Op.CANCEL else self.next_is(b, j, Op.FINISH) \
                if inst.place.op is Op.FINISH else b.done == inst.operation
            guard = z3.And(self.may_act(s, j), at, turn)
            if self.cache and inst.place.op is not Op.CANCEL:     # a waiting request only admits or cancels
                guard = z3.And(guard, b.has(Status.RUNNING))
        else:
            guard = z3.And(self.may_act(s, j), b.pc == self.pc_of[inst.place])
            if inst.operation is not None:      # a fork's later step: this fork's
                guard = z3.And(guard, b.done == inst.operation)
        child = self.operations[j][inst.operation].arg if inst.place.op is Op.FORK and inst.operation is not None else None
        return steps.take(self.layout, s, j, inst.place, guard, inst.choice, child)

    def _decide(self, s: Sym, j: int, inst: Instance) -> Executed:
        assert inst.rule is not None and inst.place is not None
        b = s.br[j]
        dom = range(self.L, self.maxpos[j] + 1)
        fill = by_value(b.pos, dom, lambda p: p % self.B)
        boundary = fill == 0
        index_ok = by_value(b.pos, dom, lambda p: z3.And(z3.BoolVal(p % self.B != 0), b.wlen > p // self.B))
        tail = z3.If(index_ok, by_value(b.pos, dom, lambda p: b.wk[p // self.B] if p // self.B < self.T else -1), -1)
        conds = [self.condition(r.when, boundary, fill, select(s.rc, tail, 0), select(s.hd, tail, 0))
                 for r in self.protocol.rules]
        chosen = z3.And(conds[inst.rule], *[z3.Not(c) for c in conds[:inst.rule]])
        guard = z3.And(self.may_act(s, j), b.has(Status.RUNNING), b.pc == 0, self.next_is(b, j, Op.APPEND), chosen)
        post = s.copy()
        nb = post.br[j]
        nb.pc, nb.tail, nb.new = self.pc_of[inst.place], tail, -1
        return Executed(guard, z3.BoolVal(True), post)

    def _verify(self, s: Sym, j: int, inst: Instance) -> Executed:
        """The rollback's first action (model.system._verify): always
        enabled in its turn, binds `rejected`; an empty [rollback] ends the
        operation here."""
        assert inst.operation is not None and inst.accepted is not None
        b = s.br[j]
        guard = z3.And(self.may_act(s, j), b.has(Status.RUNNING), b.pc == 0, b.done == inst.operation)
        post = s.copy()
        nb = post.br[j]
        if self.cache:      # the accepted drafts are verified now
            nb.verified = b.pos - (self.operations[j][inst.operation].arg - inst.accepted)
        if self.protocol.rollback:
            nb.pc, nb.rejected = self.pc_of[Place(Op.ROLLBACK, None, 0)], self.operations[j][inst.operation].arg - inst.accepted
        else:
            nb.done = b.done + 1
        return Executed(guard, z3.BoolVal(True), post)

    # -- the explicit model's view of an instance ------------------------------
    def matches(self, inst: Instance, state: State, tr: Transition) -> bool:
        """Is the explicit transition `tr` from `state` this instance?"""
        a = tr.action
        if inst.branch is None:
            return (a.actor == DEVICE and inst.slot is not None and inst.slot < len(state.queue)
                    and completion(state.queue[inst.slot], self.B, self.model.names) == a)
        assert inst.place is not None
        place = inst.place
        if a.actor != self.model.names[inst.branch] or a.op != place.op:
            return False
        br = state.branches[inst.branch]
        if inst.kind == "decide":
            return a.step == "decide" and self._rule_index(state, inst.branch) == inst.rule
        if inst.kind == "verify":
            return a.step == "verify" and br.done == inst.operation and dict(a.binds).get("accepted") == inst.accepted
        if inst.operation is not None and br.done != inst.operation:
            return False
        step = self.structure.step(place)
        if isinstance(inst.choice, tuple) and dict(a.binds).get("blocks") != inst.choice:
            return False
        if isinstance(inst.choice, int) and dict(a.binds).get(step.args[0]) != inst.choice:
            return False
        if inst.kind == "start":
            return br.op != place.op and a.step == step.text
        return self.model.place(br) == place and a.step != "decide"

    def _rule_index(self, state: State, j: int) -> int:
        br = state.branches[j]
        fill = br.pos % self.B
        index = br.pos // self.B
        tail = None if fill == 0 or index >= len(br.working) else br.working[index]
        rule = self.model.choose(state, tail, fill == 0, fill)
        assert rule is not None
        return self.protocol.rules.index(rule)
