"""A server's lifecycle (``lemoncore.launch.Lifecycle``): every transition checked without
processes, then the native supervisor driving it with real (tiny) processes."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from lemoncore.errors import LemonError
from lemoncore.launch import (
    TRANSITIONS,
    ExitTracking,
    IllegalTransition,
    LaunchSpec,
    Lifecycle,
    ServerState,
)
from lemoncore.outputlines import LineCutter
from lemoncore.supervisor import BackendProcess, StartError, free_port

pytestmark = pytest.mark.anyio
S = ServerState


def test_the_allowed_transitions_are_exactly_the_documented_ones() -> None:
    assert {state: set(targets) for state, targets in TRANSITIONS.items()} == {
        S.STARTING: {S.READY, S.DRAINING, S.CRASHED},  # served, stopped early, died
        S.READY: {S.DRAINING, S.CRASHED},
        S.DRAINING: {S.STOPPED},
        S.STOPPED: set(),
        S.CRASHED: set(),
    }
    assert [s for s in S if s.ended] == [S.STOPPED, S.CRASHED]
    assert ExitTracking is Lifecycle  # the earlier name still works


class Server(Lifecycle):
    name = "m"


def server_in(state: ServerState) -> Server:
    """A server brought to ``state`` through the public methods only."""
    server = Server()
    paths: dict[ServerState, list[Callable[[], object]]] = {
        S.STARTING: [],
        S.READY: [server.mark_ready],
        S.DRAINING: [server.mark_ready, server.begin_stop],
        S.STOPPED: [server.begin_stop, server.mark_exited],
        S.CRASHED: [server.mark_exited],
    }
    for step in paths[state]:
        step()
    assert server.state is state
    return server


@pytest.mark.parametrize(("from_", "to"), list(itertools.product(S, S)))
async def test_every_move_outside_the_table_raises_naming_both_states(
    from_: ServerState, to: ServerState, anyio_backend: str
) -> None:
    server = server_in(from_)
    if to in TRANSITIONS[from_]:
        server._move(to)
        assert server.state is to
        return
    with pytest.raises(IllegalTransition) as raised:
        server._move(to)
    assert (raised.value.from_, raised.value.to) == (from_, to)
    assert f"illegal transition {from_} -> {to}" in str(raised.value)
    assert isinstance(raised.value, LemonError)
    assert server.state is from_  # unchanged


async def test_a_stopped_server_went_starting_ready_draining_stopped(anyio_backend: str) -> None:
    server, seen = Server(), []
    server.on_exit(lambda s: seen.append((s.state, s.exited.is_set(), s.crashed)))
    assert (server.state, server.alive, server.crashed, server.stopping) == (
        S.STARTING,
        True,
        False,
        False,
    )
    server.mark_ready()
    assert server.state is S.READY
    assert server.begin_stop() is True
    assert (server.state, server.alive, server.stopping) == (S.DRAINING, True, True)
    assert server.begin_stop() is False  # the router began it; stop() asks again
    with capture_logs() as logs:
        assert server.mark_exited(code=0) is True
    assert logs == []  # an asked-for end is no news
    assert seen == [(S.STOPPED, True, False)]
    assert (server.alive, server.crashed, server.stopping) == (False, False, True)
    assert server.mark_exited(code=0) is False  # recorded once
    assert server.begin_stop() is False
    assert len(seen) == 1


@pytest.mark.parametrize("after", [S.STARTING, S.READY])
async def test_an_end_nobody_asked_for_is_a_crash_and_stays_one(
    after: ServerState, anyio_backend: str
) -> None:
    server, seen = server_in(after), []
    server.on_exit(lambda s: seen.append(s.crashed))  # the router reads it here
    with capture_logs() as logs:
        assert server.mark_exited(code=-9) is True
    assert seen == [True]
    assert server.state is S.CRASHED and server.exited.is_set() and not server.alive
    assert logs == [
        {
            "event": "backend exited",
            "log_level": "warning",
            "model": "m",
            "was": after.value,
            "code": -9,
        }
    ]
    assert server.begin_stop() is False  # stopping a crashed server cleans up, no more
    assert server.crashed and server.state is S.CRASHED


async def test_a_stop_during_start_ends_stopped_and_the_start_cannot_then_succeed(
    anyio_backend: str,
) -> None:
    server = Server()
    assert server.begin_stop() is True
    with pytest.raises(IllegalTransition, match="draining -> ready"):
        server.mark_ready()
    server.mark_exited()
    assert server.state is S.STOPPED and not server.crashed


async def test_ready_is_announced_once(anyio_backend: str) -> None:
    server = server_in(S.READY)
    with pytest.raises(
        IllegalTransition,
        match=r"ready -> ready \(allowed from ready: "
        r"crashed, draining\)",
    ):
        server.mark_ready()
    server = server_in(S.CRASHED)
    with pytest.raises(IllegalTransition, match="none: it has ended"):
        server.mark_ready()


# The native supervisor drives the same machine ----------------------------------------

HEALTHY = """\
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
print("serving", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def state_of(server: Lifecycle) -> ServerState:
    return server.state  # read anew (a type checker would keep the last assert's)


def process(argv: list[str], name: str = "tiny") -> BackendProcess:
    port = free_port()
    return BackendProcess(
        name, LaunchSpec(tuple(a.replace("PORT", str(port)) for a in argv)), "127.0.0.1", port
    )


async def test_a_native_process_is_ready_then_draining_then_stopped(anyio_backend: str) -> None:
    server = process([sys.executable, "-c", HEALTHY, "PORT"])
    states: list[Any] = []
    async with anyio.create_task_group() as tg:
        assert server.state is S.STARTING and not server.alive
        await server.start(tg, ready_within=30)
        assert server.alive and state_of(server) is S.READY
        server.on_exit(lambda s: states.append(s.state))
        await server.stop(grace=5)
    assert server.state is S.STOPPED and server.exited.is_set() and not server.crashed
    assert states == [S.STOPPED]
    assert server.returncode == -signal.SIGTERM


async def test_a_killed_native_process_crashed(anyio_backend: str) -> None:
    server = process([sys.executable, "-c", HEALTHY, "PORT"])
    crashed: list[bool] = []
    async with anyio.create_task_group() as tg:
        await server.start(tg, ready_within=30)
        server.on_exit(lambda s: crashed.append(s.crashed))
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await server.exited.wait()
        await server.stop(grace=1)  # nothing left to do; a crash stays a crash
    assert crashed == [True] and server.state is S.CRASHED


async def test_a_process_that_dies_while_starting_crashed(anyio_backend: str) -> None:
    server = process([sys.executable, "-c", "print('bad model'); raise SystemExit(3)"])
    async with anyio.create_task_group() as tg:
        with pytest.raises(StartError, match="exited with code 3"):
            await server.start(tg, ready_within=30)
    assert server.state is S.CRASHED and server.returncode == 3


async def test_a_start_given_up_on_is_stopped(anyio_backend: str) -> None:
    server = process(
        [sys.executable, "-c", "import time; print('slow', flush=True); time.sleep(60)"]
    )
    async with anyio.create_task_group() as tg:
        with pytest.raises(StartError, match="not ready after"):
            await server.start(tg, ready_within=0.5)
    assert server.state is S.STOPPED and not server.crashed


async def test_a_missing_executable_is_a_start_error_that_says_so(
    tmp_path: Path, anyio_backend: str
) -> None:
    missing = str(tmp_path / "no-such-engine")
    server = process([missing, "--port", "PORT"])
    async with anyio.create_task_group() as tg:
        with pytest.raises((StartError, FileNotFoundError)) as raised:
            await server.start(tg, ready_within=30)
    assert server.state is S.CRASHED
    if isinstance(raised.value, StartError):  # Linux: the exec helper reports it
        assert f"cannot run {missing}: No such file or directory" in str(raised.value)
        assert not raised.value.retryable


LONG_LINE = (
    """\
import sys
sys.stdout.write("x" * 300_000 + "\\n")  # one line far past asyncio's 64 KiB line limit
sys.stdout.write("after the long line\\n"); sys.stdout.flush()
"""
    + HEALTHY
)


async def test_an_engines_long_output_line_is_cut_and_the_engine_serves_on(
    anyio_backend: str,
) -> None:
    """A line over asyncio's 64 KiB readline limit used to raise in the log reader, which
    runs in the router's task group, and take the router into shutdown."""
    server = process([sys.executable, "-c", LONG_LINE, "PORT"])
    async with anyio.create_task_group() as tg:
        await server.start(tg, ready_within=30)
        with anyio.fail_after(10):
            while "serving" not in server.last_lines:
                await anyio.sleep(0.01)  # the reader's progress: no event to wait on
        long, after, *_ = server.last_lines
        assert long == "x" * 16384 + " [... 283616 more bytes of this line dropped]"
        assert after == "after the long line" and server.state is S.READY
        await server.stop(grace=5)
    assert server.state is S.STOPPED


def test_the_line_cutter_keeps_memory_bounded_and_splits_across_chunks() -> None:
    cutter = LineCutter(limit=4)
    assert cutter.feed(b"ab") == [] and cutter.feed(b"c\nde") == ["abc"]
    assert cutter.feed(b"fghij") == [] and len(cutter._line) == 4  # bounded
    assert cutter.feed(b"k\n\nl") == ["defg [... 4 more bytes of this line dropped]", ""]
    assert cutter.flush() == ["l"] and cutter.flush() == []


def test_a_line_that_is_not_utf8_is_read_in_the_systems_encoding() -> None:
    # VTE, a PyInstaller bundle on Windows, writes its Portuguese in the ANSI code page
    # (lemon_plugin_vte.launch): cp1252 there, given here as the fallback.
    said = "VTE: amdhip64.dll não encontrada"
    cutter = LineCutter(fallback="cp1252")
    assert cutter.feed(said.encode("cp1252") + b"\n") == [said]
    assert cutter.feed(said.encode() + b"\n") == [said]  # UTF-8 stays UTF-8
    # A line cut inside its last UTF-8 letter is UTF-8 still, not cp1252's mojibake
    cut = LineCutter(limit=2, fallback="cp1252")  # "n" and the first byte of "ã"
    assert cut.feed("não\n".encode()) == ["n\ufffd [... 2 more bytes of this line dropped]"]
