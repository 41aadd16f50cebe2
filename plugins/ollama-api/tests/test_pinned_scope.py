"""Through Ollama's API a request does to a pinned model only what it could through
``/api/v1``: with the API key alone it cannot reload it with other options, nor unload
it; with the admin key it can, and a reload keeps the pin."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from lemoncore.plugin import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ollama_api_support import CHAT

API, ADMIN = "api-key-1", "admin-key-2"
SAY = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "LEMON_PLUGINS_ALLOW": "llamacpp,ollama-api",
        "LEMON_API_KEY": API,
        "LEMON_ADMIN_API_KEY": ADMIN,
    }
    with running_server(tmp_path_factory.mktemp("pinned") / "lemon", env) as s:
        yield s


def health(server: ServerProcess) -> dict[str, dict[str, object]]:
    reply = httpx.get(server.url + "/api/v1/health", headers={"x-api-key": API}).json()
    return {m["model_name"]: m for m in reply["all_models_loaded"]}


def pin(server: ServerProcess, ctx: int) -> None:
    httpx.post(
        server.url + "/api/v1/load",
        headers={"x-api-key": ADMIN},
        timeout=120,
        json={"model_name": CHAT, "pinned": True, "ctx_size": ctx},
    ).raise_for_status()


def refused(call: object) -> ollama.ResponseError:
    with pytest.raises(ollama.ResponseError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.status_code == 403 and "pinned" in str(caught.value)
    return caught.value


def test_the_api_key_cannot_reload_or_unload_a_pinned_model(server: ServerProcess) -> None:
    pin(server, 2048)
    with ollama.Client(
        host=server.url, timeout=120, headers={"Authorization": f"Bearer {API}"}
    ) as client:
        refused(
            lambda: client.generate(
                model=CHAT, prompt="Hi", options={"num_ctx": 777, "num_predict": 1}
            )
        )
        refused(lambda: client.chat(model=CHAT, messages=[], keep_alive=0))
        refused(lambda: client.generate(model=CHAT, prompt="", keep_alive=0))
        # what it may do, it still does: chat with the model as loaded
        assert client.chat(model=CHAT, messages=SAY, options={"num_predict": 1}).done
    loaded = health(server)[CHAT]
    assert loaded["pinned"] is True and loaded["recipe_options"]["ctx_size"] == 2048  # type: ignore[index]


def test_the_admin_key_reloads_keeping_the_pin_and_unloads(server: ServerProcess) -> None:
    pin(server, 2048)
    with ollama.Client(
        host=server.url, timeout=120, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        client.generate(model=CHAT, prompt="Hi", options={"num_ctx": 1024, "num_predict": 1})
        loaded = health(server)[CHAT]
        assert loaded["pinned"] is True
        assert loaded["recipe_options"]["ctx_size"] == 1024  # type: ignore[index]
        gone = client.chat(model=CHAT, messages=[], keep_alive=0)
    assert gone.done_reason == "unload" and CHAT not in health(server)
