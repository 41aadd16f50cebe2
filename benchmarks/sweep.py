"""Relay capacity by concurrency: chunks/s and server CPU µs per chunk, streaming from the
zero-work upstream (``zero_upstream.py``) directly, through lemoncore, and through
LiteLLM's proxy (when ``--litellm`` names its executable), at 1, 8, 32 and 128
concurrent streams; plus the added time to first token against the same upstream.

The client is a raw-socket asyncio loop that only counts ``data:`` events, so the
servers, not the client, are measured. ``--client keepalive`` (the default) sends each
stream's requests back to back on one kept-alive connection; ``--client close`` opens a
connection per request and asks the server to close it after the answer (``Connection:
close``), as many clients do. Every system is measured in turn within a round
(interleaved), over ``--rounds`` rounds: compare within a run, not across runs.
CPU per chunk is the server process's own CPU time (``/proc/<pid>/stat``) over a
measured window divided by the events its clients received in that window; the
upstream's CPU is not counted against a proxy.

Run: ``bash benchmarks/run`` (with LiteLLM), or ``python benchmarks/sweep.py``;
``--smoke`` is a seconds-long run that checks the harness (CI). Writes
``<out>/sweep-<stamp>.json`` and ``.md`` (``sweep-latest.*`` for full runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from compare import Procs  # a sibling script: the benchmarks' process list

from lemoncore.supervisor import free_port

HERE = Path(__file__).resolve().parent
TOKENS = 200  # events per stream (plus usage and [DONE])
TICK = os.sysconf("SC_CLK_TCK")
END = b"\r\n0\r\n\r\n"  # the end of a chunked response


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def request(host: str, path: str, model: str, tokens: int, close: bool = False) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "go"}],
        }
    ).encode()
    closing = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{closing}\r\n"
    ).encode() + body


class Counter:
    def __init__(self) -> None:
        self.events = 0
        self.errors = 0


async def close_loop(port: int, payload: bytes, counter: Counter, stop: asyncio.Event) -> None:
    """Until ``stop``: open a connection, send one streaming request (``Connection:
    close``), read the answer to the server's close."""
    while not stop.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(payload)
            tail = b""
            while data := await reader.read(65536):
                counter.events += data.count(b"data: ")
                tail = (tail + data)[-16:]
            if not tail.endswith(END):
                counter.errors += 1
                return
        finally:
            writer.close()


async def stream_loop(port: int, payload: bytes, counter: Counter, stop: asyncio.Event) -> None:
    """Send streaming requests back to back on one keep-alive connection until ``stop``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while not stop.is_set():
            writer.write(payload)
            tail = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    counter.errors += 1
                    return
                counter.events += data.count(b"data: ")
                tail = (tail + data)[-16:]
                if tail.endswith(END):
                    break
    finally:
        writer.close()


async def measure(
    port: int,
    path: str,
    model: str,
    pid: int,
    streams: int,
    seconds: float,
    warmup: float,
    profile: Path | None = None,
    close: bool = False,
) -> dict[str, float]:
    """``streams`` concurrent streams for ``warmup`` + ``seconds``; rates over the
    measured window. With ``profile``, py-spy samples ``pid`` over the window into that
    file (collapsed stacks); ``close``: a connection per request (:func:`close_loop`)."""
    counter, stop = Counter(), asyncio.Event()
    payload = request(f"127.0.0.1:{port}", path, model, TOKENS, close)
    loop = close_loop if close else stream_loop
    tasks = [asyncio.create_task(loop(port, payload, counter, stop)) for _ in range(streams)]
    await asyncio.sleep(warmup)
    spy = (
        None
        if profile is None
        else await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--duration",
            str(int(seconds)),
            "--output",
            str(profile),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    )
    events0, cpu0, t0 = counter.events, cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    events1, cpu1, t1 = counter.events, cpu_seconds(pid), time.perf_counter()
    if spy is not None:
        await spy.wait()
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    chunks = events1 - events0
    return {
        "chunks_per_s": round(chunks / (t1 - t0), 1),
        "cpu_us_per_chunk": round((cpu1 - cpu0) * 1e6 / chunks, 1) if chunks else -1.0,
        "chunks": chunks,
        "errors": counter.errors,
    }


async def ttft(port: int, path: str, model: str, pid: int, n: int) -> tuple[list[float], float]:
    """Time to the first ``data:`` event of ``n`` one-token streams, back to back on one
    connection (seconds), and the server's CPU seconds per request."""
    payload = request(f"127.0.0.1:{port}", path, model, 1)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    cpu = cpu_seconds(pid)
    try:
        for _ in range(n):
            start = time.perf_counter()
            writer.write(payload)
            seen, first = b"", None
            while True:
                data = await reader.read(65536)
                if not data:
                    raise RuntimeError("server closed the connection")
                seen = (seen + data)[-4096:]
                if first is None and b"data: " in seen:
                    first = time.perf_counter() - start
                if seen.endswith(END):
                    break
            out.append(first if first is not None else float("nan"))
    finally:
        writer.close()
    return out, (cpu_seconds(pid) - cpu) / n


