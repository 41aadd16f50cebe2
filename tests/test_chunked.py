"""The relay's chunked-body decoder: any split of the bytes gives the same payload, the
end and what follows it are found, and malformed framing is refused as httpx refuses it."""

from __future__ import annotations

import httpx
import pytest

from lemoncore.serving.chunked import MAX_LINE, ChunkedDecoder

EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(5)]
BODY = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


def decode(pieces: list[bytes]) -> tuple[bytes, ChunkedDecoder]:
    decoder = ChunkedDecoder()
    return b"".join(decoder.feed(p) for p in pieces), decoder


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, len(BODY)])
def test_every_split_gives_the_payload_and_the_end(size: int) -> None:
    payload, decoder = decode([BODY[i : i + size] for i in range(0, len(BODY), size)])
    assert payload == b"".join(EVENTS)
    assert decoder.done and decoder.extra == b""


def test_extensions_trailers_and_what_follows_the_end() -> None:
    body = b"5;name=value\r\nhello\r\n0\r\nExpires: never\r\n\r\nHTTP/1.1"
    payload, decoder = decode([body])
    assert payload == b"hello"
    assert decoder.done and decoder.extra == b"HTTP/1.1"


def test_not_done_before_the_last_chunk() -> None:
    _, decoder = decode([BODY[:-2]])
    assert not decoder.done


@pytest.mark.parametrize(
    "body",
    [
        b"zz\r\nhello\r\n",  # not hex
        b"0x5\r\nhello\r\n",  # what int(_, 16) would accept
        b"-5\r\nhello\r\n",
        b"5\r\nhelloXY",  # data not followed by CRLF
        b"1" * (MAX_LINE + 2),  # a size line that never ends
        b"0\r\n" + b"X-Long: " + b"a" * MAX_LINE + b"\r\n",  # a trailer line too long
    ],
)
def test_malformed_framing_is_refused(body: bytes) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        decode([body])
