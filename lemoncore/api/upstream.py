"""What an engine's answer becomes for the client: a success passes through with its
``Content-Type``; an error is answered in the shape of the request's API surface
(:mod:`lemoncore.api.shapes`) with the engine's status, a 5xx as a 502. On an
OpenAI-shaped surface a 4xx that is an OpenAI error object passes through as it came
(with the engine's own fields), any other error is wrapped as ``backend_error``.
:func:`anthropic_error` answers one of lemoncore's errors in Anthropic's shape."""

from __future__ import annotations

import json

import httpx
from pydantic import ValidationError
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from lemoncore.api import replies
from lemoncore.api.shapes import anthropic_body, shapes_of
from lemoncore.errors import LemonError, error_body


def anthropic_error(exc: LemonError) -> Response:
    """``exc`` as Anthropic's API answers errors: ``{"type": "error", "error": {...}}``."""
    return JSONResponse(anthropic_body(exc), exc.status, headers=exc.headers)


def backend_response(
    upstream: httpx.Response, scope: Scope, answers: frozenset[int] = frozenset()
) -> Response:
    """Pass a backend answer through; answer a backend error in the shape of the
    request in ``scope`` (a 5xx becomes a 502, unless it is one of ``answers``: statuses
    that are the engine's own answer on this route, not its failure)."""
    if upstream.status_code < 400 or upstream.status_code in answers:
        return Response(
            upstream.content,
            upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
        )
    shapes = shapes_of(scope)
    exc = backend_error(upstream)
    if shapes.surface(scope) != "openai":
        return shapes.response(scope, exc)
    detail = _detail(upstream)
    if upstream.status_code < 500 and _openai_error(detail):
        return JSONResponse(detail, upstream.status_code)
    return JSONResponse(
        error_body(str(exc), exc.type, exc.code, details={"status": upstream.status_code}),
        exc.status,
    )


def backend_error(upstream: httpx.Response) -> LemonError:
    """A backend's error answer (read already) as an error with its message; a 5xx is a
    502. The message is the error object's (OpenAI's and Anthropic's ``error.message``),
    an ``error`` string's, or the body's text."""
    detail = _detail(upstream)
    error = detail.get("error") if isinstance(detail, dict) else None
    message = (
        error.get("message")
        if isinstance(error, dict)
        else error
        if isinstance(error, str)
        else str(detail)
    )
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
