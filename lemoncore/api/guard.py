"""Who may call what, and how big a request may be: an ASGI middleware.

With ``api_key`` set, every API route needs it (``Authorization: Bearer …`` or
``x-api-key``; the admin key serves too); management routes (load, unload, pull,
``models/register``, delete, install, uninstall, logs, events, shutdown) need
``admin_api_key``, which defaults to ``api_key``. What a plugin's route may do through the
gateway follows the same rule (:func:`may_manage`). With no admin key, management routes
answer only requests from this machine itself (:func:`is_local`) unless
``allow_remote_admin`` is set. ``/live``, ``/openapi.json`` and the web UI's static
pages (``/``, ``/ui/…``: they hold no data; the API calls they make need the keys) stay
open; a plugin route at ``/`` still needs the key (:data:`KEYLESS`,
:class:`~lemoncore.routevet.Fenced`).
Keys are compared in constant time and never logged. Bodies over ``max_body_bytes`` get
a 413 (:class:`BodyTooLarge`, a :class:`~lemoncore.errors.LemonError`, so a handler that
is reading the body when the limit is passed answers it too). Every refusal is in the
shape of the request's API surface (:mod:`lemoncore.api.shapes`).

WebSocket handshakes pass the same checks, and with ``api_key`` set every WebSocket path
needs it (none is open). The key comes in the same headers, so only non-browser clients
can present it: browsers cannot set headers on a handshake, and no other form (no
``Sec-WebSocket-Protocol`` bearer token, no query parameter) is accepted. A refused
handshake gets the HTTP status and the same JSON body (:func:`send_error`). Message sizes are
the server's limit (hypercorn's ``websocket_max_message_size``), not ``max_body_bytes``.
``lifespan`` passes through; any other ASGI scope type is refused (raises).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lemoncore.api.hostname import loopback_address, loopback_name
from lemoncore.api.shapes import error_bytes
from lemoncore.errors import LemonError

KEYLESS = "lemoncore.keyless"  # scope key: on an open path, without the api_key that is set
# scope key: the request may do what management routes do (may_manage); what
# lemoncore.serving.control.RuntimeControl.of requires, on whatever path a plugin serves it
ADMIN_SCOPE = "lemoncore.admin"
# path prefixes whose every route is a management route (Lemonade's /internal/* control
# endpoints, which a plugin may serve: Lemonade's server.cpp gates them on the admin key)
ADMIN_PREFIXES = ("/internal/",)
ADMIN_ENDPOINTS = {
    "load",
    "unload",
    "pull",
    "register",
    "delete",
    "install",
    "uninstall",
    "logs",
    "events",
    "shutdown",
}


def required_key(path: str) -> str | None:
    """``admin``, ``api`` or ``None`` (open) for a request path."""
    if path in {"/live", "/openapi.json", "/", "/ui"} or path.startswith("/ui/"):
        return None
    if path.startswith(ADMIN_PREFIXES):
        return "admin"
    return "admin" if path.rstrip("/").rsplit("/", 1)[-1] in ADMIN_ENDPOINTS else "api"


def presented_key(headers: dict[bytes, bytes]) -> str:
    auth = headers.get(b"authorization", b"").decode(errors="replace")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get(b"x-api-key", b"").decode(errors="replace")


def same(a: str, b: str) -> bool:
    """Constant time whatever the lengths: compare digests."""
    return hmac.compare_digest(
        hashlib.sha256(a.encode()).digest(), hashlib.sha256(b.encode()).digest()
    )


class BodyTooLarge(LemonError):
    """A request body over ``max_body_bytes``: a 413."""

    status, code = 413, "request_too_large"


def served_scope(scope: Scope) -> bool:
    """``True`` for a scope the guards check (HTTP, WebSocket), ``False`` for ``lifespan``;
    raise for any other type (ASGI: an app raises on a scope type it does not know)."""
    if scope["type"] in {"http", "websocket"}:
        return True
    if scope["type"] == "lifespan":
        return False
    raise ValueError(f"lemoncore serves HTTP and WebSocket, not ASGI {scope['type']!r} scopes")


def is_local(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    """Whether a request comes from this machine itself: a loopback client (or a unix
    socket) that no reverse proxy forwarded (no ``Forwarded``/``X-Forwarded-For``) and
    that names this server by a loopback name or address. A proxy on this machine
    connects from 127.0.0.1, so its clients count as remote."""
    client = scope.get("client")
    if client is not None and not loopback_address(client[0]):
        return False
    if b"forwarded" in headers or b"x-forwarded-for" in headers:
        return False
    return loopback_name(headers.get(b"host", b"").decode("latin-1"))


def may_manage(scope: Scope, admin_key: str | None, allow_remote_admin: bool) -> bool:
    """Whether the request in ``scope`` may do what the management routes do (load,
    unload, pin, unpin, pull, delete): it presents ``admin_key`` (``admin_api_key``, else
    ``api_key``) or, while no key is set, comes from this machine (:func:`is_local`) or
    ``allow_remote_admin`` is on. The guard's rule for management routes, and the
    gateway's for what a plugin's route may do for its caller."""
    headers = dict(scope.get("headers") or [])
    if admin_key:
        return same(presented_key(headers), admin_key)
    return allow_remote_admin or is_local(scope, headers)


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None,
        admin_key: str | None,
        max_body_bytes: int,
        allow_remote_admin: bool = False,
    ) -> None:
        self.app, self.api_key = app, api_key
        self.admin_key = admin_key or api_key
        self.max_body = max_body_bytes
        self.allow_remote_admin = allow_remote_admin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not served_scope(scope):
            await self.app(scope, receive, send)
            return
        headers, websocket = dict(scope["headers"]), scope["type"] == "websocket"
        needed = required_key(scope["path"]) or ("api" if websocket else None)
        key = presented_key(headers)
        admin = bool(self.admin_key) and same(key, self.admin_key or "")  # serves the API too
        refused = (
            not may_manage(scope, self.admin_key, self.allow_remote_admin)
            if needed == "admin"
            else needed == "api"
            and bool(self.api_key)
            and not (admin or same(key, self.api_key or ""))
        )
        if refused and (needed == "api" or self.admin_key):
            what = "an admin API key" if needed == "admin" else "an API key"
            await send_error(
                send,
                401,
                f"this route needs {what}: send 'Authorization: "
                "Bearer <key>' or 'x-api-key: <key>'",
                "invalid_api_key",
                scope,
            )
            return
        if refused:
            await send_error(
                send,
                403,
                "management routes answer only this machine while no "
                "admin key is set: set admin_api_key (LEMON_ADMIN_API_KEY), or "
                "allow_remote_admin",
                "remote_admin_refused",
                scope,
            )
            return
        if needed is None and self.api_key and not (admin or same(key, self.api_key)):
            scope = {**scope, KEYLESS: True}  # an open path: a plugin route there refuses
        if needed == "admin" or may_manage(scope, self.admin_key, self.allow_remote_admin):
            scope = {**scope, ADMIN_SCOPE: True}
        if websocket:
            await self.app(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await send_error(
                send,
                413,
                f"request body is {int(length)} bytes; the limit is "
                f"{self.max_body} (setting max_body_bytes)",
                "request_too_large",
                scope,
            )
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                raise BodyTooLarge(
                    f"request body exceeds {self.max_body} bytes (setting max_body_bytes)"
                )
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge as exc:  # no handler answered it
            await send_error(send, exc.status, str(exc), exc.code or "", scope)


async def send_error(
    send: Send,
    status: int,
    message: str,
    code: str,
    scope: Scope | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with ``status`` and an error body in the shape of ``scope``'s API surface
    (:func:`lemoncore.api.shapes.error_bytes`; OpenAI's without a ``scope``) and
    ``headers``, before any response.

    A WebSocket ``scope`` is refused before ``websocket.accept``: with the ASGI denial
    response extension (``websocket.http.response``, which hypercorn advertises and
    implements: ``hypercorn/protocol/ws_stream.py``, ``WSStream.handle`` puts it in the
    scope, ``WSStream.app_send``/``_send_rejection`` send the status, headers and body)
    it gets the same status and body as HTTP; without it, ``websocket.close`` with 1008,
    which the server answers as a bare 403 (``WSStream.app_send``:
    ``_send_error_response(403)``).
    """
    body = error_bytes(scope, LemonError(message, status, "invalid_request_error", code))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    kind = "http"
    if scope is not None and scope["type"] == "websocket":
        if "websocket.http.response" not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": 1008, "reason": code})
            return
        kind = "websocket.http"
    await send({"type": f"{kind}.response.start", "status": status, "headers": headers})
    await send({"type": f"{kind}.response.body", "body": body})