def wait_ready(url: str, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{url} never became ready")


def serve_zero(procs: Procs, weights: Path, env: dict[str, str]) -> tuple[int, str, int]:
    """``lemon serve`` with the zero upstream loaded as model ``zero``."""
    port = free_port()
    lemon = procs.start([sys.executable, "-m", "lemoncore.cli", "serve", "--port", str(port)], env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/live")
    httpx.post(
        url + "/api/v1/pull",
        timeout=60,
        json={
            "model_name": "zero",
            "recipe": "llamacpp",
            "checkpoint": f"file:{weights}",
            "recipe_options": {"backend": "system"},
        },
    ).raise_for_status()
    httpx.post(url + "/api/v1/load", timeout=60, json={"model_name": "zero"}).raise_for_status()
    return port, "zero", lemon.pid


@contextmanager
def systems(
    tmp: Path,
    litellm: str | None,
    skipped: dict[str, str],
    backend_tcp: bool = False,
    baseline: Path | None = None,
    floor: bool = False,
) -> Iterator[dict[str, tuple[int, str, int]]]:
    """The systems under test: name -> (port, model, pid of the process to measure).
    lemoncore reaches its upstream over a unix socket unless ``backend_tcp``; with
    ``baseline`` (a source tree), a second lemoncore runs that code; with ``floor``,
    ``floor_relay.py`` beside them: Hypercorn and httpx relaying (over TCP), and
    Hypercorn answering the stream itself."""
    procs = Procs()
    try:
        zport = free_port()
        zero = procs.start([sys.executable, str(HERE / "zero_upstream.py"), "--port", str(zport)])
        wait_ready(f"http://127.0.0.1:{zport}/health")
        found = {"direct": (zport, "zero", zero.pid)}
        script = tmp / "zero-upstream"
        script.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "zero_upstream.py"} "$@"\n')
        script.chmod(0o755)
        weights = tmp / "zero.gguf"
        weights.write_bytes(b"GGUF" + bytes(60))  # never read: the upstream ignores -m
        config = tmp / "config.toml"
        config.write_text(
            f'heartbeat_interval = 1.0\nmodel_dirs = ["{tmp}"]\n'
            f"[recipes.llamacpp]\n"
            f'system_bin = "{script}"\n'
        )
        env = {
            "LEMON_CONFIG_FILE": str(config),
            "LEMON_LOG_LEVEL": "warning",
            **({"LEMON_LLAMACPP_TCP": "1"} if backend_tcp else {}),
        }
        found["lemoncore"] = serve_zero(
            procs, weights, {**env, "LEMON_CACHE_DIR": str(tmp / "cache")}
        )
        if baseline is not None:  # the same, from another source tree (PYTHONPATH)
            found["lemoncore-before"] = serve_zero(
                procs,
                weights,
                {
                    **env,
                    "LEMON_CACHE_DIR": str(tmp / "cache-before"),
                    "PYTHONPATH": (f"{baseline}{os.pathsep}{baseline / 'plugins' / 'llamacpp'}"),
                },
            )
        if floor:  # Hypercorn and httpx as a relay, then Hypercorn answering alone
            for name, upstream in (
                ("hypercorn+httpx", ["--upstream", f"http://127.0.0.1:{zport}"]),
                ("hypercorn", []),
            ):
                fport = free_port()
                bare = procs.start(
                    [sys.executable, str(HERE / "floor_relay.py"), "--port", str(fport), *upstream]
                )
                wait_ready(f"http://127.0.0.1:{fport}/health")
                found[name] = (fport, "zero", bare.pid)
        if litellm and Path(litellm).exists():
            pport = free_port()
            # loopback-only benchmark peer: no master key, as LiteLLM allows for local use
            peer = procs.start(
                [
                    litellm,
                    "--model",
                    "openai/zero",
                    "--api_base",
                    f"http://127.0.0.1:{zport}/v1",
                    "--port",
                    str(pport),
                    "--host",
                    "127.0.0.1",
                ],
                {
                    "OPENAI_API_KEY": "none",
                    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
                },
            )
            try:
                wait_ready(f"http://127.0.0.1:{pport}/health/liveliness", 180)
                found["litellm"] = (pport, "openai/zero", peer.pid)
            except RuntimeError as exc:
                skipped["litellm"] = str(exc)
        else:
            skipped["litellm"] = "not installed (bash benchmarks/run installs it)"
        yield found
    finally:
        procs.stop_all()


def run(args: argparse.Namespace) -> dict[str, Any]:
    skipped: dict[str, str] = {}
    counts = [int(n) for n in args.streams.split(",")]
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "tokens": TOKENS,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "backend": "tcp" if args.backend_tcp else "unix",
            "client": args.client,
        },
        "skipped": skipped,
        "sweep": {},
        "ttft_ms": {},
    }
    with (
        tempfile.TemporaryDirectory(prefix="lemon-sweep-") as tmp,
        systems(
            Path(tmp), args.litellm, skipped, args.backend_tcp, args.baseline, args.floor
        ) as found,
    ):
        raw: dict[str, dict[int, list[dict[str, float]]]] = {
            name: {n: [] for n in counts} for name in found
        }
        ttfts: dict[str, list[float]] = {name: [] for name in found}
        cpus: dict[str, list[float]] = {name: [] for name in found}
        for _ in range(args.rounds):
            for n in counts:
                for name, (port, model, pid) in found.items():
                    if name == "litellm" and n > args.litellm_max:
                        continue  # LiteLLM takes minutes at 128 streams on 2 cores
                    cell = f"{name}-{n}-{args.client}"
                    profile = args.profile / f"{cell}.txt" if args.profile else None
                    raw[name][n].append(
                        asyncio.run(
                            measure(
                                port,
                                "/v1/chat/completions",
                                model,
                                pid,
                                n,
                                args.seconds,
                                args.warmup,
                                profile,
                                args.client == "close",
                            )
                        )
                    )
            for name, (port, model, pid) in found.items():
                times, cpu = asyncio.run(ttft(port, "/v1/chat/completions", model, pid, args.ttft))
                ttfts[name] += times
                cpus[name].append(cpu)
        for name, by_n in raw.items():
            result["sweep"][name] = {
                str(n): summarize(samples) for n, samples in by_n.items() if samples
            }
        for name, values in ttfts.items():
            ms = sorted(v * 1000 for v in values)
            result["ttft_ms"][name] = {
                "p50": round(statistics.median(ms), 3),
                "p90": round(ms[int(0.9 * (len(ms) - 1))], 3),
                "n": len(ms),
                "cpu_us_per_request": round(statistics.median(cpus[name]) * 1e6),
            }
    return result


