"""cowcheck as a library: what an engine team's own tests import.

    import cowcheck

    scenario = cowcheck.load_scenario("specs/scenarios/cow-two-writers.toml")
    result = cowcheck.check(scenario)
    assert result.summary is cowcheck.Summary.DISCIPLINED
    cowcheck.assert_holds(scenario)                       # pytest-friendly
    cx = cowcheck.check(racy).verdicts["faithful-output"].counterexample
    print(cowcheck.explain(cx))

Nothing here writes a file unless asked (`write_result`, `Counterexample.write`);
the command line is a thin layer over these functions."""

from __future__ import annotations

from dataclasses import dataclass, replace as _replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from cowcheck.model.errors import KindMismatch, SpecError
from cowcheck.model.protocol import Protocol, load_builtin, load_protocol, protocol_from_dict
from cowcheck.model.protocol import load_builtin as builtin_protocol
from cowcheck.model.harness import HarnessModel, OutOfBlocks, allocator_label
from cowcheck.model.scenario import Scenario, default_pool, harness_pool, load_scenario

from cowcheck.engines import explicit as _explicit
from cowcheck.traces.pool import PoolReplay, replay_on_pool
from cowcheck.views.explain import explain_text
from cowcheck.engines.options import SearchOptions
from cowcheck.engines.default import default_engine
from cowcheck.engines.invariants import INVARIANTS, Invariant
from cowcheck.traces.replay import Replayed, replay as _replay_model
from cowcheck.engines.results import Engine, Outcome, Result
from cowcheck.engines.counterexample import Counterexample

if TYPE_CHECKING:
    from cowcheck.enginetest.explore import EngineResult
    from cowcheck.enginetest.scenario import EngineScenario

ScenarioLike = Union[Scenario, str, Path]


def make_protocol(definition: dict[str, Any], name: str = "protocol") -> Protocol:
    """A protocol built in code from the same tables a protocol file has
    (`append` with `rules` and `paths`, optional `cancel` and `finish`),
    validated like a file."""
    return protocol_from_dict(definition, f"<protocol {name}>", default_name=name)


def as_scenario(scenario: ScenarioLike) -> Scenario:
    return scenario if isinstance(scenario, Scenario) else load_scenario(Path(scenario))


def resolve_protocol(ref: Union[Protocol, str, Path], source: str = "--protocol") -> Protocol:
    """A protocol given as an object, a built-in name or a path to a TOML file."""
    if isinstance(ref, Protocol):
        return ref
    text = str(ref)
    if "/" in text or text.endswith(".toml"):
        return load_protocol(Path(text))
    try:
        return load_builtin(text)
    except SpecError as err:
        raise SpecError(source, "protocol", err.message) from None


def with_overrides(scenario: Scenario, protocol: Union[Protocol, str, Path, None] = None,
                   device: Optional[str] = None, reuse: Optional[str] = None, allocator: Optional[str] = None,
                   transfer: Optional[str] = None, scheduler: Optional[str] = None) -> Scenario:
    """The scenario under another protocol (or allocator code, a
    "module:factory" reference, a path resolved from the working folder),
    device model, reuse order or transfer model (cache scenarios only). It
    is renamed (`name~protocol-device-reuse`, a transfer scenario's with
    `-transfer` after it, or `name~allocator-device` for allocator code), so
    its counterexample files never overwrite those of the scenario as
    written, and its `expect` is dropped: it was written for what the file
    checks, not for the override. A reuse order for allocator code is
    refused: the code takes free blocks in its own order."""
    if protocol is None and device is None and reuse is None and allocator is None and transfer is None and scheduler is None:
        return scenario
    changed = scenario.with_overrides(resolve_protocol(protocol) if protocol is not None else None, device, reuse, transfer)
    if allocator is not None:
        changed, _ = with_allocator(changed, allocator, base=Path.cwd())
    if scheduler is not None:
        changed = with_scheduler(changed, scheduler, base=Path.cwd())
    if changed.scheduler is not None:
        if reuse is not None:
            raise SpecError("--reuse", "", "scheduler code takes free blocks in its own order; --reuse applies to protocol files only")
        return _replace(changed, name=f"{changed.name}~{allocator_label(changed.scheduler)}-{changed.device}-{changed.transfer}", expect=())
    if changed.allocator is not None:
        if reuse is not None:
            what = "not with --allocator: allocator code" if allocator is not None else f"{scenario.source} checks allocator code, which"
            raise SpecError("--reuse", "", f"{what} takes free blocks in its own order; --reuse applies to protocol files only")
        return _replace(changed, name=f"{changed.name}~{allocator_label(changed.allocator)}-{changed.device}", expect=())
    transfer_model = f"-{changed.transfer}" if changed.transfers else ""    # only a transfer scenario's checks depend on it
    return _replace(changed, name=f"{changed.name}~{changed.protocol.name}-{changed.device}-{changed.reuse}{transfer_model}", expect=())


