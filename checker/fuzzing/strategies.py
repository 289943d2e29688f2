"""The fuzz generators as hypothesis strategies, for tests that want
hypothesis's shrinking and its database of failures on top of cowcheck's
own (tests/test_engines_random.py). Imports hypothesis, a test dependency:
`cowcheck fuzz` never loads this module.

    @given(scenarios("fork", ("cow",), Knobs(tight_pools=False)))
    def test_cow_holds(scenario): ...

`cowcheck fuzz` itself draws from a seeded `random.Random`
(cowcheck.fuzzing.draws), not from hypothesis: a scenario there must be
drawn again from its seed and index alone, on any Dask worker and in any
order, which hypothesis's engine (one process, its own choice sequence,
`.example()` not reproducible) does not offer; and a finding is shrunk by
cowcheck's shrinker, which knows what a smaller scenario is."""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

from hypothesis import strategies as st

from cowcheck.model.protocol import load_builtin
from cowcheck.model.scenario import Scenario

from cowcheck.fuzzing.generators import Knobs, scenario_of

T = TypeVar("T")


class HypothesisDraw:
    """The generators' choices (cowcheck.fuzzing.draws.Draw) from a
    hypothesis `draw`: shrinking then lowers each choice."""

    def __init__(self, draw: Any):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return int(self.draw(st.integers(low, high)))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.draw(st.integers(0, len(options) - 1))]

    def boolean(self, chance: float = 0.5) -> bool:
        return bool(self.draw(st.booleans()))


@st.composite
def scenarios(draw: Any, kind: str = "fork", protocols: Sequence[str] = ("cow",), knobs: Knobs = Knobs()) -> Scenario:
    """Scenarios of `kind` (fork, cache, transfer) under one of the
    built-in `protocols`, drawn as `cowcheck fuzz` draws them."""
    protocol = load_builtin(draw(st.sampled_from(list(protocols))))
    return scenario_of(HypothesisDraw(draw), kind, protocol, knobs).scenario
