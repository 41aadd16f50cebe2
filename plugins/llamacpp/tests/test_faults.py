"""Fault injection against real llama-server processes, in bounded loops, on loopback.

Each test prints its figure. CI runs short loops; LEMON_FAULTS_FULL=1 runs the full
counts (50 kills, 100 load/unload cycles, 50 concurrent first requests, 200
swap-inducing requests).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

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
    return httpx.post(
        server.api + "/chat/completions",
        timeout=120,
        json={
            "model": model,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )


def stream(
    server: ServerProcess, model: str, tokens: int, on_first: Callable[[], None] | None = None
) -> list[str]:
    lines = []
    with httpx.stream(
        "POST",
        server.api + "/chat/completions",
        timeout=120,
        json={
            "model": model,
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
        },
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                if on_first is not None and len(lines) == 0:
                    on_first()
                lines.append(line[6:])
    return lines


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    # TCP to the engine: these tests read its connections' states in /proc/net/tcp (the
    # unix-socket path has its own disconnect test, test_unix_socket.py)
    with running_server(
        tmp_path,
        {"LEMON_MAX_LOADED_MODELS": "1", "LEMON_LLAMACPP_TCP": "1", "LEMON_LOG_LEVEL": "warning"},
    ) as s:
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
    print(
        f"kill mid-stream x{rounds}: {clean} clean errors, next request ok, {len(orphans)} orphans"
    )
    assert clean == rounds and orphans == []


def backend_sockets(port: int) -> list[str]:
    """TCP states (``/proc/net/tcp`` codes: 01 established, 08 close-wait) of the backend's
    ends of its connections."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return [row[3] for row in rows if int(row[1].split(":")[1], 16) == port]


def test_a_client_that_goes_away_cancels_its_request_upstream(server: ServerProcess) -> None:
    """A disconnect frees the model at once and closes the backend connection; for a
    stream, llama-server then stops generating. (This llama-server build does not watch
    the connection of a non-streaming request: it finishes that generation regardless.)"""
    long = {
        "model": MODEL,
        "max_tokens": 100_000,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    httpx.post(
        server.url + "/api/v1/load", json={"model_name": MODEL}, timeout=120
    ).raise_for_status()  # no pooled backend connection yet
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.api + "/chat/completions", json=long, timeout=1.5)
    port = int(str(loaded(server)[MODEL]["backend_url"]).rsplit(":", 1)[1])

    def released_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while loaded(server)[MODEL]["in_flight"] or "01" in backend_sockets(port):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    assert released_within(5), backend_sockets(port)
    # That generation would run to its end; a fresh backend for the streaming half:
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    chat(server).raise_for_status()
    backend_url, key = loaded(server)[MODEL]["backend_url"], engine_key(server)

    def generating() -> bool:
        metrics = httpx.get(f"{backend_url}/metrics", headers=key).text
        return (
            next(
                line
                for line in metrics.splitlines()
                if line.startswith("llamacpp:requests_processing")
            ).split()[1]
            != "0"
        )

    with httpx.stream(
        "POST", server.api + "/chat/completions", timeout=60, json={**long, "stream": True}
    ) as response:
        lines = response.iter_lines()
        while not generating():
            next(lines)
    started = time.monotonic()
    while generating() and time.monotonic() - started < 10:
        time.sleep(0.02)
    stopped = time.monotonic() - started
    print(
        f"client gone: model free and backend connection closed; a stream's generation "
        f"stopped {stopped:.2f} s later"
    )
    assert not generating() and loaded(server)[MODEL]["in_flight"] == 0


def test_load_unload_cycles_leak_nothing(server: ServerProcess) -> None:
    cycles = count(100, 10)
    chat(server).raise_for_status()
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    fds_before = open_fds(server.process.pid)
    for _ in range(cycles):
        httpx.post(
            server.url + "/api/v1/load", json={"model_name": MODEL}, timeout=120
        ).raise_for_status()
        httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    # Hypercorn closes a client connection the peer has closed only when its 5 s
    # keep-alive ends (CLOSE-WAIT until then): wait that out, then count.
    deadline = time.monotonic() + 10
    while open_fds(server.process.pid) > fds_before and time.monotonic() < deadline:
        time.sleep(0.2)
    leaked_fds = open_fds(server.process.pid) - fds_before
    print(
        f"{cycles} load/unload cycles: {len(children(server.process.pid))} processes, "
        f"{leaked_fds} file descriptors (sockets included) left over"
    )
    assert children(server.process.pid) == []
    assert leaked_fds <= 0


