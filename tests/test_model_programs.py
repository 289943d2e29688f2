"""Branch programs (docs/semantics.md#branch-programs): beam forks in the
middle of generation and speculative decoding with rollback. The reference
rows are reproduced exactly; the rules that decide verdicts and lengths
(verify's successors, unborn children, token names, the published-table
rule, trim) are each pinned by a small test."""

from __future__ import annotations

import pytest

from conftest import broken
from cowcheck import check
from cowcheck.model.block import Draft
from cowcheck.model.scenario import make_scenario
from cowcheck.model.state import Status
from cowcheck.model.system import ProtocolModel

FORK = [{"program": ["append", "fork c", "append"]}, {"appends": 1}, {"program": ["append"], "parent": "a"}]
SPECULATE = [{"program": ["speculate 2", "append"]}, {"appends": 1}]

# docs/semantics.md#reference-numbers, the rows with programs (async, lifo, B=2, L=3)
REFERENCE = [
    ("cow", FORK, {}, 6, (1, 2)),
    ("fork-share-first", FORK, {"no-use-after-free": 23, "faithful-output": 32, "copy-before-use": 33, "exclusive-write": 36,
                                "no-underflow": 36, "refcount-exact": 42, "refcount-write": 44}, 6, (1, 2)),
    ("cow", SPECULATE, {}, 5, (1, 2)),
    ("rollback-no-trim", SPECULATE, {}, 6, (1, 2)),
]


@pytest.mark.parametrize("protocol,branches,violations,peak,copies", REFERENCE,
                         ids=["cow-fork", "fork-share-first", "cow-speculate", "rollback-no-trim"])
@pytest.mark.parametrize("symmetry", [False, True], ids=["plain", "symmetry"])
def test_reference_rows(protocol, branches, violations, peak, copies, symmetry):
    result = check(make_scenario(2, 3, branches, protocol), symmetry=symmetry)
    assert result.exploration.complete
    assert broken(result) == violations
    assert result.exploration.peak == peak
    assert result.exploration.cost_range == copies


def walk(model, state, *labels):
    """Follow the transitions whose action prints as each label, in turn."""
    for label in labels:
        options = [t for t in model.successors(state) if str(t.action).startswith(label)]
        assert options, f"no {label!r} from {[str(t.action) for t in model.successors(state)]}"
        state = options[0].state
    return state


def test_verify_has_a_successor_per_accepted_count_and_names_are_never_reused():
    model = ProtocolModel(make_scenario(2, 3, [{"program": ["speculate 2", "append"]}], "cow"))
    state = walk(model, model.init_state(), *["a (append)"] * 2, "device", "a (append)",     # a1 in place
                 *["a (append)"] * 5, "device", "a (append)")                              # a2 on a fresh block
    verifies = [t for t in model.successors(state) if t.action.step == "verify"]
    assert [dict(t.action.binds) for t in verifies] == [{"accepted": j, "rejected": 2 - j} for j in range(3)]
    rejected_all = verifies[0].state
    after = walk(model, rejected_all, "a (rollback): wait-kernel", "a (rollback): rewind", "a (rollback): trim",
                 "a (rollback): publish")
    a = after.branches[0]
    assert (a.pos, a.seq, a.working, a.writes) == (3, ("p0", "p1", "p2"), (0, 1), 2)
    assert 2 in after.free                                  # trim released the draft's fresh block
    assert after.blocks[1].slots == ("p2", "a1")            # the rejected draft's token stays as garbage
    writes = [t for t in model.successors(walk(model, after, "a (append): decide")) if t.action.step == "write"]
    assert dict(writes[0].action.binds)["token"] == "a3"   # a1 and a2 were rejected: never named again


def test_a_child_is_unborn_until_shared_and_counts_its_own_writes():
    model = ProtocolModel(make_scenario(2, 3, [{"program": ["fork b"]}, {"appends": 1, "parent": "a"}], "cow"))
    state = model.init_state()
    assert state.branches[1].status is Status.UNBORN and state.branches[1].working == ()
    assert state.blocks[0].refcount == 1                  # only the root holds the prompt
    assert all(t.action.actor == "a" for t in model.successors(state))
    state = walk(model, state, "a (fork): wait-kernel", "a (fork): incref-all")
    assert state.blocks[0].refcount == 2 and state.branches[1].status is Status.UNBORN
    state = walk(model, state, "a (fork): share")
    b = state.branches[1]
    assert (b.status, b.pos, b.seq, b.working, b.published) == (Status.RUNNING, 3, ("p0", "p1", "p2"), (0, 1), (0, 1))
    state = walk(model, state, "b (append): decide", "b (append): alloc", "b (append): copy", "device", "b (append): wait-copy",
                 "b (append): replace", "b (append): publish", "b (append): decref")
    write = next(t for t in model.successors(state) if t.action.step == "write")
    assert dict(write.action.binds)["token"] == "b1"


def test_cancelling_a_parent_cancels_its_unborn_children():
    scenario = make_scenario(2, 3, [{"program": ["append", "fork b"], "may_cancel": True}, {"program": ["fork c"], "parent": "a"},
                                    {"appends": 1, "parent": "b"}], "cow")
    model = ProtocolModel(scenario)
    state = walk(model, model.init_state(), "a (cancel): wait-kernel", "a (cancel): decref-all")
    assert [b.status for b in state.branches] == [Status.CANCELLED] * 3
    assert model.is_final(state)
    assert check(scenario).verdicts["no-leak"].holds


def test_cancel_comes_between_drafts_and_before_verify_never_inside_a_rollback():
    model = ProtocolModel(make_scenario(2, 3, [{"program": ["speculate 1"], "may_cancel": True}], "cow"))
    state = walk(model, model.init_state(), *["a (append)"] * 2, "device", "a (append)")
    assert {t.action.step for t in model.successors(state)} == {"verify", "wait-kernel"}   # cancel's first step
    state = walk(model, state, "a (rollback): verify")
    assert {t.action.op for t in model.successors(state)} == {"rollback"}


def test_a_trimmed_block_still_in_the_published_table_past_pos_is_not_a_use():
    """cow's rollback frees a rejected draft's block (trim) one action before
    `publish` drops it from the published table: not a use-after-free."""
    result = check(make_scenario(2, 3, [{"program": ["speculate 2"]}], "cow"))
    assert result.verdicts["no-use-after-free"].holds


def test_incref_of_a_free_block_leaves_it_on_the_free_list():
    model = ProtocolModel(make_scenario(2, 3, [{"appends": 1}], "cow"))
    d = Draft(model.init_state(), "lifo")
    from cowcheck.model import block
    block.incref(d, 2)
    assert 2 in d.free and d.blocks[2].refcount == 1


def test_default_pool_counts_drafts_forks_and_rollback_allocs():
    scenario = make_scenario(2, 3, [{"program": ["speculate 3", "fork b"]}, {"appends": 2, "parent": "a"}], "cow")
    assert scenario.pool == 2 + (3 + 2) * 1
    assert [b.appends for b in scenario.branches] == [3, 2]
