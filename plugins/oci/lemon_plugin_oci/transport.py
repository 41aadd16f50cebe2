"""How lemoncore's requests reach a container's engine: over the engine's socket (a fresh
connection per request through the relay), held while the container is relaunched."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import httpx


def engine_transport(socket: str, relayed: bool) -> httpx.AsyncHTTPTransport:
    """The connection to the engine's socket. Through the relay, a connection the engine
    closes after a response reaches lemoncore a thread hop late, so a kept-alive one
    could be reused after its end (llama-server does close after a stream): a relayed
    engine gets a fresh connection per request (``benchmarks/oci_relay.py`` prices it)."""
    limits = httpx.Limits(max_keepalive_connections=0) if relayed else httpx.Limits()
    return httpx.AsyncHTTPTransport(uds=socket, limits=limits)


class WhenServing(httpx.AsyncBaseTransport):
    """Holds each request until ``serving()`` (the event of the current launch, asked
    anew for every request) is set: while the container is relaunched after drift."""

    def __init__(self, inner: httpx.AsyncBaseTransport, serving: Callable[[], anyio.Event]) -> None:
        self.inner, self.serving = inner, serving

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self.serving().wait()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
