"""What the translator tests share: llama-server-shaped chat completions and stream
chunks, SSE parsing, the SDKs' event types, and SDK clients answered in process."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, get_args

import openai
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent

from lemoncore.errors import LemonError
from lemoncore.translation import anthropic as am
from lemoncore.translation import responses as rs

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
HI = [{"role": "user", "content": "Hi"}]


def ask(**fields: Any) -> dict[str, Any]:
    """A valid Messages request with ``fields`` set."""
    return {"model": "m", "max_tokens": 16, "messages": HI, **fields}


# --- llama-server-shaped chat completions ------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "smol",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def chat_usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def call_delta(
    index: int, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    call: dict[str, Any] = {"index": index, "function": function}
    if call_id:
        call.update(id=call_id, type="function")
        function["name"] = name
    return {"tool_calls": [call]}


def text_stream(
    *pieces: str, finish: str = "stop", usage: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    return [
        chunk({"role": "assistant", "content": None}),
        *(chunk({"content": p}) for p in pieces),
        chunk({}, finish),
        chunk(usage=usage or chat_usage(11, len(pieces))),
    ]


def tool_stream() -> list[dict[str, Any]]:
    """Text, then two tool calls with their arguments split over several chunks."""
    return [
        chunk({"role": "assistant", "content": None}),
        chunk({"content": "Checking"}),
        chunk({"content": " both."}),
        chunk(call_delta(0, "call_a", "weather")),
        chunk(call_delta(0, arguments='{"ci')),
        chunk(call_delta(0, arguments='ty": "Par')),
        chunk(call_delta(0, arguments='is"}')),
        chunk(call_delta(1, "call_b", "weather", '{"city":')),
        chunk(call_delta(1, arguments=' "Rome"}')),
        chunk({}, "tool_calls"),
        chunk(usage=chat_usage(40, 25)),
    ]


def chat_reply(
    content: str | None,
    calls: Sequence[tuple[str, str, str]] = (),
    finish: str = "stop",
    **choice: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-xyz",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "smol",
        "usage": chat_usage(30, 7),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
    }


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


def translate(
    stream: am.MessagesStream | rs.ResponsesStream, chunks: list[dict[str, Any]]
) -> bytes:
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
    with (
        http.Client(transport=http.MockTransport(respond)) as transport,
        sdk.Client(
            api_key="none", base_url=base_url, http_client=transport, max_retries=0
        ) as client,
    ):
        yield client


def refused(fn: Callable[[dict[str, Any]], Any], body: dict[str, Any]) -> LemonError:
    with pytest.raises(LemonError) as info:
        fn(body)
    assert info.value.status == 400
    return info.value
