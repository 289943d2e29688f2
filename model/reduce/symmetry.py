"""Symmetry: states that differ only in which interchangeable branch is which,
or in which block id holds what, behave alike. `Symmetry.representative`
maps a state to one member of its orbit, so an explorer can store each orbit
once (Stateright's `Representative`, TLC's SYMMETRY).

Two kinds of renaming are symmetries of the transition system:

- Branches with the same program (appends, may_cancel) are interchangeable
  once their tokens are renamed with them (a1 <-> b1, ...): every rule,
  step and invariant treats branch names only as names. Only *plain*
  branches are put in classes (roots that only append): a branch that
  forks, speculates or has a parent is left where it is, which is sound
  (a coarser symmetry) and keeps every sequence a function of the
  branch and its pos, as the signatures and twins (signature.py,
  refine.py) assume.
- In a cache scenario the branches are requests, and two are alike with
  the same program (speculation included: requests never fork), prompt,
  `after` and may_cancel. Their tokens are renamed wherever they lie:
  sequences, slots, block keys, kernels. Prompts are fixed text, so a
  request whose tokens some prompt names, and one that another request is
  `after`, stay where they are (`_groups`); every renaming then fixes every
  prompt and every `after`, and lookup, the cache's keys and the admission
  rule commute with it. A speculating request's sequence is not a function
  of its pos (a rewind drops tokens, later writes get new names): the
  twins compare sequences (renamed) for it, and whether a branch has any
  token to rename is read from its write count, never from its pos.
- Block ids are names too: nothing in the model compares ids, except the free
  list's order, which a renaming carries along (and which `any` reuse keeps
  sorted, so there it is re-sorted).
- In a transfer scenario host block ids are names as well, and the host
  free list's order (lifo, whatever `reuse` says) is carried along like
  the GPU list's under `lifo`; the transfers in flight and the pending
  reports are renamed with their blocks, host blocks, owners and tokens.
  Requests are interchanged only with the same `source` and `sink`. Under
  `any` reuse block ids are kept (`_block_ids`): `store-free` reads the
  sorted free list in its order.

The representative sorts each class of interchangeable branches by a
signature of its local state, then numbers blocks in order of first
appearance (branch tables in the new branch order, then the device queue,
then any block no one references and the free list, ordered by contents
where their order carries no meaning). Where signatures tie it takes the
least of the tied orders, so every member of an orbit gets the same
representative: the explorer stores each orbit exactly once, and a trace is
rebuilt by matching representatives step by step.

Trying every tied order costs the factorial of the ties (8! relabels for
eight identical branches at the fork), so that definition is kept only
where it is cheap: when no class has more than three branches (at most
3! = 6 orders, every shipped scenario), which keeps every committed trace.
Larger classes get the *refined* representative, the least relabelling
among the orders that agree with a finer, still label-free, partition
(cowcheck.model.reduce.refine: signatures with the ops in flight, then
anchors, then twins), canonical too; the class-size rule is fixed per
scenario.

The parts are modules of their own, each imported by the ones after it:

- signature.py: a branch without names, which each class is sorted by;
- relabel.py: the state renamed by a branch order, and the least of such;
- refine.py: the refined representative, and the twins it finds;
- here: `Symmetry`, which holds a scenario's classes and caches, picks the
  definition (`representative`: every tied order in `_exhaustive`, else
  `_refined`) and drops mirrored moves (`unmirrored`)."""

from __future__ import annotations

from itertools import groupby, permutations, product

from cowcheck.model.action import Transition
from cowcheck.model.reduce.refine import Refinement
from cowcheck.model.reduce.relabel import _least
from cowcheck.model.reduce.signature import Local
from cowcheck.model.scenario import Scenario
from cowcheck.model.state import Block, Branch, State


