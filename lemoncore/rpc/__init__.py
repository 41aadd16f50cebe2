"""llama.cpp RPC workers (``rpc-server``), by part:

* :mod:`~lemoncore.rpc.address`: worker addresses, the bind policy, finding the binary;
* :mod:`~lemoncore.rpc.probe`: the reachability and version probe (the RPC HELLO
  handshake), with the protocol facts it rests on;
* :mod:`~lemoncore.rpc.worker`: what ``lemon worker`` runs (rpc-server's command line and
  environment) and the checks before it starts;
* :mod:`~lemoncore.rpc.supervisor`: running rpc-server, restarting it after a crash with
  back-off, stopping it on a signal;
* :mod:`~lemoncore.rpc.records`: the state records that ``lemon ps`` and ``lemon status``
  read.

This package's names are the first two parts' (so ``from lemoncore.rpc import
probe_worker`` works), each loaded on first use: importing the package itself loads none
of its parts (``lemon --help`` builds ``lemon worker``'s parser from :data:`DEFAULT_PORT`
alone), and nothing here loads anyio or the supervisor until asked.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

DEFAULT_PORT = 50052  # rpc-server.cpp rpc_server_params.port

if TYPE_CHECKING:
    from lemoncore.rpc.address import (
        CGNAT,
        PRIVATE_NETWORKS,
        RPC_SERVER_NAMES,
        TUNNEL_INTERFACES,
        AddressError,
        WorkerAddress,
        bind_refusal,
        find_rpc_server,
        is_private,
        parse_worker_address,
        parse_workers,
        rpc_argument,
        tunnel_addresses,
    )
    from lemoncore.rpc.probe import (
        HELLO_REPLY_SIZE,
        HELLO_REQUEST,
        PROTOCOL,
        ProbeStatus,
        WorkerProbe,
        hello_outcome,
        probe_worker,
    )

__all__ = [
    "CGNAT",
    "DEFAULT_PORT",
    "HELLO_REPLY_SIZE",
    "HELLO_REQUEST",
    "PRIVATE_NETWORKS",
    "PROTOCOL",
    "RPC_SERVER_NAMES",
    "TUNNEL_INTERFACES",
    "AddressError",
    "ProbeStatus",
    "WorkerAddress",
    "WorkerProbe",
    "bind_refusal",
    "find_rpc_server",
    "hello_outcome",
    "is_private",
    "parse_worker_address",
    "parse_workers",
    "probe_worker",
    "rpc_argument",
    "tunnel_addresses",
]

_ADDRESS = (
    "CGNAT",
    "PRIVATE_NETWORKS",
    "RPC_SERVER_NAMES",
    "TUNNEL_INTERFACES",
    "AddressError",
    "WorkerAddress",
    "bind_refusal",
    "find_rpc_server",
    "is_private",
    "parse_worker_address",
    "parse_workers",
    "rpc_argument",
    "tunnel_addresses",
)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    part = "address" if name in _ADDRESS else "probe"
    value = getattr(import_module(f"lemoncore.rpc.{part}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
