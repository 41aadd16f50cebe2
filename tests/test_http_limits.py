"""The real server (Hypercorn and lemoncore's ``Intake``) bounds how a request arrives:
head size (431), the time a head may take (closed) and the time a body may take (408,
closed), and keeps serving; a long streamed answer is not cut (#30, item 9).

Raw sockets, so a test decides exactly what is sent when; every wait is a socket timeout
that fails the test if the server never answers or never closes.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
import httpx
import pytest

from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT

BODY_TIMEOUT, HEAD_TIMEOUT = 0.5, 1.0
WAIT = 10.0  # the most any answer or close may take before the test fails


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "LEMON_BODY_TIMEOUT": str(BODY_TIMEOUT),
        "LEMON_HEAD_TIMEOUT": str(HEAD_TIMEOUT),
        "LEMON_HEARTBEAT_INTERVAL": "0.1",
    }
    with running_server(
        tmp_path_factory.mktemp("lemon"), env=env, command=(str(SCRIPT),)
    ) as running:
        yield running


def connect(server: ServerProcess) -> socket.socket:
    address = urlparse(server.url)
    return socket.create_connection((address.hostname or "", address.port or 0), timeout=WAIT)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


def head(method: str, path: str, *lines: str) -> bytes:
    return "\r\n".join((f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *lines, "", "")).encode()


CHAT = head(
    "POST", "/v1/chat/completions", "Content-Type: application/json", "Content-Length: 1000"
)
CHUNKED = head(
    "POST", "/v1/chat/completions", "Content-Type: application/json", "Transfer-Encoding: chunked"
)


@pytest.mark.parametrize(
    "start", [CHAT + b'{"model": "', CHUNKED + b'5\r\n{"mod\r\n'], ids=["content-length", "chunked"]
)
def test_a_body_that_stalls_gets_408_and_its_connection_closed(
    server: ServerProcess, start: bytes
) -> None:
    with connect(server) as sock:
        began = time.monotonic()
        sock.sendall(start)
        reply = until_closed(sock)
        held = time.monotonic() - began
    assert reply.startswith(b"HTTP/1.1 408"), reply[:300]
    assert b"connection: close" in reply.lower()
    error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
    assert "(setting body_timeout)" in error["message"]
    assert error["code"] == "request_timeout"
    assert BODY_TIMEOUT <= held < BODY_TIMEOUT + 3


def test_the_timeout_is_for_the_whole_body_not_each_gap(server: ServerProcess) -> None:
    """A byte every 0.2 s never leaves the server waiting 0.5 s at once; in all it does."""
    with connect(server) as sock:
        sock.sendall(CHAT)
        began = time.monotonic()
        while not select.select([sock], [], [], 0.2)[0]:  # until the server answers
            assert time.monotonic() - began < WAIT
            sock.sendall(b" ")
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:300]


def test_a_body_sent_in_pieces_in_time_is_read(server: ServerProcess) -> None:
    body = b'{"model": "' + MODEL.encode() + b'"}'
    with connect(server) as sock:
        sock.sendall(
            head(
                "POST",
                "/v1/chat/completions",
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
            )
        )
        for piece in (body[:5], body[5:12], body[12:]):
            assert not select.select([sock], [], [], 0.05)[0]  # no answer before the end
            sock.sendall(piece)
        reply = until_closed(sock)  # kept alive, then closed idle after head_timeout
    assert reply.startswith(b"HTTP/1.1 400"), reply[:300]  # parsed: it has no messages
    assert b"'messages'" in reply


def test_a_head_that_stalls_is_closed(server: ServerProcess) -> None:
    with connect(server) as sock:
        began = time.monotonic()
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        reply = until_closed(sock)
        held = time.monotonic() - began
    assert reply == b""
    assert HEAD_TIMEOUT <= held < HEAD_TIMEOUT + 3


BIG_HEAD = head("GET", "/v1/models", *(f"X-Pad-{i}: {'a' * 990}" for i in range(54)))


def test_a_54_kb_head_in_one_write_gets_431(server: ServerProcess) -> None:
    assert 54_000 < len(BIG_HEAD) < 65_536  # one read of hypercorn's: h11 lets it through
    with connect(server) as sock:
        sock.sendall(BIG_HEAD)
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:300]
    error = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]
    assert "(setting max_header_bytes)" in error["message"]
    assert httpx.get(server.api + "/models").status_code == 200


@pytest.mark.parametrize("piece", [1024, 200_000], ids=["trickled", "200-kb-header"])
def test_a_head_over_the_limit_arriving_in_pieces_gets_431(
    server: ServerProcess, piece: int
) -> None:
    """Refused by h11 while incomplete, before it is whole: an empty 431."""
    big = BIG_HEAD if piece < len(BIG_HEAD) else head("GET", "/v1/models", f"X-Big: {'a' * piece}")
    with connect(server) as sock:
        for start in range(0, len(big), 1024):
            if select.select([sock], [], [], 0.005)[0]:  # refused already: stop sending
                break
            sock.sendall(big[start : start + 1024])
        reply = until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 431"), reply[:300]
    assert httpx.get(server.api + "/models").status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_a_slow_answer_outlives_both_timeouts(server: ServerProcess, stream: bool) -> None:
    """The engine is silent for 2 s (> body_timeout, > head_timeout) and the client sends
    nothing all that time, while lemoncore waits in ``receive`` for a disconnect (not
    streamed: :func:`~lemoncore.api.disconnect.until_disconnect`): the answer is whole."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        "delay": 2 * HEAD_TIMEOUT,
    }
    began = time.monotonic()
    with httpx.stream("POST", server.api + "/chat/completions", json=body, timeout=30) as response:
        text = response.read().decode()
    assert response.status_code == 200, text
    assert time.monotonic() - began >= 2 * HEAD_TIMEOUT
    assert "ok from" in text and text.rstrip().endswith("data: [DONE]") == stream, text[-300:]


