"""What a scenario checks: a protocol file's model, allocator code through
the engine harness, or scheduler code through the scheduler harness. Its
own module because the scheduler harness extends the engine harness: the
choice between them belongs to neither."""

from __future__ import annotations

from cowcheck.model.harness import HarnessModel
from cowcheck.model.scenario import Scenario
from cowcheck.model.scheduler import SchedulerModel
from cowcheck.model.system import ProtocolModel, TransitionSystem


def system_for(scenario: Scenario) -> TransitionSystem:
    """The transition system a scenario is checked on."""
    if scenario.allocator is not None:
        return HarnessModel(scenario)
    if scenario.scheduler is not None:
        return SchedulerModel(scenario)
    return ProtocolModel(scenario)
