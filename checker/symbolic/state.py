"""The symbolic state: one z3 bit-vector per field of model.state.State, and
the facts an action produces, in the model's own fact types.

Fields are signed bit-vectors just wide enough for the scenario's largest
value (bit-blasting these small finite domains is far faster for z3 than
integer arithmetic), sized from the scenario: P blocks (refcount, holds, B
slots), the free list as P positions plus a length, per branch its status,
pos, done, one program counter for its place (cowcheck.model.structure),
the locals tail and new, and both tables as T entries plus lengths; the
device queue as Q slots in launch order. With branch programs a branch
also has its write counter, its `rejected` local and its sequence, and a
kernel the sequence it must read (positions L and beyond; the prompt's are
always p0 .. p{L-1}); a plain scenario leaves these fields out, since its
sequences are the branches' references. Absent values are -1 (an empty
slot, an unbound local, an unused table entry), and every entry past a
length is kept at its canonical empty value, so that two symbolic states
are equal exactly when the explicit states are (k-induction's simple-path
constraint relies on that).

A cache scenario (docs/semantics.md#prefix-caching) gets the program
fields with L = 0: a request has no sequence until its prefill, and its
prompt is its own, so every position of its sequence is a field (token
ids: each request's own tokens first, consecutive, then the other names
its prompts use). Its sequence is state (speculation rewinds it), so a
key cannot be named by (request, length): a block's key is stored as its
tokens, `klen` (0: no key; else a multiple of B) and KL token fields
(KL: the longest key any request can make, -1 past klen). Two keys are
equal exactly when their fields are, a key names a block exactly while it
is the block's (the cache is the keyed blocks), and lookup compares the
constant prefixes of the request's prompt with every block's key. A
branch adds `verified`, and the admission's local `hits` (H entries and a
length, H = (L_j - 1) // B); status `waiting` has its own code; a queue
slot adds `span`, the positions a kernel writes ending at kpos (1 for a
write, the uncached prompt for a prefill, 0 for a copy and an empty slot),
its expected sequence (kseq) giving the token of each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

from cowcheck.model.block import Fact
from cowcheck.model.state import Status

from cowcheck.symbolic.terms import Term

#: a branch's status as the symbolic state stores it
STATUS_CODE: dict[Status, int] = {Status.RUNNING: 0, Status.FINISHED: 1, Status.CANCELLED: 2, Status.UNBORN: 3,
                                   Status.WAITING: 4}
#: a queue slot's kind
COPY_KIND, KERNEL_KIND, EMPTY = 0, 1, -1
NONE_READ = -2      # what a read past the end of a table yields: never a token


@dataclass
class SymBranch:
    status: Term
    pos: Term
    done: Term
    pc: Term            # 0 between operations, else SymbolicSystem.pcs index
    tail: Term
    new: Term
    wk: list            # working table, T entries
    wlen: Term
    pb: list            # published table, T entries
    plen: Term
    # branch programs only (None / empty for plain scenarios, whose sequence
    # is the reference and whose write count is pos - L): the write counter,
    # the rollback's local `rejected`, and the sequence's tokens at positions
    # L .. maxpos-1 (-1 at and past pos; positions below L hold the prompt)
    writes: Optional[Term] = None
    rejected: Optional[Term] = None
    seq: list = field(default_factory=list)
    # cache scenarios only (None / empty otherwise): the verified count, and
    # the admission's local `hits` as H entries plus a length
    verified: Optional[Term] = None
    hlen: Optional[Term] = None
    hits: list = field(default_factory=list)

    def has(self, status: Status) -> Term:
        return self.status == STATUS_CODE[status]


@dataclass
class SymOp:
    kind: Term          # COPY_KIND, KERNEL_KIND, EMPTY
    src: Term
    dst: Term
    n: Term
    br: Term
    kpos: Term
    snap: list
    slen: Term
    # branch programs only: a kernel's expected sequence at positions
    # L .. max(maxpos)-1 (-1 past its own position and for copies)
    kseq: list = field(default_factory=list)
    # cache scenarios only: the positions a kernel writes, ending at kpos
    # (1 for a write, the uncached prompt for a prefill; 0 for a copy)
    span: Optional[Term] = None


@dataclass
class Sym:
    rc: list
    hd: list
    slot: list          # slot[b][s]
    free: list
    flen: Term
    br: list[SymBranch]
    q: list[SymOp]
    qlen: Term
    # cache scenarios only (empty otherwise): per block its key's length
    # (0: no key) and its tokens (KL fields, -1 past the length)
    klen: list = field(default_factory=list)
    key: list = field(default_factory=list)       # key[b][i]

    def copy(self) -> "Sym":
        return Sym(list(self.rc), list(self.hd), [list(s) for s in self.slot], list(self.free), self.flen,
                   [SymBranch(**{**b.__dict__, "wk": list(b.wk), "pb": list(b.pb), "seq": list(b.seq), "hits": list(b.hits)})
                    for b in self.br],
                   [SymOp(**{**o.__dict__, "snap": list(o.snap), "kseq": list(o.kseq)}) for o in self.q], self.qlen,
                   list(self.klen), [list(k) for k in self.key])

    def flat(self) -> list:
        """Every field in one fixed order (the order of SymbolicSystem.values)."""
        out = list(self.rc) + list(self.hd) + [c for s in self.slot for c in s]
        out += list(self.klen) + [t for k in self.key for t in k]
        out += list(self.free) + [self.flen]
        for b in self.br:
            out += [b.status, b.pos, b.done, b.pc, b.tail, b.new, *b.wk, b.wlen, *b.pb, b.plen]
            if b.writes is not None:
                out += [b.writes, b.rejected, *b.seq]
            if b.verified is not None:
                out += [b.verified, b.hlen, *b.hits]
        for o in self.q:
            out += [o.kind, o.src, o.dst, o.n, o.br, o.kpos, *o.snap, o.slen, *o.kseq]
            if o.span is not None:
                out.append(o.span)
        return out + [self.qlen]


# -- facts ----------------------------------------------------------------------
class Queued(NamedTuple):
    """An in-flight op as its completion sees it: its queue slot and its
    fields in the state before (the symbolic counterpart of a Copy or a
    Kernel in CopyDone and KernelDone)."""
    slot: int
    op: SymOp


class Guarded(NamedTuple):
    """A fact of model.block (Freed, Underflow, ...), of the same type as
    the explicit model's but with z3 terms for fields, and the condition
    under which the action produces it."""
    when: Term
    fact: Fact


def symbolic(kind: Callable[..., Fact], *fields: Any) -> Fact:
    """A model fact of type `kind` whose fields are z3 terms (named tuples
    check no types at run time; this is the one place that says so)."""
    return kind(*fields)
