"""The walk both stream translators share: chat-completion chunks in, one at a time, and
what each part of a chunk becomes left to the translator. A chunk carrying ``error``
ends the stream (:meth:`ChunkWalk.fail`, with the status the error names:
:func:`error_status`); a chunk's ``usage`` is kept; the first chunk
starts the stream; each choice's text delta, tool-call deltas and finish reason are
handed over in that order.
"""

from __future__ import annotations

from lemoncore.translation.wire import ChatChunk, ChunkChoice, DeltaToolCall, Usage

BACKEND_FAILED = 502  # the status of an engine's error that names none


def error_status(error: object, default: int = BACKEND_FAILED) -> int:
    """The HTTP status an engine's error object names: its ``status_code`` or its numeric
    ``code`` (llama-server's error objects carry one: ``{"code": 400, "type":
    "exceed_context_size_error", ...}``), when it is one from 400 to 599, read as
    Lemonade does (``src/cpp/include/lemon/anthropic_error.h``,
    ``backend_error_http_status``); else ``default``."""
    if isinstance(error, dict):
        for key in ("status_code", "code"):
            value = error.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
                return value
    return default


class ChunkWalk:
    """Base of a stream translator (:class:`~lemoncore.translation.StreamTranslator`):
    :meth:`feed` walks a chunk and calls the hooks a translator implements (``start``,
    ``usage``, ``text``, ``tool_call``, ``finished``, ``fail``); nothing is produced once
    the stream is done."""

    def __init__(self) -> None:
        self._started = self._done = False

    def feed(self, chunk: ChatChunk) -> bytes:
        """One parsed chunk → zero or more complete SSE events."""
        if self._done:
            return b""
        if error := chunk.get("error"):
            message = error.get("message") if isinstance(error, dict) else error
            return self.fail(str(message), error_status(error))
        if usage := chunk.get("usage"):
            self.usage(usage)
        out = self.started(chunk)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if content := delta.get("content"):
                out += self.text(content)
            for call in delta.get("tool_calls") or []:
                out += self.tool_call(call)
            if choice.get("finish_reason"):
                self.finished(choice)
        return out

    def started(self, chunk: ChatChunk) -> bytes:
        """The stream's opening events, the first time only (``chunk``: the first one)."""
        if self._started:
            return b""
        self._started = True
        return self.start(chunk)

    def start(self, chunk: ChatChunk) -> bytes:
        raise NotImplementedError

    def usage(self, usage: Usage) -> None:
        raise NotImplementedError

    def text(self, text: str) -> bytes:
        raise NotImplementedError

    def tool_call(self, call: DeltaToolCall) -> bytes:
        raise NotImplementedError

    def finished(self, choice: ChunkChoice) -> None:
        raise NotImplementedError

    def fail(self, message: str, status: int = BACKEND_FAILED) -> bytes:
        """The event that ends the stream with an error; ``status``: the HTTP status the
        error would have had before the stream began."""
        raise NotImplementedError
