"""cowcheck's engines and tools: the explorer, invariant evaluation, traces,
replay, explanation and the command line. The model (package `cowcheck.model`) knows
nothing of search; this package knows nothing of how a step changes a state."""
