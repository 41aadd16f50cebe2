"""The Anthropic Messages and OpenAI Responses translators over chat completions.

Requests are translated as the SDKs send them, replies validated strictly against the
SDKs' own types, and streams are fed llama-server-shaped chunk sequences and read back
by the real ``anthropic`` and ``openai`` clients (over an in-process httpx transport),
whose accumulators must build the final message from the events.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, get_args

import anthropic
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent

from lemoncore.errors import LemonError
from lemoncore.translation import anthropic as am
from lemoncore.translation import responses as rs

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"]}


# --- llama-server-shaped chat completions ------------------------------------------

def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
           usage: dict[str, int] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": "chatcmpl-abc", "object": "chat.completion.chunk",
                             "created": 1700000000, "model": "smol",
                             "choices": [] if delta is None else
                             [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _call(index: int, call_id: str | None = None, name: str | None = None,
          arguments: str = "") -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    call: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        call.update(id=call_id, type="function")
        function["name"] = name
    return {"tool_calls": [call]}


def text_stream(*pieces: str, finish: str = "stop",
                usage: dict[str, int] | None = None) -> list[dict[str, Any]]:
    return [_chunk({"role": "assistant", "content": None}),
            *(_chunk({"content": p}) for p in pieces),
            _chunk({}, finish), _chunk(usage=usage or _usage(11, len(pieces)))]


def tool_stream() -> list[dict[str, Any]]:
    """Text, then two tool calls with their arguments split over several chunks."""
    return [_chunk({"role": "assistant", "content": None}),
            _chunk({"content": "Checking"}), _chunk({"content": " both."}),
            _chunk(_call(0, "call_a", "weather")), _chunk(_call(0, arguments='{"ci')),
            _chunk(_call(0, arguments='ty": "Par')), _chunk(_call(0, arguments='is"}')),
            _chunk(_call(1, "call_b", "weather", '{"city":')),
            _chunk(_call(1, arguments=' "Rome"}')),
            _chunk({}, "tool_calls"), _chunk(usage=_usage(40, 25))]


def chat_reply(content: str | None, calls: Sequence[tuple[str, str, str]] = (),
               finish: str = "stop", **choice: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function",
                                  "function": {"name": n, "arguments": a}}
                                 for i, n, a in calls]
    return {"id": "chatcmpl-xyz", "object": "chat.completion", "created": 1700000000,
            "model": "smol", "usage": _usage(30, 7),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}]}


# --- SSE and the SDKs ---------------------------------------------------------------

def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """Parse SSE frames; each must be ``event: T`` + ``data: {"type": T, ...}``."""
    assert raw.endswith(b"\n\n")
    events = []
    for frame in raw.decode().split("\n\n")[:-1]:
        event_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        events.append(data)
    return events


def _validators(union: Any) -> dict[str, Any]:
    """Event type → its SDK class, from a discriminated union of event models."""
    classes = get_args(get_args(union)[0])
    return {get_args(cls.model_fields["type"].annotation)[0]: cls for cls in classes}


ANTHROPIC_EVENTS = _validators(RawMessageStreamEvent)
RESPONSES_EVENTS = _validators(ResponseStreamEvent)


def strictly(events: list[dict[str, Any]], validators: dict[str, Any]) -> None:
    for event in events:
        validators[event["type"]].model_validate(event)  # a missing field raises


def translate(stream: am.MessagesStream | rs.ResponsesStream,
              chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(stream.feed(c) for c in chunks) + stream.finish()


@contextmanager
def mocked(sdk: Any, handler: Callable[[dict[str, Any]], tuple[bytes, str]]) -> Iterator[Any]:
    """A client of ``sdk`` whose every POST is answered by ``handler(json body)``, in
    process. The transport is of the SDK's own httpx flavour (newer SDKs use httpx2)."""
    http = importlib.import_module(sdk.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])

    def respond(request: Any) -> Any:
        content, kind = handler(json.loads(request.content))
        return http.Response(200, content=content, headers={"content-type": kind})

    base_url = "http://lemon/v1" if sdk is openai else "http://lemon"
    with http.Client(transport=http.MockTransport(respond)) as transport, sdk.Client(
            api_key="none", base_url=base_url, http_client=transport,
            max_retries=0) as client:
        yield client


def refused(fn: Callable[[dict[str, Any]], Any], body: dict[str, Any]) -> LemonError:
    with pytest.raises(LemonError) as info:
        fn(body)
    assert info.value.status == 400
    return info.value


# --- Anthropic: requests -------------------------------------------------------------

