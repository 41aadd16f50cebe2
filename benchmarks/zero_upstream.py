"""A zero-work OpenAI-shaped upstream: answers health, chat completions (streaming and
not) instantly with fixed-size output, so a proxy's own overhead is all that is measured.

It accepts llama-server's command line (only --host and --port matter; a --host ending in
``.sock`` is a unix socket, as for llama-server), so lemoncore can launch it as the
llama.cpp plugin's ``system`` backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json

CHUNK = json.dumps(
    {
        "id": "z",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "zero",
        "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}],
    }
)


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            path = lines[0].split()[1]
            length = next(
                (
                    int(line.split(":")[1])
                    for line in lines
                    if line.lower().startswith("content-length:")
                ),
                0,
            )
            body = json.loads(await reader.readexactly(length)) if length else {}
            if path == "/health":
                payload = b'{"status":"ok"}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
                )
            elif body.get("stream"):
                n = int(body.get("max_tokens") or 16)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for _ in range(n):
                    event = f"data: {CHUNK}\n\n".encode()
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
                tail = f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail.encode()))
            else:
                n = int(body.get("max_tokens") or 16)
                payload = json.dumps(
                    {
                        "id": "z",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "zero",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "length",
                                "message": {"role": "assistant", "content": "tok " * n},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 8,
                            "completion_tokens": n,
                            "total_tokens": 8 + n,
                        },
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
                )
            await writer.drain()
            if any(line.lower().replace(" ", "") == "connection:close" for line in lines):
                return  # HTTP/1.1 (RFC 9112 9.6): close after this answer, as llama-server does
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--host", default="127.0.0.1", help="IP address, or UNIX socket path ending in .sock"
    )
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    server = await (
        asyncio.start_unix_server(handle, args.host, backlog=1024)
        if args.host.endswith(".sock")
        else asyncio.start_server(handle, args.host, args.port, backlog=1024)
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
