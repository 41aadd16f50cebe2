"""What plugins hand the core to install and start a backend (plans and specs, plain
data), the objects with behaviour a plugin may return for the core to await
(:class:`Installer`, :class:`Runner`), and the lifecycle every started server follows
(:class:`Lifecycle`, :class:`ServerState`)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lemoncore.errors import LaunchRefused, LemonError, RequestRefused
from lemoncore.recipes import ModelInfo

if TYPE_CHECKING:  # plugins import this module: no async or HTTP stack at import time
    import anyio
    import anyio.abc
    import httpx

__all__ = ["LaunchRefused", "RequestRefused"]  # plugin-facing, defined in lemoncore.errors

# Reports (bytes done, bytes total) while something downloads.
ProgressCallback = Callable[[int, int], None]
# Releases what an idle engine holds (LaunchSpec.downsize), through a client to it.
Downsize = Callable[["httpx.AsyncClient"], Awaitable[None]]


@dataclass(frozen=True)
class Artifact:
    """A pinned downloadable file; the core verifies ``sha256`` before using it.

    ``sha256`` is ``None`` only for a pin whose hash is not known yet: such a file is
    refused unless the user allows unverified installs for that backend.
    """

    url: str
    sha256: str | None
    extract: bool = True
    provenance: str = ""


@dataclass(frozen=True)
class InstallPlan:
    """Where a backend's executable comes from.

    Exactly one of: ``artifacts`` the core downloads, verifies and installs into
    ``<cache>/bin/<recipe>/<backend>/``; ``location``, an existing directory (a binary on
    ``PATH``, a wheel's data); or ``action``, the command a user must run to provide it.
    ``unsupported`` says the backend cannot run on this host at all (``message`` says
    why), for what support rows cannot express (a GPU model the engine lacks).
    """

    version: str  # shown to users and recorded in install.json
    artifacts: tuple[Artifact, ...] = ()
    location: Path | None = None  # becomes LaunchContext.install_dir
    action: str | None = None
    message: str = ""  # shown beside the backend's state
    runtime: str | None = None  # e.g. "rocm": the core decides and records the runtime
    installer: Installer | None = None  # fetches ``artifacts`` itself (container images)
    unsupported: bool = False


@dataclass(frozen=True)
class Migration:
    """Something an earlier install left behind that a plugin's backend replaces (a native
    binary now run as a container): what it is, and the paths ``lemon backends migrate
    NAME`` removes, only with the user's word."""

    name: str
    message: str
    paths: tuple[Path, ...]


class PinRefresher(Protocol):
    """Asks the artifact's publisher what its pinned name (a container image's tag)
    points at now: ``lemon lock refresh``. Network I/O, awaited by the core."""

    async def latest(self) -> Artifact: ...


@dataclass(frozen=True)
class Installed:
    """What an :class:`Installer` fetched: ``record`` (an image ID, say), kept in
    ``install.json`` and handed back at launch as ``installed["result"]``; and the models
    the artifact itself declares (checked by the plugin: Hugging Face checkpoints with a
    published SHA-256 and size per file). The core lists those models while the backend
    stays installed; they are fetched only when a user pulls one."""

    record: str
    models: tuple[ModelInfo, ...] = ()


class Installer(Protocol):
    """Plugin-side fetching for artifacts the core cannot download (``docker://`` images).

    The core decides when to install, reports progress, and records what it returns
    beside the plan in ``install.json``.
    """

    async def install(self, on_progress: ProgressCallback | None) -> Installed: ...

    async def uninstall(self) -> None: ...


