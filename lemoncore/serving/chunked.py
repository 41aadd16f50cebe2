"""HTTP/1.1's chunked transfer coding, decoded from raw reads (RFC 9112, section 7.1):
what the relay uses instead of h11 for a streamed backend body, one pass per read rather
than one parser event per chunk."""

from __future__ import annotations

import re
from enum import Enum

import httpx

MAX_LINE = 4096  # a chunk-size line or a trailer line longer than this is refused
MAX_TRAILERS = 16384  # all trailer lines together
_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class _At(Enum):
    SIZE = "size"
    DATA = "data"
    DATA_END = "data end"
    TRAILER = "trailer"
    DONE = "done"


class ChunkedDecoder:
    """Feed it a body's bytes in any pieces; :meth:`feed` returns the payload they
    complete. ``done`` once the last chunk and the trailers are in; ``extra``: bytes fed
    after that (none from a backend that answers one request at a time). Malformed
    framing raises :class:`httpx.RemoteProtocolError`, as httpx does for it."""

    def __init__(self) -> None:
        self._at, self._left, self._partial, self._trailers = _At.SIZE, 0, b"", 0
        self.extra = b""

    @property
    def done(self) -> bool:
        return self._at is _At.DONE

    def feed(self, data: bytes) -> bytes:
        buf = self._partial + data if self._partial else data
        out: list[bytes] = []
        i, n = 0, len(buf)
        while i < n:
            if self._at is _At.DATA:
                take = min(self._left, n - i)
                out.append(buf[i : i + take])
                i, self._left = i + take, self._left - take
                if not self._left:
                    self._at = _At.DATA_END
            elif self._at is _At.DATA_END:
                if n - i < 2:
                    break
                if buf[i : i + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk data not followed by CRLF")
                i, self._at = i + 2, _At.SIZE
            elif self._at is _At.DONE:
                self.extra += buf[i:]
                i = n
            else:
                end = buf.find(b"\n", i, i + MAX_LINE + 1)
                if end < 0:
                    if n - i > MAX_LINE:
                        raise httpx.RemoteProtocolError("chunked body: a line over 4 KiB")
                    break
                line, i = buf[i:end].removesuffix(b"\r"), end + 1
                self._line(line)
        self._partial = buf[i:]
        return out[0] if len(out) == 1 else b"".join(out)

    def _line(self, line: bytes) -> None:
        if self._at is _At.TRAILER:
            self._trailers += len(line)
            if self._trailers > MAX_TRAILERS:
                raise httpx.RemoteProtocolError("chunked body: trailers over 16 KiB")
            if not line:
                self._at = _At.DONE
            return
        size = line.split(b";", 1)[0].strip(b" \t")  # a chunk extension is ignored
        if not _SIZE.fullmatch(size):
            raise httpx.RemoteProtocolError(f"chunked body: bad chunk size {line[:40]!r}")
        self._left = int(size, 16)
        self._at = _At.DATA if self._left else _At.TRAILER
