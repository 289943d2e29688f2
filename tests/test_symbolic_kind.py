"""k-induction with strengthening lemmas (cowcheck.symbolic.lemmas, .kind).

- Every lemma part holds in every reachable state of small correct
  scenarios (the explicit model's states, each encoded with
  SymbolicSystem.equals, so the z3 predicates are judged on exactly the explicit
  states).
- On buggy scenarios, the lemma parts k-induction kept (proved) hold in
  every reachable state too: a lemma that is false for a protocol is
  dropped, never used.
- k-induction proves every invariant of small correct scenarios at k = 1
  and never proves an invariant the explorer sees broken."""

from __future__ import annotations

from pathlib import Path

import pytest
import z3

from cowcheck import check
from cowcheck.engines.invariants import INVARIANTS
from cowcheck.symbolic.bmc import solve
from cowcheck.symbolic.system import SymbolicSystem
from cowcheck.symbolic.kind import run_kinduction
from cowcheck.symbolic.lemmas import Lemmas
from cowcheck.model.scenario import load_scenario, make_scenario

SPECS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"


def reachable(model) -> list:
    """Every reachable state of a (small) scenario, breadth-first."""
    init = model.init_state()
    seen, frontier = {init}, [init]
    while frontier:
        nxt = []
        for state in frontier:
            for tr in model.successors(state):
                if tr.state is not None and tr.state not in seen:
                    seen.add(tr.state)
                    nxt.append(tr.state)
        frontier = nxt
    return list(seen)


def broken_parts(scenario, keep=None) -> dict[str, object]:
    """The lemma parts (all, or those whose key is in `keep`) that some
    reachable state breaks, each with one such state. One z3 query asks for
    a state among the reachable ones (a disjunction of SymbolicSystem.equals)
    where some part is false; each answer removes the parts it breaks."""
    enc = SymbolicSystem(scenario)
    sym = enc.fresh("r.")
    parts = Lemmas(enc).parts(sym)
    if keep is not None:     # pieces of parts too: k-induction may have kept a piece of a part
        parts = [q for p in parts for q in p.flat() if q.key in keep]
    states = reachable(enc.model)
    member = z3.Or([enc.equals(sym, s) for s in states])
    out: dict[str, object] = {}
    while parts:
        m = solve([member, z3.Or([z3.Not(p.formula) for p in parts])])
        if m is None:
            break
        values = [m.eval(x, model_completion=True).as_signed_long() for x in sym.flat()]
        state = next(s for s in states if enc.values(s) == values)
        bad = [p for p in parts if z3.is_false(m.eval(p.formula, model_completion=True))]
        assert bad
        for p in bad:
            out[f"{p.lemma}: {p.label}"] = state
        parts = [p for p in parts if p not in bad]
    return out


def test_every_lemma_holds_in_every_reachable_state_of_a_shipped_scenario():
    assert broken_parts(load_scenario(SPECS / "cow-one-slot-tail.toml")) == {}


@pytest.mark.parametrize("scenario", [
    make_scenario(2, 3, [(1, False), (1, True)], "cow"),                      # cancellation
    make_scenario(2, 3, [1, 1], "holds"),                                     # holds
    make_scenario(2, 3, [1, 1], "publish-before-copy", device="stream"),      # one stream
    make_scenario(2, 3, [1, 1], "cow", device="streams", reuse="fifo"),
], ids=["cow-cancel", "holds", "publish-before-copy-stream", "cow-streams-fifo"])
def test_every_lemma_holds_in_every_reachable_state(scenario):
    assert broken_parts(scenario) == {}


@pytest.mark.slow
def test_kinduction_proves_a_correct_scenario_at_k1():
    result = run_kinduction(make_scenario(2, 3, [1, 1], "cow"), INVARIANTS, 2)
    assert result.closed_at == {inv.id: 1 for inv in INVARIANTS}
    assert all(v.holds is True for v in result.verdicts.values())
    assert result.complete
    assert all(dropped == 0 for _, dropped in result.lemmas.values())
    data = result.to_json()
    assert data["engine"] == "kind" and data["closed_at"]["faithful-output"] == 1 and "lemma_parts" in data


@pytest.mark.parametrize("scenario", [
    make_scenario(2, 1, [1, 1], "spare-capacity"),
    pytest.param(make_scenario(2, 1, [1, 1], "premature-decrement"), marks=pytest.mark.slow),   # breaks what L = 3 breaks, in half the z3 time
], ids=["spare-capacity", "premature-decrement"])
def test_kinduction_never_proves_what_the_explorer_breaks(scenario):
    explicit = check(scenario, symmetry=False)
    result = run_kinduction(scenario, INVARIANTS, 1)
    broken = {k for k, v in explicit.verdicts.items() if v.holds is False}
    assert broken
    for inv_id in broken:
        assert result.verdicts[inv_id].holds is not True, inv_id
        assert result.closed_at[inv_id] is None
    # what it proved is true, and the lemma parts it used hold in every reachable state
    for inv_id, v in result.verdicts.items():
        if v.holds is True:
            assert inv_id not in broken
    assert broken_parts(scenario, keep=set(result.proven_parts)) == {}