@dataclass(frozen=True)
class LaunchContext:
    """Everything a plugin needs to build a launch spec.

    ``options`` are the load's request-scope options (a caller may have set them, checked
    against their declared types); ``config`` holds the admin-scope values, from the
    configuration file only. ``model_path`` is resolved and lies in a directory models may
    come from; ``model_owned`` says it lies where lemoncore puts models (its cache or the
    Hugging Face cache), so a plugin may relabel it for a container; an administrator's
    ``model_dirs`` file is not. ``backend_key`` is a fresh secret of this launch: the core
    sends it as ``Authorization: Bearer`` on every request to the backend, so an engine
    that can require a key should (its loopback port is reachable by every local program
    and web page, and the core's browser boundary does not guard it). Keep it out of argv,
    which ``/health`` shows: pass it through the environment. An engine that reads several
    files (a tokenizer beside the weights) finds them in ``model_dir`` and must check that
    each resolves inside ``model_roots``.
    """

    model_path: Path  # the checkpoint's file, resolved
    options: Mapping[str, Any]  # request-scope options, validated, defaults filled in
    install_dir: Path  # where the install plan put (or found) the engine
    host: str  # the address the engine must listen on (loopback)
    port: int  # the free port the engine must listen on
    server_pid: int  # lemoncore's own process id
    runtime_env: Mapping[str, str] = field(default_factory=dict)  # a runtime's (ROCm) env
    installed: Mapping[str, Any] = field(default_factory=dict)  # the install record
    instance: str = ""  # identifies this lemoncore installation (ownership labels)
    config: Mapping[str, Any] = field(default_factory=dict)  # admin-scope option values
    model_owned: bool = False
    backend_key: str = ""  # require it as the engine's API key; never put it in argv
    model_dir: Path | None = None  # the checkpoint's directory as named (ModelStore)
    model_roots: tuple[Path, ...] = ()  # resolved; files beside the model must lie here
    rpc_workers: tuple[str, ...] = ()  # llama.cpp RPC workers (host:port) to place layers on


@dataclass(frozen=True)
class LaunchSpec:
    """A process for the core to start: a native binary, or a Python-hosted engine as
    ``(sys.executable, "-m", module, ...)``. The core polls ``health_path`` every 10 ms
    until it answers 200 (the model is then ready), proxies requests to
    ``http://host:port``, and stops it with SIGTERM, then SIGKILL after the stop grace
    period; on Linux the process also dies with lemoncore (parent-death signal).

    A process that dies of a signal, while starting or serving, is reported by the
    signal's name with the core's explanation (``lemoncore.exits``), then the fix: the
    engine's own from ``crash_advice``, keyed by signal name (``{"SIGILL": "use the
    portable build: ..."}``), else a generic one.

    A failed start is judged by its exit and by the engine's own words, which only its
    plugin knows (``lemoncore.exits.start_failure``): ``out_of_memory`` and ``hopeless``
    are regular expressions searched for in each of the engine's last lines of output. A
    start whose output matches ``hopeless``, or that dies of ``SIGILL``, is not retried
    and nothing is evicted for it; the model is held off at once (an explicit load still
    retries it). One whose output matches ``out_of_memory``, or that dies of ``SIGKILL``
    (the out-of-memory killer), is started once more after every other model that could
    hold the memory is evicted. Any other failure evicts nothing; repeated ones are held
    off as a crash loop. Declare the engine's real messages, in its language."""

    argv: tuple[str, ...]  # the program and its arguments; shown by /health, so no secrets
    env: Mapping[str, str] = field(default_factory=dict)  # added to lemoncore's environment
    health_path: str = "/health"  # answers 200 once the engine can serve
    cwd: Path | None = None  # the working directory (None: lemoncore's)
    # per signal name ("SIGILL", "SIGSEGV", "SIGKILL", ...): what a user should do when the
    # engine dies of it, one or two sentences (shown after the core's explanation)
    crash_advice: Mapping[str, str] = field(default_factory=dict)
    # regular expressions for the engine's lines saying it wanted memory (an allocation
    # failed): evicting other models and starting it again may help
    out_of_memory: tuple[str, ...] = ()
    # regular expressions for the engine's lines saying starting it again cannot help (a
    # missing or damaged model file, an unknown argument, a device it refuses)
    hopeless: tuple[str, ...] = ()
    # what the engine gives back while idle (Lemonade's downsize): awaited with a client
    # to the engine (its base URL and key set) once the model has been idle past its
    # downsize_idle_timeout, never while a request is in flight; raise when it could not.
    # The next request needs nothing restored. None: the engine cannot downsize.
    downsize: Downsize | None = None

    def __post_init__(self) -> None:
        for pattern in (*self.out_of_memory, *self.hopeless):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"LaunchSpec: {pattern!r} is not a regular expression: {exc}"
                ) from exc


