"""Cost of the browser boundary per request: the middleware alone, called directly with the
headers an OpenAI SDK sends, against a bare ASGI callable. Run: python benchmarks/boundary.py
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lemoncore.api.boundary import BrowserBoundary

CALLS = 200_000
SCOPE = {
    "type": "http",
    "path": "/v1/chat/completions",
    "method": "POST",
    "headers": [
        (b"host", b"127.0.0.1:13305"),
        (b"user-agent", b"OpenAI/Python 1.99"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json"),
        (b"authorization", b"Bearer none"),
        (b"content-length", b"120"),
    ],
}


async def bare(scope: Any, receive: Any, send: Any) -> None:
    pass


async def per_call_us(app: Any) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        await app(SCOPE, None, None)
    return (time.perf_counter() - started) / CALLS * 1e6


async def main() -> None:
    boundary = BrowserBoundary(bare, [], [])
    for _ in range(3):  # interleaved, as the machines are shared
        base, guarded = await per_call_us(bare), await per_call_us(boundary)
        print(
            f"bare {base:.2f} us, with the boundary {guarded:.2f} us: "
            f"+{guarded - base:.2f} us per request"
        )


if __name__ == "__main__":
    asyncio.run(main())
