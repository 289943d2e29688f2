"""Allocator code shipped with cowcheck to keep the engine harness honest
(docs/semantics.md#engine-harness).

`engine` holds a block manager written the way inference engines write
theirs (vLLM v0's BlockSpaceManager: a LIFO free list, refcounts, one block
table per sequence, copy-on-write of a shared partial last block), the few
lines of adapter that expose it to the harness, and buggy variants of it.
Each has a factory `(pool, block_size) -> adapter`, referenced from a
scenario as `cowcheck.specs.allocators.engine:<factory>`, and a protocol file
in specs/protocols/ (`engine*.toml`) describing the same step order: on the
same scenarios the harness must reach the verdicts of those files.
"""
