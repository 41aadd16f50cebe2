"""lemoncore.rpc: worker addresses, the bind policy, the binary's lookup, and the probe's
verdicts on peers that are not an rpc-server (real TCP servers on loopback). The probe
against a real rpc-server is in plugins/llamacpp/tests/test_worker.py."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lemoncore.rpc import (
    HELLO_REQUEST,
    AddressError,
    WorkerAddress,
    bind_refusal,
    find_rpc_server,
    hello_outcome,
    parse_worker_address,
    parse_workers,
    probe_worker,
    rpc_argument,
)
from lemoncore.supervisor import free_port
from lemoncore.testing import serve_directory


@pytest.mark.parametrize(
    ("host", "allow_public", "allowed"),
    [
        ("127.0.0.1", False, True),
        ("127.0.0.2", False, True),
        ("::1", False, True),
        ("10.0.0.2", False, True),
        ("172.16.5.4", False, True),
        ("172.32.0.1", False, False),  # just outside 172.16.0.0/12
        ("192.168.1.20", False, True),
        ("100.101.102.103", False, False),  # CGNAT (100.64.0.0/10) not on a tunnel: an ISP's
        ("100.64.0.7", False, True),  # the same range on this machine's Tailscale interface
        ("100.128.0.1", False, False),  # just outside it
        ("169.254.10.1", False, True),  # link-local: a direct cable
        ("fd7a:115c:a1e0::1", False, True),  # ULA (Tailscale IPv6)
        ("fe80::1", False, True),
        ("8.8.8.8", False, False),
        ("2001:db8::1", False, False),
        ("0.0.0.0", False, False),  # every interface, public ones included
        ("::", False, False),
        ("localhost", False, False),  # a name cannot be judged
        ("8.8.8.8", True, True),
        ("0.0.0.0", True, True),
    ],
)
def test_bind_refusal(host: str, allow_public: bool, allowed: bool) -> None:
    refusal = bind_refusal(host, allow_public, tunnels={"100.64.0.7"})
    assert (refusal is None) is allowed, refusal
    if refusal is not None:
        assert host in refusal
        assert "no authentication and no encryption" in refusal
        assert "--allow-public" in refusal
    if host == "100.101.102.103":
        assert "carrier-grade NAT" in str(refusal) and "Tailscale" in str(refusal)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.2:50052", WorkerAddress("10.0.0.2", 50052)),
        (" worker-1.lan:6000 ", WorkerAddress("worker-1.lan", 6000)),
        ("127.0.0.1:1", WorkerAddress("127.0.0.1", 1)),
    ],
)
def test_worker_address_parses(text: str, expected: WorkerAddress) -> None:
    assert parse_worker_address(text) == expected
    assert str(expected) == text.strip()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("10.0.0.2", "no port; write 10.0.0.2:50052"),
        (":50052", "no host"),
        ("10.0.0.2:0", "from 1 to 65535"),
        ("10.0.0.2:65536", "from 1 to 65535"),
        ("10.0.0.2:http", "from 1 to 65535"),
        ("[fd00::2]:50052", "IPv6 addresses are not supported"),
        ("fd00::2:50052", "IPv6 addresses are not supported"),
        ("[::ffff:10.0.0.2]:50052", "(10.0.0.2)"),
        ("bad host:50052", "not an IPv4 address or a host name"),
        ("-x:50052", "not an IPv4 address or a host name"),
    ],
)
def test_worker_address_errors(text: str, says: str) -> None:
    with pytest.raises(AddressError) as caught:
        parse_worker_address(text)
    assert says in str(caught.value)


def test_default_port_and_lists() -> None:
    assert parse_worker_address("10.0.0.2", default_port=50052) == WorkerAddress("10.0.0.2", 50052)
    workers = parse_workers(["10.0.0.2:50052", "10.0.0.3:50052"])
    assert rpc_argument(workers) == "10.0.0.2:50052,10.0.0.3:50052"
    with pytest.raises(AddressError, match="listed twice"):
        parse_workers(["10.0.0.2:50052", " 10.0.0.2:50052"])


def test_find_rpc_server(tmp_path: Path) -> None:
    assert find_rpc_server(tmp_path) is None
    nested = tmp_path / "llama-b1-bin-ubuntu-x64" / "build" / "bin"
    nested.mkdir(parents=True)
    (nested / "rpc-server").write_text("")
    assert find_rpc_server(tmp_path) == nested / "rpc-server"
    (tmp_path / "ggml-rpc-server").write_text("")  # beside llama-server wins
    assert find_rpc_server(tmp_path) == tmp_path / "ggml-rpc-server"


def _reply(major: int, minor: int, patch: int) -> bytes:
    return struct.pack("<Q", 28) + bytes([major, minor, patch, 0]) + bytes(24)


@pytest.mark.parametrize(
    ("reply", "status", "version"),
    [
        (_reply(7, 0, 0), "ok", (7, 0, 0)),
        (_reply(7, 0, 9), "ok", (7, 0, 9)),  # patch levels do not matter
        (_reply(7, 1, 0), "incompatible", (7, 1, 0)),  # a newer minor than the client's
        (_reply(6, 0, 0), "incompatible", (6, 0, 0)),
        (b"", "not_rpc", None),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not_rpc", None),
        (_reply(7, 0, 0)[:20], "not_rpc", None),  # cut short
    ],
)
def test_hello_outcome(reply: bytes, status: str, version: tuple[int, int, int] | None) -> None:
    probe = hello_outcome("10.0.0.2:50052", reply)
    assert (probe.status, probe.version) == (status, version)
    assert probe.ok is (status == "ok")
    assert (probe.error is None) is probe.ok
    if probe.error:
        assert "10.0.0.2:50052" in probe.error


@contextmanager
def tcp_server(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A one-connection-at-a-time TCP server on loopback calling ``answer(conn)``."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                answer(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join()
        server.close()


def _banner_then_wait(conn: socket.socket) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    conn.settimeout(2)
    try:
        conn.recv(100)
    except OSError:
        pass


def _read_then_close(conn: socket.socket) -> None:
    conn.recv(len(HELLO_REQUEST))  # what an rpc-server of another version does


@pytest.mark.anyio
async def test_probe_of_a_server_that_answers_otherwise() -> None:
    with tcp_server(_banner_then_wait) as port:
        probe = await probe_worker(f"127.0.0.1:{port}", timeout=2)
    assert probe.status == "not_rpc" and probe.reachable
    assert probe.error is not None
    assert f"127.0.0.1:{port} is not an rpc-server" in probe.error and "SSH-2.0" in probe.error


@pytest.mark.anyio
async def test_probe_of_a_server_that_closes() -> None:
    with tcp_server(_read_then_close) as port:
        probe = await probe_worker(f"127.0.0.1:{port}", timeout=2)
    assert probe.status == "not_rpc"
    assert probe.error is not None and "closed the connection during the handshake" in probe.error


@pytest.mark.anyio
async def test_probe_of_an_http_server(tmp_path: Path) -> None:
    """An HTTP server waits for a request line the handshake never sends: no answer."""
    with serve_directory(tmp_path) as url:
        address = url.removeprefix("http://")
        probe = await probe_worker(address, timeout=0.5)
    assert probe.status == "no_answer" and probe.reachable
    assert probe.error is not None
    assert address in probe.error and "not an rpc-server" in probe.error


@pytest.mark.anyio
async def test_probe_of_a_closed_port() -> None:
    port = free_port()
    probe = await probe_worker(f"127.0.0.1:{port}", timeout=2)
    assert probe.status == "unreachable" and not probe.reachable
    assert probe.error is not None
    assert f"RPC worker 127.0.0.1:{port} is unreachable: connection refused" in probe.error


@pytest.mark.anyio
async def test_probe_refuses_a_bad_address() -> None:
    with pytest.raises(AddressError, match="IPv6"):
        await probe_worker("[::1]:50052")
