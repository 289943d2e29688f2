"""Which engine a check without `--engine` (or `engine=` in the API) uses.

The explorer (cowcheck.engines.explicit) is the reference and the default:
it covers every scenario kind and every option. The frontier engine
(cowcheck.engines.frontier) is chosen instead where it is the faster one
by a wide margin and gives the same answer: a protocol-file scenario it
covers (`rows.refusal`), with FRONTIER_BRANCHES branches or more, and no
option only the explorer has (`--compact`, `--fingerprints`). There, with
symmetry and partial-order reduction as rows, it gives the explorer's
verdicts, shortest lengths and measures (tests/test_engines_frontier.py)
several times sooner (docs/explanation/speed.md: cow B=4 L=6 8x1, 6x2 and
the cancellable B=2 L=3 6x2). Below that many branches the explorer's
reduced spaces are small and its fixed costs lower; every shipped
scenario has four branches or fewer, so `cowcheck check specs/` and its
committed counterexamples are the explorer's."""

from __future__ import annotations

from cowcheck.model.scenario import Scenario
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.results import Engine
from cowcheck.engines.rows import refusal

#: the fewest branches at which a check without --engine runs the frontier engine
FRONTIER_BRANCHES = 5


def default_engine(scenario: Scenario, options: SearchOptions) -> Engine:
    """The engine for a check that names none (allocator and scheduler code
    are the explorer's: `refusal` names them)."""
    if options.compact or options.fingerprints or len(scenario.branches) < FRONTIER_BRANCHES \
            or refusal(scenario) is not None:
        return Engine.EXPLICIT
    return Engine.FRONTIER