def check(scenario: ScenarioLike, *, engine: Union[Engine, str, None] = None,
          invariants: tuple[Invariant, ...] = INVARIANTS, depth: int = 20,
          options: Optional[SearchOptions] = None, progress: Optional[Callable[..., None]] = None,
          allocator: Union[Callable[[int, int], Any], str, None] = None, array: str = "numpy",
          **search: Any) -> Result:
    """Check a scenario (an object or a path) with one engine and return its
    result: a verdict per invariant (each violated one with its shortest
    counterexample), the summary, whether `expect` is met, and the engine's
    figures. `depth` bounds the z3 engines. The explorer searches under
    `options` (cowcheck.engines.options.SearchOptions: the command line's
    flags), or under the options named as keywords, e.g.
    `check(path, symmetry=False, max_states=10_000)`. `allocator`: check
    allocator code through the engine harness instead of the scenario's
    protocol (a factory `(pool, block_size) -> adapter`, or its
    "module:factory" reference; docs/how-to/allocator-code.md). `array`:
    the frontier engine's array module, numpy or cupy. `engine` None:
    the explorer, or the frontier engine where it is the faster one
    (cowcheck.engines.default). Writes nothing."""
    if options is not None and search:
        raise SpecError("check()", sorted(search)[0], "give the search options either as `options` or as keywords, not both")
    options = options if options is not None else SearchOptions.of(**search)
    scenario = as_scenario(scenario)     # each engine validates its `expect` against the invariants
    system = None
    if allocator is not None:
        scenario, system = with_allocator(scenario, allocator)
    engine = default_engine(scenario, options) if engine is None else Engine(engine)
    if engine is Engine.EXPLICIT:
        return _explicit.explore(scenario, options, invariants=invariants, progress=progress, system=system)
    if engine is Engine.FRONTIER:
        from cowcheck.engines.frontier import explore_frontier
        from cowcheck.traces.pool import array_module     # the replay's numpy/CuPy switch: one for both
        return explore_frontier(scenario, options, invariants=invariants, progress=progress, xp=array_module(array),
                                array=array)
    if scenario.allocator is not None:
        raise SpecError(scenario.source, "allocator", f"the {engine} engine checks protocol files; allocator code is checked by the explorer (--engine explicit)")
    if scenario.scheduler is not None:
        raise SpecError(scenario.source, "scheduler", f"the {engine} engine checks protocol files; scheduler code is checked by the explorer (--engine explicit)")
    from cowcheck import symbolic   # z3 loads only for the engines that use it
    run = symbolic.run_bmc if engine is Engine.BMC else symbolic.run_kinduction
    return run(scenario, invariants, depth)


def with_allocator(scenario: Scenario, allocator: Union[Callable[[int, int], Any], str],
                   base: Optional[Path] = None) -> tuple[Scenario, HarnessModel]:
    """The scenario with allocator code in place of its protocol, and the
    harness that runs it. A factory object is named by its module and
    qualified name, so a counterexample file can import it again; a
    reference's path is relative to `base` (default: the scenario's folder)."""
    if isinstance(allocator, str):
        folder = base if base is not None else Path(scenario.source).parent
        changed = _replace(scenario, allocator=allocator, allocator_base=str(folder))
        factory = None
    else:
        ref = f"{getattr(allocator, '__module__', '?')}:{getattr(allocator, '__qualname__', repr(allocator))}"
        changed, factory = _replace(scenario, allocator=ref), allocator
    if scenario.allocator is None and scenario.pool == default_pool(scenario.protocol, scenario.block_size, scenario.prompt,
                                                                    scenario.branches, scenario.cache):
        changed = _replace(changed, pool=harness_pool(scenario.block_size, scenario.prompt, scenario.branches, scenario.cache))
    return changed, HarnessModel(changed, factory)