class Symmetry(Refinement):
    """A scenario's symmetries: `representative` and `unmirrored` for the
    explorer. The signatures, the relabelling and the refinement are its
    mixins (cowcheck.model.reduce.signature, .relabel, .refine)."""

    #: recent representatives kept, per generation
    CACHE = 1 << 15

    def __init__(self, scenario: Scenario, branches: bool = True, blocks: bool = True):
        # `store-free` reads the GPU free list in its order, which `any` reuse
        # keeps sorted by id: there block ids are not names (`_block_ids`)
        self.blocks_enabled = blocks and _block_ids(scenario)
        self.sort_free = scenario.reuse == "any"
        self.names = [scenario.branch_name(i) for i in range(len(scenario.branches))]
        # tokens each branch owns, for renaming: own[i][k-1] = f"{name_i}{k}"
        self.own = [scenario.own_tokens(i) for i in range(len(scenario.branches))]
        self.classes = [tuple(g) for g in _groups(scenario, self.own) if len(g) > 1] if branches else []
        # each class with the positions of its members
        self._members = [(members, range(len(members))) for members in self.classes]
        #: the old definition (every tied order) where it is cheap, else the
        #: refined one; always the old one in a transfer scenario, whose
        #: anchors and twins would have to read the host tier too
        self.exhaustive = all(len(c) <= 3 for c in self.classes) or scenario.transfers
        self.identity = list(range(len(scenario.branches)))
        #: per branch: plain (a root that only appends: its sequence is its prompt and its first writes)
        self.plain = [spec.plain for spec in scenario.branches]
        #: blocks carry keys (a cache scenario): renamings rename them too
        self.keys = scenario.cache
        # hash(state) -> (state, representative): keyed by the hash so that a
        # miss costs one hash of the state, not one per look-up and insertion
        self._recent: dict[int, tuple[State, State]] = {}
        self._older: dict[int, tuple[State, State]] = {}
        self.own_set = [frozenset(own) for own in self.own]
        # tuple(order) -> (old token -> new token, new_of[old] = new)
        self._renamings: dict[tuple[int, ...], tuple[dict[str, str], list[int]]] = {}
        # id(branch) -> (branch, the blocks its local signature reads, those Block objects, that signature,
        # the state's blocks it was read from: when a later state has the very same tuple, nothing changed)
        self._locals: dict[int, tuple[Branch, tuple[int, ...], tuple[Block, ...], Local, tuple[Block, ...]]] = {}

    def describe(self) -> list[str]:
        out = []
        if self.classes:
            out.append("branch symmetry (" + "; ".join("".join(self.names[i] for i in c) for c in self.classes) + ")")
        if self.blocks_enabled:
            out.append("block-id symmetry")
        return out

    # -- the representative -------------------------------------------------
    def representative(self, state: State) -> State:
        """The orbit's canonical member: branches of each class sorted by
        signature, blocks numbered by first appearance; where signatures tie,
        the least (by repr) of the tied orders. Canonical, since the
        signature and the numbering name no branch and no block."""
        # Interleavings meet: the same state comes back as a successor of
        # several stored ones, so recent answers are kept (two generations
        # of at most CACHE states each).
        key = hash(state)
        known = self._recent.get(key)
        if known is not None and known[0] == state:
            return known[1]
        known = self._older.get(key)
        if known is not None and known[0] == state:
            rep = known[1]
        else:
            rep = self._refined(state) if not self.exhaustive else self._exhaustive(state)
        if len(self._recent) >= self.CACHE:
            self._older, self._recent = self._recent, {}
        self._recent[key] = (state, rep)
        return rep

    # -- mirrored moves (which branches mirror a twin: `Refinement.mirrored`) --
    def unmirrored(self, state: State, transitions: list[Transition]) -> list[Transition]:
        """The transitions but those of branches whose moves mirror an
        earlier branch's (`mirrored`): each leads to the orbit of one kept,
        with the same facts renamed, so the explorer stores the same states
        and finds the same violations at the same depths without them."""
        return without_actors(transitions, self.mirrored_actors(state))

    def mirrored_actors(self, state: State) -> frozenset[str]:
        """The names of the `mirrored` branches."""
        mirrored = self.mirrored(state)
        return frozenset(self.names[i] for i in mirrored) if mirrored else _NO_ACTORS

    # -- the exhaustive representative (no class of more than three) ---------
    def _exhaustive(self, state: State) -> State:
        """The least relabelling over every order that sorts each class by
        signature (cheap while no class has more than three branches)."""
        orders = self._orders(state)
        if len(orders) == 1:
            return self._relabel(state, orders[0])
        candidates = {self._relabel(state, order) for order in orders}
        # tied branches are often truly alike (swapping them changes nothing)
        return candidates.pop() if len(candidates) == 1 else _least(candidates)

    def _orders(self, state: State) -> list[list[int]]:
        """Every branch order (order[new] = old) that sorts each class by
        signature; more than one only where signatures tie."""
        orders = [list(self.identity)]
        if not self.classes:
            return orders
        kernels = self._kernels(state.queue)
        for members in self.classes:
            sig = dict(zip(members, self._signatures(state, members, kernels)))
            ranked = sorted(members, key=sig.__getitem__)
            runs = [list(g) for _, g in groupby(ranked, key=sig.__getitem__)]
            if len(runs) == len(ranked):        # no tie: one order
                for order in orders:
                    for slot, old in zip(members, ranked):
                        order[slot] = old
                continue
            extended = []
            for choice in product(*(permutations(run) for run in runs)):
                flat = [i for run in choice for i in run]
                for order in orders:
                    order = list(order)
                    for slot, old in zip(members, flat):
                        order[slot] = old
                    extended.append(order)
            orders = extended
        return orders


