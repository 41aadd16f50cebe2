"""Ollama-shaped errors and NDJSON streams, in-process: an error before a stream's first
line is answered with its status; one during the stream ends it with an error line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lemoncore.plugin import LemonError

from lemon_plugin_ollama_api.responses import (
    INTERNAL,
    Line,
    NDJSONResponse,
    ollama_errors,
    started,
)

pytestmark = pytest.mark.anyio


async def lines(fail_after: int, error: Exception) -> AsyncIterator[Line]:
    for n in range(fail_after):
        yield {"n": n, "done": False}
    raise error


@ollama_errors
async def streamed(request: Request) -> Response:
    after = int(request.query_params["after"])
    error: Exception = (
        LemonError("engine broke", 502)
        if request.query_params.get("kind") == "lemon"
        else RuntimeError("a bug")
    )
    return NDJSONResponse(await started(lines(after, error)))


@ollama_errors
async def refused(request: Request) -> Response:
    raise LemonError("busy; retry", 503, retry_after=2.5)


async def ask(path: str) -> httpx.Response:
    app = Starlette(routes=[Route("/stream", streamed), Route("/refused", refused)])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://test"
    ) as client:
        return await client.get(path)


async def test_an_error_during_a_stream_ends_it_with_an_error_line() -> None:
    answer = await ask("/stream?after=2&kind=lemon")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-ndjson"
    assert [json.loads(x) for x in answer.text.splitlines()] == [
        {"n": 0, "done": False},
        {"n": 1, "done": False},
        {"error": "engine broke"},
    ]
    unexpected = await ask("/stream?after=1&kind=bug")
    assert [json.loads(x) for x in unexpected.text.splitlines()] == [
        {"n": 0, "done": False},
        {"error": INTERNAL},
    ]


async def test_an_error_before_the_first_line_keeps_its_status() -> None:
    answer = await ask("/stream?after=0&kind=lemon")
    assert answer.status_code == 502 and answer.json() == {"error": "engine broke"}
    bug = await ask("/stream?after=0&kind=bug")
    assert bug.status_code == 500 and bug.json() == {"error": INTERNAL}


async def test_errors_are_ollama_shaped_with_retry_after() -> None:
    answer = await ask("/refused")
    assert answer.status_code == 503 and answer.json() == {"error": "busy; retry"}
    assert answer.headers["retry-after"] == "3"
