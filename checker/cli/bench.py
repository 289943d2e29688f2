"""`cowcheck bench`: the speed of exploration, replay, z3 and sweeps on fixed
benchmarks (the measuring code is cowcheck.bench)."""

from __future__ import annotations

import click

from cowcheck.cli.common import console, fail
from cowcheck.model.errors import SpecError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--counterexamples", "folder", default="counterexamples", show_default=True, type=click.Path(file_okay=False),
              help="Whose files the replay line replays.")
@click.option("--full", is_flag=True, help="Also run the slow ones: 4x2 unreduced (3.3 million states), 5x2, 6x2 and 8x1.")
@click.option("--branches", is_flag=True, help="Instead: symmetry as branches grow (cow B=4 L=6, 2-8 x 1 and 2-6 x 2 appends).")
@click.option("--profile", is_flag=True, help="Instead: where the time goes per state (successors, invariants, canonical form, storage).")
@click.option("--floor", is_flag=True, help="Instead: 6x1 and 5x2 as they are and with the canonical form looked up "
              "in a table the first run recorded (what a free canonical form would leave).")
@click.option("--choice", is_flag=True, help="Instead: the default check's choice of partial-order reduction against "
              "--por and --no-por, on protocols that hold as branches grow and on every shipped scenario.")
@click.option("--limit", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a --branches, --profile, --floor or --choice row may search; then it stops and reports "
                   "what it explored.")
@click.option("--sweep", "sweep_bench", is_flag=True,
              help="Measure sweeps instead: ~200 small cells serially and on 1 and 2 Dask workers (cells/s, speed-up), "
                   "and the per-task overhead on trivial cells.")
@click.option("--fuzz", "fuzz_bench", is_flag=True,
              help="Measure `cowcheck fuzz` instead: scenarios per second per scenario kind, and the time to find each "
                   "shipped bug protocol's violation from seed 0.")
@click.option("--engine-test", "engine_bench", is_flag=True,
              help="Measure `cowcheck engine-test` instead: schedules per second on a fork and a prefix-sharing "
                   "scenario of specs/engine, and where the time goes (model forward, monitor, reference); "
                   "skipped in one line without torch and transformers.")
@click.option("--only", metavar="TEXT",
              help="Run only the rows whose label contains TEXT (any case), in the main table or with --choice: "
                   "e.g. --only prefix-cache.")
def bench(as_json, folder, full, branches, profile, floor, choice, limit, sweep_bench, fuzz_bench, engine_bench, only) -> None:
    """Measure exploration and replay speed on fixed benchmarks, with and
    without reductions, and z3 BMC's time to a shortest violation next to
    the explorer's."""
    from cowcheck.bench.branches import run_branches, run_floor, run_profile
    from cowcheck.bench.choice import run_choice
    from cowcheck.bench.enginetest import run_engine_benchmarks
    from cowcheck.bench.fuzz import run_fuzz_benchmarks
    from cowcheck.bench.sweeps import run_sweep_benchmarks
    from cowcheck.bench.table import run_benchmarks
    try:
        if only is not None and (sweep_bench or fuzz_bench or engine_bench or branches or profile or floor):
            raise SpecError("bench", "--only", "selects rows of the main table or of --choice; "
                            "not allowed with --sweep, --fuzz, --engine-test, --branches, --profile or --floor")
        if sweep_bench:
            run_sweep_benchmarks(console, as_json)
            return
        if fuzz_bench:
            run_fuzz_benchmarks(console, as_json)
            return
        if engine_bench:
            run_engine_benchmarks(console, as_json)
            return
        if choice:
            run_choice(console, as_json, limit, only)
            return
        if branches or profile or floor:
            if branches:
                run_branches(console, as_json, limit)
            if profile:
                run_profile(console, as_json, limit)
            if floor:
                run_floor(console, as_json, limit)
            return
        run_benchmarks(console, as_json, folder, full, only)
    except SpecError as error:
        fail(error)

