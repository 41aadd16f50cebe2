"""Child backend processes: spawn, readiness, log capture, exit watch, stop.

Each :class:`BackendProcess` is the one owner of one child, and drives its
:class:`~lemoncore.launch.Lifecycle`: ``starting`` from the spawn, ``ready`` when the
health endpoint answers, ``draining`` when :meth:`BackendProcess.stop` begins, then
``stopped``, or ``crashed`` when the child ends on its own. Children run in their own
session or process group (so a terminal's Ctrl-C reaches only lemoncore, which stops
them in order) and die with lemoncore if it dies without stopping them: how is the
platform's business (``lemoncore.platforms``). The supervisor uses asyncio subprocesses:
lemoncore runs on the asyncio backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

import anyio
import httpx
import structlog

from lemoncore.errors import LemonError
from lemoncore.exits import EngineExit, StartFailure, classify, signal_name, start_failure
from lemoncore.launch import LaunchSpec, Lifecycle
from lemoncore.outputlines import EngineOutput, pump_engine_output
from lemoncore.platforms import ProcessPlatform, current

log = structlog.get_logger("lemoncore.supervisor")

READY_POLL_SECONDS = 0.01
READ_CHUNK_BYTES = 64 * 1024
PLATFORM: ProcessPlatform = current()
# what lemoncore's own exec helper prints when the engine cannot be run (platforms.py)
EXEC_FAILED = r"^lemoncore: cannot run "


class StartError(LemonError):
    """A backend did not become ready; the message carries its last log lines.

    ``exit`` says how the process ended when it ended while starting (``None``: it did
    not, or a runner did not say). ``failure`` is what the failure calls for
    (:func:`~lemoncore.exits.start_failure`: the exit, then the engine's declared
    patterns); given none, the exit alone decides. ``retryable`` is false when starting
    again cannot help (``hopeless``).
    """

    status, type, code = 503, "model_load_error", "backend_start_failed"

    def __init__(
        self, message: str, exit: EngineExit | None = None, failure: StartFailure | None = None
    ) -> None:
        super().__init__(message)
        self.exit = exit
        self.failure = failure or start_failure(exit, exit.last_lines if exit else ())

    @property
    def retryable(self) -> bool:
        return self.failure is not StartFailure.HOPELESS

    @property
    def should_retry(self) -> bool | None:  # type: ignore[override]
        """``False`` when starting again cannot help (see ``retryable``)."""
        return None if self.retryable else False

    @property
    def reason(self) -> str:
        """One line: the message's first, and the engine's last line of output when that
        first line does not explain the failure itself (an ordinary exit code)."""
        first = str(self).split("\n", 1)[0]
        if self.exit is None or self.exit.explanation or not self.exit.last_lines:
            return first
        return f"{first} Its last output: {self.exit.last_lines[-1]}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS chose it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def wait_healthy(
    client: httpx.AsyncClient, url: str, exited: anyio.Event, ready_within: float
) -> bool:
    """Poll ``url`` every 10 ms until it answers 200 (True), the server exits or
    ``ready_within`` passes (False). Connection errors mean "still starting"."""
    with anyio.move_on_after(ready_within):
        while not exited.is_set():
            try:
                if (await client.get(url)).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            with anyio.move_on_after(READY_POLL_SECONDS):
                await exited.wait()
    return False


class BackendProcess(Lifecycle):
    """A started backend: ``base_url`` serves the OpenAI API once :meth:`start` returns.

    With ``uds``, the backend listens on that unix socket (its argv says so) instead of
    ``host:port``: readiness is probed there, the core's client connects there, and the
    socket file is removed once the process has ended.
    """

    def __init__(
        self, name: str, spec: LaunchSpec, host: str, port: int, uds: str | None = None
    ) -> None:
        super().__init__()
        self.name, self.spec, self.uds = name, spec, uds
        self.base_url = f"http://{host}:{port}"
        self.transport: httpx.AsyncBaseTransport | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._output_read = anyio.Event()  # the child's output reached its end
        self._killed = False  # lemoncore forced it to end: its signal is not the engine's

    @property
    def argv(self) -> tuple[str, ...]:
        return self.spec.argv

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def peak_memory(self) -> int | None:
        """The process's peak resident memory in bytes (Linux ``VmHWM``); ``None`` where
        unknown. GPU memory is not counted."""
        if self._proc is None or self.exited.is_set():
            return None
        try:
            status = Path(f"/proc/{self._proc.pid}/status").read_text()
        except OSError:
            return None
        kib = next(
            (line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), None
        )
        return int(kib) * 1024 if kib else None

    @property
    def alive(self) -> bool:
        """Spawned and not ended."""
        return self._proc is not None and super().alive

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        """Spawn, then return when the health endpoint answers 200 (``ready``); raise
        StartError (the child stopped, or ``crashed`` if it ended on its own)."""
        env = {**os.environ, **self.spec.env}
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *PLATFORM.command(self.spec.argv),
                env=env,
                cwd=self.spec.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                **PLATFORM.spawn_options(),
            )
        except BaseException as exc:
            self.mark_exited(error=repr(exc))  # starting -> crashed: nothing ran
            raise
        PLATFORM.adopt(self._proc.pid)
        log.info(
            "backend starting", model=self.name, pid=self._proc.pid, argv=" ".join(self.spec.argv)
        )
        task_group.start_soon(self._pump_logs)
        task_group.start_soon(self._watch_exit)
        try:
            await self._wait_ready(ready_within)
            self.mark_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop(grace=1)
            raise

    async def _wait_ready(self, ready_within: float) -> None:
        transport = httpx.AsyncHTTPTransport(uds=self.uds) if self.uds else None
        async with httpx.AsyncClient(timeout=2, transport=transport) as client:
            ready = await wait_healthy(
                client, self.base_url + self.spec.health_path, self.exited, ready_within
            )
        if ready and not self.exited.is_set():
            return
        if not self.exited.is_set():
            raise StartError(
                f"{self.name}: not ready after {ready_within:.0f} s. "
                f"Last output:\n" + "\n".join(self.last_lines),
                None,
                self._failure(None),
            )
        with anyio.move_on_after(1):  # its last words, which say why
            await self._output_read.wait()
        ended = self.exit_report()
        raise StartError(
            ended.report(f"{self.name}: backend", "while starting"), ended, self._failure(ended)
        )

    def _failure(self, ended: EngineExit | None) -> StartFailure:
        if self._killed:  # a SIGKILL of lemoncore's own says nothing of memory
            return StartFailure.UNKNOWN
        return start_failure(
            ended, self.last_lines, self.spec.out_of_memory, (*self.spec.hopeless, EXEC_FAILED)
        )

    def exit_report(self) -> EngineExit:
        """How the process ended (or ``ended`` while it runs), with its last lines of
        output and the spec's ``crash_advice``."""
        return classify(self.returncode, self.last_lines, self.spec.crash_advice)

    async def _pump_logs(self) -> None:
        """Log the child's output (:func:`~lemoncore.outputlines.pump_engine_output`: lines bounded,
        escaped and rate-limited; every line kept in ``last_lines``). A failure to read
        it ends this child (a crash, restarted as any: unread, its output pipe would fill
        and stall it), never the task group it runs in (the router's)."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        output = EngineOutput(log, self.last_lines, model=self.name, source="backend")
        try:
            await pump_engine_output(lambda: stdout.read(READ_CHUNK_BYTES), output)
        except Exception:  # this child's business, not the server's: log it, end it
            log.exception("backend output could not be read", model=self.name)
            if self._proc.returncode is None:
                self._killed = True
                PLATFORM.force_stop(self._proc.pid)
        finally:
            self._output_read.set()

    async def _watch_exit(self) -> None:
        assert self._proc is not None
        code = await self._proc.wait()
        PLATFORM.release(self._proc.pid)
        if self.uds:
            with contextlib.suppress(OSError):
                os.unlink(self.uds)
        died_of = {"signal": name} if (name := signal_name(code)) else {}
        self.mark_exited(pid=self._proc.pid, code=code, **died_of)

    async def stop(self, grace: float) -> None:
        """Ask the child to stop (``draining``), force it after ``grace`` seconds; wait
        for it (``stopped``). Nothing to do once it has ended."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        self.begin_stop()  # False when the router already began it
        if PLATFORM.request_stop(proc.pid):
            with anyio.move_on_after(grace):
                await proc.wait()
        if proc.returncode is None:
            log.warning("backend did not stop in time; killing", model=self.name, pid=self.pid)
            self._killed = True
            PLATFORM.force_stop(proc.pid)
            await proc.wait()
        self.mark_exited(pid=proc.pid, code=proc.returncode)  # unless _watch_exit did
        log.info("backend stopped", model=self.name, pid=self.pid)
