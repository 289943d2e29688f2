"""The engine-test mode: scenarios run in a real inference engine on the CPU
(Hugging Face transformers' continuous batching), every schedule of their
submissions and cancels from scratch, with a shadow of every KV slot
(docs/how-to/engine-test.md).

- scenario.py: the scenario files of specs/engine/ (an `[engine]` table)
- engine.py: importing torch and transformers, and the small random model
- shadow.py: the slot shadow and the invariants, read from the engine's tables
- run.py: one schedule, driven step by step through the manager
- explore.py: every schedule within the bounds, and the verdicts
- trace.py: the counterexample files (kind "engine"), read back by explain,
  html (page.py) and replay

torch and transformers are the optional extra `cowcheck[engine]`; without
them `missing()` names what to install."""

from __future__ import annotations

import importlib.util
from typing import Optional

#: the one line a run without the extra prints
INSTALL = 'pip install "cowcheck[engine]"'


def missing() -> Optional[str]:
    """None when torch and transformers are importable, else one line that
    says what to install."""
    absent = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"the engine-test mode needs {' and '.join(absent)}: {INSTALL}"
