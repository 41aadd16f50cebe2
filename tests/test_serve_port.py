"""A second ``lemon serve`` on a taken port: it binds before it records itself, so it
exits 1 saying who holds the port, and the running server keeps its record (``lemon
status`` and ``lemon stop`` still find it); ``--detach`` reports the failure, not the
other server's ``/live``. Real processes: ``lemon serve`` with no plugins."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from lemoncore.testing import running_server

NO_PLUGINS = {"LEMON_PLUGINS_ALLOW": ""}


def _lemon(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cache.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **NO_PLUGINS,
        "LEMON_CACHE_DIR": str(cache),
        "LEMON_CONFIG_FILE": str(cache / "config.toml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_second_server_on_a_taken_port_changes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "lemon"
    with running_server(cache, NO_PLUGINS) as server:
        port = server.url.rsplit(":", 1)[1]
        record = json.loads((cache / "run" / f"serve-{port}.json").read_text())
        assert record["pid"] == server.process.pid
        second = _lemon(cache, "serve", "--port", port)
        assert second.returncode == 1, second.stderr
        said = second.stderr.strip().splitlines()
        assert said == [
            f"port {port} is in use by pid {server.process.pid} (lemoncore, "
            f"{server.url}); stop it with: lemon stop, or choose another port "
            "(--port or LEMON_PORT)"
        ], second.stderr  # one line, no traceback
        assert json.loads((cache / "run" / f"serve-{port}.json").read_text()) == record
        status = _lemon(cache, "status", "--port", port, "--json")
        assert json.loads(status.stdout)["pid"] == server.process.pid, status.stdout
        # a lemoncore recorded under another cache directory, with and without --detach
        for detach in ((), ("--detach",)):
            other = _lemon(tmp_path / "other", "serve", "--port", port, *detach)
            assert other.returncode == 1, (detach, other.stdout, other.stderr)
            assert f"port {port} is in use by another lemoncore server" in other.stderr
            assert "lemoncore is serving" not in other.stdout


def test_a_port_another_program_holds_names_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        refused = _lemon(tmp_path / "lemon", "serve", "--port", port)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"port {port} is in use by pid {os.getpid()} ("), (
        refused.stderr
    )
    assert not (tmp_path / "lemon" / "run" / f"serve-{port}.json").exists()
