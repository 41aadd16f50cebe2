"""Answers in Ollama's shapes: errors are ``{"error": "message"}`` with the
:class:`LemonError`'s status (and ``Retry-After``), streams are NDJSON lines, and an error
during a stream ends it with an ``{"error": ...}`` line."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from lemoncore.plugin import LemonError

log = structlog.get_logger("lemon_plugin_ollama_api")

Handler = Callable[[Request], Awaitable[Response]]
Line = dict[str, Any]
T = TypeVar("T")
NDJSON = "application/x-ndjson"
INTERNAL = "internal error in the Ollama API plugin; see lemoncore's log"


def error_response(exc: LemonError) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, exc.status, headers=exc.headers)


def ollama_errors(handler: Handler) -> Handler:
    """``handler`` with its failures answered in Ollama's shape: a :class:`LemonError`
    with its status, anything else a logged 500."""

    @functools.wraps(handler)
    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except LemonError as exc:
            return error_response(exc)
        except Exception as exc:  # a 500 in Ollama's shape, logged
            log.exception("ollama api handler failed", path=request.url.path, error=repr(exc))
            return JSONResponse({"error": INTERNAL}, 500)

    return answer


async def close(iterator: AsyncIterator[Any]) -> None:
    """Close an async generator (which stops the engine's generation behind it)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


async def started(lines: AsyncIterator[Line]) -> AsyncIterator[Line]:
    """``lines`` with its first line already produced, so that a failure before it (an
    unknown model, a load that fails) raises here and is answered with its status."""
    try:
        first = await anext(lines)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await close(lines)
        raise

    async def resumed() -> AsyncIterator[Line]:
        try:
            if first is not None:
                yield first
            async for item in lines:
                yield item
        finally:
            await close(lines)

    return resumed()


async def last(lines: AsyncIterator[Line]) -> Line:
    """The last of ``lines`` (a non-streaming answer is its stream's final line)."""
    final: Line = {}
    try:
        async for item in lines:
            final = item
    finally:
        await close(lines)
    return final


class NDJSONResponse(Response):
    """``lines`` as NDJSON, one JSON object a line. A failure ends the stream with an
    ``{"error": ...}`` line; a client that disconnects cancels it. ``lines`` is iterated
    and closed in the task that serves the request."""

    media_type = NDJSON

    def __init__(self, lines: AsyncIterator[Line]) -> None:  # no body: no Content-Length
        self.status_code, self.background, self.lines = 200, None, lines
        self.init_headers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        left = False

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            group.cancel_scope.cancel()

        async def write(item: Line) -> None:
            await send(
                {
                    "type": "http.response.body",
                    "body": json.dumps(item).encode() + b"\n",
                    "more_body": True,
                }
            )

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            try:
                async for item in self.lines:
                    await write(item)
            except LemonError as exc:
                await write({"error": str(exc)})
            except Exception as exc:  # the stream has begun: an error line
                log.exception("ollama api stream failed", error=repr(exc))
                await write({"error": INTERNAL})
            finally:
                with anyio.CancelScope(shield=True):
                    await close(self.lines)
            group.cancel_scope.cancel()
        if not left:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
