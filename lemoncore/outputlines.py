"""An engine's output as log lines, whatever it prints: bounded memory and linear time
(:class:`LineCutter`), decoded as UTF-8 or, for a line that is not, in this system's own
encoding (:data:`SYSTEM_ENCODING`), control characters escaped (:func:`escaped`), and at most
:data:`LINES_PER_SECOND` lines a second logged (:class:`RateLimit`), the rest counted and
reported (:class:`EngineOutput`, fed by :func:`pump_engine_output`). Every line is logged as the
``line`` field of an ``engine output`` event, never as a message of lemoncore's own.
"""

from __future__ import annotations

import locale
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

MAX_LINE_BYTES = 16 * 1024  # of one output line kept; what a longer line has past it is dropped
# llama.cpp's start prints a few hundred lines within a second (its model metadata): the
# burst keeps a whole start; no engine logs 200 lines a second for long while it serves,
# and at that rate a flood costs a few percent of a core to log, and the log's ring of
# 2000 backend lines still holds ten seconds of it.
LINES_PER_SECOND, BURST_LINES = 200.0, 1000
REPORT_EVERY_S = 5.0  # while lines are dropped, how often the count is logged
# What a program that does not write UTF-8 writes to a pipe: on Windows the ANSI code page
# (a Python program's stdout there, PyInstaller bundles included, unless it runs in UTF-8
# mode), elsewhere the locale's. ``locale.getencoding`` (3.11): "On Windows, return the
# ANSI code page (ex: "cp1252")", ignoring lemoncore's own UTF-8 mode.
SYSTEM_ENCODING = locale.getencoding()

# C0 controls but tab, DEL, C1 controls; and the characters that reorder or break a
# console's line (bidirectional overrides and isolates, line and paragraph separators)
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_CONTROLS |= {
    c: f"\\u{c:04x}"
    for c in (
        0x061C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def escaped(line: str) -> str:
    """``line`` with every control character shown as an escape (ESC as ``\\x1b``, CR as
    ``\\x0d``, U+202E as ``\\u202e``), so that it prints as one line of inert text: no
    colours, no cursor moves, no line that passes for one of lemoncore's own. Tabs stay."""
    return line.translate(_CONTROLS)


class LineCutter:
    """Split a byte stream, fed in chunks, into lines of at most ``limit`` bytes, each
    decoded (UTF-8, else ``fallback``: a Windows program's ANSI code page) and
    :func:`escaped`. A longer line keeps its first ``limit`` bytes and says how many more
    were dropped, so an engine that prints megabytes without a newline costs ``limit``
    bytes, not the line's length. Each byte is looked at once."""

    def __init__(self, limit: int = MAX_LINE_BYTES, fallback: str = SYSTEM_ENCODING) -> None:
        self.limit, self.fallback = limit, fallback
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

    def _decoded(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":  # UTF-8, cut inside its last letter
                return raw.decode(errors="replace")
            return raw.decode(self.fallback, errors="replace")

    def _take(self) -> str:
        text = escaped(self._decoded(bytes(self._line)).rstrip())
        if self._dropped:
            text += f" [... {self._dropped} more bytes of this line dropped]"
        self._line.clear()
        self._dropped = 0
        return text


class RateLimit:
    """A token bucket: ``burst`` lines at once, then ``rate`` lines a second. ``clock``
    (seconds, monotonic) is injected for tests."""

    def __init__(
        self,
        rate: float = LINES_PER_SECOND,
        burst: int = BURST_LINES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._tokens, self._at = float(burst), clock()

    def allow(self) -> bool:
        """Take one line's token: ``True`` when the line may be logged."""
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class EngineOutput:
    """One engine's output: each line (cut and escaped) is appended to ``tail`` (the last
    lines a crash report shows: never rate-limited) and logged at info as ``engine
    output`` with ``line`` and ``fields`` (``model``, ``source``) within ``limit``. Lines
    over the limit are counted; the count is logged as one ``engine output dropped``
    warning every :data:`REPORT_EVERY_S` seconds while they are, and when the output ends
    or goes quiet (:meth:`quiet`)."""

    def __init__(
        self, log: Any, tail: deque[str], limit: RateLimit | None = None, **fields: Any
    ) -> None:
        self.log, self.tail, self.fields = log, tail, fields
        self.limit = limit or RateLimit()
        self.lines = LineCutter()
        self.dropped = 0  # lines not logged since the last report
        self._first_drop = 0.0

    def feed(self, chunk: bytes) -> None:
        for line in self.lines.feed(chunk):
            self._line(line)

    def end(self) -> None:
        """The output ended: its last line, and the count of what was dropped."""
        for line in self.lines.flush():
            self._line(line)
        self.quiet()

    def quiet(self) -> None:
        """Report the lines dropped so far, if any."""
        if self.dropped:
            self.log.warning(
                "engine output dropped",
                dropped=self.dropped,
                limit=f"{self.limit.rate:g} lines/s",
                model=self.fields.get("model"),
            )
            self.dropped = 0

    def _line(self, line: str) -> None:
        if not line:
            return
        self.tail.append(line)
        if self.limit.allow():
            self.log.info("engine output", line=line, **self.fields)
            return
        if not self.dropped:
            self._first_drop = self.limit.clock()
        self.dropped += 1
        if self.limit.clock() - self._first_drop >= REPORT_EVERY_S:
            self.quiet()


async def pump_engine_output(read: Callable[[], Awaitable[bytes]], output: EngineOutput) -> None:
    """Feed ``output`` with what ``read`` returns until it returns ``b""`` (the end),
    then :meth:`EngineOutput.end`. While lines are being dropped, a read that waits
    :data:`REPORT_EVERY_S` seconds reports them (the flood is over)."""
    while True:
        chunk: bytes | None = None
        with anyio.move_on_after(REPORT_EVERY_S if output.dropped else math.inf):
            chunk = await read()
        if chunk is None:
            output.quiet()
        elif not chunk:
            break
        else:
            output.feed(chunk)
    output.end()
