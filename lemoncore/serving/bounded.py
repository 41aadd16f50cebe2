"""Read an engine's answer into memory, never more than a limit.

An engine is outside lemoncore's control: a non-streamed answer, an error body or one
line of a stream lemoncore parses may be any size. What is read whole is bounded by the
setting ``max_answer_bytes`` (a 502 ``answer_too_large`` past it); an error body is read
only as far as its message can be (:data:`ERROR_BODY_BYTES`), the rest dropped.
"""

from __future__ import annotations

import httpx

from lemoncore.errors import LemonError

ERROR_BODY_BYTES = 1 << 16  # of an error answer, only this much is read
# Headers that described the bytes on the wire, not the decoded body kept.
_WIRE_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


class AnswerTooLarge(LemonError):
    """The engine sent more than ``max_answer_bytes`` where lemoncore reads it whole."""

    status, type, code = 502, "backend_error", "answer_too_large"

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(
            f"the backend's {what} exceeds {limit} bytes, the most lemoncore "
            "holds of one answer (setting max_answer_bytes); ask for less (a "
            "stream, fewer inputs) or raise the setting"
        )


async def read_whole(response: httpx.Response, limit: int) -> httpx.Response:
    """``response`` (opened with ``stream=True``) read into a new, closed response with the
    same status and headers. An error answer (4xx/5xx) keeps its first
    :data:`ERROR_BODY_BYTES`; any other over ``limit`` bytes (decoded) raises
    :class:`AnswerTooLarge`. The original is closed either way."""
    error = response.status_code >= 400
    cap = ERROR_BODY_BYTES if error else limit
    declared = response.headers.get("content-length", "")
    if not error and declared.isdigit() and int(declared) > limit:
        await response.aclose()
        raise AnswerTooLarge(f"answer ({declared} bytes, its Content-Length)", limit)
    parts: list[bytes] = []
    size = 0
    try:
        async for part in response.aiter_bytes():
            parts.append(part)
            size += len(part)
            if size > cap:
                if not error:
                    raise AnswerTooLarge("answer", limit)
                break
    finally:
        await response.aclose()
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _WIRE_HEADERS]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=b"".join(parts)[:cap],
        request=response.request,
    )
