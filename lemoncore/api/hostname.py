"""What a ``Host`` header or a client address says about where a request comes from."""

from __future__ import annotations

import ipaddress


def split_host(host: str) -> str:
    """``Host`` header value to its lower-case name or address, without port or brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name = host.partition(":")[0] if host.count(":") == 1 else host
    return name.rstrip(".")


def loopback_address(address: str) -> bool:
    """127.0.0.0/8, ::1, or ::ffff:127.x (an IPv4 client of a dual-stack bind)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def loopback_name(host: str) -> bool:
    """Whether a ``Host`` header names this machine's loopback interface."""
    name = split_host(host)
    return name in {"", "localhost"} or name.endswith(".localhost") or loopback_address(name)
