"""What an engine sends back is bounded (``max_answer_bytes``): a non-streamed answer
too large is a 502 naming the setting, an error body is read only as far as its
message, and one over-long event of a stream lemoncore parses ends that stream with an
error; the server goes on serving. The engine is ``tinyserver.py`` with ``flood``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore import Settings, create_app
from lemoncore.api.gateway import Gateway
from lemoncore.app import core_of
from lemoncore.errors import LemonError
from lemoncore.serving.bounded import ERROR_BODY_BYTES
from lemoncore.serving.sse import DataLines

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, tiny_plugin

pytestmark = pytest.mark.anyio
LIMIT = 1 << 20
CHAT = "/v1/chat/completions"
SAY = [{"role": "user", "content": "hi"}]


@asynccontextmanager
async def lemon(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    cache = tmp_path / "cache"
    app = create_app(
        Settings(cache_dir=cache, plugins_allow="", max_answer_bytes=LIMIT),
        plugins={"tiny": tiny_plugin(cache)},
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=60
        ) as client,
    ):
        yield client, Gateway(core_of(app))


def flood(size: int, **how: Any) -> dict[str, Any]:
    """A request the engine answers with ``size`` hostile bytes (``Handler.flood``)."""
    said = "flood " + json.dumps({"size": size, **how})
    return {"model": MODEL, "messages": [{"role": "user", "content": said}]}


async def still_serving(client: httpx.AsyncClient) -> None:
    answer = await client.post(CHAT, json={"model": MODEL, "messages": SAY})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == f"ok from {MODEL}"


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until-close"])
async def test_a_non_streamed_answer_over_the_limit_is_a_502(
    tmp_path: Path, length: bool, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, _):
        answer = await client.post(CHAT, json=flood(4 * LIMIT, length=length))
        assert answer.status_code == 502, answer.text[:300]
        error = answer.json()["error"]
        assert error["code"] == "answer_too_large" and "max_answer_bytes" in error["message"]
        small = await client.post(CHAT, json=flood(LIMIT // 2))  # under it: whole
        assert small.status_code == 200 and len(small.json()["x"]) == LIMIT // 2 - 9
        await still_serving(client)


async def test_an_answer_that_cannot_be_decoded_is_a_502(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, _):
        answer = await client.post(CHAT, json=flood(4096, gzip=True))
        assert answer.status_code == 502, answer.text[:300]
        assert "DecodingError" in answer.json()["error"]["message"]
        await still_serving(client)


async def test_an_error_body_is_read_only_as_far_as_its_message(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, _):
        for stream in (False, True):
            answer = await client.post(
                CHAT, json={**flood(8 * LIMIT, status=500), "stream": stream}
            )
            assert answer.status_code == 502, answer.text[:300]
            message = answer.json()["error"]["message"]
            assert (
                message.startswith('backend error: {"x": "aaa') and len(message) < ERROR_BODY_BYTES
            )
        await still_serving(client)


async def test_an_overlong_event_ends_a_translated_stream_with_an_error(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, _):
        body = {**flood(4 * LIMIT, sse=True, length=False), "max_tokens": 8, "stream": True}
        async with client.stream("POST", "/v1/messages", json=body) as answer:
            assert answer.status_code == 200
            events = [line async for line in answer.aiter_lines() if line.startswith("data:")]
        error = json.loads(events[-1][5:])
        assert error["type"] == "error" and "max_answer_bytes" in error["error"]["message"]
        await still_serving(client)


async def test_an_overlong_event_raises_from_the_gateways_stream(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, gateway):
        events = gateway.stream(CHAT, flood(4 * LIMIT, sse=True, length=False))
        with pytest.raises(LemonError) as caught:
            async for _ in events:
                pass
        assert caught.value.status == 502 and caught.value.code == "answer_too_large"
        await still_serving(client)


def test_data_lines_cut_nowhere_but_over_the_limit() -> None:
    """Any split of the bytes gives the same events; a line over the limit raises, even
    one that never ends."""
    stream = b'data: {"a": 1}\n\n: ping\ndata: [DONE]\n' + b"data: " + b"x" * 10 + b"\n"
    for size in (1, 2, 3, 7, len(stream)):
        lines = DataLines(max_line=64)
        events = [e for i in range(0, len(stream), size) for e in lines.feed(stream[i : i + size])]
        assert events[0] == {"a": 1} and len(events) == 2
    lines = DataLines(max_line=64)
    with pytest.raises(LemonError, match="max_answer_bytes"):
        for _ in range(10):
            lines.feed(b"y" * 10)
