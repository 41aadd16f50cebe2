"""The main job on llamacpp:prebuilt, the backend a new user gets (scripts/quickstart):
llama.cpp's server from the xllamacpp wheel, in a child process lemoncore supervises,
answering the clients people use; its tuning flags, its refusals and its crashes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from lemoncore.plugin import ServerProcess

from .conftest import _register, prebuilt_server

DEFAULT = "SmolLM2-135M-Instruct-GGUF"
HELLO = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with prebuilt_server(tmp_path_factory.mktemp("prebuilt")) as server:
        yield server


@pytest.fixture
def client(prebuilt: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=prebuilt.api, api_key="none", max_retries=0) as client:
        yield client


def health(server: ServerProcess) -> dict[str, dict[str, object]]:
    models = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    return {m["model_name"]: m for m in models}


def test_chat_streamed_and_not_with_the_openai_client(
    client: openai.OpenAI, prebuilt: ServerProcess
) -> None:
    reply = client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=16)
    assert reply.choices[0].message.content and reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(
            model=DEFAULT,
            messages=HELLO,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3 and text and chunks[-1].usage is not None
    served = health(prebuilt)[DEFAULT]
    assert served["backend"] == "prebuilt"
    # llama-server's own arguments, to xllamacpp's server
    argv = " ".join(served["launch_command"])  # type: ignore[arg-type]
    assert "-m lemon_plugin_llamacpp.xserver" in argv and "--alias " + DEFAULT in argv


def test_messages_stream_and_responses_stream(prebuilt: ServerProcess) -> None:
    with (
        anthropic.Anthropic(base_url=prebuilt.url, api_key="none", max_retries=0) as claude,
        claude.messages.stream(model=DEFAULT, max_tokens=8, messages=HELLO) as stream,
    ):
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0
    # The SDK's own helper: lemoncore translates Responses to llama-server's chat (its own
    # /v1/responses has no content_index, which the helper's accumulator needs)
    with (
        openai.OpenAI(base_url=prebuilt.api, api_key="none", max_retries=0) as client,
        client.responses.stream(
            model=DEFAULT, input="Say hi.", max_output_tokens=16, temperature=0
        ) as events,
    ):
        kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in {"response.completed", "response.incomplete"}
    assert "response.output_text.delta" in kinds


def test_embeddings(prebuilt: ServerProcess) -> None:
    # a chat model: embeddings need a pooling type (llama.cpp refuses 'none' for OpenAI's)
    _register(prebuilt, "smol-embed", ("embeddings",), {"llamacpp_args": "--pooling mean"})
    with openai.OpenAI(base_url=prebuilt.api, api_key="none", max_retries=0) as client:
        vectors = client.embeddings.create(model="smol-embed", input=["red", "blue"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) > 100
    assert vectors.data[0].embedding != vectors.data[1].embedding


def test_tuning_flags_reach_the_engine_and_unmapped_ones_are_refused(
    prebuilt: ServerProcess,
) -> None:
    loaded = httpx.post(
        prebuilt.url + "/api/v1/load",
        timeout=120,
        json={"model_name": DEFAULT, "llamacpp_args": "--no-repack -np 2", "ctx_size": 1024},
    )
    assert loaded.status_code == 200, loaded.text
    argv = " ".join(health(prebuilt)[DEFAULT]["launch_command"])  # type: ignore[arg-type]
    assert "--no-repack -np 2" in argv
    refused = httpx.post(
        prebuilt.url + "/api/v1/load",
        timeout=60,
        json={"model_name": DEFAULT, "llamacpp_args": "-dev CPU"},
    )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "launch_refused"
    assert "-dev" in error["message"] and "llamacpp:pypi" in error["message"]
    assert health(prebuilt)[DEFAULT]["backend"] == "prebuilt"  # the old server serves on


def test_a_crashed_engine_is_named_and_replaced(
    client: openai.OpenAI, prebuilt: ServerProcess
) -> None:
    client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=2)
    pid = int(health(prebuilt)[DEFAULT]["pid"])  # type: ignore[call-overload]
    os.kill(pid, signal.SIGSEGV)
    reply = client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=4)
    assert reply.choices[0].message.content
    assert int(health(prebuilt)[DEFAULT]["pid"]) != pid  # type: ignore[call-overload]
    assert "signal=SIGSEGV" in prebuilt.log()
