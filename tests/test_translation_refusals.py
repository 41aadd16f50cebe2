"""What the translators refuse, as a 400 naming the field (Anthropic's ``invalid_request_error``
on the Messages endpoints): what the APIs refuse, and what a chat completion cannot
carry; and that no value anywhere in a request makes them raise anything else."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lemoncore.errors import LemonError
from lemoncore.translation import anthropic as am
from lemoncore.translation import responses as rs

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from translation_support import (
    HI,
    ask,
    refused,
)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools[0].type",
            "web_search_20250305",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
            "'document'",
        ),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'robot'"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0].type",
            "'image'",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "image", "source": {"type": "url", "url": "u"}}],
                    }
                ]
            },
            "messages[0].content[0].type",
            "assistant",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source.type",
            "'file'",
        ),
        ({"mcp_servers": [{"type": "url", "url": "u", "name": "n"}]}, "mcp_servers", "remove"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type", "'sometimes'"),
        # as strict as Anthropic's API (anthropic/types/message_create_params.py)
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": "Hi"}, "messages", "non-empty list"),
        ({"messages": ["Hi"]}, "messages[0].role", "'user' or 'assistant'"),
        ({"messages": [{"content": "Hi"}]}, "messages[0].role", "None"),
        (
            {"messages": [{"role": "user", "content": [{"type": "made_up", "text": "x"}]}]},
            "messages[0].content[0].type",
            "no content block type",
        ),
        (
            {"messages": [{"role": "user", "content": ["Hi"]}]},
            "messages[0].content[0].type",
            "no content block type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "search_result"}]}]},
            "messages[0].content[0].type",
            "cannot carry",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}],
                    }
                ]
            },
            "messages[0].content[0].type",
            "a user message cannot hold",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
            "messages[0].content[0].text",
            "a string",
        ),
        (
            {"messages": [{"role": "user", "content": {"text": "Hi"}}]},
            "messages[0].content",
            "a string or a list",
        ),
        (
            {"messages": [{"role": "user", "content": None}]},
            "messages[0].content",
            "a string or a list",
        ),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content", "non-empty"),
        (
            {"messages": [{"role": "assistant", "content": ""}, *HI]},
            "messages[0].content",
            "non-empty",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "n", "input": "x"}],
                    },
                    *HI,
                ]
            },
            "messages[0].content[0].input",
            "an object",
        ),
        ({"max_tokens": None}, "max_tokens", "required"),
        ({"max_tokens": 0}, "max_tokens", "at least 1"),
        ({"max_tokens": -3}, "max_tokens", "at least 1"),
        ({"max_tokens": True}, "max_tokens", "integer"),
        ({"max_tokens": "8"}, "max_tokens", "integer"),
        ({"max_tokens": 2.5}, "max_tokens", "integer"),
        ({"temperature": "hot"}, "temperature", "'hot'"),
        ({"top_p": False}, "top_p", "a number"),
        ({"top_k": 1.5}, "top_k", "an integer"),
        ({"top_k": -3}, "top_k", "at least 0"),
        ({"temperature": 5}, "temperature", "from 0 to 1"),
        ({"top_p": 1.5}, "top_p", "from 0 to 1"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name", "non-empty string"),
        ({"stop_sequences": "END"}, "stop_sequences", "a list of strings"),
        ({"stop_sequences": ["END", 3]}, "stop_sequences", "a list of strings"),
        ({"tools": {"name": "x"}}, "tools", "a list"),
        ({"tools": [{"name": 3, "input_schema": {}}]}, "tools[0]", "'name'"),
        ({"tools": [{"name": "now"}]}, "tools[0]", "'input_schema'"),
        ({"system": [{"type": "text", "text": None}]}, "system[0].text", "a string"),
        ({"output_config": {"format": {"type": "xml"}}}, "output_config.format", "json_schema"),
    ],
)
def test_anthropic_refusals(body: dict[str, Any], param: str, words: str) -> None:
    error = refused(am.to_chat, ask(**body))
    assert error.param == param
    assert words in str(error)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "whole conversation"),
        ({"conversation": "conv_1"}, "conversation", "no conversation state"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "'web_search'"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "no conversation"),
        (
            {"input": [{"type": "file_search_call", "id": "f"}]},
            "input[0].type",
            "'file_search_call'",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
            "'input_file'",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0]",
            "image_url",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "'tool'"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice", "web_search"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type", "'xml'"),
        ({"text": "json"}, "text", "an object"),
        ({"text": {"format": "json_schema"}}, "text", "an object"),
        ({"tools": {"type": "function"}}, "tools", "a list"),
        ({"tools": [{"type": "function"}]}, "tools[0].name", "non-empty string"),
        ({"tool_choice": {"type": "function"}}, "tool_choice.name", "non-empty string"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
            "input[0].name",
            "non-empty string",
        ),
        (
            {"input": [{"type": "function_call_output", "output": "4"}]},
            "input[0].call_id",
            "non-empty string",
        ),
        ({"max_output_tokens": 0}, "max_output_tokens", "at least 1"),
        ({"max_output_tokens": -1}, "max_output_tokens", "at least 1"),
        ({"max_output_tokens": "x"}, "max_output_tokens", "integer"),
        ({"temperature": "hot"}, "temperature", "from 0 to 2"),
        ({"temperature": 2.5}, "temperature", "from 0 to 2"),
        ({"top_p": -0.1}, "top_p", "from 0 to 1"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ],
)
def test_responses_refusals(body: dict[str, Any], param: str, words: str) -> None:
    error = refused(rs.to_chat, {"model": "m", "input": "x", **body})
    assert error.param == param
    assert words in str(error)


# --- Any body: a translation or a 400, never a traceback ---------------------------

ODD = [None, "x", "", 3, -1, 2.5, True, [], {}, [None], ["x"], {"type": "x"}]
RICH_MESSAGES = {
    "model": "m",
    "max_tokens": 8,
    "system": [{"type": "text", "text": "S"}],
    "stop_sequences": ["END"],
    "temperature": 0.5,
    "top_k": 3,
    "stream": True,
    "tools": [{"name": "now", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "now", "disable_parallel_tool_use": True},
    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    "messages": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "now", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "no"}],
                }
            ],
        },
    ],
}
RICH_RESPONSES = {
    "model": "m",
    "instructions": "Be brief.",
    "max_output_tokens": 8,
    "stream": True,
    "temperature": 0.5,
    "parallel_tool_calls": False,
    "tool_choice": {"type": "function", "name": "now"},
    "tools": [{"type": "function", "name": "now", "parameters": {"type": "object"}}],
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
    "input": [
        {"role": "developer", "content": "Rules."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What?"},
                {"type": "input_image", "image_url": "data:image/png;base64,QUJD", "detail": "low"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "noon"}],
        },
    ],
}


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key and index path in ``value``, the top level's keys first."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, inner in items:
        yield (*path, key)
        yield from _paths(inner, (*path, key))


def _with(body: Any, path: tuple[Any, ...], odd: Any) -> Any:
    copy = json.loads(json.dumps(body))
    *parents, last = path
    node = copy
    for key in parents:
        node = node[key]
    node[last] = odd
    return copy


@pytest.mark.parametrize(
    ("translate", "body"),
    [
        (am.to_chat, RICH_MESSAGES),
        (am.count_tokens_request, RICH_MESSAGES),
        (rs.to_chat, RICH_RESPONSES),
    ],
    ids=["messages", "count_tokens", "responses"],
)
def test_any_value_anywhere_translates_or_is_refused(
    translate: Callable[[Any], Any], body: dict[str, Any]
) -> None:
    """Each value of a request that uses every field, replaced in turn by each of
    :data:`ODD`: a chat request or a 400 naming a field, never another exception."""
    translate(body)
    for path in _paths(body):
        if path == ("model",):
            continue  # checked by the API layer before any translation
        for odd in ODD:
            try:
                translate(_with(body, path, odd))
            except LemonError as error:
                assert error.status == 400 and error.param, (path, odd, error)
