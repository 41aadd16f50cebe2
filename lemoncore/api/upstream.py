"""What an engine's answer becomes for the client: a success passes through with its
``Content-Type``, a 4xx that is an OpenAI error object passes through with its status,
and any other error is wrapped OpenAI-style as ``backend_error`` (a 5xx becomes a 502).
:func:`anthropic_error` gives lemoncore's own errors the shape Anthropic's API answers
them in, for the surfaces that speak it."""

from __future__ import annotations

import json

import httpx
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response

from lemoncore.api import replies
from lemoncore.errors import LemonError, error_body

# Anthropic's error types by status (docs.anthropic.com, "Errors").
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(exc: LemonError) -> Response:
    """``exc`` as Anthropic's API answers errors: ``{"type": "error", "error": {...}}``."""
    kind = ANTHROPIC_ERRORS.get(exc.status, "api_error" if exc.status >= 500
                                else "invalid_request_error")
    return JSONResponse({"type": "error", "error": {"type": kind, "message": str(exc)}},
                        exc.status, headers=exc.headers)


def backend_response(upstream: httpx.Response) -> Response:
    """Pass a backend answer through, and a 4xx that is an OpenAI error object; wrap any
    other backend error OpenAI-style (a 5xx becomes a 502)."""
    if upstream.status_code < 400:
        return Response(upstream.content, upstream.status_code, media_type=upstream.headers.get(
            "content-type", "application/json"))
    detail = _detail(upstream)
    if upstream.status_code < 500 and _openai_error(detail):
        return JSONResponse(detail, upstream.status_code)
    exc = backend_error(upstream)
    return JSONResponse(error_body(str(exc), exc.type, exc.code,
                                   details={"status": upstream.status_code}), exc.status)


def backend_error(upstream: httpx.Response) -> LemonError:
    """A backend's error answer (read already) as an error with its message; a 5xx is a
    502."""
    detail = _detail(upstream)
    error = detail.get("error") if isinstance(detail, dict) else None
    message = error.get("message") if isinstance(error, dict) else \
        error if isinstance(error, str) else str(detail)
    status = upstream.status_code if upstream.status_code < 500 else 502
    return LemonError(f"backend error: {message}", status, "backend_error", "backend_error")


def _detail(upstream: httpx.Response) -> object:
    try:
        return json.loads(upstream.content)
    except ValueError:
        return upstream.text[:500]


def _openai_error(detail: object) -> bool:
    try:
        replies.ErrorReply.model_validate(detail)
    except ValidationError:
        return False
    return True
