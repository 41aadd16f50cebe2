"""The pure conversions between Ollama's shapes and OpenAI's, without processes: names,
bodies, options, messages and tool calls both ways, and answers gathered from chunks in
the shapes llama-server streams (tool-call arguments arrive in pieces)."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import pytest

from lemoncore.plugin import LemonError

from lemon_plugin_ollama_api.answers import Clock, Turn, final_line, line
from lemon_plugin_ollama_api.bodies import (
    BadRequest,
    ChatBody,
    GenerateBody,
    Message,
    Options,
    keep_alive_seconds,
    parse,
)
from lemon_plugin_ollama_api.messages import ollama_tool_calls, openai_messages
from lemon_plugin_ollama_api.names import lemon_name, ollama_name
from lemon_plugin_ollama_api.options import load_options, request_fields, response_format

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()


def test_names_round_trip_and_other_tags_stay_unknown() -> None:
    assert lemon_name(ollama_name("SmolLM2-135M-Instruct-GGUF")) == "SmolLM2-135M-Instruct-GGUF"
    assert lemon_name("smollm2") == "smollm2"
    assert lemon_name("smollm2:7b") == "smollm2:7b"


def test_bodies_name_every_wrong_field() -> None:
    with pytest.raises(BadRequest) as bad:
        parse(ChatBody, b'{"model": "m", "stream": "yes", "messages": [{"role": "robot"}]}')
    assert bad.value.status == 400
    assert "stream" in str(bad.value) and "messages.0.role" in str(bad.value)
    with pytest.raises(BadRequest, match="'model' is required"):
        parse(ChatBody, b"{}")
    with pytest.raises(BadRequest, match="invalid request body"):
        parse(ChatBody, b"")
    assert parse(ChatBody, b'{"name": "m", "extra": 1}').target == "m"  # Ollama's older key


def test_null_means_not_given() -> None:
    body = parse(
        ChatBody,
        b'{"model": "m", "stream": null, "options": null, "format": null,'
        b' "messages": [{"role": "assistant", "content": null,'
        b' "tool_calls": null}]}',
    )
    assert body.stream is True and body.options == Options() and body.format is None
    assert body.messages[0].content == "" and body.messages[0].tool_calls == []


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (None, None),
        ("", None),
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("-1", math.inf),
        (-1, math.inf),
        ("-5m", math.inf),
    ],
)
def test_keep_alive_durations(given: object, seconds: float | None) -> None:
    assert keep_alive_seconds(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 minutes", "m5", True, [1]])
def test_keep_alive_refuses_what_is_no_duration(given: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        keep_alive_seconds(given)


def test_options_become_request_fields_and_load_options() -> None:
    options = Options(
        temperature=0.2,
        top_k=5,
        seed=7,
        stop=["\n"],
        num_predict=9,
        repeat_penalty=1.1,
        num_ctx=2048,
    )
    assert request_fields(options) == {
        "temperature": 0.2,
        "top_k": 5,
        "seed": 7,
        "stop": ["\n"],
        "repeat_penalty": 1.1,
        "max_tokens": 9,
    }
    assert load_options(options) == {"ctx_size": 2048}
    assert "max_tokens" not in request_fields(Options(num_predict=-1))  # no limit
    assert load_options(Options()) == {} and request_fields(Options()) == {}


def test_format_becomes_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert response_format(None) is None and response_format("") is None
    assert response_format("json") == {"type": "json_object"}
    assert response_format(schema) == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": True},
    }
    with pytest.raises(BadRequest):
        response_format({})
    with pytest.raises(BadRequest, match="format"):
        parse(GenerateBody, b'{"model": "m", "format": "xml"}')


def test_images_become_image_url_parts() -> None:
    (user,) = openai_messages([Message(role="user", content="What is it?", images=[PNG])])
    assert user["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    with pytest.raises(BadRequest, match="base64"):
        openai_messages([Message(role="user", images=["not base64!"])])
    with pytest.raises(BadRequest, match="PNG, JPEG"):
        openai_messages([Message(role="user", images=[base64.b64encode(b"text").decode()])])


def test_tool_calls_and_results_are_linked_by_ids() -> None:
    body = parse(
        ChatBody,
        json.dumps(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                            {"function": {"name": "weather", "arguments": {"city": "Rome"}}},
                            {"id": "t9", "function": {"name": "time", "arguments": {}}},
                        ],
                    },
                    {"role": "tool", "content": "sunny", "tool_name": "weather"},
                    {"role": "tool", "content": "12:00", "tool_call_id": "t9"},
                    {"role": "tool", "content": "rainy", "tool_name": "weather"},
                ],
            }
        ).encode(),
    )
    user, assistant, paris, noon, rome = openai_messages(body.messages)
    assert user == {"role": "user", "content": "Weather in Paris and Rome?"}
    assert assistant["tool_calls"] == [
        {
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "id": "call_1_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
        },
        {"id": "t9", "type": "function", "function": {"name": "time", "arguments": "{}"}},
    ]
    assert (paris["tool_call_id"], noon["tool_call_id"], rome["tool_call_id"]) == (
        "call_1_0",
        "t9",
        "call_1_1",
    )
    assert paris["role"] == "tool" and paris["content"] == "sunny"


def test_tool_calls_come_back_with_object_arguments() -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert ollama_tool_calls(calls) == [
        {"id": "c1", "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris"}}}
    ]
    with pytest.raises(LemonError, match="not a JSON object") as bad:
        ollama_tool_calls([{"function": {"name": "weather", "arguments": "[1"}}])
    assert bad.value.status == 502


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


# llama-server's stream of an answer with text, then a tool call in pieces, then usage.
STREAM = [
    chunk({"role": "assistant", "content": None}),
    chunk({"content": "Let me"}),
    chunk({"content": " check."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    chunk({}, "tool_calls"),
    {"choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 9}},
]


def test_a_streamed_answer_is_gathered() -> None:
    turn = Turn()
    added = [turn.feed(c) for c in STREAM]
    assert [text for text, _ in added if text] == ["Let me", " check."]
    assert turn.tool_calls() == [
        {"id": "c1", "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris"}}}
    ]
    assert turn.done_reason == "stop"  # Ollama reports a tool call as a stop
    assert turn.counts() == {"prompt_eval_count": 21, "eval_count": 9}


def test_final_lines_whole_and_streamed() -> None:
    turn, clock = Turn(), Clock()
    for c in STREAM:
        turn.feed(c)
    clock.mark_sent()
    clock.mark_token()
    clock.mark_end()
    whole = final_line("chat", "m:latest", turn, clock, whole=True)
    assert whole["done"] is True and whole["model"] == "m:latest"
    assert whole["message"]["content"] == "Let me check."
    assert whole["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert whole["total_duration"] >= whole["prompt_eval_duration"] + whole["eval_duration"]
    streamed = final_line("chat", "m", turn, clock, whole=False)
    assert streamed["message"] == {"role": "assistant", "content": ""}
    generated = final_line("generate", "m", turn, clock, whole=True)
    assert generated["response"] == "Let me check." and "message" not in generated
    assert line("generate", "m", "Hi")["response"] == "Hi"
    assert line("chat", "m", "", thinking="hmm")["message"]["thinking"] == "hmm"


def test_raw_completions_chunks_and_a_cut_answer() -> None:
    turn = Turn()
    for text in ("Once", " upon"):
        turn.feed({"choices": [{"index": 0, "text": text, "finish_reason": None}]})
    turn.feed({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    assert "".join(turn.text) == "Once upon" and turn.done_reason == "length"
    assert turn.counts() == {"prompt_eval_count": 0, "eval_count": 2}  # no usage: pieces