async def test_an_sse_stream_longer_than_the_timeouts_is_not_cut(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Hypercorn as ``lemon serve`` configures it, around ``Intake``: a stream of events
    for 1.5 s, with the relay's disconnect watcher waiting in ``receive`` throughout."""
    from hypercorn.asyncio import serve
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from lemoncore.api.intake import Intake
    from lemoncore.cli.serving import hypercorn_config
    from lemoncore.settings import Settings
    from lemoncore.testing import free_port

    async def events(request: Request) -> StreamingResponse:
        await request.body()

        async def stream() -> AsyncIterator[bytes]:
            async with anyio.create_task_group() as tg:

                async def disconnect() -> None:  # as lemoncore's relay watches
                    while (await request.receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(disconnect)
                for n in range(15):
                    yield f"data: {n}\n\n".encode()
                    await anyio.sleep(0.1)
                tg.cancel_scope.cancel()

        return StreamingResponse(stream(), media_type="text/event-stream")

    settings = Settings(port=free_port(), body_timeout=0.3, head_timeout=0.3, cache_dir=tmp_path)
    app = Intake(
        Starlette(routes=[Route("/events", events, methods=["POST"])]),
        body_timeout=settings.body_timeout,
        max_header_bytes=settings.max_header_bytes,
    )
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        config = hypercorn_config(settings)
        asgi: Any = app  # hypercorn's own ASGI types; an ASGI app all the same
        tg.start_soon(lambda: serve(asgi, config, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(timeout=WAIT) as client:
            for _ in range(100):  # until it listens
                try:
                    response = await client.post(
                        f"http://127.0.0.1:{settings.port}/events", content=b"{}"
                    )
                    break
                except httpx.ConnectError:
                    await anyio.sleep(0.05)
        stop.set()
    assert response.status_code == 200
    assert response.text.split("\n\n")[-2] == "data: 14"
