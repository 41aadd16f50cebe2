"""The router collection's stream framing (lemoncore.api.collection_dispatch.RouteFraming):
the decision goes into the first JSON event whatever its line endings or how the bytes
were split, and every other byte passes as it came."""

from __future__ import annotations

import json

import pytest

from lemoncore.api.collection_dispatch import FIELD, RouteFraming
from lemoncore.serving.proxy import Passthrough

DECISION = {"route_to": "m1", "matched_rule": "code"}


def framed(chunks: list[bytes]) -> bytes:
    framing = RouteFraming(Passthrough(), dict(DECISION))
    return b"".join(framing.chunk(c) for c in chunks) + framing.end()


@pytest.mark.parametrize("nl", [b"\n", b"\r\n", b"\r"])
def test_the_first_json_event_carries_the_decision_whatever_the_split(nl: bytes) -> None:
    stream = (
        b": ping" + nl + nl
        + b"event: response.created" + nl + b'data: {"a": 1}' + nl + nl
        + b'data: {"b": 2}' + nl + nl
        + b"data: [DONE]" + nl + nl
    )  # fmt: skip
    for size in (1, 2, 3, 7, len(stream)):
        out = framed([stream[i : i + size] for i in range(0, len(stream), size)])
        events = [e for e in out.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n\n")]
        assert events[0] == b": ping"
        head, data = events[1].split(b"\n")
        assert head == b"event: response.created"
        assert json.loads(data[5:]) == {"a": 1, FIELD: DECISION}, (nl, size)
        assert events[2] == b'data: {"b": 2}' and events[3] == b"data: [DONE]"


def test_an_error_event_is_left_alone_and_a_cut_stream_ends_its_event() -> None:
    out = framed([b'data: {"error": {"message": "x"}}\n\ndata: {"par'])
    assert out.startswith(b'data: {"error": {"message": "x"}}\n\ndata: {"par\n\n')
    assert FIELD.encode() not in out
