"""The OpenAI Responses translator: requests as the SDK sends them, replies validated
strictly against the SDK's types, and llama-server-shaped chunk sequences into event
streams read back by the real ``openai`` client's ``responses.stream()``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openai
from openai.types.responses import Response

from lemoncore.translation import responses as rs

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from translation_support import (
    RESPONSES_EVENTS,
    WEATHER,
    call_delta,
    chat_reply,
    chunk,
    mocked,
    sse_events,
    strictly,
    text_stream,
    tool_stream,
    translate,
)

# --- Responses: requests -------------------------------------------------------------


def test_responses_request_string_input_and_settings() -> None:
    chat = rs.to_chat(
        {
            "model": "m",
            "input": "Hi",
            "instructions": "Be brief.",
            "max_output_tokens": 30,
            "temperature": 0.1,
            "top_p": 0.9,
            "stream": True,
            "store": False,
        }
    )
    assert chat == {
        "model": "m",
        "max_tokens": 30,
        "temperature": 0.1,
        "top_p": 0.9,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }


def test_responses_request_items() -> None:
    chat = rs.to_chat(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": "Rules."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64,QUJD",
                            "detail": "low",
                        },
                    ],
                },
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
                },
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "lookup",
                    "arguments": '{"a":1}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "a dog"}],
                },
                {"type": "function_call", "call_id": "c3", "name": "lookup", "arguments": "{}"},
            ],
        }
    )
    calls = [
        {"id": c, "type": "function", "function": {"name": "lookup", "arguments": a}}
        for c, a in (("c1", "{}"), ("c2", '{"a":1}'), ("c3", "{}"))
    ]
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,QUJD", "detail": "low"},
                },
            ],
        },
        {"role": "assistant", "content": "Looking.", "tool_calls": calls[:2]},
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        {"role": "tool", "tool_call_id": "c2", "content": "a dog"},
        {"role": "assistant", "content": None, "tool_calls": calls[2:]},
    ]


def test_responses_request_tools_and_formats() -> None:
    chat = rs.to_chat(
        {
            "model": "m",
            "input": "x",
            "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "name": "weather"},
            "tools": [
                {
                    "type": "function",
                    "name": "weather",
                    "strict": True,
                    "description": "Now",
                    "parameters": WEATHER,
                }
            ],
            "text": {
                "format": {"type": "json_schema", "name": "city", "schema": WEATHER, "strict": True}
            },
        }
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Now",
                "parameters": WEATHER,
                "strict": True,
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": WEATHER, "strict": True},
    }
    assert rs.to_chat({"input": "x", "text": {"format": {"type": "json_object"}}})[
        "response_format"
    ] == {"type": "json_object"}
    assert "response_format" not in rs.to_chat({"input": "x", "text": {"format": {"type": "text"}}})
    assert rs.to_chat({"input": "x", "tool_choice": "required"})["tool_choice"] == "required"


# --- Responses: replies --------------------------------------------------------------

REQUEST = {
    "model": "gpt-alias",
    "input": "x",
    "instructions": "Be brief.",
    "max_output_tokens": 100,
    "temperature": 0.5,
    "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}],
}


def test_responses_reply() -> None:
    reply = rs.from_chat(
        chat_reply("It is sunny.", [("call_9", "weather", '{"city":"Oslo"}')], "tool_calls"),
        REQUEST,
    )
    response = Response.model_validate(reply)
    assert response.output_text == "It is sunny."
    assert (response.status, response.model, response.instructions) == (
        "completed",
        "gpt-alias",
        "Be brief.",
    )
    call = response.output[1]
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == ("call_9", "weather", '{"city":"Oslo"}')
    assert response.usage is not None
    assert (
        response.usage.input_tokens,
        response.usage.output_tokens,
        response.usage.total_tokens,
    ) == (30, 7, 37)
    assert response.id.startswith("resp_") and call.id and call.id.startswith("fc_")
    assert response.tools[0].type == "function" and response.max_output_tokens == 100


def test_responses_reply_echoes_the_request_or_the_api_defaults() -> None:
    given = {
        "model": "m",
        "input": "x",
        "instructions": "Be brief.",
        "max_output_tokens": 20,
        "temperature": 0.3,
        "top_p": 0.8,
        "tool_choice": "none",
        "metadata": {"k": "v"},
        "parallel_tool_calls": False,
        "tools": REQUEST["tools"],
        "text": {"verbosity": "low"},
    }
    echoed = rs.from_chat(chat_reply("hi"), given)
    Response.model_validate(echoed)
    assert {k: echoed[k] for k in given if k != "input"} == {
        **{k: v for k, v in given.items() if k != "input"},
        "text": {"format": {"type": "text"}, "verbosity": "low"},
    }
    bare = rs.from_chat(chat_reply("hi"), {"model": "m", "input": "x"})
    assert {k: bare[k] for k in given if k != "input"} == {
        "model": "m",
        "instructions": None,
        "max_output_tokens": None,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "metadata": {},
        "parallel_tool_calls": True,
        "tools": [],
        "text": {"format": {"type": "text"}},
    }
    assert bare["id"].startswith("resp_") and bare["output"][0]["id"].startswith("msg_")


def test_responses_reply_incomplete() -> None:
    response = Response.model_validate(
        rs.from_chat(chat_reply("It is", finish="length"), {"model": "m", "input": "x"})
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "It is"


def test_responses_sdk_create_round_trip() -> None:
    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        assert rs.to_chat(body)["messages"][-1] == {"role": "user", "content": "Hello"}
        return json.dumps(rs.from_chat(chat_reply("Hej"), body)).encode(), "application/json"

    with mocked(openai, backend) as client:
        response = client.responses.create(model="m", input="Hello")
    assert response.output_text == "Hej"


# --- Responses: streams --------------------------------------------------------------


def responses_with_sdk(
    chunks: list[dict[str, Any]], **kwargs: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Serve ``chunks`` translated to the real ``responses.stream()``: (final response,
    the events as sent)."""
    sent: list[bytes] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        assert rs.to_chat(body)["stream_options"] == {"include_usage": True}
        sent.append(translate(rs.ResponsesStream(body), chunks))
        return sent[-1], "text/event-stream"

    with (
        mocked(openai, backend) as client,
        client.responses.stream(model="gpt-x", input="Hi", **kwargs) as stream,
    ):
        for _ in stream:
            pass
        final = stream.get_final_response()
    events = sse_events(sent[0])
    strictly(events, RESPONSES_EVENTS)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
    return final, events