def test_anthropic_request_settings() -> None:
    chat = am.to_chat({"model": "smol", "max_tokens": 64, "temperature": 0.2, "top_k": 5,
                       "system": [{"type": "text", "text": "Be brief."},
                                  {"type": "text", "text": "Be kind."}],
                       "stop_sequences": ["END"], "stream": True,
                       "metadata": {"user_id": "u1"},
                       "messages": [{"role": "user", "content": "Hi"}]})
    assert chat == {"model": "smol", "max_tokens": 64, "temperature": 0.2, "top_k": 5,
                    "stop": ["END"], "stream": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": "Be brief.\nBe kind."},
                                 {"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none"),
    ({"type": "tool", "name": "weather"}, {"type": "function", "function": {"name": "weather"}}),
])
def test_anthropic_tools_and_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    chat = am.to_chat({"model": "m", "messages": [], "tool_choice": choice, "tools": [
        {"name": "weather", "description": "Weather now", "input_schema": WEATHER}]})
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "weather", "description": "Weather now", "parameters": WEATHER}}]
    assert chat["tool_choice"] == expected
    assert "parallel_tool_calls" not in chat


def test_anthropic_disable_parallel_tool_use() -> None:
    chat = am.to_chat({"model": "m", "messages": [], "tool_choice": {
        "type": "auto", "disable_parallel_tool_use": True}})
    assert chat["parallel_tool_calls"] is False


def test_anthropic_tool_history() -> None:
    chat = am.to_chat({"model": "m", "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "t2", "name": "weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "Be quick."},
            {"type": "tool_result", "tool_use_id": "t1", "content": "21C"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
             "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "data"}]}]},
    ]})
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
            {"id": "t2", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "21C"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no\ndata"},
        {"role": "user", "content": "Be quick."}]


def test_anthropic_tool_use_only_and_tool_result_only() -> None:
    chat = am.to_chat({"model": "m", "messages": [
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "now", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "noon"}]}]})
    assert chat["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "noon"}]


def test_anthropic_images() -> None:
    chat = am.to_chat({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "text", "text": "Same?"}]}]})
    assert chat["messages"] == [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
        {"type": "text", "text": "Same?"}]}]


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type",
     "web_search_20250305"),
    ({"messages": [{"role": "user", "content": [
        {"type": "document", "source": {}}]}]}, "messages[0].content[0].type", "'document'"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "system"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
        "content": [{"type": "image", "source": {}}]}]}]},
     "messages[0].content[0].content[0].type", "'image'"),
    ({"messages": [{"role": "assistant", "content": [{"type": "image", "source": {
        "type": "url", "url": "u"}}]}]}, "messages[0].content[0].type", "assistant"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "file", "file_id": "f"}}]}]}, "messages[0].content[0].source.type", "'file'"),
    ({"mcp_servers": [{"type": "url", "url": "u", "name": "n"}]}, "mcp_servers", "remove"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type", "'sometimes'"),
])
def test_anthropic_refusals(body: dict[str, Any], param: str, words: str) -> None:
    error = refused(am.to_chat, {"model": "m", "messages": [], **body})
    assert error.param == param
    assert words in str(error)


# --- Anthropic: replies --------------------------------------------------------------

def test_anthropic_reply_with_text_and_tools() -> None:
    reply = am.from_chat(chat_reply("Let me look.", [
        ("call_1", "weather", '{"city": "Paris"}'), ("call_2", "weather", "Paris")],
        finish="tool_calls"), "claude-alias")
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


@pytest.mark.parametrize(("finish", "extra", "reason", "sequence"), [
    ("stop", {}, "end_turn", None), ("length", {}, "max_tokens", None),
    ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the match
    ("stop", {"stop_reason": None}, "end_turn", None),
])
def test_anthropic_stop_reasons(finish: str, extra: dict[str, Any], reason: str,
                                sequence: str | None) -> None:
    message = Message.model_validate(am.from_chat(chat_reply("hi", finish=finish, **extra),
                                                  "m"))
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


def test_anthropic_reply_cached_tokens_counted_apart() -> None:
    chat = chat_reply("hi")
    chat["usage"]["prompt_tokens_details"] = {"cached_tokens": 20}
    usage = Message.model_validate(am.from_chat(chat, "m")).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (10, 20)


def test_anthropic_sdk_create_round_trip() -> None:
    seen: list[dict[str, Any]] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        seen.append(am.to_chat(body))
        return json.dumps(am.from_chat(chat_reply("Bonjour"), body["model"])).encode(), \
            "application/json"

    with mocked(anthropic, backend) as client:
        message = client.messages.create(model="m", max_tokens=20, system="French only.",
                                         messages=[{"role": "user", "content": "Hello"}])
    assert message.content[0].type == "text" and message.content[0].text == "Bonjour"
    assert seen[0]["messages"][0] == {"role": "system", "content": "French only."}
    assert seen[0]["max_tokens"] == 20


