"""The routes this plugin serves: Ollama's API paths (none under ``/v1`` or ``/api/v1``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lemoncore.plugin import LemonError

from lemon_plugin_ollama_api import inference, manage
from lemon_plugin_ollama_api.responses import Handler
from lemon_plugin_ollama_api.shape import ollama_error

EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def route(path: str, handler: Handler, method: str) -> Route:
    """``handler`` at ``path`` for ``method`` (and ``HEAD`` with ``GET``); other methods
    get Ollama's error shape (a 405), not lemoncore's."""
    allowed = {method, "HEAD"} if method == "GET" else {method}

    async def checked(request: Request) -> Response:
        if request.method not in allowed:
            refused = LemonError(
                f"method {request.method} not allowed for {path}; use {method}", 405
            )
            return JSONResponse(
                ollama_error(refused), refused.status, headers={"Allow": ", ".join(sorted(allowed))}
            )
        return await handler(request)

    return Route(path, checked, methods=EVERY_METHOD)


def routes() -> list[Route]:
    return [
        route("/", manage.heartbeat, "GET"),
        route("/api/version", manage.api_version, "GET"),
        route("/api/tags", manage.tags, "GET"),
        route("/api/ps", manage.ps, "GET"),
        route("/api/show", manage.show, "POST"),
        route("/api/pull", manage.pull, "POST"),
        route("/api/delete", manage.delete, "DELETE"),
        route("/api/chat", inference.chat, "POST"),
        route("/api/generate", inference.generate, "POST"),
        route("/api/embed", inference.embed, "POST"),
        route("/api/embeddings", inference.embeddings, "POST"),
        *(
            route(f"/api/{what}", manage.refusal(what), "POST")
            for what in ("create", "copy", "push")
        ),
        route("/api/blobs/{digest}", manage.refusal("blobs"), "POST"),
    ]
