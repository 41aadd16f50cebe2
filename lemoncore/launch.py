"""What plugins hand the core to install and start a backend: plain data only."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio.abc
import httpx
import structlog

from lemoncore.errors import LaunchRefused, RequestRefused
from lemoncore.recipes import ModelInfo

__all__ = ["LaunchRefused", "RequestRefused"]  # plugin-facing, defined in lemoncore.errors


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

    version: str
    artifacts: tuple[Artifact, ...] = ()
    location: Path | None = None
    action: str | None = None
    message: str = ""
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

    async def install(self, on_progress: Callable[[int, int], None] | None) -> Installed: ...

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

    model_path: Path
    options: Mapping[str, Any]
    install_dir: Path
    host: str
    port: int
    server_pid: int
    runtime_env: Mapping[str, str] = field(default_factory=dict)
    installed: Mapping[str, Any] = field(default_factory=dict)  # the install record
    instance: str = ""  # identifies this lemoncore installation (ownership labels)
    config: Mapping[str, Any] = field(default_factory=dict)
    model_owned: bool = False
    backend_key: str = ""
    model_dir: Path | None = None  # the checkpoint's directory as named (ModelStore)
    model_roots: tuple[Path, ...] = ()  # resolved; files beside the model must lie here


@dataclass(frozen=True)
class LaunchSpec:
    """A native process to start. ``env`` is added to lemoncore's own environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    cwd: Path | None = None


class Runner(Protocol):
    """A server a plugin starts and stops itself (a container), instead of a native
    process the core spawns from a :class:`LaunchSpec`. The core awaits it, proxies to
    ``base_url`` through ``transport`` (a unix socket, say), and never learns what it is.
    """

    name: str
    base_url: str
    transport: httpx.AsyncBaseTransport | None
    exited: anyio.Event
    last_lines: deque[str]

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def alive(self) -> bool: ...

    @property
    def crashed(self) -> bool: ...

    @property
    def argv(self) -> tuple[str, ...]: ...

    def on_exit(self, callback: Callable[[Any], None]) -> None: ...

    def peak_memory(self) -> int | None:
        """Peak host memory in bytes the server has used (``None`` where unknown)."""

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None: ...

    async def stop(self, grace: float) -> None: ...


class ExitTracking:
    """The part of a :class:`Runner` about its end: ``exited``, ``crashed``, ``on_exit``
    callbacks, the last lines of output. A subclass sets ``_stopping`` before a stop it
    asks for and calls :meth:`_mark_exited` when the server ends."""

    name: str

    def __init__(self) -> None:
        self.exited = anyio.Event()
        self.last_lines: deque[str] = deque(maxlen=30)
        self._stopping = False
        self._on_exit: list[Callable[[Any], None]] = []

    @property
    def crashed(self) -> bool:
        """Exited without being asked to stop."""
        return self.exited.is_set() and not self._stopping

    def on_exit(self, callback: Callable[[Any], None]) -> None:
        self._on_exit.append(callback)

    def _mark_exited(self, **why: Any) -> None:
        """Record the end once: set ``exited``, warn unless a stop was asked for, call
        the ``on_exit`` callbacks."""
        if self.exited.is_set():
            return
        self.exited.set()
        if not self._stopping:
            structlog.get_logger("lemoncore.launch").warning(
                "backend exited", model=self.name, **why)
        for callback in self._on_exit:
            callback(self)


StartupTask = Callable[[], Awaitable[None]]
