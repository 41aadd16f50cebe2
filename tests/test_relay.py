"""The relay's hot path: chunks that arrive together leave together, a lone chunk leaves
at once, and the bytes are the backend's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import httpx
import pytest
from starlette.types import Message

from lemoncore.serving.answer import Answer
from lemoncore.serving.proxy import DONE, SSERelay
from lemoncore.serving.transport import backend_transport, body_reads, relay_stream

pytestmark = pytest.mark.anyio

EVENT = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def upstream(burst: int, gap: float) -> AsyncIterator[tuple[str, list[float]]]:
    """A backend that writes ``burst`` chunks at once, then one more after ``gap``
    seconds; yields its URL and the times it wrote the lone chunk."""
    wrote: list[float] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        writer.write(b"".join(b"%x\r\n%s\r\n" % (len(EVENT), EVENT) for _ in range(burst)))
        await writer.drain()
        await asyncio.sleep(gap)
        wrote.append(anyio.current_time())
        writer.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
        await writer.drain()
        await asyncio.sleep(gap)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", wrote


async def relay(url: str) -> list[tuple[float, bytes]]:
    """Relay one stream; the body sends the client got, with their times."""
    sent: list[tuple[float, bytes]] = []
    async with httpx.AsyncClient(
        base_url=url, transport=backend_transport(httpx.Limits())
    ) as client:
        response = await client.send(client.build_request("POST", "/x", json={}), stream=True)
        assert relay_stream(response) is not None
        resources = AsyncExitStack()
        resources.push_async_callback(response.aclose)
        never = anyio.Event()

        async def receive() -> Message:
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append((anyio.current_time(), message["body"]))

        await SSERelay(Answer(None, response, resources), 30.0)({"type": "http"}, receive, send)
    return sent


async def test_chunks_that_arrive_together_are_sent_together() -> None:
    async with upstream(burst=50, gap=0.05) as (url, _):
        sent = await relay(url)
    assert b"".join(body for _, body in sent) == EVENT * 51 + DONE
    assert len(sent) <= 4  # the burst, the lone chunk, the end (one send each at most)
    assert sent[0][1].count(b"data: ") > 1


async def test_a_lone_chunk_is_sent_when_it_arrives() -> None:
    async with upstream(burst=1, gap=0.3) as (url, wrote):
        sent = await relay(url)
    lone = next(t for t, body in sent if t >= wrote[0])
    assert lone - wrote[0] < 0.1  # not held until the next chunk, 0.3 s later
    assert b"".join(body for _, body in sent) == EVENT * 2 + DONE


@contextlib.asynccontextmanager
async def keepalive_upstream(
    answer: list[bytes], cut: bool = False
) -> AsyncIterator[tuple[str, list[int]]]:
    """A backend that answers each request on a connection with ``answer``'s pieces, one
    write each (``cut``: then closes mid-body); yields its URL and a count of
    connections."""
    connections = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        # a connection still open when the test ends is cancelled: that ends it too
        with contextlib.suppress(
            asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError
        ):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                for i, piece in enumerate(answer):
                    if i:
                        await asyncio.sleep(0.01)  # each piece its own read
                    writer.write(piece)
                    await writer.drain()
                if cut:
                    break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", connections


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
)
CHUNKS = b"".join(b"%x\r\n%s\r\n" % (len(EVENT), EVENT) for _ in range(3))


@pytest.mark.parametrize(
    "answer",
    [
        [CHUNKED_HEAD + b"\r\n" + CHUNKS + b"0\r\n\r\n"],  # head and body in one read
        [CHUNKED_HEAD + b"\r", b"\n" + CHUNKS[:7], CHUNKS[7:] + b"0\r\n", b"\r\n"],
        [CHUNKED_HEAD + b"\r\n", CHUNKS, b"0\r\n\r\n"],  # the body starts in a later read
    ],
    ids=["one-read", "split-everywhere", "head-alone"],
)
async def test_a_chunked_body_is_read_past_h11_and_the_connection_reused(
    answer: list[bytes],
) -> None:
    async with (
        keepalive_upstream(answer) as (url, connections),
        httpx.AsyncClient(base_url=url, transport=backend_transport(httpx.Limits())) as client,
    ):
        for _ in range(3):
            request = client.build_request("POST", "/x", json={})
            async with contextlib.aclosing(await client.send(request, stream=True)) as response:
                stream = relay_stream(response)
                assert stream is not None and stream.body_start is not None  # taken over
                assert b"".join([d async for d in body_reads(response)]) == EVENT * 3
    assert connections[0] == 1


async def test_a_body_cut_short_is_a_transport_error() -> None:
    async with (
        keepalive_upstream([CHUNKED_HEAD + b"\r\n" + CHUNKS[:20]], cut=True) as (url, _),
        httpx.AsyncClient(base_url=url, transport=backend_transport(httpx.Limits())) as client,
    ):
        request = client.build_request("POST", "/x", json={})
        async with contextlib.aclosing(await client.send(request, stream=True)) as response:
            with pytest.raises(httpx.RemoteProtocolError):
                [d async for d in body_reads(response)]


async def test_a_body_with_a_length_is_httpx_s() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
    async with (
        keepalive_upstream([head % len(EVENT), EVENT]) as (url, connections),
        httpx.AsyncClient(base_url=url, transport=backend_transport(httpx.Limits())) as client,
    ):
        for _ in range(2):
            request = client.build_request("POST", "/x", json={})
            async with contextlib.aclosing(await client.send(request, stream=True)) as response:
                assert b"".join([d async for d in body_reads(response)]) == EVENT
    assert connections[0] == 1
