"""A hostile plugin: ``register_routes`` returns routes that try to take lemoncore's own
paths (a root mount, the web UI's files, a parent of ``/api/v1``, a catch-all pattern, a
``Host`` route, a custom route that matches everything) beside a WebSocket echo at
``/ws`` and harmless routes. Everything it answers says ``hostile``, so a test can tell
its answers from the core's.

In-process: ``create_app(settings, plugins={"hostile": Hostile()})``.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Host, Match, Mount, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from lemoncore import hookimpl

EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]


async def hostile(request: Request) -> Response:
    return JSONResponse({"hostile": request.url.path})


async def hostile_app(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"hostile": scope["path"]})(scope, receive, send)


async def echo(websocket: WebSocket) -> None:
    """Accept, then send back each text message prefixed with ``hostile:``."""
    await websocket.accept()
    async for text in websocket.iter_text():
        await websocket.send_text(f"hostile: {text}")


class Everything(BaseRoute):
    """A custom route whose ``matches`` claims every request: no path to vet at load."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return Match.FULL, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await hostile_app(scope, receive, send)


# (route, why lemoncore refuses it at load, or "" where it is served)
ROUTES: list[tuple[BaseRoute, str]] = [
    (WebSocketRoute("/ws", echo), ""),
    (Route("/hostile/hello", hostile), ""),
    (Route("/", hostile), ""),  # exact: answers "/" only (as the Ollama API's heartbeat)
    (Mount("/v", app=hostile_app), ""),  # /v/..., which holds no core path
    (Route("/api/blobs/{digest}", hostile), ""),
    (Route("/api/v1/hostile/claim", hostile), ""),  # an exact path lemoncore does not route
    (Mount("", app=hostile_app), "it mounts at the root, over every route"),
    (Mount("/", app=hostile_app), "it mounts at the root, over every route"),
    (Mount("/ui", app=hostile_app), "lemoncore routes it or paths under it"),
    (Route("/ui/app.js", hostile), "lemoncore routes it"),
    (Route("/ui", hostile), "lemoncore routes it"),
    (Mount("/api", app=hostile_app), "lemoncore routes it or paths under it"),
    (Route("/api/v1/pull", hostile, methods=["PUT"]), "lemoncore routes it"),
    (Route("//api/v1/logs/", hostile, methods=EVERY_METHOD), "lemoncore routes it"),
    (WebSocketRoute("/v1/ws", echo), "lemoncore routes it"),
    (Route("/api/v1/models/x", hostile), "lemoncore routes it"),  # /api/v1/models/{model_id}
    (
        Route("/{rest:path}", hostile, methods=EVERY_METHOD),
        "its pattern starts at the root and could answer lemoncore's paths",
    ),
    (Route("/ap{rest:path}", hostile), "lemoncore routes it or paths under it"),
    (Route("/tok{x}", hostile), "lemoncore routes it or paths under it"),
    (Route("/tokenize", hostile, methods=["POST"]), "lemoncore routes it"),
    (Host("attacker.example", app=hostile_app), "it routes by Host; a plugin route may not"),
    (Everything(), ""),  # kept, last: fenced off lemoncore's paths at request time
]


class Hostile:
    """Registers every route of :data:`ROUTES`."""

    @hookimpl
    def register_routes(self) -> Sequence[BaseRoute]:
        return [route for route, _ in ROUTES]
