"""The web UI: static pages served at ``/ui/``; ``GET /`` from a browser redirects there
(:class:`BrowserRoot`), whatever a plugin answers ``/`` with for other clients.

The pages are plain HTML, CSS and JavaScript in ``static/`` (no build step). They call
the API same-origin with relative URLs, so the browser boundary
(:mod:`lemoncore.api.boundary`) lets them through; a key the server asks for is kept in
a JavaScript variable only. Every answer carries a Content-Security-Policy that allows
nothing but this server's own scripts, styles and connections, and no framing.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


def _files() -> dict[str, Path]:
    """The files that may be served: those of ``static/`` itself, by name."""
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in MEDIA_TYPES}


async def _file(request: Request) -> Response:
    name = request.path_params.get("name") or "index.html"
    path = _files().get(name)
    if path is None:
        return Response("not found", 404, media_type="text/plain", headers=SECURITY_HEADERS)
    media = MEDIA_TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
    return FileResponse(path, media_type=media, headers=SECURITY_HEADERS)


async def _to_ui(request: Request) -> Response:
    return RedirectResponse("/ui/", 307)


class BrowserRoot(Route):
    """``GET /`` from a browser (its ``Accept`` names ``text/html``): the redirect to the
    UI. Matched before plugin routes, so an address opened in a browser shows the page
    even where a plugin answers ``/`` for its clients (the Ollama API's "Ollama is
    running", which Ollama clients ask for without ``text/html``)."""

    def __init__(self) -> None:
        super().__init__("/", _to_ui, methods=["GET", "HEAD"])

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        accept = dict(scope.get("headers") or ()).get(b"accept", b"")
        if b"text/html" not in accept.lower():
            return Match.NONE, {}
        return super().matches(scope)


def routes() -> list[BaseRoute]:
    """The UI's routes, served before any plugin route (none may take them): ``/ui…`` and
    a browser's ``GET /``."""
    return [
        BrowserRoot(),
        Route("/ui", _to_ui, methods=["GET", "HEAD"]),
        Route("/ui/", _file, methods=["GET", "HEAD"]),
        Route("/ui/{name}", _file, methods=["GET", "HEAD"]),
    ]


def root_redirect() -> BaseRoute:
    """Any other ``GET /`` to the UI, served after plugin routes: a plugin that answers
    ``/`` itself (the Ollama API) keeps it."""
    return Route("/", _to_ui, methods=["GET", "HEAD"])