def _groups(scenario: Scenario, own: list[tuple[str, ...]]) -> list[list[int]]:
    """The branches that may be interchanged, in groups (a group of one is
    no class). Outside cache scenarios only plain branches (roots that only
    append) are grouped, by their program: appends and may_cancel.

    In a cache scenario a request is also described by its prompt and its
    `after`, and renaming it renames its tokens everywhere (sequences,
    slots, keys, kernels), but not inside other requests' prompts, which
    are fixed text. So a request stays out of every class when some prompt
    names one of its tokens (`a1` in a later turn's prompt), and when some
    request is `after` it (its status gates that admission); requests of one
    group have the same program, prompt and `after`, which is then no member
    of a class, so every renaming of a group fixes every prompt and every
    `after` (docs/explanation/reductions.md#symmetry). In a transfer
    scenario a P/D consumer (`source`) or producer (`sink`) is interchanged
    only with requests of the same roles."""
    groups: dict[tuple[object, ...], list[int]] = {}
    named = frozenset(scenario.prompt_tokens) if scenario.cache else frozenset()
    waited_on = {spec.after for spec in scenario.branches} if scenario.cache else set()
    for i, spec in enumerate(scenario.branches):
        if scenario.cache:
            if spec.parent is not None or i in waited_on or not named.isdisjoint(own[i]):
                continue
            groups.setdefault((spec.program, spec.may_cancel, scenario.prompt_of(i), spec.after, spec.source,
                               spec.sink), []).append(i)
        elif spec.plain:
            groups.setdefault((spec.appends, spec.may_cancel), []).append(i)
    return list(groups.values())


def _block_ids(scenario: Scenario) -> bool:
    """Whether renaming GPU block ids is a symmetry: everywhere but in a
    transfer scenario under `any` reuse, where `store-free` stores the free
    list's keyed blocks in its order (sorted by id), so which keys reach a
    host tier that runs out depends on the ids."""
    return not (scenario.transfers and scenario.reuse == "any")


#: no actor skipped
_NO_ACTORS: frozenset[str] = frozenset()


def without_actors(transitions: list[Transition], actors: frozenset[str]) -> list[Transition]:
    """The transitions whose actor is not one of `actors`."""
    return [tr for tr in transitions if tr.action.actor not in actors] if actors else transitions
