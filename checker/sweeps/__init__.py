"""Sweeps: grids of scenarios, each cell checked by `cowcheck.api.check` as
one task, serially in this process or as Dask tasks (docs/how-to/sweeps.md);
shrinking a counterexample to the smallest scenario that still shows it
(docs/how-to/shrinking.md); and the sweep's HTML page.

- grid.py: the grid file's format and validation, and a grid's expansion
  into cells in the documented order
- cells.py: a cell (its coordinates as a named scenario, what its check
  found, its verdict) and the order on scenarios by size
- runner.py: a check as plain data (`task_for`), checked by `run_cell`,
  and the Runner that runs many, serially or on Dask
- sweep.py: a sweep (`cowcheck.sweep`): the cells of grids run and their
  results collected, with `--json` checkpoints to resume from
- shrink.py: shrinking, its candidates checked in size order through the
  Runner
- page.py: the sweep's HTML page, with the stepper pages it links to

Nothing is imported here; Dask only when a Runner first starts a cluster
or connects to one."""
