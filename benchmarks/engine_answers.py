"""What a hostile engine's answer costs lemoncore: time to parse one long SSE line, and
the memory a huge non-streamed answer takes.

1. One SSE line of 6, 12, 24 and 48 MiB fed in 64 KiB chunks (httpx's read size) to
   :class:`lemoncore.serving.sse.DataLines` and to the parser it replaced (kept below as
   ``RebuiltLines``: it re-joined the partial line on every chunk), interleaved, 3 rounds.
2. A 256 MiB non-streamed answer from ``tests/tinyserver.py`` through an in-process app
   (``max_answer_bytes`` at its 64 MiB default): the status, and the process's peak RSS
   growth (``ru_maxrss``).

Run: ``.venv/bin/python benchmarks/engine_answers.py``; the table goes to stdout.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from lemoncore import Settings, create_app
from lemoncore.serving.sse import DataLines

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tinyplugin import MODEL, tiny_plugin

CHUNK = 1 << 16


class RebuiltLines:
    """The parser before: the partial line joined with every chunk (quadratic)."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[Any]:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        return [json.loads(line[5:]) for line in lines if line.startswith(b"data:")]


def parse_seconds(parser: DataLines | RebuiltLines, size: int) -> float:
    piece = b"a" * CHUNK
    began = time.perf_counter()
    parser.feed(b'data: {"x": "')
    for _ in range(size // CHUNK):
        parser.feed(piece)
    assert len(parser.feed(b'"}\n\n')) == 1
    return time.perf_counter() - began


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def huge_answer(size: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        app = create_app(
            Settings(cache_dir=cache, plugins_allow=""), plugins={"tiny": tiny_plugin(cache)}
        )
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=300
            ) as client,
        ):
            said = "flood " + json.dumps({"size": size, "length": False})
            body = {"model": MODEL, "messages": [{"role": "user", "content": said}]}
            await client.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
            before = max_rss_mib()
            answer = await client.post("/v1/chat/completions", json=body)
            return answer.status_code, max_rss_mib() - before


def main() -> None:
    status, grew = anyio.run(huge_answer, 256 << 20)  # first: ru_maxrss only ever grows
    print(f"256 MiB non-streamed answer: status {status}, peak RSS +{grew:.0f} MiB\n")
    print("| line MiB | DataLines s (3 rounds) | RebuiltLines s (3 rounds) |")
    print("|---|---|---|")
    for mib in (6, 12, 24, 48):
        new: list[float] = []
        old: list[float] = []
        for _ in range(3):
            new.append(parse_seconds(DataLines(max_line=1 << 30), mib << 20))
            old.append(parse_seconds(RebuiltLines(), mib << 20))
        print(
            f"| {mib} | {', '.join(f'{s:.3f}' for s in new)} | "
            f"{', '.join(f'{s:.2f}' for s in old)} |"
        )


if __name__ == "__main__":
    main()