def test_responses_stream_text() -> None:
    final, events = responses_with_sdk(text_stream("Hel", "lo", "!"))
    assert final.output_text == "Hello!"
    assert (final.status, final.model) == ("completed", "gpt-x")
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 3)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_responses_stream_tools_split_over_chunks() -> None:
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER, "strict": False}]
    final, events = responses_with_sdk(tool_stream(), tools=tools)
    assert final.output_text == "Checking both."
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "weather", {"city": "Paris"}),
        ("call_b", "weather", {"city": "Rome"}),
    ]
    assert final.usage is not None and final.usage.total_tokens == 65
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [json.loads(e["arguments"]) for e in done] == [{"city": "Paris"}, {"city": "Rome"}]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [
        0,
        1,
        2,
    ]


def test_responses_stream_incomplete_and_no_usage() -> None:
    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk(call_delta(0, "c1", "now", "{}")),
        chunk({"content": "Then"}),
        chunk({}, "length"),
    ]
    sent = translate(rs.ResponsesStream({"model": "m", "input": "x"}), chunks)
    events = sse_events(sent)
    strictly(events, RESPONSES_EVENTS)
    last = Response.model_validate(events[-1]["response"])
    assert events[-1]["type"] == "response.incomplete"
    assert last.status == "incomplete" and last.output_text == "Then"
    assert [item.type for item in last.output] == ["function_call", "message"]
    assert last.usage is not None and last.usage.output_tokens == 0


def test_responses_create_stream_iterates() -> None:
    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        return translate(rs.ResponsesStream(body), text_stream("a", "b")), "text/event-stream"

    with mocked(openai, backend) as client:
        events = list(client.responses.create(model="m", input="Hi", stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["a", "b"]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "ab"


def test_responses_stream_failure() -> None:
    stream = rs.ResponsesStream({"model": "m", "input": "x"})
    raw = stream.feed(text_stream("partial")[1]) + stream.fail("backend died")
    events = sse_events(raw)
    strictly(events, RESPONSES_EVENTS)
    assert events[-1]["type"] == "error" and events[-1]["message"] == "backend died"
    assert events[-1]["sequence_number"] == len(events) - 1
    assert stream.finish() == b"" and stream.feed(text_stream("x")[1]) == b""
