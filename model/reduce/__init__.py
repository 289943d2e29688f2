"""The reductions the explorer may apply: pure functions of states (and of
the scenario), with no search of their own; the searches that use them are
in cowcheck.engines.

- Symmetry (symmetry.py): one canonical member of each state's orbit under
  renaming interchangeable branches and block ids, and the moves that
  mirror a twin's. Its parts: signature.py (a branch described without
  names), relabel.py (a state renamed by a branch order) and refine.py
  (splitting signature ties in classes of more than three branches).
- Partial-order reduction (ample.py): states where one branch's actions can
  be explored alone without losing any verdict or measure.

Nothing is re-exported: import from the module that defines a name."""
