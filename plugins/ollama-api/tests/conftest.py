from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from lemoncore.plugin import ModelInfo, ServerProcess, running_server, serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ollama_api_support import EMBED, SMOLLM2, hub_model, smollm2_gguf


@pytest.fixture(scope="module")
def pulled() -> ModelInfo:
    return hub_model()


@pytest.fixture(scope="module")
def gguf_bytes() -> bytes:
    return smollm2_gguf().read_bytes()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, pulled: ModelInfo, gguf_bytes: bytes
) -> Iterator[ServerProcess]:
    """One real server (llamacpp and this plugin only) with a Hugging Face-shaped hub
    serving the catalogue's hub model, and SmolLM2 registered as an embeddings model."""
    repo, _, filename = pulled.checkpoint.partition(":")
    tmp = tmp_path_factory.mktemp("ollama-api")
    with serve_hub({f"{repo}/{filename}": gguf_bytes}) as hub:
        env = {
            "LEMON_PLUGINS_ALLOW": "llamacpp,ollama-api",
            "HF_ENDPOINT": hub,
            "HF_HOME": str(tmp / "hf"),
            "HF_HUB_OFFLINE": "0",
        }
        with running_server(tmp / "lemon", env) as s:
            httpx.post(
                s.url + "/api/v1/pull",
                json={
                    "model_name": EMBED,
                    "checkpoint": SMOLLM2,
                    "recipe": "llamacpp",
                    "labels": ["embeddings"],  # SmolLM2 is a chat model: it needs a pooling
                    "recipe_options": {"llamacpp_args": "--pooling mean"},
                },
            ).raise_for_status()
            yield s


@pytest.fixture
def client(server: ServerProcess) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.url, timeout=120) as c:
        yield c
