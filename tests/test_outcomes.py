"""One definition of a failed answer on every path (``lemoncore.serving.answer``): a
stream that starts and then carries an error event, as llama-server sends one, counts as
one failure whether it was relayed as it came (``/v1/chat/completions``), translated
(``/v1/messages``) or read by a plugin (``Gateway.stream``); after ``WEDGED_AFTER`` of
them the server is restarted, and a good answer resets the count."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from lemoncore import Settings, create_app
from lemoncore.api.gateway import Gateway
from lemoncore.app import core_of
from lemoncore.errors import LemonError
from lemoncore.serving.admission import WEDGED_AFTER
from lemoncore.serving.router import Router

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, tiny_plugin

pytestmark = pytest.mark.anyio
FAILING = [{"role": "user", "content": "fail in the stream"}]  # tinyserver's failed_stream
Send = Callable[[httpx.AsyncClient, Gateway, list[dict[str, str]]], Awaitable[None]]


async def relayed(client: httpx.AsyncClient, _: Gateway, messages: list[dict[str, str]]) -> None:
    body = {"model": MODEL, "messages": messages, "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        assert answer.status_code == 200
        await answer.aread()


async def translated(client: httpx.AsyncClient, _: Gateway, messages: list[dict[str, str]]) -> None:
    body = {"model": MODEL, "messages": messages, "stream": True, "max_tokens": 8}
    async with client.stream("POST", "/v1/messages", json=body) as answer:
        assert answer.status_code == 200
        await answer.aread()


async def through_the_gateway(
    _: httpx.AsyncClient, gateway: Gateway, messages: list[dict[str, str]]
) -> None:
    try:
        async for _event in gateway.stream(
            "/v1/chat/completions", {"model": MODEL, "messages": messages}
        ):
            pass
    except LemonError as exc:
        assert exc.status == 502 and "failed mid-stream" in str(exc)


@asynccontextmanager
async def lemon(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Gateway, Router]]:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow=""), plugins={"tiny": tiny_plugin(tmp_path)}
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        core = core_of(app)
        yield client, Gateway(core), core.router


@pytest.mark.parametrize("send", [relayed, translated, through_the_gateway])
async def test_a_stream_that_fails_counts_the_same_on_every_path(
    tmp_path: Path, send: Send, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as (client, gateway, router):
        await send(client, gateway, FAILING)
        first = router.servers[MODEL]
        assert first.failures == 1
        await send(client, gateway, [{"role": "user", "content": "hi"}])
        assert first.failures == 0  # a good answer resets it
        for _ in range(WEDGED_AFTER):
            await send(client, gateway, FAILING)
        assert router.servers.get(MODEL) is not first  # wedged: restarted
    # stopped in the background, or by the shutdown right after: never left running
    assert first.process.exited.is_set()
