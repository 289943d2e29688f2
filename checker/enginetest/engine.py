"""torch and transformers for the engine-test mode, and the small random
model it runs (no weights are ever downloaded: the model is built from a
config, its weights drawn from a fixed seed).

Which transformers: the folder in $COWCHECK_TRANSFORMERS_SOURCE (the
folder that holds `transformers/`, as for the allocator adapter,
cowcheck.adapters.transformers), put first on the import path; else the
installed one. The adapter's torch-free stand-ins are forgotten first, so
that the real package, torch included, is what runs here."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cowcheck.adapters import sources
from cowcheck.adapters import transformers as adapter
from cowcheck.model.errors import SpecError

#: the default model: a few layers of a Llama-style config, float32
MODEL = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
SEED = 0
#: the attention the engine runs (continuous batching pages it; "paged|eager" also works); the reference
#: runs "eager" without a cache
ATTENTION = "sdpa"
#: how the mode decodes, as its counterexamples record it: greedy forks
#: would be identical siblings, which no missing copy could tell apart
SAMPLING = ("greedy without forks; with forks, sampling at temperature 1 (no top-k, no top-p) from the engine's "
            f"generator, seeded with {SEED} at each run, so branches diverge, the same way on every run")


@dataclass(frozen=True)
class Release:
    """Which transformers and torch ran, as a result records them."""
    transformers: str
    torch: str
    source: Optional[str]

    def line(self) -> str:
        where = f" from {self.source}" if self.source else ""
        return f"transformers {self.transformers}{where}, torch {self.torch}"


def modules() -> tuple[Any, Any, Release]:
    """torch and transformers, from $COWCHECK_TRANSFORMERS_SOURCE or the
    installed ones."""
    source = adapter.source()
    sources.unload("transformers")
    if source is not None:
        root = str(Path(source).resolve())
        if root not in sys.path:
            sys.path.insert(0, root)
        mod = sys.modules.get("transformers")
        if mod is not None and not str(getattr(mod, "__file__", "")).startswith(root):
            sources._forget(["transformers"])
    import torch
    import transformers
    if source is not None:      # recorded as the folder the modules came from: absolute, links resolved
        root = str(Path(source).resolve())
        if not str(Path(transformers.__file__ or "").resolve()).startswith(root + os.sep):
            raise SpecError(adapter.ENV, "", f"transformers was imported from {transformers.__file__}, not from {root}")
        source = root
    return torch, transformers, Release(transformers.__version__, torch.__version__, source)


def build_model(torch: Any, transformers: Any, attention: str = ATTENTION, overrides: Optional[dict[str, Any]] = None) -> Any:
    """The random Llama-style model, deterministic: float32, one thread,
    torch.manual_seed(SEED) before its weights are drawn."""
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(**{**MODEL, **(overrides or {})})
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=attention, dtype=torch.float32)
    return model.eval()
