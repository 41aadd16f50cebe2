"""Helpers for testing lemoncore and its plugins against real processes.

``running_server`` starts ``lemon serve`` as a real subprocess on a free loopback port
with its own cache directory and yields its base URL; leaving stops it with SIGTERM.
``serve_directory`` serves files over real HTTP on loopback (installs, downloads).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from lemoncore.supervisor import free_port


@dataclass
class ServerProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_file: Path

    @property
    def api(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


@contextmanager
def running_server(cache_dir: Path, env: Mapping[str, str] | None = None,
                   args: tuple[str, ...] = (), ready_within: float = 30.0
                   ) -> Iterator[ServerProcess]:
    """Run ``lemon serve`` until the context exits; raise with its log if it never starts."""
    port = free_port()
    log_file = cache_dir / "server.log"
    cache_dir.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "LEMON_CACHE_DIR": str(cache_dir),
                "LEMON_CONFIG_FILE": str(cache_dir / "config.toml"), **(env or {})}
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "lemoncore.cli", "serve", "--port", str(port), *args],
            env=full_env, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess(f"http://127.0.0.1:{port}", process, log_file)
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lemon serve did not start:\n{server.log()}")
            try:
                if httpx.get(server.url + "/live", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.02)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on a free loopback port; yield its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
