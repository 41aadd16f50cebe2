"""How a request may arrive: an ASGI middleware bounding the head's size and the time the
body takes to arrive.

Hypercorn parses the head before the app sees it, and its h11 parser refuses a head only
while it is incomplete and over ``h11_max_incomplete_size``: a larger head that arrives
whole in one read (hypercorn reads up to 64 KiB at a time) passes. So ``max_header_bytes``
is checked here, on the request line and headers as parsed: over it, a 431 (a WebSocket
handshake's too, before it is accepted). Both refusals below are in the shape of the
request's API surface (:mod:`lemoncore.api.shapes`). Once the head
is in, hypercorn has no timeout at all (its ``keep_alive_timeout`` covers only the wait
for a head), so a body that stalls would hold the connection forever: when the app has
waited ``body_timeout`` seconds in all for a body's bytes, the request gets a 408 and the
connection is closed. Time counts only while the app waits in ``receive`` and only until
the body is complete, so neither a slow engine nor a long SSE answer (whose disconnect
listener waits in ``receive`` throughout) is cut. HTTP/1.1 and HTTP/2 alike.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lemoncore.api.guard import send_error
from lemoncore.errors import LemonError


class BodyTimedOut(LemonError):
    """The request body did not arrive in time: a 408 (by Starlette's handler when it
    propagates, else by :class:`Intake`), after which the connection is closed."""

    status, code = 408, "request_timeout"


def head_bytes(scope: Scope) -> int:
    """The size of a request's head as sent: request line and ``name: value`` lines."""
    line = (
        len(scope.get("method", "GET"))  # a WebSocket handshake is a GET
        + len(scope.get("raw_path") or scope["path"].encode())
        + len(scope.get("query_string", b""))
        + len(" ?HTTP/1.1\r\n")
    )
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"]) + 2


class Intake:
    """Refuse a head over ``max_header_bytes`` (431) and a body that keeps the app waiting
    more than ``body_timeout`` seconds in all (408); both close the connection."""

    def __init__(self, app: ASGIApp, body_timeout: float, max_header_bytes: int) -> None:
        self.app, self.body_timeout, self.max_header_bytes = app, body_timeout, max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and (size := head_bytes(scope)) > self.max_header_bytes:
            await send_error(
                send,
                431,
                f"the handshake's request line and headers are {size} "
                f"bytes; the limit is {self.max_header_bytes} (setting "
                "max_header_bytes)",
                "request_header_fields_too_large",
                scope,
            )
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        close = (
            [(b"connection", b"close")] if scope.get("http_version", "1.1") < "2" else []
        )  # HTTP/2 forbids the header; its stream ends with the answer
        if (size := head_bytes(scope)) > self.max_header_bytes:
            await send_error(
                send,
                431,
                f"the request line and headers are {size} bytes; the "
                f"limit is {self.max_header_bytes} (setting max_header_bytes)",
                "request_header_fields_too_large",
                scope,
                headers=close,
            )
            return
        waited, complete, started, late = 0.0, False, False, False

        async def timed() -> Message:
            nonlocal waited, complete, late
            if complete:  # after the body: waiting for a disconnect is not timed
                return await receive()
            began = anyio.current_time()
            with anyio.move_on_after(self.body_timeout - waited) as deadline:
                message = await receive()
            waited += anyio.current_time() - began
            if deadline.cancelled_caught:
                late = True
                raise BodyTimedOut(
                    f"the request body did not arrive in full within "
                    f"{self.body_timeout:g} s (setting body_timeout)"
                )
            complete = message["type"] != "http.request" or not message.get("more_body")
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if late:  # Starlette answers the 408: make it close the connection
                    message = {**message, "headers": [*message.get("headers", []), *close]}
            await send(message)

        try:
            await self.app(scope, timed, watched)
        except BodyTimedOut as exc:
            if not started:  # else the answer is cut short; the connection closes anyway
                await send_error(send, exc.status, str(exc), exc.code or "", scope, headers=close)
