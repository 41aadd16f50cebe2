"""The HTTP transport to backends: httpx over httpcore's pool, over TCP or a unix socket,
whose connections tell a relay when they are about to wait for the network, and hand a
streamed body out a read at a time.

httpcore reads up to 64 KiB at a time and hands a streamed body out one HTTP chunk at a
time, through h11 and five generator layers per chunk; a backend that is ahead of the
client (many streams, a burst) leaves many chunks in one read. :func:`body_reads` decodes
a chunked body a read at a time instead (:class:`~lemoncore.serving.chunked.
ChunkedDecoder`), and :class:`RelayStream` lets :class:`~lemoncore.serving.proxy.SSERelay`
send what one read brought as one write, exactly when nothing more is available, with no
extra task and no timer.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx

from lemoncore.serving.chunked import ChunkedDecoder

HEAD_END = b"\r\n\r\n"
READ_BYTES = 1 << 16  # what httpcore reads at a time
LAST_CHUNK = b"0\r\n\r\n"


class RelayStream(httpcore.AsyncNetworkStream):
    """A backend connection. ``before_read``, when set, is awaited before each read from
    the network: by then every byte already received has been handed out.

    An answer's head is handed to httpcore alone: the body bytes that came in the same
    read are kept back (``body_start``) until httpcore reads again, so :func:`body_reads`
    can take the body over from its first byte."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self.before_read: Callable[[], Awaitable[None]] | None = None
        self._readable = readable_check(inner.get_extra_info("socket"))
        self._head: bytes | None = None  # the answer's head so far, while it is awaited
        # kept back after the head (maybe b""); None once httpcore read past the head
        self.body_start: bytes | None = None

    # httpcore's interface takes timeouts as arguments
    async def read(
        self,
        max_bytes: int,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> bytes:
        if self.body_start is not None:
            data, self.body_start = self.body_start, None
            if data:
                return data
        if self.before_read is not None:
            await self.before_read()
        data = await self._inner.read(max_bytes, timeout)
        if self._head is None:
            return data
        seen = self._head + data
        end = seen.find(HEAD_END)
        if end < 0:
            self._head = seen[-len(HEAD_END) :]
            return data
        cut = end + len(HEAD_END) - len(self._head)
        self._head, self.body_start = None, data[cut:]
        return data[:cut]

    async def write(
        self,
        buffer: bytes,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        self._head, self.body_start = b"", None  # a request: its answer's head comes next
        await self._inner.write(buffer, timeout)

    async def read_body(self, timeout: float | None) -> bytes:  # noqa: ASYNC109
        """The next bytes of a body taken over from httpcore (:func:`body_reads`);
        httpcore's errors as httpx's."""
        try:
            return await self.read(READ_BYTES, timeout)
        except httpcore.TimeoutException as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except httpcore.NetworkError as exc:
            raise httpx.ReadError(str(exc)) from exc

    async def aclose(self) -> None:
        self.before_read, self.body_start = None, None
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        # httpcore's pool asks every idle connection "is_readable" on each request and
        # each response close; its anyio stream answers that with a getpeername() and a
        # fresh poll each time, which grew with the number of open connections
        if info == "is_readable":
            return self._readable()
        return self._inner.get_extra_info(info)


def readable_check(sock: socket.socket | None) -> Callable[[], bool]:
    """A check of whether ``sock`` has bytes (or its end) to read now, without reading:
    what httpcore's ``is_socket_readable`` answers, with one poll object per socket. A
    socket that is gone reads as readable (its next read is the end)."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return lambda: True
    if not hasattr(select, "poll"):  # Windows
        return lambda: bool(select.select([fd], [], [], 0)[0])
    poll = select.poll()
    poll.register(fd, select.POLLIN | select.POLLPRI)
    return lambda: bool(poll.poll(0))


class RelayBackend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, its connections wrapped in :class:`RelayStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return RelayStream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return RelayStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def backend_transport(limits: httpx.Limits, uds: str | None = None) -> httpx.AsyncHTTPTransport:
    """httpx's transport (its request and error mapping) over a pool of
    :class:`RelayStream` connections; to ``uds`` when given (the URL's host is then only
    the ``Host`` header)."""
    transport = httpx.AsyncHTTPTransport(limits=limits, uds=uds)
    # httpx takes no network backend; its pool is replaced by the same pool with ours
    transport._pool = httpcore.AsyncConnectionPool(
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        uds=uds,
        network_backend=RelayBackend(),
    )
    return transport


def relay_stream(response: httpx.Response) -> RelayStream | None:
    """The :class:`RelayStream` a response is read from, if it came over one."""
    stream = response.extensions.get("network_stream")
    return stream if isinstance(stream, RelayStream) else None


async def body_reads(response: httpx.Response) -> AsyncIterator[bytes]:
    """A streamed response's raw body (as ``aiter_raw``), a network read at a time: a
    chunked body over a :class:`RelayStream` is decoded here rather than by h11, then
    h11 is shown its last chunk so the connection goes back to the pool. Anything else
    is httpx's ``aiter_raw``. Errors are httpx's (``TransportError``)."""
    stream = relay_stream(response)
    chunked = response.headers.get("transfer-encoding", "").lower() == "chunked"
    if stream is None or stream.body_start is None or not chunked or response.is_stream_consumed:
        async for data in response.aiter_raw():
            yield data
        return
    timeout = response.request.extensions.get("timeout", {}).get("read")
    decoder, data = ChunkedDecoder(), stream.body_start
    stream.body_start = None
    while True:
        if payload := decoder.feed(data):
            yield payload
        if decoder.done:
            break
        data = await stream.read_body(timeout)
        if not data:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
    if not decoder.extra:  # h11 reads the end it expects, and the connection is reusable
        stream.body_start = LAST_CHUNK
        async for _ in response.aiter_raw():
            pass