class Runner(Protocol):
    """A server a plugin starts and stops itself (a container), instead of a native
    process the core spawns from a :class:`LaunchSpec`. The core awaits it, proxies to
    ``base_url`` through ``transport`` (a unix socket, say), and never learns what it is.

    Its life follows :class:`ServerState` (``starting → ready → draining → stopped``, or
    ``crashed`` when it ends without being asked to); subclassing :class:`Lifecycle`
    provides everything below about that life (``state``, ``exited``, ``crashed``,
    ``alive``, ``on_exit``, ``last_lines``), so a runner only has to call
    :meth:`Lifecycle.mark_ready` when :meth:`start` succeeds, :meth:`Lifecycle.begin_stop`
    first thing in :meth:`stop`, and :meth:`Lifecycle.mark_exited` once it has ended,
    whichever way. The core relies on:

    * :meth:`start` returns once ``base_url`` answers, or raises (``StartError``,
      ``LaunchRefused``) after cleaning up what it started;
    * ``exited`` is set, and every ``on_exit`` callback called once, when the server
      has ended, with ``crashed`` already telling whether it ended on its own;
    * :meth:`stop` ends the server (waiting at most about ``grace`` seconds before
      forcing it) and may be called more than once, or after a crash.
    """

    name: str
    base_url: str
    transport: httpx.AsyncBaseTransport | None
    exited: anyio.Event
    last_lines: deque[str]

    @property
    def state(self) -> ServerState:
        """Where the server is in its life."""

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def alive(self) -> bool:
        """Started and not ended (also while draining)."""

    @property
    def crashed(self) -> bool:
        """Ended without a stop being asked for."""

    @property
    def argv(self) -> tuple[str, ...]: ...

    def on_exit(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(runner)`` once the server has ended."""

    def peak_memory(self) -> int | None:
        """Peak host memory in bytes the server has used (``None`` where unknown)."""

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None: ...

    async def stop(self, grace: float) -> None: ...


class ServerState(StrEnum):
    """The life of a server, native process or container.

    ``starting``: launched (or being launched), not answering yet. ``ready``: its start
    succeeded and it serves. ``draining``: a stop was asked for; it may still answer
    what is in flight until it ends. ``stopped``: it ended after a stop was asked for.
    ``crashed``: it ended without one (an engine that died, while starting or serving).
    ``stopped`` and ``crashed`` are final.
    """

    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"
    CRASHED = "crashed"

    @property
    def ended(self) -> bool:
        return self in (ServerState.STOPPED, ServerState.CRASHED)


#: Every allowed transition, from → to. A start that fails because the server ended is
#: ``starting → crashed``; one the core gives up on (a timeout, a cancelled load) and
#: stops is ``starting → draining → stopped``.
TRANSITIONS: Mapping[ServerState, frozenset[ServerState]] = {
    ServerState.STARTING: frozenset({ServerState.READY, ServerState.DRAINING, ServerState.CRASHED}),
    ServerState.READY: frozenset({ServerState.DRAINING, ServerState.CRASHED}),
    ServerState.DRAINING: frozenset({ServerState.STOPPED}),
    ServerState.STOPPED: frozenset(),
    ServerState.CRASHED: frozenset(),
}


class IllegalTransition(LemonError):
    """A server was moved between two states that :data:`TRANSITIONS` does not connect:
    a bug in the code driving it (a runner marking ready after its stop began, say)."""

    code = "illegal_server_transition"

    def __init__(self, name: str, from_: ServerState, to: ServerState) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[from_])) or "none: it has ended"
        super().__init__(
            f"server {name or '?'}: illegal transition {from_} -> {to} "
            f"(allowed from {from_}: {allowed})"
        )
        self.from_, self.to = from_, to


class Lifecycle:
    """The state machine of one server (:class:`ServerState`, :data:`TRANSITIONS`),
    shared by lemoncore's native processes and plugins' runners: subclass it and drive it
    with :meth:`mark_ready`, :meth:`begin_stop` and :meth:`mark_exited`. It also keeps
    the last lines of the server's output (``last_lines``) for error messages.

    Create it inside the event loop's thread (``exited`` is an ``anyio.Event``); its
    methods are not thread-safe and are called from that loop.
    """

    name: str = ""

    def __init__(self) -> None:
        import anyio  # here, not at module level: plugins import this module

        self.exited = anyio.Event()
        self.last_lines: deque[str] = deque(maxlen=30)
        self._state = ServerState.STARTING
        self._on_exit: list[Callable[[Any], None]] = []

    @property
    def state(self) -> ServerState:
        """Where the server is in its life; starts as ``starting``."""
        return self._state

    @property
    def alive(self) -> bool:
        """Not ended yet (``starting``, ``ready`` or ``draining``)."""
        return not self._state.ended

    @property
    def crashed(self) -> bool:
        """Ended without a stop being asked for (``crashed``)."""
        return self._state is ServerState.CRASHED

    @property
    def stopping(self) -> bool:
        """A stop was asked for (``draining`` or ``stopped``)."""
        return self._state in (ServerState.DRAINING, ServerState.STOPPED)

    def on_exit(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` when the server ends (after ``state`` and ``exited``
        say so), once; a callback added after the end is not called."""
        self._on_exit.append(callback)

    def mark_ready(self) -> None:
        """The start succeeded: ``starting → ready``. Raises :class:`IllegalTransition`
        from any other state (a stop or an end came first: the start must fail)."""
        self._move(ServerState.READY)

    def begin_stop(self) -> bool:
        """A stop is asked for: ``starting`` or ``ready`` → ``draining``, so the end that
        follows is ``stopped``, not ``crashed``. Call it before stopping the server (the
        core may call it earlier, when it takes the server out of service and lets the
        requests in flight finish before :meth:`Runner.stop`).
        Returns whether this call began the stop: ``False`` when one already had, or the
        server has already ended (nothing to stop; a crash stays a crash)."""
        if self._state in (ServerState.STARTING, ServerState.READY):
            self._move(ServerState.DRAINING)
            return True
        return False

    def mark_exited(self, **why: Any) -> bool:
        """The server has ended: ``draining → stopped``, else (no stop asked for)
        ``starting``/``ready`` → ``crashed``, logged as a warning with ``why``. Sets
        ``exited`` and calls the ``on_exit`` callbacks. Only the first call counts: it
        returns ``False`` when the end was already recorded."""
        if self._state.ended:
            return False
        was = self._state
        self._move(ServerState.STOPPED if was is ServerState.DRAINING else ServerState.CRASHED)
        self.exited.set()
        if self.crashed:
            import structlog

            structlog.get_logger("lemoncore.launch").warning(
                "backend exited", model=self.name, was=was.value, **why
            )
        for callback in self._on_exit:
            callback(self)
        return True

    def _move(self, to: ServerState) -> None:
        if to not in TRANSITIONS[self._state]:
            raise IllegalTransition(self.name, self._state, to)
        self._state = to


ExitTracking = Lifecycle  # the name before the state machine; use Lifecycle


# A coroutine function the core awaits once at startup (``startup_tasks``), before the
# server answers requests: a failure is logged, never fatal.
StartupTask = Callable[[], Awaitable[None]]
