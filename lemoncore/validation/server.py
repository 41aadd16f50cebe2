"""The validation's own server: ``lemon serve`` as a subprocess on a free loopback port,
with the user's own settings, cache, installed backends and models.

Its own server, not the user's running one: validation loads and unloads models, installs,
stops the engine and checks that nothing is left, none of which may disturb a server the
user relies on. The same cache, not an isolated one: the evidence is about the backend
and models the user really installed. Two servers on one cache would sweep each other's
containers (they share the instance label), so :func:`running_elsewhere` refuses while
another server records itself in that cache.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from lemoncore.supervisor import free_port

SERVE = ("-m", "lemoncore.cli", "serve")


@dataclass
class ServerProcess:
    """A running ``lemon serve``: its base URL, the process and its log file (:meth:`log`
    reads it, for messages)."""

    url: str
    process: subprocess.Popen[bytes]
    log_file: Path

    @property
    def api(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def running_elsewhere(cache_dir: Path) -> str:
    """The URL of a live server recorded in ``cache_dir`` (``lemon serve``'s state file),
    or ""."""
    for state in sorted((cache_dir / "run").glob("serve-*.json")):
        try:
            data = json.loads(state.read_text())
            if not psutil.pid_exists(int(data["pid"])):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return str(data.get("url", f"pid {data.get('pid')}"))
    return ""


@contextmanager
def serving(
    log_file: Path,
    command: tuple[str, ...] = SERVE,
    env: Mapping[str, str] | None = None,
    ready_within: float = 60.0,
    args: tuple[str, ...] = (),
) -> Iterator[ServerProcess]:
    """Run the server (``python COMMAND --port N ARGS``) on loopback until the block ends
    (leaving stops it with SIGTERM and waits); ``RuntimeError`` with its log when it never
    answers ``/live``."""
    port = free_port()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *command, "--port", str(port), *args],
            env={**os.environ, "LEMON_HOST": "127.0.0.1", **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = ServerProcess(f"http://127.0.0.1:{port}", process, log_file)
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{server.log()[-4000:]}")
            try:
                if httpx.get(server.url + "/live", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield server
    finally:
        stop(server)


def stop(server: ServerProcess, within: float = 30.0) -> int | None:
    """SIGTERM, then wait; SIGKILL after ``within`` seconds. The exit status (``None``
    when it had to be killed)."""
    if server.process.poll() is not None:
        return server.process.returncode
    server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        return None
