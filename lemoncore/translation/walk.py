"""The walk both stream translators share: chat-completion chunks in, one at a time, and
what each part of a chunk becomes left to the translator. A chunk carrying ``error``
ends the stream (:meth:`ChunkWalk.fail`); a chunk's ``usage`` is kept; the first chunk
starts the stream; each choice's text delta, tool-call deltas and finish reason are
handed over in that order.
"""

from __future__ import annotations

from lemoncore.translation.wire import ChatChunk, ChunkChoice, DeltaToolCall, Usage


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
            return self.fail(str(error.get("message") if isinstance(error, dict) else error))
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

    def fail(self, message: str) -> bytes:
        raise NotImplementedError
