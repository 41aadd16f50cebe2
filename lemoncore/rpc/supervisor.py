"""rpc-server under supervision: :func:`supervise` starts it (:class:`RpcServerProcess`:
ready once it answers the RPC handshake), restarts it after a crash with exponential
back-off (reset once it has run :data:`STABLE_AFTER` seconds), and stops it when asked;
:func:`run` does that until a stop signal. A start that fails before the server was ever
ready (a bad device, a taken port) ends the supervision instead: retrying cannot help.
"""

from __future__ import annotations

import sys
import time
from typing import TypedDict

import anyio
import anyio.abc

from lemoncore.launch import LaunchSpec
from lemoncore.platforms import on_stop_signal
from lemoncore.rpc.probe import probe_worker
from lemoncore.rpc.records import Record
from lemoncore.rpc.worker import WorkerConfig, worker_argv, worker_env
from lemoncore.supervisor import BackendProcess, StartError

BACKOFF_FIRST = 0.5  # seconds before the first restart; doubles per crash
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a server that ran this long crashed afresh: back-off starts over
READY_WITHIN = 60.0  # seconds a start may take (device initialisation) before it failed
STOP_GRACE = 5.0
PROBE_INTERVAL = 0.05


class LastExit(TypedDict):
    """How the previous rpc-server ended (``None`` before the first restart)."""

    last_exit: int | None
    last_error: str | None


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
            raise StartError(
                f"{self.name}: no RPC handshake after {ready_within:.0f} s. "
                "Last output:\n" + "\n".join(self.last_lines)
            )
        with anyio.move_on_after(1):  # its last words, which say why
            await self._output_read.wait()
        ended = self.exit_report()
        raise StartError(ended.report(f"{self.name}:", "while starting"), ended)


async def supervise(
    config: WorkerConfig, stop: anyio.Event, record: Record, ready_within: float = READY_WITHIN
) -> int:
    """Run rpc-server until ``stop`` is set (0), restarting it after each crash with
    back-off; 1 when the first start fails. ``record(**fields)`` is called on each state
    change with ``state`` (``starting``, ``ready``, ``restarting``, ``stopped``) and the
    facts behind it."""
    restarts, delay, ever_ready = 0, BACKOFF_FIRST, False
    last: LastExit = {"last_exit": None, "last_error": None}
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
        print(
            f"lemon worker: rpc-server ended ({(error or '').splitlines()[0]}); "
            f"restart {restarts} in {delay:g} s",
            file=sys.stderr,
            flush=True,
        )
        record(
            state="restarting",
            rpc_server_pid=None,
            restarts=restarts,
            backoff_s=delay,
            next_start_at=time.time() + delay,
            **last,
        )
        with anyio.move_on_after(delay):
            await stop.wait()
        delay = min(delay * 2, BACKOFF_MAX)
    record(state="stopped", rpc_server_pid=None)
    return 0


async def _start(
    proc: RpcServerProcess, tg: anyio.abc.TaskGroup, stop: anyio.Event, ready_within: float
) -> str | None:
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


def _announce(proc: RpcServerProcess, record: Record, restarts: int, last: LastExit) -> None:
    config = proc.config
    version = ".".join(map(str, proc.version or ()))
    record(state="ready", rpc_server_pid=proc.pid, version=version, restarts=restarts, **last)
    print(
        f"lemon worker: rpc-server v{version} ready on {config.endpoint} (pid {proc.pid}); "
        f'heads list it in rpc_workers as "{config.endpoint}"',
        file=sys.stderr,
        flush=True,
    )


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


async def run(config: WorkerConfig, record: Record) -> int:
    """:func:`supervise` until a stop signal (:func:`lemoncore.platforms.stop_signals`); its exit
    code."""
    stop = anyio.Event()
    with on_stop_signal(stop.set):
        return await supervise(config, stop, record)
