"""What lemoncore's own stack costs without lemoncore, for ``sweep.py --floor``.

With ``--upstream URL``: Hypercorn serving a bare ASGI app that forwards each request with
one shared ``httpx.AsyncClient`` and sends the upstream's body on as it arrives
(``aiter_raw``), as an app would write a relay on these libraries, with none of
lemoncore's routing, body checks, scheduling or accounting. Without it: Hypercorn alone,
the app answering the zero upstream's own stream (``zero_upstream.py``: one event per
send, ``max_tokens`` of them), with no upstream at all: the most any relay on Hypercorn
could deliver here.

    python benchmarks/floor_relay.py --port P [--upstream http://127.0.0.1:U]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx
from hypercorn.asyncio import serve
from hypercorn.config import Config
from zero_upstream import CHUNK

Send = Any


async def _body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    return body


async def _start(send: Send, status: int, kind: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", kind)]}
    )


def relay(upstream: str) -> Any:
    client = httpx.AsyncClient(
        base_url=upstream,
        timeout=None,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=1024),
    )

    async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
        body = await _body(receive)
        request = client.build_request(
            scope["method"],
            scope["path"],
            content=body,
            headers={"content-type": "application/json"},
        )
        answer = await client.send(request, stream=True)
        await _start(send, answer.status_code, answer.headers.get("content-type", "").encode())
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await answer.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


async def generate(scope: dict[str, Any], receive: Any, send: Send) -> None:
    """The zero upstream's answers, from Hypercorn itself."""
    body = await _body(receive)
    if scope["path"] == "/health":
        await _start(send, 200, b"application/json")
        await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
        return
    n = int(json.loads(body).get("max_tokens") or 16)
    await _start(send, 200, b"text/event-stream")
    event = f"data: {CHUNK}\n\n".encode()
    for _ in range(n):
        await send({"type": "http.response.body", "body": event, "more_body": True})
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    tail = f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"
    await send({"type": "http.response.body", "body": tail.encode(), "more_body": False})


def lifespan(app: Any) -> Any:
    async def wrapped(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", help="relay to it; without: answer the stream itself")
    args = parser.parse_args()
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    app = relay(args.upstream) if args.upstream else generate
    asyncio.run(serve(lifespan(app), config))


if __name__ == "__main__":
    main()
