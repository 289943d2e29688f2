"""The measuring code of `cowcheck bench` (the command itself is
cowcheck.cli.bench): fixed benchmarks of how fast cowcheck explores,
replays, runs z3 and sweeps. Speed is measured by `cowcheck bench`, never
in a timed test: the tests call these functions only for what they compute
(a row is stopped at its limit, a replay replays every file), not for how
long they take.

- child: one row in a fresh child process, with a time limit (in_child)
- table: the default run, exploration with and without reductions, BMC
  next to the explorer, the engine harness, end to end (run_benchmarks)
- replay: replay speed over counterexamples (replayable, replay_figures)
- branches: symmetry as branches grow, where the time goes, and the
  canonical form's floor (run_branches, run_profile, run_floor; one row:
  measure_branches, measure_profile, measure_floor)
- sweeps: sweeps serially and on Dask workers (run_sweep_benchmarks)
- enginetest: the engine-test mode's schedules per second and where a run's
  time goes (run_engine_benchmarks)

Nothing is imported here: importing the package costs nothing, and each
module pulls in only the engines it measures."""
