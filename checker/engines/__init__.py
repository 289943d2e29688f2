"""The explicit-state engines: what searches a transition system and what a
search returns. They know nothing of how a step changes a state (that is
cowcheck.model) and nothing of files, pages or commands (the layers above).

- options.py: SearchOptions, the user's choices for a search
- invariants.py: the invariants as named predicates, their kinds, the judge
- explorer.py: breadth-first search with symmetry, partial-order reduction,
  compact states and fingerprints plugged in as functions
- depth_first.py: a depth-first search, the cross-check of the explorer
- explicit.py: one check of one scenario (the staged searches, shortest
  counterexamples, peak and steady measures)
- results.py: verdicts, summaries and each engine's result
- counterexample.py: a trace from the initial state and its file format"""
