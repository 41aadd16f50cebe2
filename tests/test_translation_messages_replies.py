"""The Anthropic Messages translator's answers: chat completions into ``message``
objects validated strictly against the SDK's types, and llama-server-shaped chunk
sequences into event streams read back by the real ``anthropic`` client (over an
in-process httpx transport), whose accumulator must build the final message."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import Message

from lemoncore.errors import LemonError
from lemoncore.translation import anthropic as am

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from translation_support import (
    ANTHROPIC_EVENTS,
    call_delta,
    chat_reply,
    chat_usage,
    chunk,
    mocked,
    sse_events,
    strictly,
    text_stream,
    tool_stream,
    translate,
)

# --- Anthropic: replies --------------------------------------------------------------


def test_anthropic_reply_with_text_and_tools() -> None:
    reply = am.from_chat(
        chat_reply(
            "Let me look.",
            [("call_1", "weather", '{"city": "Paris"}'), ("call_2", "weather", "Paris")],
            finish="tool_calls",
        ),
        "claude-alias",
    )
    message = Message.model_validate(reply)
    assert message.model == "claude-alias"
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == "Let me look."  # type: ignore[union-attr]
    first, second = message.content[1], message.content[2]
    assert first.type == "tool_use" and second.type == "tool_use"
    assert (first.id, first.name, first.input) == ("call_1", "weather", {"city": "Paris"})
    assert second.input == {"arguments": "Paris"}  # not JSON: kept raw
    assert (message.usage.input_tokens, message.usage.output_tokens) == (30, 7)
    assert message.id.startswith("msg_")


@pytest.mark.parametrize(
    ("finish", "extra", "reason", "sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("length", {}, "max_tokens", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the match
        ("stop", {"stop_reason": None}, "end_turn", None),
    ],
)
def test_anthropic_stop_reasons(
    finish: str, extra: dict[str, Any], reason: str, sequence: str | None
) -> None:
    message = Message.model_validate(am.from_chat(chat_reply("hi", finish=finish, **extra), "m"))
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


@pytest.mark.parametrize(
    ("verbose", "reason", "sequence"),
    [
        ({"stopping_word": "END"}, "stop_sequence", "END"),
        ({"stopping_word": ""}, "end_turn", None),
        (None, "end_turn", None),
    ],
)
def test_anthropic_stop_sequence_llama_server_names(
    verbose: dict[str, str] | None, reason: str, sequence: str | None
) -> None:
    """llama-server names the matched stop only in ``__verbose.stopping_word`` (when the
    request asks, ``"verbose": true``): on the answer, and in a stream on the first chunk
    of its last result (server-task.cpp, to_json_oaicompat_chat(_stream))."""
    chat = chat_reply("hi")
    if verbose is not None:
        chat["__verbose"] = verbose
    message = Message.model_validate(am.from_chat(chat, "m"))
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)
    chunks = text_stream("hi")
    if verbose is not None:
        chunks[-2]["__verbose"] = verbose  # the finish chunk, first of the last result
    events = sse_events(translate(am.MessagesStream("m"), chunks))
    delta = next(e["delta"] for e in events if e["type"] == "message_delta")
    assert (delta["stop_reason"], delta["stop_sequence"]) == (reason, sequence)


def test_anthropic_reply_cached_tokens_counted_apart() -> None:
    chat = chat_reply("hi")
    chat["usage"]["prompt_tokens_details"] = {"cached_tokens": 20}
    usage = Message.model_validate(am.from_chat(chat, "m")).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (10, 20)


def test_anthropic_sdk_create_round_trip() -> None:
    seen: list[dict[str, Any]] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        seen.append(am.to_chat(body))
        return json.dumps(
            am.from_chat(chat_reply("Bonjour"), body["model"])
        ).encode(), "application/json"

    with mocked(anthropic, backend) as client:
        message = client.messages.create(
            model="m",
            max_tokens=20,
            system="French only.",
            messages=[{"role": "user", "content": "Hello"}],
        )
    assert message.content[0].type == "text" and message.content[0].text == "Bonjour"
    assert seen[0]["messages"][0] == {"role": "system", "content": "French only."}
    assert seen[0]["max_tokens"] == 20


def test_count_tokens() -> None:
    body = {
        "model": "m",
        "system": "S",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "now", "input_schema": {"type": "object"}}],
    }
    request = am.count_tokens_request(body)
    assert request["max_tokens"] == 1
    assert "stream" not in request
    assert request == am.to_chat({**body, "max_tokens": 1})
    assert am.count_tokens_reply(chat_reply("x")) == {"input_tokens": 30}
    with pytest.raises(LemonError):
        am.count_tokens_reply({"choices": []})


# --- Anthropic: streams --------------------------------------------------------------


def stream_with_sdk(
    chunks: list[dict[str, Any]], **kwargs: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Serve ``chunks`` translated to the real ``messages.stream()``: (final message,
    the events as sent)."""
    sent: list[bytes] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        assert am.to_chat(body)["stream_options"] == {"include_usage": True}
        sent.append(translate(am.MessagesStream(body["model"]), chunks))
        return sent[-1], "text/event-stream"

    with (
        mocked(anthropic, backend) as client,
        client.messages.stream(
            model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "Hi"}], **kwargs
        ) as stream,
    ):
        final = stream.get_final_message()
    events = sse_events(sent[0])
    strictly(events, ANTHROPIC_EVENTS)
    return final, events


