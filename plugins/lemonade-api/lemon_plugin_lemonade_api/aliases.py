"""Lemonade's ``/api/v0/*`` and ``/v0/*`` prefixes: Lemonade serves every endpoint under
``/api/v0``, ``/api/v1``, ``/v0`` and ``/v1`` (``register_get``/``register_post`` in
src/cpp/server/server.cpp). A request under ``/api/v0`` or ``/v0`` is served by the app
again as ``/api/v1/…`` when lemoncore routes that path, else as ``/v1/…`` (inference
lives there), through the app's whole stack: the key guard and the browser boundary
check the rewritten request as they check one sent there directly."""

from __future__ import annotations

from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

PREFIXES = ("/api/v0", "/v0")


def target(scope: Scope) -> str:
    """The lemoncore path a ``/api/v0`` or ``/v0`` request stands for."""
    path: str = scope["path"]
    rest = next(path[len(p) :] for p in PREFIXES if path.startswith(p + "/"))
    for candidate in ("/api/v1" + rest, "/v1" + rest):
        probe = {**scope, "path": candidate}
        if any(r.matches(probe)[0] is not Match.NONE for r in scope["app"].router.routes):
            return candidate
    return "/api/v1" + rest


class Alias:
    """An ASGI app (Starlette calls an object, not a function, as one) that serves the
    request again at :func:`target`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = target(scope)
        rewritten = {**scope, "path": path, "raw_path": path.encode()}
        await scope["app"](rewritten, receive, send)


def routes() -> list[Route]:
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return [Route(f"{p}/{{rest:path}}", Alias(), methods=methods) for p in PREFIXES]