def summarize(samples: list[dict[str, float]]) -> dict[str, Any]:
    def mid(key: str) -> float:
        return round(statistics.median(s[key] for s in samples), 1)

    return {
        "chunks_per_s": mid("chunks_per_s"),
        "cpu_us_per_chunk": mid("cpu_us_per_chunk"),
        "chunks_per_s_all": [s["chunks_per_s"] for s in samples],
        "cpu_us_per_chunk_all": [s["cpu_us_per_chunk"] for s in samples],
        "errors": sum(int(s["errors"]) for s in samples),
    }


def table(result: dict[str, Any]) -> list[str]:
    sweep = result["sweep"]
    names = list(sweep)
    lines = [
        "| streams | "
        + " | ".join(f"{n} chunks/s (CPU µs/chunk)" for n in names)
        + " | lemoncore / direct |",
        "|---" * (len(names) + 2) + "|",
    ]
    for n in sweep["direct"]:
        cells = [
            f"{sweep[s][n]['chunks_per_s']:,.0f} ({sweep[s][n]['cpu_us_per_chunk']:,.0f})"
            if n in sweep[s]
            else "—"
            for s in names
        ]
        ratio = sweep["lemoncore"][n]["chunks_per_s"] / sweep["direct"][n]["chunks_per_s"]
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    t = result["ttft_ms"]
    lines += [
        "",
        "Time to first token of a one-token stream on one connection, p50 (p90) "
        "ms [server CPU µs per request]: "
        + ", ".join(
            f"{name} {v['p50']} ({v['p90']}) [{v['cpu_us_per_request']:,}]" for name, v in t.items()
        )
        + f"; lemoncore adds {t['lemoncore']['p50'] - t['direct']['p50']:.3f} ms.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,8,32,128")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttft", type=int, default=100, help="TTFT samples per round")
    parser.add_argument("--litellm", help="path to the litellm executable")
    parser.add_argument(
        "--litellm-max", type=int, default=32, help="most streams to put through LiteLLM"
    )
    parser.add_argument("--smoke", action="store_true", help="seconds-long harness check")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another lemoncore source tree to measure beside this one "
        "(as lemoncore-before), e.g. a git worktree of an older commit",
    )
    parser.add_argument(
        "--backend-tcp",
        action="store_true",
        help="lemoncore reaches the upstream over TCP, not a unix socket",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure floor_relay.py: Hypercorn and httpx relaying, and Hypercorn "
        "answering alone, with nothing of lemoncore",
    )
    parser.add_argument(
        "--client",
        choices=["keepalive", "close"],
        default="keepalive",
        help="one kept-alive connection per stream, or a connection per request",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--profile", type=Path, help="folder for py-spy profiles of each cell (needs py-spy)"
    )
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.streams, args.seconds, args.warmup, args.rounds, args.ttft = "1,4", 0.2, 0.05, 1, 3
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = "smoke" if args.smoke else time.strftime("%Y%m%d-%H%M%S")
    lines = [
        f"# Relay sweep {stamp}",
        "",
        f"{result['machine']['cpus']} CPUs, {TOKENS} "
        f"tokens per stream, {args.rounds} interleaved rounds of {args.seconds} s; "
        f"{args.client} client; median per cell. "
        f"Skipped: {result['skipped'] or 'nothing'}.",
        "",
        *table(result),
    ]
    text = json.dumps(result, indent=2)
    (args.out / f"sweep-{stamp}.json").write_text(text)
    (args.out / f"sweep-{stamp}.md").write_text("\n".join(lines) + "\n")
    if not args.smoke:
        (args.out / "sweep-latest.json").write_text(text)
        (args.out / "sweep-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
