"""Finding bugs nobody wrote a scenario for (docs/how-to/fuzz.md): random
scenarios drawn with pressure on what breaks (`generators`, over the
choices of `draws`), each checked exhaustively within a budget through the
sweep's task machinery, serially or on Dask (`run`, in the batches of
`batches`, judged in index order), the first violation of
each invariant reduced one change at a time (`greedy`) and then shrunk to the
smallest scenario that still breaks it (cowcheck.sweeps.shrink).

`strategies` offers the same generators to hypothesis, for tests that want
its shrinking on top. `engine` fuzzes the actual engine (`cowcheck
engine-test`'s scenarios, run through cowcheck.enginetest, reduced one
change at a time)."""
