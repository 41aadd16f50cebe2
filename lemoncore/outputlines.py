"""An engine's output as lines, in bounded memory and linear time, whatever it prints."""

from __future__ import annotations

MAX_LINE_BYTES = 16 * 1024  # of one output line kept; what a longer line has past it is dropped


class LineCutter:
    """Split a byte stream, fed in chunks, into lines of at most ``limit`` bytes. A longer
    line keeps its first ``limit`` bytes and says how many more were dropped, so an engine
    that prints megabytes without a newline costs ``limit`` bytes, not the line's length.
    Each byte is looked at once."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._line = bytearray()
        self._dropped = 0

    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes (without their newlines)."""
        done: list[str] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = max(0, self.limit - len(self._line))
            self._line += piece[:room]
            self._dropped += len(piece) - min(room, len(piece))
            if end < 0:
                return done
            done.append(self._take())
            start = end + 1

    def flush(self) -> list[str]:
        """The last line, when the stream ended without a newline."""
        return [self._take()] if self._line or self._dropped else []

    def _take(self) -> str:
        text = self._line.decode(errors="replace").rstrip()
        if self._dropped:
            text += f" [... {self._dropped} more bytes of this line dropped]"
        self._line.clear()
        self._dropped = 0
        return text