def test_anthropic_stream_text() -> None:
    final, events = stream_with_sdk(text_stream("Hel", "", "lo", "!"))
    assert final.content[0].text == "Hello!"
    assert (final.stop_reason, final.model) == ("end_turn", "claude-x")
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 4)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_anthropic_stream_tools_split_over_chunks() -> None:
    final, events = stream_with_sdk(tool_stream())
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text == "Checking both."
    assert [(b.id, b.name, b.input) for b in final.content[1:]] == [
        ("call_a", "weather", {"city": "Paris"}),
        ("call_b", "weather", {"city": "Rome"}),
    ]
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (40, 25)
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == [0, 1, 2]


def test_anthropic_stream_text_after_tool_and_no_usage() -> None:
    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk(call_delta(0, "c1", "now", "{}")),
        chunk({"content": "Done."}),
        chunk({}, "length"),
    ]  # no usage chunk: the stream ends without one
    final, _ = stream_with_sdk(chunks)
    assert [b.type for b in final.content] == ["tool_use", "text"]
    assert (final.content[0].input, final.content[1].text) == ({}, "Done.")
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 0


def test_anthropic_stream_usage_on_first_chunk() -> None:
    chunks = text_stream("a")
    chunks[0]["usage"] = chat_usage(9, 0)
    _, events = stream_with_sdk(chunks)
    assert events[0]["message"]["usage"]["input_tokens"] == 9


def test_anthropic_stream_empty() -> None:
    stream = am.MessagesStream("m")
    events = sse_events(stream.finish())
    strictly(events, ANTHROPIC_EVENTS)
    assert [e["type"] for e in events] == ["message_start", "message_delta", "message_stop"]
    assert stream.finish() == b"" and stream.feed(chunk({"content": "x"})) == b""


def test_anthropic_stream_failure_raises_in_the_sdk() -> None:
    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        stream = am.MessagesStream("m")
        return stream.feed(text_stream("partial")[1]) + stream.fail(
            "backend died"
        ), "text/event-stream"

    with (
        mocked(anthropic, backend) as client,
        pytest.raises(anthropic.APIStatusError, match="backend died"),
        client.messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        ) as s,
    ):
        s.get_final_message()


def test_anthropic_stream_error_chunk() -> None:
    stream = am.MessagesStream("m")
    raw = stream.feed({"error": {"message": "out of memory", "code": 500}})
    assert sse_events(raw)[-1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "out of memory"},
    }
    assert stream.finish() == b""
