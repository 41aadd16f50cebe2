"""lemoncore mounted inside another Starlette app: routes under a prefix, lifespan owned
by the outer app, backends stopped when it stops."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import lemoncore
from lemoncore import Settings

pytestmark = pytest.mark.anyio


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("host app")


async def test_mounted_app_serves_chat_and_stops_its_backends(
    tmp_path: Path, anyio_backend: str
) -> None:
    llm = lemoncore.create_app(Settings(cache_dir=tmp_path))

    @asynccontextmanager
    async def outer_lifespan(app: Starlette) -> AsyncIterator[None]:
        async with lemoncore.lifespan(llm):
            yield

    outer = Starlette(routes=[Route("/", hello), Mount("/llm", app=llm)], lifespan=outer_lifespan)
    async with (
        outer.router.lifespan_context(outer),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(outer), base_url="http://localhost", timeout=60
        ) as client,
    ):
        assert (await client.get("/")).text == "host app"
        reply = await client.post(
            "/llm/v1/chat/completions",
            json={
                "model": "smollm2",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hi"}],
            },
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        health = (await client.get("/llm/api/v1/health")).json()
        pid = health["all_models_loaded"][0]["pid"]
        os.kill(pid, 0)  # alive while the host app runs
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
