"""The HTTP transport to backends: httpx over httpcore's pool, over TCP or a unix socket,
whose connections tell a relay when they are about to wait for the network.

httpcore reads up to 64 KiB at a time and hands a streamed body out one HTTP chunk at a
time; a backend that is ahead of the client (many streams, a burst) leaves many chunks in
one read. :class:`RelayStream` lets :class:`~lemoncore.serving.proxy.SSERelay` gather those
and send them to the client as one write, exactly when nothing more is available, with no
extra task and no timer.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore
import httpx


class RelayStream(httpcore.AsyncNetworkStream):
    """A backend connection. ``before_read``, when set, is awaited before each read from
    the network: by then every byte already received has been handed out."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self.before_read: Callable[[], Awaitable[None]] | None = None

    # httpcore's interface takes timeouts as arguments
    async def read(
        self,
        max_bytes: int,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> bytes:
        if self.before_read is not None:
            await self.before_read()
        return await self._inner.read(max_bytes, timeout)

    async def write(
        self,
        buffer: bytes,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self.before_read = None
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


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
