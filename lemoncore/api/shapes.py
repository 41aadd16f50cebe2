"""Which shape an error answer takes: every API surface answers in its own, whoever
produced the error (the guards, the router's 404 and 405, a handler, the engine).

- **Anthropic's** (``{"type": "error", "error": {"type", "message"}}``, the type by status
  as Anthropic's errors page lists them: docs.claude.com/en/api/errors) on the paths of
  the routed endpoints whose ``Endpoint.errors`` is ``anthropic`` (``/v1/messages`` and
  ``/v1/messages/count_tokens``, under ``/v1`` and ``/api/v1``), and on any request
  under ``/v1`` or ``/api/v1`` that sends ``anthropic-version``, as the anthropic SDK
  does on every request (anthropic 2.15, ``_client.py`` ``Anthropic.default_headers``).
- **A plugin's own** on the paths its ``register_error_shapes`` covers, lemoncore's own
  paths excepted (:meth:`lemoncore.plugins.PluginHost.error_body`, which falls back to
  OpenAI's when the plugin's render fails).
- **OpenAI's** (:func:`lemoncore.errors.error_body`) everywhere else.

An app's :class:`ErrorShapes` is ``app.state.error_shapes`` (:func:`lemoncore.app.
create_app` sets it); ASGI code finds it from the scope (:func:`shapes_of`), so the
middlewares need no wiring. Without an app, only lemoncore's own endpoints' shapes apply.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Literal, Protocol, TypedDict

from starlette.responses import Response
from starlette.types import Scope

from lemoncore.errors import ErrorShape, LemonError
from lemoncore.recipes import Endpoint, core_endpoints

# Anthropic's error types by status (docs.claude.com/en/api/errors, "HTTP errors"); any
# other 4xx is invalid_request_error ("we may also use this error type for other 4XX
# status codes"), any other 5xx api_error.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
ANTHROPIC_VERSION = b"anthropic-version"  # the header every Anthropic client sends
API_PREFIXES = ("/v1", "/api/v1")
Surface = Literal["openai", "anthropic", "plugin"]


class PluginShapes(Protocol):
    """The plugins' error shapes (:class:`lemoncore.plugins.PluginHost`)."""

    def error_shape(self, path: str) -> tuple[str, ErrorShape] | None: ...
    def error_body(self, path: str, error: LemonError) -> bytes | None: ...


class AnthropicError(TypedDict):
    type: str
    message: str


class AnthropicErrorBody(TypedDict):
    """Anthropic's error answer (the SDK's ``types/error_response.py``)."""

    type: Literal["error"]
    error: AnthropicError


def anthropic_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    return ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_body(exc: LemonError) -> AnthropicErrorBody:
    return {"type": "error", "error": {"type": anthropic_type(exc.status), "message": str(exc)}}


def _under_api(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in API_PREFIXES)


class ErrorShapes:
    """The error shape of each request of one app."""

    def __init__(self, endpoints: Iterable[Endpoint], plugins: PluginShapes | None = None) -> None:
        """``endpoints``: the routed endpoints (their ``errors`` field); ``plugins``: the
        plugins' error shapes."""
        paths = [e.path for e in endpoints if e.errors == "anthropic"]
        self.anthropic_paths = frozenset(
            {*paths, *("/api" + p for p in paths if p.startswith("/v1/"))}
        )
        self.plugins = plugins

    def surface(self, scope: Scope) -> Surface:
        """Whose shape the errors of the request in ``scope`` take: Anthropic's on and
        under its endpoints' paths (``/v1/messages/…``) and for a client that sends
        ``anthropic-version``."""
        path = scope.get("path", "")
        if any(path == p or path.startswith(p + "/") for p in self.anthropic_paths) or (
            _under_api(path)
            and any(name == ANTHROPIC_VERSION for name, _ in scope.get("headers") or ())
        ):
            return "anthropic"
        if self.plugins is not None and self.plugins.error_shape(path) is not None:
            return "plugin"
        return "openai"

    def body(self, scope: Scope, exc: LemonError) -> bytes:
        """``exc`` as the JSON body the request's surface answers errors with (OpenAI's
        where a plugin's render fails)."""
        surface = self.surface(scope)
        if surface == "anthropic":
            return _dump(anthropic_body(exc))
        if surface == "plugin" and self.plugins is not None:
            rendered = self.plugins.error_body(scope.get("path", ""), exc)
            if rendered is not None:
                return rendered
        return _dump(exc.body())

    def response(self, scope: Scope, exc: LemonError) -> Response:
        """``exc`` answered in the request's shape, with its status and headers."""
        return Response(
            self.body(scope, exc), exc.status, headers=exc.headers, media_type="application/json"
        )


def _dump(body: object) -> bytes:
    return json.dumps(body).encode()


@functools.cache
def _default() -> ErrorShapes:
    return ErrorShapes(core_endpoints())


def shapes_of(scope: Scope) -> ErrorShapes:
    """The :class:`ErrorShapes` of the app serving ``scope`` (Starlette puts the app in
    the scope before its middlewares run); lemoncore's own endpoints' without one."""
    found = getattr(getattr(scope.get("app"), "state", None), "error_shapes", None)
    return found if isinstance(found, ErrorShapes) else _default()


def error_response(scope: Scope, exc: LemonError) -> Response:
    """``exc`` answered in the shape of ``scope``'s surface."""
    return shapes_of(scope).response(scope, exc)


def error_bytes(scope: Scope | None, exc: LemonError) -> bytes:
    """``exc`` as the JSON body of ``scope``'s surface (OpenAI's without a scope)."""
    return shapes_of(scope).body(scope, exc) if scope is not None else _dump(exc.body())