def test_count_tokens() -> None:
    body = {"model": "m", "system": "S", "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"name": "now", "input_schema": {"type": "object"}}]}
    request = am.count_tokens_request(body)
    assert request["max_tokens"] == 1
    assert "stream" not in request
    assert request["messages"] == am.to_chat(body)["messages"]
    assert request["tools"] == am.to_chat(body)["tools"]
    assert am.count_tokens_reply(chat_reply("x")) == {"input_tokens": 30}
    with pytest.raises(LemonError):
        am.count_tokens_reply({"choices": []})


# --- Anthropic: streams --------------------------------------------------------------

def stream_with_sdk(chunks: list[dict[str, Any]], **kwargs: Any) -> tuple[
        Any, list[dict[str, Any]]]:
    """Serve ``chunks`` translated to the real ``messages.stream()``: (final message,
    the events as sent)."""
    sent: list[bytes] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        assert am.to_chat(body)["stream_options"] == {"include_usage": True}
        sent.append(translate(am.MessagesStream(body["model"]), chunks))
        return sent[-1], "text/event-stream"

    with mocked(anthropic, backend) as client, client.messages.stream(
            model="claude-x", max_tokens=50, messages=[{"role": "user", "content": "Hi"}],
            **kwargs) as stream:
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
        "message_start", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]


def test_anthropic_stream_tools_split_over_chunks() -> None:
    final, events = stream_with_sdk(tool_stream())
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert final.content[0].text == "Checking both."
    assert [(b.id, b.name, b.input) for b in final.content[1:]] == [
        ("call_a", "weather", {"city": "Paris"}), ("call_b", "weather", {"city": "Rome"})]
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (40, 25)
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == [0, 1, 2]


def test_anthropic_stream_text_after_tool_and_no_usage() -> None:
    chunks = [_chunk({"role": "assistant", "content": None}),
              _chunk(_call(0, "c1", "now", "{}")), _chunk({"content": "Done."}),
              _chunk({}, "length")]  # no usage chunk: the stream ends without one
    final, _ = stream_with_sdk(chunks)
    assert [b.type for b in final.content] == ["tool_use", "text"]
    assert (final.content[0].input, final.content[1].text) == ({}, "Done.")
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 0


def test_anthropic_stream_usage_on_first_chunk() -> None:
    chunks = text_stream("a")
    chunks[0]["usage"] = _usage(9, 0)
    _, events = stream_with_sdk(chunks)
    assert events[0]["message"]["usage"]["input_tokens"] == 9


def test_anthropic_stream_empty() -> None:
    stream = am.MessagesStream("m")
    events = sse_events(stream.finish())
    strictly(events, ANTHROPIC_EVENTS)
    assert [e["type"] for e in events] == ["message_start", "message_delta", "message_stop"]
    assert stream.finish() == b"" and stream.feed(_chunk({"content": "x"})) == b""


def test_anthropic_stream_failure_raises_in_the_sdk() -> None:
    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        stream = am.MessagesStream("m")
        return stream.feed(text_stream("partial")[1]) + stream.fail("backend died"), \
            "text/event-stream"

    with mocked(anthropic, backend) as client, pytest.raises(
            anthropic.APIStatusError, match="backend died"), client.messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]) as s:
        s.get_final_message()


def test_anthropic_stream_error_chunk() -> None:
    stream = am.MessagesStream("m")
    raw = stream.feed({"error": {"message": "out of memory", "code": 500}})
    assert sse_events(raw)[-1] == {"type": "error", "error": {
        "type": "api_error", "message": "out of memory"}}
    assert stream.finish() == b""


# --- Responses: requests -------------------------------------------------------------

def test_responses_request_string_input_and_settings() -> None:
    chat = rs.to_chat({"model": "m", "input": "Hi", "instructions": "Be brief.",
                       "max_output_tokens": 30, "temperature": 0.1, "top_p": 0.9,
                       "stream": True, "store": False})
    assert chat == {"model": "m", "max_tokens": 30, "temperature": 0.1, "top_p": 0.9,
                    "stream": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}]}


