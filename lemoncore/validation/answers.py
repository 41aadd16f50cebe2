"""How the kit sends requests and fails: every helper asserts the status it expects and,
when the answer differs, fails quoting what the backend answered (the status and the
first :data:`BODY_CHARS` of the body) and, on a 503, the engine's last lines (from
lemoncore's start-failure message, else the server's log API)."""

from __future__ import annotations

from typing import Any

import httpx

from lemoncore.validation.target import ConformanceTarget

BODY_CHARS = 500
ENGINE_LINES = 20
_LAST_OUTPUT = "Last output:\n"  # how a StartError's message introduces the engine's lines


def engine_lines(target: ConformanceTarget, message: str = "") -> list[str]:
    """The engine's last lines: those a start failure's ``message`` carries, else the
    model's backend lines from ``/api/v1/logs`` (empty when neither has any)."""
    if _LAST_OUTPUT in message:
        lines = message.split(_LAST_OUTPUT, 1)[1].splitlines()
        if lines and lines[-1].startswith("(") and "held off" in lines[-1]:
            lines.pop()  # lemoncore's note of a crash loop, not the engine's
        return lines[-ENGINE_LINES:]
    try:
        answer = httpx.get(
            target.server.url + "/api/v1/logs",
            params={"model": target.model, "limit": 200},
            timeout=10,
        )
        entries = answer.json()["data"] if answer.status_code == 200 else []
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []
    lines = [
        str((e.get("fields") or {}).get("line", e.get("event", "")))
        for e in entries
        if isinstance(e, dict) and e.get("source") == "backend"
    ]
    return lines[-ENGINE_LINES:]


def _message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else ""


def quoted(response: httpx.Response, target: ConformanceTarget | None = None) -> str:
    """``POST /v1/x answered 503: <body>``, and on a 503 the engine's last lines."""
    request = response.request
    body = response.text
    if len(body) > BODY_CHARS:
        body = body[:BODY_CHARS] + f"... ({len(response.content)} bytes)"
    said = f"{request.method} {request.url.path} answered {response.status_code}: {body}"
    if response.status_code == 503 and target is not None:
        if lines := engine_lines(target, _message(response)):
            said += "\n-- the engine's last lines --\n" + "\n".join(lines)
    return said


def expect(
    response: httpx.Response, status: int, target: ConformanceTarget | None = None, why: str = ""
) -> httpx.Response:
    """``response`` when its status is ``status``; else fail quoting it (``why`` first)."""
    if response.status_code != status:
        response.read()
        prefix = f"{why}: " if why else ""
        raise AssertionError(f"{prefix}expected {status}; {quoted(response, target)}")
    return response


def json_body(response: httpx.Response, target: ConformanceTarget | None = None) -> dict[str, Any]:
    """The answer's JSON object; fail quoting the answer when it is not one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise AssertionError(f"the answer is not a JSON object; {quoted(response, target)}")
    return body


def post(
    target: ConformanceTarget,
    path: str,
    status: int = 200,
    why: str = "",
    timeout: float = 120,
    **request: Any,
) -> httpx.Response:
    """``POST`` ``path`` (on the server's URL) and :func:`expect` ``status``."""
    response = httpx.post(target.server.url + path, timeout=timeout, **request)
    return expect(response, status, target, why)


def load(target: ConformanceTarget) -> None:
    """Load the target's model (``/api/v1/load``), failing with the answer quoted."""
    post(target, "/api/v1/load", why="loading the model", json={"model_name": target.model})


def loaded(target: ConformanceTarget) -> dict[str, Any] | None:
    """The model's ``/api/v1/health`` entry, or ``None`` when it is not loaded."""
    health = json_body(httpx.get(target.server.url + "/api/v1/health", timeout=30), target)
    return next(
        (m for m in health.get("all_models_loaded", ()) if m.get("model_name") == target.model),
        None,
    )
