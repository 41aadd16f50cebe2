"""Forward inference requests to a backend: JSON or SSE, chunk by chunk.

Streams pass backend bytes through untouched, add ``: ping`` comments while the backend
is silent, end with ``data: [DONE]`` (appended when a backend omits it) and turn a
backend failure mid-stream into an error frame instead of hanging.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectSendStream
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

PING = b": ping\n\n"
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class BackendFailure(Exception):
    """The backend could not be reached or broke the connection."""


def error_body(message: str, type_: str, code: str | None = None,
               param: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": param,
                      **extra}}


def sse_error(message: str, status: int = 502) -> bytes:
    body = error_body(message, "backend_error", "backend_error", status_code=status)
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def send_request(client: httpx.AsyncClient, path: str, body: dict[str, Any],
                       stream: bool) -> httpx.Response:
    """POST to the backend; transport failures become :class:`BackendFailure`."""
    try:
        return await client.send(client.build_request("POST", path, json=body), stream=stream)
    except httpx.TransportError as exc:
        raise BackendFailure(f"backend connection failed: {exc!r}") from exc


async def relay_sse(response: httpx.Response, heartbeat: float) -> AsyncIterator[bytes]:
    """Yield the backend's SSE bytes, with heartbeats and a final ``[DONE]`` or error."""
    send, receive = anyio.create_memory_object_stream[bytes | BackendFailure](64)
    tail = b""
    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(_pump, response, send)
        while True:
            with anyio.move_on_after(heartbeat) as silent:
                try:
                    item = await receive.receive()
                except anyio.EndOfStream:
                    break
            if silent.cancelled_caught:
                yield PING
            elif isinstance(item, BackendFailure):
                yield sse_error(str(item))
                return
            else:
                tail = (tail + item)[-64:]
                yield item
    if DONE.strip() not in tail:
        yield DONE


async def _pump(response: httpx.Response,
                send: MemoryObjectSendStream[bytes | BackendFailure]) -> None:
    async with send:
        try:
            async for chunk in response.aiter_raw():
                await send.send(chunk)
        except httpx.TransportError as exc:
            await send.send(BackendFailure(f"backend stream broke: {exc!r}"))


class ManagedStreamingResponse(StreamingResponse):
    """A streaming response that closes ``resources`` however the response ends."""

    def __init__(self, content: AsyncIterator[bytes], resources: AsyncExitStack) -> None:
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self.resources = resources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.resources.aclose()
