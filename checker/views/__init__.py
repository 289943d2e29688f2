"""The views: how a person sees what the checker found. Each module holds one.

- words: the sentences every view of a trace shares (what an action did,
  where a branch is in its program, what a witness shows), in plain text;
  it draws nothing and imports no rich.
- explain: `cowcheck explain`, a counterexample narrated step by step in the
  terminal with rich (and `explain_text`, the same as plain text).
- html: self-contained HTML pages: the skeleton every page shares
  (`document`), the counterexample stepper and the index of a
  `cowcheck check --html` run. No rich.
- graph: the block graph at one step of a counterexample (`cowcheck graph`),
  as SVG, Graphviz DOT or PNG.
- lab: the cache lab (`cowcheck lab`) and its interactive page.
- pages: what the pages are drawn from (a counterexample as the model replays
  it, its kernels' output on a KV pool) and the pages of one
  `cowcheck check --html DIR` run.
- junit: the results as JUnit XML for CI systems (`cowcheck check --junit-xml`).
- report: how results look in the terminal: a rich table per scenario, the
  one-line summary and the measures.
- comparison: what changed between two runs (`cowcheck diff`), as a rich table.
- assets/: the scripts and styles (package data) that html inlines into
  every page, so a page opened from disk needs no network.

Importing this package imports none of them."""
