"""How a server stops: ``lemon stop`` asks it through ``POST /api/v1/shutdown`` (with the
admin key) and falls back to a signal; the route drains like SIGTERM; the Windows branches
(``--detach``'s console, the stop signals, ``TerminateProcess``) pass what the Windows
APIs document. Real ``lemon serve`` processes with no plugins, and the ASGI app."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lemoncore import Settings, create_app
from lemoncore.cli import daemon
from lemoncore.platforms import SIGBREAK, stop_signals
from lemoncore.serving.admission import Admission
from lemoncore.testing import running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, tiny_plugin

NO_PLUGINS = {"LEMON_PLUGINS_ALLOW": ""}
ADMIN_KEY = "stop-test-admin-key"


def _stop(cache: Path, port: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        **NO_PLUGINS,
        "LEMON_CACHE_DIR": str(cache),
        "LEMON_CONFIG_FILE": str(cache / "config.toml"),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "stop", "--port", port, "--json"],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("cli_key", "how"),
    [(ADMIN_KEY, "asked"), ("a-wrong-key", "signalled")],
    ids=["with-the-admin-key", "refused-then-signalled"],
)
def test_lemon_stop_asks_the_server_and_falls_back_to_a_signal(
    tmp_path: Path, cli_key: str, how: str
) -> None:
    cache = tmp_path / "lemon"
    with running_server(cache, {**NO_PLUGINS, "LEMON_ADMIN_API_KEY": ADMIN_KEY}) as server:
        port = server.url.rsplit(":", 1)[1]
        stopped = _stop(cache, port, LEMON_ADMIN_API_KEY=cli_key)
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout) == {
            "workers": [],
            "stopped": server.process.pid,
            "how": how,
        }
        assert server.process.wait(5) == 0  # a graceful exit either way, on POSIX
        log = server.log_file.read_text()
        assert ("shutdown asked" in log) == (how == "asked"), log[-2000:]
        assert "shutting down: draining in-flight requests" in log
        if how == "signalled":
            assert "did not take the shutdown request (401" in stopped.stderr
            assert "sent it SIGTERM" in stopped.stderr
    assert not (cache / "run" / f"serve-{port}.json").exists()


@pytest.mark.anyio
async def test_the_shutdown_route_drains_the_router(tmp_path: Path, anyio_backend: str) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow=""), plugins={"tiny": tiny_plugin(tmp_path)}
    )
    core = app.state.core
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://localhost") as c,
    ):
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(core.router.shutdown_begun)  # what ends lemon serve's Hypercorn
                answer = await c.post("/api/v1/shutdown")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"status": "shutting_down", "pid": os.getpid(), "drain_s": 5.0}
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        refused = await c.post("/v1/chat/completions", json=chat)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"


@pytest.mark.anyio
async def test_shutdown_begun_returns_once_it_began(anyio_backend: str) -> None:
    admission = Admission(Settings(plugins_allow=""))
    returned = anyio.Event()

    async def wait() -> None:
        await admission.shutdown_begun()
        returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert not returned.is_set()
        admission.begin_shutdown()
        with anyio.fail_after(1):
            await returned.wait()
    with anyio.fail_after(1):
        await admission.shutdown_begun()  # already begun: at once


# The Windows branches, checked against the documented values: they have never run on
# Windows (README).


class _StartupInfo:  # subprocess.STARTUPINFO, which only Windows' subprocess defines
    def __init__(self) -> None:
        self.dwFlags, self.wShowWindow = 0, 1


def test_detach_on_windows_gives_the_server_a_hidden_console_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subprocess, "STARTUPINFO", _StartupInfo, raising=False)
    options: dict[str, Any] = daemon.detached_options("win32")
    # winbase.h: CREATE_NEW_CONSOLE 0x10, CREATE_NEW_PROCESS_GROUP 0x200; winuser.h:
    # STARTF_USESHOWWINDOW 0x1, SW_HIDE 0. Not DETACHED_PROCESS (0x8): no console at all.
    assert options["creationflags"] == 0x10 | 0x200
    assert (options["startupinfo"].dwFlags, options["startupinfo"].wShowWindow) == (1, 0)
    assert "start_new_session" not in options  # ignored on Windows
    assert daemon.detached_options("linux") == {"start_new_session": True}


def test_signal_stop_on_windows_says_it_terminated(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert daemon.signal_stop(4242, "win32") == "terminated"  # os.kill: TerminateProcess
    assert daemon.signal_stop(4242, "linux") == "signalled"
    assert sent == [(4242, signal.SIGTERM)] * 2


def test_the_stop_signals_of_each_os() -> None:
    # CPython signal.c: SIGBREAK is 21 on Windows (CTRL_BREAK_EVENT); SIGTERM cannot be
    # caught there (os.kill is TerminateProcess), so only SIGINT and SIGBREAK are handled.
    assert stop_signals("win32") == (signal.SIGINT, SIGBREAK) == (2, 21)
    assert stop_signals("linux") == (signal.SIGINT, signal.SIGTERM)
