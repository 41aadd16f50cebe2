"""An error that ends a translated Messages stream is Anthropic's ``error`` event, its
``error.type`` the one the HTTP status would have had (Anthropic's errors page; Lemonade's
``build_anthropic_error``, ``src/cpp/include/lemon/anthropic_error.h``), and nothing
follows it: no ``message_stop``, no ``data: [DONE]``. The status is the one the engine's
error names (llama-server's numeric ``code``) or lemoncore's own (a shutdown's 503)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.shared import ErrorResponse

from lemoncore.translation import TRANSLATIONS, TranslatedFraming
from lemoncore.translation import anthropic as am
from lemoncore.translation.walk import error_status

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from translation_support import ANTHROPIC_EVENTS, mocked, sse_events, strictly, text_stream

# What llama-server sends when a request fails on a chat stream (its error object, as
# its own answer to an overflowing prompt carries it)
OVERFLOW = {
    "code": 400,
    "message": "request (2031 tokens) exceeds the available context size (512 tokens), "
    "try increasing it",
    "type": "exceed_context_size_error",
}


def framing() -> TranslatedFraming:
    translation = TRANSLATIONS["/v1/messages"]
    assert translation.stream is not None
    return TranslatedFraming(translation.stream({"model": "m"}), 1 << 20)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (OVERFLOW, 400),
        ({"message": "x", "status_code": 429}, 429),
        ({"message": "x", "code": 200}, 502),  # no error status
        ({"message": "x", "code": "400"}, 502),  # not a number
        ({"message": "x", "code": True}, 502),
        ("out of memory", 502),
    ],
)
def test_the_status_an_engine_error_names(error: object, status: int) -> None:
    assert error_status(error) == status


def test_an_engine_error_event_is_typed_by_its_status() -> None:
    f = framing()
    raw = f.chunk(sse(text_stream("partial")[0], {"error": OVERFLOW}) + b"data: [DONE]\n\n")
    events = sse_events(raw)
    strictly(events[:-1], ANTHROPIC_EVENTS)
    ErrorResponse.model_validate(events[-1])  # the SDK's type of the error event's body
    assert events[-1] == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"backend error: {OVERFLOW['message']}",
        },
    }
    assert f.error and f.end() == b""
    assert b"message_stop" not in raw and b"[DONE]" not in raw


@pytest.mark.parametrize(
    ("status", "kind"),
    [(503, "overloaded_error"), (413, "request_too_large"), (502, "api_error")],
)
def test_lemoncore_errors_mid_stream_are_typed_by_status(status: int, kind: str) -> None:
    """The relay's own: a shutdown cut (503), an event over the answer limit, a break."""
    raw = framing().fail("cut", status)
    assert sse_events(raw) == [{"type": "error", "error": {"type": kind, "message": "cut"}}]


def test_the_sdk_raises_the_typed_error() -> None:
    """``messages.stream`` raises on the ``error`` event, its body as Anthropic's."""

    def backend(body: dict[str, Any]) -> tuple[bytes, str]:
        stream = am.MessagesStream("m")
        return stream.feed(text_stream("hi")[0]) + stream.fail("too long", 400), "text/event-stream"

    with (
        mocked(anthropic, backend) as client,
        pytest.raises(anthropic.APIStatusError) as raised,
        client.messages.stream(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        ) as s,
    ):
        s.get_final_message()
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "too long"},
    }