def with_scheduler(scenario: Scenario, scheduler: str, base: Optional[Path] = None) -> Scenario:
    """The scenario with scheduler code (a "module:factory" reference, a
    path relative to `base`, default the scenario's folder) in place of its
    protocol, checked through the scheduler harness
    (cowcheck.model.scheduler); cache scenarios only."""
    if not scenario.cache:
        raise KindMismatch(scenario.source, "scheduler", 'a scheduler admits requests with their own prompts: only a cache '
                           'scenario (cache = "prefix") has one', "fork", "a scheduler runs cache scenarios only")
    folder = base if base is not None else Path(scenario.source).parent
    changed = _replace(scenario, scheduler=scheduler, allocator=None, allocator_base=str(folder))
    if scenario.scheduler is None and scenario.pool == default_pool(scenario.protocol, scenario.block_size, scenario.prompt,
                                                                    scenario.branches, scenario.cache):
        changed = _replace(changed, pool=harness_pool(scenario.block_size, scenario.prompt, scenario.branches, scenario.cache))
    return changed


def load_counterexample(path: Union[str, Path], scenario: Optional[ScenarioLike] = None) -> Counterexample:
    """Read a counterexample file; with `scenario`, refuse it unless it was
    made for that scenario (name and source aside)."""
    cx = Counterexample.load(Path(path))
    if scenario is not None:
        mine, theirs = cx.scenario.definition(), as_scenario(scenario).definition()
        for key in ("name", "source"):
            mine.pop(key), theirs.pop(key)
        if mine != theirs:
            differ = [k for k in mine if mine[k] != theirs.get(k)]
            raise SpecError(str(path), "scenario", f"this counterexample is for another scenario ({', '.join(differ)} differ from {scenario})")
    return cx


@dataclass
class Replay:
    """A counterexample re-run: in the model (same violation at the same
    step?) and, unless `pool` is "none", on a real KV pool. `ok` says both
    agree with the file: for faithful-output, the pool's first wrong output
    must be at the model's violating step."""
    model: Replayed
    pool: Optional[PoolReplay]
    pool_message: Optional[str]

    @property
    def ok(self) -> bool:
        return self.model.ok and self.pool_message is None


def replay(cx: Counterexample, *, pool: str = "numpy", invariants: tuple[Invariant, ...] = ()) -> Replay:
    """Re-run a counterexample in the model and on a real pool ("numpy",
    "cupy" or "none"). A custom invariant's file needs its definition in
    `invariants` (a counterexample from `check` in this process carries it).
    A transfer scenario's pool has a host tier too, and a send's read is
    judged there as the remote reader's output. Scheduler code replays in
    the model by re-driving the same scheduler, and on the pool from its
    plans (each kernel's positions, each transfer's block)."""
    model = _replay_model(cx, invariants)
    applied = len(model.transitions) == len(cx.actions)   # the pool takes block ids from actions the model enabled
    on_pool = replay_on_pool(cx.scenario, cx.actions, pool, initial=cx.initial, states=cx.states) \
        if pool != "none" and applied else None
    message = None
    if pool != "none" and not applied:
        message = "not replayed: the trace does not apply in the model"
    elif on_pool is not None and cx.invariant == "faithful-output":
        first = on_pool.first_divergence
        if first is None or first.step != cx.length:
            message = f"the pool's first divergence is at step {first.step if first else 'none'}, the model's at step {cx.length}"
    return Replay(model, on_pool, message)


def explain(cx: Counterexample, invariants: tuple[Invariant, ...] = ()) -> str:
    """The counterexample narrated step by step, as plain text."""
    return explain_text(cx, invariants)


def page(cx: Counterexample, invariants: tuple[Invariant, ...] = (), pool: bool = True) -> str:
    """A self-contained HTML page that steps through the counterexample
    (what `cowcheck html` writes), with each kernel's decoded output on a
    numpy pool unless `pool` is False."""
    from cowcheck.views.html import stepper_html
    from cowcheck.views.pages import decoded_on_pool, page_data
    from cowcheck.traces.replay import judging, replayed_as_recorded
    inv = judging(cx, invariants)
    data = page_data(cx, replayed_as_recorded(cx, invariants))
    return stepper_html(data, decoded_on_pool(cx) if pool else None, inv.holds_when if inv else None)