def test_responses_request_items() -> None:
    chat = rs.to_chat({"model": "m", "input": [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,QUJD",
             "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a cat"},
        {"type": "function_call_output", "call_id": "c2", "output": [
            {"type": "input_text", "text": "a dog"}]},
        {"type": "function_call", "call_id": "c3", "name": "lookup", "arguments": "{}"}]})
    calls = [{"id": c, "type": "function", "function": {"name": "lookup", "arguments": a}}
             for c, a in (("c1", "{}"), ("c2", '{"a":1}'), ("c3", "{}"))]
    assert chat["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD",
                                                "detail": "low"}}]},
        {"role": "assistant", "content": "Looking.", "tool_calls": calls[:2]},
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        {"role": "tool", "tool_call_id": "c2", "content": "a dog"},
        {"role": "assistant", "content": None, "tool_calls": calls[2:]}]


def test_responses_request_tools_and_formats() -> None:
    chat = rs.to_chat({"model": "m", "input": "x", "parallel_tool_calls": False,
                       "tool_choice": {"type": "function", "name": "weather"},
                       "tools": [{"type": "function", "name": "weather", "strict": True,
                                  "description": "Now", "parameters": WEATHER}],
                       "text": {"format": {"type": "json_schema", "name": "city",
                                           "schema": WEATHER, "strict": True}}})
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "weather", "description": "Now", "parameters": WEATHER, "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "city", "schema": WEATHER, "strict": True}}
    assert rs.to_chat({"input": "x", "text": {"format": {"type": "json_object"}}})[
        "response_format"] == {"type": "json_object"}
    assert "response_format" not in rs.to_chat({"input": "x", "text": {
        "format": {"type": "text"}}})
    assert rs.to_chat({"input": "x", "tool_choice": "required"})["tool_choice"] == "required"


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "whole conversation"),
    ({"conversation": "conv_1"}, "conversation", "no conversation state"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "'web_search'"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "no conversation"),
    ({"input": [{"type": "file_search_call", "id": "f"}]}, "input[0].type",
     "'file_search_call'"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0]", "'input_file'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0]", "image_url"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "'tool'"),
    ({"tool_choice": {"type": "web_search"}}, "tool_choice", "web_search"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "'xml'"),
])
def test_responses_refusals(body: dict[str, Any], param: str, words: str) -> None:
    error = refused(rs.to_chat, {"model": "m", "input": "x", **body})
    assert error.param == param
    assert words in str(error)


# --- Responses: replies --------------------------------------------------------------

REQUEST = {"model": "gpt-alias", "input": "x", "instructions": "Be brief.",
           "max_output_tokens": 100, "temperature": 0.5,
           "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}]}


def test_responses_reply() -> None:
    reply = rs.from_chat(chat_reply("It is sunny.", [("call_9", "weather", '{"city":"Oslo"}')],
                                    "tool_calls"), REQUEST)
    response = Response.model_validate(reply)
    assert response.output_text == "It is sunny."
    assert (response.status, response.model, response.instructions) == (
        "completed", "gpt-alias", "Be brief.")
    call = response.output[1]
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == ("call_9", "weather", '{"city":"Oslo"}')
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (30, 7, 37)
    assert response.id.startswith("resp_") and call.id and call.id.startswith("fc_")
    assert response.tools[0].type == "function" and response.max_output_tokens == 100


def test_responses_reply_incomplete() -> None:
    response = Response.model_validate(rs.from_chat(chat_reply("It is", finish="length"),
                                                    {"model": "m", "input": "x"}))
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

def responses_with_sdk(chunks: list[dict[str, Any]], **kwargs: Any) -> tuple[
        Any, list[dict[str, Any]]]:
    """Serve ``chunks`` translated to the real ``responses.stream()``: (final response,
    the events as sent)."""
    sent: list[bytes] = []

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        assert rs.to_chat(body)["stream_options"] == {"include_usage": True}
        sent.append(translate(rs.ResponsesStream(body), chunks))
        return sent[-1], "text/event-stream"

    with mocked(openai, backend) as client, client.responses.stream(
            model="gpt-x", input="Hi", **kwargs) as stream:
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
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 3,
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]


def test_responses_stream_tools_split_over_chunks() -> None:
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER, "strict": False}]
    final, events = responses_with_sdk(tool_stream(), tools=tools)
    assert final.output_text == "Checking both."
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "weather", {"city": "Paris"}), ("call_b", "weather", {"city": "Rome"})]
    assert final.usage is not None and final.usage.total_tokens == 65
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [json.loads(e["arguments"]) for e in done] == [{"city": "Paris"}, {"city": "Rome"}]
    assert [e["output_index"] for e in events if e["type"] ==
            "response.output_item.added"] == [0, 1, 2]


def test_responses_stream_incomplete_and_no_usage() -> None:
    chunks = [_chunk({"role": "assistant", "content": None}),
              _chunk(_call(0, "c1", "now", "{}")), _chunk({"content": "Then"}),
              _chunk({}, "length")]
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
