"""Read a backend's server-sent events: bytes in, the JSON of each ``data:`` line out.

Only for streams lemoncore must understand (a translated stream, a plugin's own API):
a stream relayed as it came is never parsed (:class:`lemoncore.serving.proxy.SSERelay`).
"""

from __future__ import annotations

import json
from typing import Any

DONE = object()  # the ``data: [DONE]`` sentinel


class DataLines:
    """Split a byte stream into its ``data:`` payloads, whatever the chunk boundaries.

    :meth:`feed` returns the parsed JSON of each complete ``data:`` line (``DONE`` for
    ``[DONE]``); comments, ``event:`` and ``id:`` lines, and payloads that are not JSON
    are skipped (an engine's stray line must not end a stream).
    """

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[Any]:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        found: list[Any] = []
        for line in lines:
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


def error_message(event: Any) -> str | None:
    """The message of an OpenAI-shaped error event (``{"error": {...}}``), else ``None``."""
    if not isinstance(event, dict) or "error" not in event or "choices" in event:
        return None
    error = event["error"]
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)
