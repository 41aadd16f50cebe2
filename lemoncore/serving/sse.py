"""Read a backend's server-sent events: bytes in, the JSON of each ``data:`` line out.

Only for streams lemoncore must understand (a translated stream, a plugin's own API):
a stream relayed as it came is never parsed (:class:`lemoncore.serving.proxy.SSERelay`).
"""

from __future__ import annotations

import json
from typing import Any

from lemoncore.serving.bounded import AnswerTooLarge

DONE = object()  # the ``data: [DONE]`` sentinel


class DataLines:
    """Split a byte stream into its ``data:`` payloads, whatever the chunk boundaries.

    :meth:`feed` returns the parsed JSON of each complete ``data:`` line (``DONE`` for
    ``[DONE]``); comments, ``event:`` and ``id:`` lines, and payloads that are not JSON
    are skipped (an engine's stray line must not end a stream). Time is linear in the
    bytes fed, however long a line; a line over ``max_line`` bytes raises
    :class:`~lemoncore.serving.bounded.AnswerTooLarge`.
    """

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._partial: list[bytes] = []  # the line begun, in the pieces it came in
        self._size = 0

    def feed(self, chunk: bytes) -> list[Any]:
        end = chunk.rfind(b"\n")
        if end < 0:  # no line ends here: keep the piece, join nothing
            self._keep(chunk)
            return []
        lines = b"".join([*self._partial, chunk[:end]]).split(b"\n")
        self._partial, self._size = [], 0
        self._keep(chunk[end + 1 :])
        found: list[Any] = []
        for line in lines:
            if len(line) > self.max_line:
                raise AnswerTooLarge("stream event", self.max_line)
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                found.append(DONE)
                continue
            try:
                found.append(json.loads(payload))
            except ValueError:
                continue
        return found

    def _keep(self, piece: bytes) -> None:
        if piece:
            self._size += len(piece)
            if self._size > self.max_line:
                raise AnswerTooLarge("stream event", self.max_line)
            self._partial.append(piece)


def error_message(event: Any) -> str | None:
    """The message of an OpenAI-shaped error event (``{"error": {...}}``), else ``None``."""
    if not isinstance(event, dict) or "error" not in event or "choices" in event:
        return None
    error = event["error"]
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)
