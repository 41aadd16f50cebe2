"""Every failure leaves the API as JSON with a fitting status, in the shape of the
request's API surface (:mod:`lemoncore.api.shapes`): a :class:`LemonError` as it says,
the router's 404 and 405, and anything else as a logged 500."""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api.shapes import error_response as shaped
from lemoncore.errors import LemonError

log = structlog.get_logger("lemoncore.api")


class ApiError(LemonError):
    """A request the HTTP layer refuses (bad JSON, a missing field)."""

    status, type = 400, "invalid_request_error"


async def handle_exception(request: Request, exc: Exception) -> Response:
    """Answer a :class:`LemonError` as it says; anything else is a logged 500."""
    if not isinstance(exc, LemonError):
        log.exception("unhandled error", error=repr(exc))
        exc = LemonError("internal server error; see the server log")
    return shaped(request.scope, exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """The router's refusals (no route: 404; a method the route does not serve: 405,
    with its ``Allow``), and any other ``HTTPException``, with their status."""
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 405:
        message = f"method {request.method} not allowed for {request.url.path}"
    elif exc.status_code == 404:
        message = f"no route {request.url.path}"
    response = shaped(request.scope, LemonError(message, exc.status_code, "invalid_request_error"))
    response.headers.update(exc.headers or {})
    return response


# Known errors are answered by Starlette's ExceptionMiddleware; anything else reaches the
# server-error middleware, which answers the same JSON and re-raises for the server log.
EXCEPTION_HANDLERS: dict[Any, Any] = {
    HTTPException: handle_http_exception,
    Exception: handle_exception,
    LemonError: handle_exception,
}


MAX_JSON_DEPTH = 64  # arrays and objects inside each other; real bodies nest a few deep


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong (not valid JSON,
    not an object, nested deeper than ``MAX_JSON_DEPTH``: a deeper body would reach
    Python's recursion limit in the parser, or later in whatever walks it)."""
    raw = await request.body()
    if not raw:
        return {}
    too_deep = ApiError(f"request body nests arrays and objects more than {MAX_JSON_DEPTH} deep")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise ApiError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object")
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _depth(body) > MAX_JSON_DEPTH:
        raise too_deep
    return body


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value``, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        )
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest
