"""Fault injection against real llama-server processes, in bounded loops, on loopback.

Each test prints its figure. CI runs short loops; LEMON_FAULTS_FULL=1 runs the full
counts (50 kills, 100 load/unload cycles, 50 concurrent first requests, 200
swap-inducing requests).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from lemoncore.testing import ServerProcess, running_server

FULL = os.environ.get("LEMON_FAULTS_FULL") == "1"
MODEL = "SmolLM2-135M-Instruct-GGUF"


def count(full: int, short: int) -> int:
    return full if FULL else short


def children(pid: int) -> list[int]:
    """llama-server processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, _, rest = text.partition("(")[2].rpartition(")")
        if name == "llama-server" and int(rest.split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def loaded(server: ServerProcess) -> dict[str, dict[str, object]]:
    health = httpx.get(server.url + "/api/v1/health").json()
    return {m["model_name"]: m for m in health["all_models_loaded"]}


def chat(server: ServerProcess, model: str = MODEL, tokens: int = 4) -> httpx.Response:
    return httpx.post(server.api + "/chat/completions", timeout=120, json={
        "model": model, "max_tokens": tokens, "messages": [{"role": "user", "content": "hi"}]})


def stream(server: ServerProcess, model: str, tokens: int,
           on_first: Callable[[], None] | None = None) -> list[str]:
    lines = []
    with httpx.stream("POST", server.api + "/chat/completions", timeout=120, json={
            "model": model, "max_tokens": tokens, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Tell me a long story."}]}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                if on_first is not None and len(lines) == 0:
                    on_first()
                lines.append(line[6:])
    return lines


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with running_server(tmp_path, {"LEMON_MAX_LOADED_MODELS": "1",
                                   "LEMON_LOG_LEVEL": "warning"}) as s:
        yield s


def test_backend_killed_mid_stream(server: ServerProcess) -> None:
    rounds, clean = count(50, 5), 0
    for _ in range(rounds):
        chat(server).raise_for_status()
        pid = int(loaded(server)[MODEL]["pid"])  # type: ignore[call-overload]
        frames = stream(server, MODEL, 2000, lambda pid=pid: os.kill(pid, signal.SIGKILL))
        last = json.loads(frames[-1]) if frames[-1].startswith("{") else {}
        if "error" in last and "[DONE]" not in frames and chat(server).status_code == 200:
            clean += 1
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    orphans = children(server.process.pid)
    print(f"kill mid-stream x{rounds}: {clean} clean errors, next request ok, "
          f"{len(orphans)} orphans")
    assert clean == rounds and orphans == []


def test_load_unload_cycles_leak_nothing(server: ServerProcess) -> None:
    cycles = count(100, 10)
    chat(server).raise_for_status()
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    fds_before = open_fds(server.process.pid)
    for _ in range(cycles):
        httpx.post(server.url + "/api/v1/load", json={"model_name": MODEL},
                   timeout=120).raise_for_status()
        httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    # Hypercorn closes a client connection the peer has closed only when its 5 s
    # keep-alive ends (CLOSE-WAIT until then): wait that out, then count.
    deadline = time.monotonic() + 10
    while open_fds(server.process.pid) > fds_before and time.monotonic() < deadline:
        time.sleep(0.2)
    leaked_fds = open_fds(server.process.pid) - fds_before
    print(f"{cycles} load/unload cycles: {len(children(server.process.pid))} processes, "
          f"{leaked_fds} file descriptors (sockets included) left over")
    assert children(server.process.pid) == []
    assert leaked_fds <= 0


def test_concurrent_first_requests_spawn_once(server: ServerProcess) -> None:
    clients = count(50, 20)
    before = httpx.get(server.url + "/metrics").text
    with ThreadPoolExecutor(clients) as pool:
        codes = list(pool.map(lambda _: chat(server).status_code, range(clients)))

    def loads(text: str) -> int:
        return int(next(line.split()[1] for line in text.splitlines()
                        if line.startswith("lemon_loads_total")))

    spawned = loads(httpx.get(server.url + "/metrics").text) - loads(before)
    print(f"{clients} concurrent first requests: {spawned} spawn, codes {set(codes)}")
    assert spawned == 1 and set(codes) == {200}


def test_swaps_never_interrupt_running_streams(server: ServerProcess) -> None:
    httpx.post(server.url + "/api/v1/pull", json={
        "model_name": "other", "recipe": "llamacpp",
        "checkpoint": loaded_checkpoint(server)}).raise_for_status()
    swaps = count(200, 20)
    interrupted: list[int] = []
    errors: list[int] = []

    def streamer() -> None:
        frames = stream(server, MODEL, 64)
        if not frames or frames[-1] != "[DONE]":
            interrupted.append(1)

    def swapper(i: int) -> None:
        response = chat(server, "other" if i % 2 else MODEL, 2)
        if response.status_code != 200:
            errors.append(response.status_code)

    with ThreadPoolExecutor(8) as pool:
        streams = [pool.submit(streamer) for _ in range(4)]
        swapping = [pool.submit(swapper, i) for i in range(swaps)]
        streams += [pool.submit(streamer) for _ in range(4)]
        for future in [*streams, *swapping]:
            future.result()
    print(f"{swaps} swap-inducing requests beside 8 streams: {len(interrupted)} interrupted "
          f"streams, {len(errors)} failed requests")
    assert interrupted == [] and errors == []


def loaded_checkpoint(server: ServerProcess) -> str:
    """The default model's file, as a checkpoint for a second model name."""
    import importlib.util

    package, _, rel = httpx.get(server.api + f"/models/{MODEL}").json()["checkpoint"][
        4:].partition("/")
    spec = importlib.util.find_spec(package)
    assert spec and spec.submodule_search_locations
    return f"file:{Path(next(iter(spec.submodule_search_locations))) / rel}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_children_die_with_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    with running_server(tmp_path) as server:
        chat(server).raise_for_status()
        kids = children(server.process.pid)
        assert kids
        started = time.monotonic()
        server.process.send_signal(sig)
        server.process.wait(timeout=15)
        while any(Path(f"/proc/{k}").exists() for k in kids) and \
                time.monotonic() - started < 10:
            time.sleep(0.02)
        elapsed = time.monotonic() - started
    print(f"{sig.name} to the server: children gone after {elapsed:.2f} s")
    assert not any(Path(f"/proc/{k}").exists() for k in kids)
    assert elapsed <= 10