def test_concurrent_first_requests_spawn_once(server: ServerProcess) -> None:
    clients = count(50, 20)
    before = httpx.get(server.url + "/metrics").text
    with ThreadPoolExecutor(clients) as pool:
        codes = list(pool.map(lambda _: chat(server).status_code, range(clients)))

    def loads(text: str) -> int:
        return int(
            next(
                line.split()[1]
                for line in text.splitlines()
                if line.startswith("lemon_loads_total")
            )
        )

    spawned = loads(httpx.get(server.url + "/metrics").text) - loads(before)
    print(f"{clients} concurrent first requests: {spawned} spawn, codes {set(codes)}")
    assert spawned == 1 and set(codes) == {200}


def test_swaps_never_interrupt_running_streams(server: ServerProcess) -> None:
    httpx.post(
        server.url + "/api/v1/pull",
        json={"model_name": "other", "recipe": "llamacpp", "checkpoint": loaded_checkpoint(server)},
    ).raise_for_status()
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
    print(
        f"{swaps} swap-inducing requests beside 8 streams: {len(interrupted)} interrupted "
        f"streams, {len(errors)} failed requests"
    )
    assert interrupted == [] and errors == []


def engine_key(server: ServerProcess) -> dict[str, str]:
    """The launch's key, as only the engine's own user can read it (its environment)."""
    pid = loaded(server)[MODEL]["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    key = next(v for k, _, v in (e.partition(b"=") for e in environ) if k == b"LLAMA_API_KEY")
    return {"Authorization": f"Bearer {key.decode()}"}


def loaded_checkpoint(server: ServerProcess) -> str:
    """The default model's file, as a checkpoint for a second model name."""
    checkpoint: str = httpx.get(server.api + f"/models/{MODEL}").json()["checkpoint"]
    return checkpoint


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_children_die_with_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    with running_server(tmp_path) as server:
        chat(server).raise_for_status()
        kids = children(server.process.pid)
        assert kids
        started = time.monotonic()
        server.process.send_signal(sig)
        server.process.wait(timeout=15)
        while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() - started < 10:
            time.sleep(0.02)
        elapsed = time.monotonic() - started
    print(f"{sig.name} to the server: children gone after {elapsed:.2f} s")
    assert not any(Path(f"/proc/{k}").exists() for k in kids)
    assert elapsed <= 10


def test_shutdown_drains_in_flight_requests_and_cuts_the_rest_at_the_deadline(
    tmp_path: Path,
) -> None:
    """SIGTERM: a request that finishes within stop_grace finishes; the rest end at the
    deadline with a ``shutting_down`` error (an SSE frame, or 503), then children stop."""
    grace = 3.0
    with (
        running_server(tmp_path, {"LEMON_STOP_GRACE": str(grace)}) as server,
        ThreadPoolExecutor(3) as pool,
    ):
        chat(server).raise_for_status()
        kids = children(server.process.pid)
        ended: dict[str, float] = {}

        def timed(name: str, call: Callable[[], object]) -> object:
            try:
                return call()
            finally:
                ended[name] = time.monotonic()

        long_stream = pool.submit(timed, "stream", lambda: stream(server, MODEL, 100_000))
        long_request = pool.submit(
            timed,
            "request",
            lambda: httpx.post(
                server.api + "/chat/completions",
                timeout=60,
                json={
                    "model": MODEL,
                    "max_tokens": 100_000,
                    "ignore_eos": True,
                    "messages": [{"role": "user", "content": "Tell me a long story."}],
                },
            ),
        )
        deadline = time.monotonic() + 30
        while loaded(server)[MODEL]["in_flight"] != 2:  # both long ones are in
            assert time.monotonic() < deadline, loaded(server)[MODEL]
            time.sleep(0.01)
        first = threading.Event()
        # a few tokens more after its first: done within the grace on a slow, loaded CPU too
        short_stream = pool.submit(stream, server, MODEL, 8, first.set)
        assert first.wait(30)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)

        short, cut = short_stream.result(), long_stream.result()
        refused = long_request.result()
        server.process.wait(timeout=20)
        exited = time.monotonic() - signalled
        while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() - signalled < 10:
            time.sleep(0.02)
        gone = time.monotonic() - signalled

    assert short[-1] == "[DONE]"
    assert isinstance(cut, list) and json.loads(cut[-1])["error"]["code"] == "shutting_down"
    assert isinstance(refused, httpx.Response) and refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    cut_after = {name: at - signalled for name, at in ended.items()}
    print(
        f"SIGTERM with 3 requests in flight (stop_grace {grace:g} s): the short stream "
        f"finished with [DONE]; the long stream and request ended with shutting_down "
        f"after {cut_after['stream']:.2f} s / {cut_after['request']:.2f} s; server exited "
        f"after {exited:.2f} s, children gone after {gone:.2f} s"
    )
    assert all(grace - 0.5 <= t <= grace + 2 for t in cut_after.values())
    assert not any(Path(f"/proc/{k}").exists() for k in kids) and gone <= 10
