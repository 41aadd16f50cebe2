"""Anthropic's and OpenAI's newer APIs on a backend that serves only chat completions.

The example backend declares only the OpenAI core (``Backend.endpoints`` default), so
lemoncore translates ``/v1/messages`` and ``/v1/responses`` to chat completions and the
answers back, streams included. The engine is a real llama-server (SmolLM2, ``--jinja``:
tool calls come from its chat template); the clients are the SDKs people use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import anthropic
import openai
import pytest
from anthropic.types import MessageParam, ToolParam
from openai.types.responses import FunctionToolParam

from lemoncore.plugin import ServerProcess, running_server

MODEL = "example-smollm2"
LONG_ANSWER = "Write a long story about a dragon who learns to bake bread."
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"LEMON_PLUGINS_ALLOW": "example"}
    with running_server(tmp_path_factory.mktemp("translated"), env) as s:
        yield s


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


@pytest.fixture
def gpt(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as client:
        yield client


def test_messages_with_a_system_prompt_stop_sequences_and_usage(
    claude: anthropic.Anthropic,
) -> None:
    message = claude.messages.create(
        model=MODEL,
        max_tokens=12,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello."}],
        stop_sequences=["\n\n"],
    )
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert message.content[0].type == "text" and message.content[0].text
    assert "\n\n" not in message.content[0].text
    assert message.stop_reason in {"end_turn", "max_tokens"}
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 12
    short = claude.messages.create(
        model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "Tell a story."}]
    )
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_messages_stream_and_token_counting(claude: anthropic.Anthropic) -> None:
    # an answer that cannot fit in 8 tokens, so the cut is certain
    question: list[MessageParam] = [{"role": "user", "content": LONG_ANSWER}]
    with claude.messages.stream(model=MODEL, max_tokens=8, messages=question) as stream:
        kinds = []
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
    } <= set(kinds)
    assert final.content[0].type == "text" and final.content[0].text
    assert final.usage.output_tokens > 0 and final.stop_reason == "max_tokens"
    counted = claude.messages.count_tokens(model=MODEL, messages=question)
    usage = claude.messages.create(model=MODEL, max_tokens=1, messages=question).usage
    # Anthropic counts prompt tokens read from the engine's cache apart
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_a_tool_result_round_trip(claude: anthropic.Anthropic) -> None:
    """A conversation with a tool call and its result reaches the engine as chat's
    ``tool_calls`` and ``tool`` messages, and the engine answers from it. SmolLM2's chat
    template has no tool syntax, so llama-server never emits a call for it: the call's
    translation back (``tool_use`` blocks, streamed ``input_json_delta``) is checked with
    llama-server-shaped chunks in ``tests/test_translation_messages_replies.py``."""
    history: list[MessageParam] = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny, 21 degrees"}
            ],
        },
    ]
    answer = claude.messages.create(model=MODEL, max_tokens=16, tools=[WEATHER], messages=history)
    assert answer.content[0].type == "text" and answer.content[0].text
    assert answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) > 20


def test_errors_are_anthropic_shaped(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(
            model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
        )
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as server_tool:
        claude.messages.create(
            model=MODEL,
            max_tokens=4,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert "web_search" in server_tool.value.message


def test_responses_streaming_and_not(gpt: openai.OpenAI) -> None:
    answer = gpt.responses.create(
        model=MODEL, input="Say hello.", instructions="Be brief.", max_output_tokens=8
    )
    assert answer.output_text and answer.model == MODEL
    assert answer.usage is not None and answer.usage.output_tokens <= 8
    assert answer.status in {"completed", "incomplete"}
    kinds, text = [], ""
    with gpt.responses.stream(
        model=MODEL,
        max_output_tokens=8,
        temperature=0,
        input=[{"role": "user", "content": [{"type": "input_text", "text": LONG_ANSWER}]}],
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            # cut at max_output_tokens, the stream ends as OpenAI's does: incomplete (the
            # SDK's get_final_response() wants response.completed)
            if event.type == "response.incomplete":
                final = event.response
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    assert text and final.output_text == text and final.usage is not None
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"


def test_responses_function_call_output(gpt: openai.OpenAI) -> None:
    # As a client sends it: without "strict", which the SDK's type requires.
    tool = cast(
        "FunctionToolParam",
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather",
            "parameters": WEATHER["input_schema"],
        },
    )
    follow = gpt.responses.create(
        model=MODEL,
        tools=[tool],
        max_output_tokens=16,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        ],
    )
    assert follow.output_text
    with pytest.raises(openai.BadRequestError) as stateful:
        gpt.responses.create(model=MODEL, input="And tomorrow?", previous_response_id="r1")
    assert "previous_response_id" in stateful.value.message