# -- assertions for an engine team's pytest suite ------------------------------
class CheckFailed(AssertionError):
    """A cowcheck assertion failed; the message explains the shortest
    counterexample (or why none could be judged)."""


def _failure(result: Result, broken: list[Any], wanted: str, invariants: tuple[Invariant, ...]) -> CheckFailed:
    shortest = min(broken, key=lambda v: v.length or 0)
    head = (f"{result.scenario.name}: expected {wanted}, but {', '.join(f'{v.invariant} ({v.length} actions)' for v in broken)} "
            f"broke. The shortest counterexample, {shortest.invariant}:\n\n")
    body = explain(shortest.counterexample, invariants) if shortest.counterexample else ""
    return CheckFailed(head + body)


def _undecided(result: Result, wanted: str) -> Optional[CheckFailed]:
    if result.complete:
        return None
    return CheckFailed(f"{result.scenario.name}: expected {wanted}, which a partial run cannot confirm "
                       f"(stopped: {result.stopped})")


def assert_holds(scenario: ScenarioLike, invariant: Optional[str] = None, **options: Any) -> Result:
    """Assert that every invariant (or the one named) holds, exhaustively."""
    invariants = options.get("invariants", INVARIANTS)
    result = check(scenario, **options)
    verdicts = [v for v in result.verdicts.values() if invariant is None or v.invariant == invariant]
    if invariant is not None and not verdicts:
        raise CheckFailed(f"{invariant} was not checked; checked: {', '.join(result.verdicts)}")
    wanted = f"{invariant} to hold" if invariant else "every invariant to hold"
    broken = [v for v in verdicts if v.outcome is Outcome.VIOLATED]
    if broken:
        raise _failure(result, broken, wanted, invariants)
    failure = _undecided(result, wanted)
    if failure:
        raise failure
    return result


def assert_safe(scenario: ScenarioLike, **options: Any) -> Result:
    """Assert that no harm invariant breaks (discipline ones may)."""
    invariants = options.get("invariants", INVARIANTS)
    result = check(scenario, **options)
    broken = [v for v in result.verdicts.values() if v.outcome is Outcome.VIOLATED and v.kind == "harm"]
    if broken:
        raise _failure(result, broken, "no harm invariant to break", invariants)
    failure = _undecided(result, "safety")
    if failure:
        raise failure
    return result


def assert_violates(scenario: ScenarioLike, invariant: str, length: Optional[int] = None, **options: Any) -> Counterexample:
    """Assert that `invariant` breaks (with a shortest trace of exactly
    `length` actions, if given); returns its counterexample."""
    result = check(scenario, **options)
    verdict = result.verdicts.get(invariant)
    if verdict is None:
        raise CheckFailed(f"{invariant} was not checked; checked: {', '.join(result.verdicts)}")
    if verdict.outcome is not Outcome.VIOLATED or verdict.counterexample is None:
        raise CheckFailed(f"{result.scenario.name}: expected {invariant} to break, but its verdict is {verdict.outcome}"
                          + (f" (stopped: {result.stopped})" if result.stopped else ""))
    if length is not None and verdict.length != length:
        raise CheckFailed(f"{result.scenario.name}: expected a shortest {invariant} violation of {length} actions, "
                          f"found {verdict.length}:\n\n{explain(verdict.counterexample, options.get('invariants', ()))}")
    return verdict.counterexample


def engine_test(scenario: Union[str, Path, "EngineScenario"], *, max_schedules: int = 1000) -> "EngineResult":
    """Run an engine scenario (specs/engine/) in transformers' continuous
    batching on the CPU, every schedule within `max_schedules`, and judge
    every invariant (docs/how-to/engine-test.md). Needs torch and
    transformers: `pip install "cowcheck[engine]"`; a SpecError says so."""
    from cowcheck.enginetest import missing
    from cowcheck.enginetest.explore import explore
    from cowcheck.enginetest.scenario import EngineScenario, load
    why = missing()
    if why is not None:
        raise SpecError("engine-test", "", why)
    loaded = scenario if isinstance(scenario, EngineScenario) else load(Path(scenario))
    return explore(loaded, max_schedules=max_schedules)
