"""llama-server on a unix socket when it can listen on one (its ``--help`` says so), TCP
otherwise: the launch, the fallback, and a streamed answer through lemoncore over it."""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import LaunchContext, LaunchSpec, ModelInfo, ServerProcess

from lemon_plugin_llamacpp.install import pypi_plan
from lemon_plugin_llamacpp.launch import on_unix_socket

MODEL = ModelInfo(name="m", recipe="llamacpp", checkpoint="o/r:m.gguf")
DEFAULT = "SmolLM2-135M-Instruct-GGUF"


def spec_for(exe: Path) -> tuple[LaunchSpec, LaunchContext]:
    context = LaunchContext(Path("m.gguf"), {}, exe.parent, "127.0.0.1", 43210, 1, {}, {}, "")
    return LaunchSpec(
        argv=(str(exe), "-m", "m.gguf", "--port", "43210", "--host", "127.0.0.1")
    ), context


def test_a_llama_server_that_serves_unix_sockets_listens_on_one() -> None:
    plan = pypi_plan()
    assert plan.location is not None, plan.message
    spec, context = spec_for(plan.location / "llama-server")
    process = on_unix_socket(MODEL, spec, context)
    assert process is not None and process.uds is not None
    assert process.uds.endswith("43210.sock")
    assert process.argv[process.argv.index("--host") + 1] == process.uds
    assert stat.S_IMODE(Path(process.uds).parent.stat().st_mode) == 0o700  # ours alone


def test_an_older_binary_or_tcp_by_choice_stays_on_tcp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\necho '--host HOST   ip address to listen'\n")
    old.chmod(0o755)
    assert on_unix_socket(MODEL, *spec_for(old)) is None
    plan = pypi_plan()
    assert plan.location is not None
    monkeypatch.setenv("LEMON_LLAMACPP_TCP", "1")
    assert on_unix_socket(MODEL, *spec_for(plan.location / "llama-server")) is None


def test_requests_stream_over_the_socket(server: ServerProcess) -> None:
    with httpx.stream(
        "POST",
        server.api + "/chat/completions",
        timeout=120,
        json={
            "model": DEFAULT,
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "Hi"}],
        },
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) > 2
    [engine] = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    socket = str(engine["backend_url"]).removeprefix("unix:")
    assert socket.endswith(".sock") and Path(socket).exists()
    httpx.post(server.url + "/api/v1/unload", json={}, timeout=60).raise_for_status()
    assert not Path(socket).exists()  # removed with the process


def test_a_client_that_goes_away_stops_generation_over_the_socket(server: ServerProcess) -> None:
    """The relay closes its unix-socket connection when the client leaves, and
    llama-server stops generating, as over TCP (test_faults.py)."""
    httpx.post(
        server.url + "/api/v1/load", json={"model_name": DEFAULT}, timeout=120
    ).raise_for_status()
    generating = engine_generating(server)
    with httpx.stream(
        "POST",
        server.api + "/chat/completions",
        timeout=60,
        json={
            "model": DEFAULT,
            "max_tokens": 100_000,
            "ignore_eos": True,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
        },
    ) as response:
        lines = response.iter_lines()
        while not generating():
            next(lines)
    started = time.monotonic()
    while generating() and time.monotonic() - started < 10:
        time.sleep(0.02)
    assert not generating()


def engine_generating(server: ServerProcess) -> Callable[[], bool]:
    """Whether the engine is generating, by its own ``/metrics`` over its socket (with the
    launch's key, from its environment)."""
    [engine] = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    socket = str(engine["backend_url"]).removeprefix("unix:")
    environ = Path(f"/proc/{engine['pid']}/environ").read_bytes().split(b"\0")
    key = next(v for k, _, v in (e.partition(b"=") for e in environ) if k == b"LLAMA_API_KEY")

    def now() -> bool:
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=socket),
            base_url="http://e",
            headers={"Authorization": f"Bearer {key.decode()}"},
        ) as client:
            metrics = client.get("/metrics").text
        return (
            next(
                line
                for line in metrics.splitlines()
                if line.startswith("llamacpp:requests_processing")
            ).split()[1]
            != "0"
        )

    return now
