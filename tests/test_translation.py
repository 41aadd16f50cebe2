"""The Anthropic Messages translator's requests: as the SDK sends them, into chat
completions. Its replies and streams: ``test_translation_messages_replies.py``; the
Responses translator: ``test_translation_responses.py``; what both refuse:
``test_translation_refusals.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lemoncore.translation import anthropic as am

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from translation_support import (
    HI,
    WEATHER,
    ask,
)

# --- Anthropic: requests -------------------------------------------------------------


def test_anthropic_request_settings() -> None:
    chat = am.to_chat(
        {
            "model": "smol",
            "max_tokens": 64,
            "temperature": 0.2,
            "top_k": 5,
            "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
            "stop_sequences": ["END"],
            "stream": True,
            "metadata": {"user_id": "u1"},
            "messages": [{"role": "user", "content": "Hi"}],
        }
    )
    assert chat == {
        "model": "smol",
        "max_tokens": 64,
        "temperature": 0.2,
        "top_k": 5,
        "stop": ["END"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief.\nBe kind."},
            {"role": "user", "content": "Hi"},
        ],
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        (
            {"type": "tool", "name": "weather"},
            {"type": "function", "function": {"name": "weather"}},
        ),
    ],
)
def test_anthropic_tools_and_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    chat = am.to_chat(
        ask(
            tool_choice=choice,
            tools=[{"name": "weather", "description": "Weather now", "input_schema": WEATHER}],
        )
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "weather", "description": "Weather now", "parameters": WEATHER},
        }
    ]
    assert chat["tool_choice"] == expected
    assert "parallel_tool_calls" not in chat


def test_anthropic_disable_parallel_tool_use() -> None:
    chat = am.to_chat(ask(tool_choice={"type": "auto", "disable_parallel_tool_use": True}))
    assert chat["parallel_tool_calls"] is False


def test_anthropic_tool_history() -> None:
    chat = am.to_chat(
        {
            "model": "m",
            "max_tokens": 9,
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "text", "text": "Checking."},
                        {
                            "type": "tool_use",
                            "id": "t1",
                            "name": "weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "t2",
                            "name": "weather",
                            "input": {"city": "Rome"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Be quick."},
                        {"type": "tool_result", "tool_use_id": "t1", "content": "21C"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "t2",
                            "is_error": True,
                            "content": [
                                {"type": "text", "text": "no"},
                                {"type": "text", "text": "data"},
                            ],
                        },
                    ],
                },
            ],
        }
    )
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "t2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "21C"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no\ndata"},
        {"role": "user", "content": "Be quick."},
    ]


def test_anthropic_tool_use_only_and_tool_result_only() -> None:
    chat = am.to_chat(
        {
            "model": "m",
            "max_tokens": 9,
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "noon"}],
                },
            ],
        }
    )
    assert chat["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "noon"},
    ]


def test_anthropic_images() -> None:
    chat = am.to_chat(
        {
            "model": "m",
            "max_tokens": 9,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/jpeg",
                                "data": "QUJD",
                            },
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                        {"type": "text", "text": "Same?"},
                    ],
                }
            ],
        }
    )
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                {"type": "text", "text": "Same?"},
            ],
        }
    ]


def test_anthropic_accepts_what_the_api_does() -> None:
    """A ``system`` message (the SDK's ``SystemMessageParam``), an empty final assistant
    message (a prefill), an integral float, and a JSON Schema output format."""
    chat = am.to_chat(
        ask(
            max_tokens=8.0,
            top_k=3.0,
            messages=[
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                *HI,
                {"role": "assistant", "content": ""},
            ],
            output_config={"format": {"type": "json_schema", "schema": WEATHER}},
        )
    )
    assert (chat["max_tokens"], chat["top_k"]) == (8, 3)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        *HI,
        {"role": "assistant", "content": ""},
    ]
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": WEATHER},
    }
