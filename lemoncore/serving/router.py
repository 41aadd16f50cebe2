"""Sequences a load: gather facts, plan (:mod:`~lemoncore.serving.planner`), refuse or
admit (:mod:`~lemoncore.serving.admission`), make room as
:mod:`~lemoncore.serving.eviction` decides (:mod:`~lemoncore.serving.fleet` evicts),
start (:mod:`~lemoncore.serving.launcher`). Loads are serialised by one lock (so
concurrent first requests for a model spawn it once); requests for loaded models never
take it. A background task unloads servers left idle past their ``keep_alive``
(:func:`~lemoncore.serving.eviction.idle`).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import structlog

from lemoncore.errors import LaunchRefused, LemonError
from lemoncore.exits import StartFailure
from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.models import ModelError, ModelStore
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, ModelInfo, Recipe
from lemoncore.rpc import WorkerProbe, probe_worker
from lemoncore.serving.admission import Admission, Refused
from lemoncore.serving.eviction import Eviction, Incoming, after_failed_start, idle, next_idle
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.launcher import Launcher, LoadedServer
from lemoncore.serving.planner import Facts, Loaded, LoadPlan, plan
from lemoncore.settings import Settings
from lemoncore.supervisor import StartError

log = structlog.get_logger("lemoncore.serving.router")

WORKER_PROBE_TIMEOUT = 2.0  # seconds for an RPC worker's TCP connect and handshake


class RouterError(LemonError):
    """A model cannot be found, loaded or unloaded."""


class PinnedModel(RouterError):
    """A caller without management rights asked to change a pinned model."""

    status, code = 403, "model_pinned"

    def __init__(self, name: str, change: str) -> None:
        super().__init__(f"{name} is pinned: only a request that may use management routes "
                         "(with the admin key, or from this machine while no admin key is "
                         f"set) may {change} it")


@dataclass
class _PendingLoad:
    """A load running in the router's task group, outliving a caller who gives up."""

    hold: bool  # count the server busy for the caller before handing it over
    waiting: bool = True
    done: anyio.Event = field(default_factory=anyio.Event)
    server: LoadedServer | None = None
    error: Exception | None = None


class Router:
    """Use as ``async with Router(...) as router``; leaving stops every backend."""

    def __init__(self, settings: Settings, plugins: PluginHost, backends: Backends,
                 models: ModelStore, host: HostInfo) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host = models, host
        self.admission = Admission(settings)
        self.launcher = Launcher(settings, plugins, backends, models, host)
        self.fleet = Fleet(self.admission, settings.stop_grace)
        self.servers = self.fleet.servers
        self.loads = 0
        # models pinned by a load, kept across a crash; unpinned by a load or an unload
        self.pins: set[str] = set()
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._idle_changed = anyio.Event()

    async def __aenter__(self) -> Router:
        self._tg = self.fleet.task_group = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._unload_idle)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.admission.begin_shutdown()
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await self.fleet.evict_all("shutdown", max(
                    0.0, self.admission.drain_deadline - anyio.current_time()))
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)

    def model(self, name: str) -> ModelInfo:
        model = self.models.get(name)
        if model is None:
            raise RouterError(f"model {name!r} not found; list models with GET /v1/models",
                              404, code="model_not_found")
        if model.recipe not in self.plugins.registry.recipes:
            raise RouterError(f"model {name!r} needs recipe {model.recipe!r}; install its "
                              "plugin", 400, code="recipe_not_installed")
        return model

    def loaded(self, name: str) -> LoadedServer | None:
        model = self.models.get(name)
        server = self.servers.get(model.name) if model else None
        return server if server is not None and server.process.alive else None

    async def plan(self, name: str, request: Mapping[str, Any] | None = None,
                   explicit: bool = True) -> LoadPlan:
        """What a load of ``name`` would do, changing nothing. The facts that need I/O
        (backend statuses, the model's files) and the owner's preflight run in threads."""
        model = self.model(name)
        recipe = self.plugins.registry.recipes[model.recipe]
        await self.backends.refresh_statuses()
        current = self.loaded(model.name)
        facts = Facts(model, recipe, self.backends.configuration(recipe),
                      self.models.saved_options(model.name), str(self.models.options_file),
                      self.backends.cached_statuses(recipe),
                      [s.resident() for s in self.servers.values()],
                      None if current is None else Loaded(current.backend.name,
                                                          current.options),
                      await anyio.to_thread.run_sync(self.models.local_path, model),
                      self.settings.max_loaded_models, self.settings.workers_for(model))
        found = plan(facts, request, self.plugins, self.host, explicit)
        if found.model_path is None or found.already_loaded or found.refusal:
            return found
        refusal = await anyio.to_thread.run_sync(
            self.plugins.preflight, recipe, found.backend.backend, model, found.model_path,
            found.config, self.host, found.options)
        return replace(found, refusal=refusal)

    async def backend_for(self, name: str) -> tuple[Recipe, Backend]:
        """The backend that serves ``name``: its loaded server's, else the one a load of it
        would choose now (nothing is loaded)."""
        server = self.loaded(name)
        if server is not None:
            return server.recipe, server.backend
        found = await self.plan(name, explicit=False)
        return found.recipe, found.backend.backend

    @asynccontextmanager
    async def acquire(self, name: str, keep_alive: float | None = None
                      ) -> AsyncIterator[LoadedServer]:
        """Yield a ready server for ``name``, loading it if needed, counted busy meanwhile
        and within its concurrency limit (:meth:`Admission.turn`). A ``keep_alive``
        (seconds) replaces the server's from now on."""
        self.admission.refuse_if_closing()
        server = self.loaded(name)
        if server is None:
            server = await self.load(name, explicit=False, hold=True)
        else:
            self.admission.hold(server)
        try:
            async with self.admission.turn(server):
                if keep_alive is not None:  # a request refused for a full queue changes nothing
                    server.keep_alive = keep_alive
                yield server
        finally:
            server.answered = True
            self.admission.release(server)
            self._idle_changed.set()

    async def load(self, name: str, request: Mapping[str, Any] | None = None,
                   pinned: bool | None = None, explicit: bool = True,
                   hold: bool = False, keep_alive: float | None = None,
                   manage: bool = True) -> LoadedServer:
        """Load ``name`` (or return it when loaded); an explicit load with new options
        reloads it, pinned as it was (a pin outlives a crash: :attr:`pins`) unless
        ``pinned`` says. Without ``manage`` (a caller who may not use management routes) a
        pinned model is neither reloaded, started with request options, nor unpinned:
        :class:`PinnedModel`. With ``hold`` the server comes back counted busy,
        so no other load evicts it before the caller uses it; a ``keep_alive`` (seconds)
        replaces the server's. The load runs in the router's own task: a
        caller that gives up does not cancel it, and one that waits ``load_timeout``
        seconds gets 503 ``model_loading`` with ``Retry-After`` while it goes on."""
        self.model(name)  # an unknown name fails now, without waiting for other loads
        pending = _PendingLoad(hold)
        assert self._tg is not None, "use the router as an async context manager"
        self._tg.start_soon(self._run, pending, name, request, pinned, explicit, manage)
        try:
            with anyio.move_on_after(self.settings.load_timeout):
                await pending.done.wait()
        except BaseException:  # the caller was cancelled: give back what was held for it
            if pending.server is not None and hold:
                self.admission.release(pending.server)
            raise
        finally:
            pending.waiting = False
        if pending.error is not None:
            raise pending.error
        if pending.server is None:
            raise Refused(f"{name} is still loading after {self.settings.load_timeout:.0f} s "
                          "(a large download or a slow start); the load goes on, retry "
                          "shortly", code="model_loading", retry_after=5)
        if keep_alive is not None:
            pending.server.keep_alive = keep_alive
        self._idle_changed.set()
        return pending.server

    async def _run(self, pending: _PendingLoad, name: str, request: Mapping[str, Any] | None,
                   pinned: bool | None, explicit: bool, manage: bool) -> None:
        try:
            server = await self._load(name, request, pinned, explicit, manage)
            if pending.hold and pending.waiting:  # no checkpoint since the lock's release
                self.admission.hold(server)
                pending.server = server
            elif not pending.hold:
                pending.server = server
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            pending.error = exc
        finally:
            pending.done.set()

    async def _load(self, name: str, request: Mapping[str, Any] | None,
                    pinned: bool | None, explicit: bool, manage: bool) -> LoadedServer:
        async with self._lock:
            found = await self.plan(name, request, explicit)
            current, name = self.loaded(found.model.name), found.model.name
            if not manage and name in self.pins and (
                    found.reload or pinned is False or (current is None and request)):
                raise PinnedModel(name, "reload with other options or unpin")
            if current is not None and not found.reload:
                if pinned is not None:
                    current.pinned = pinned
                    self._pin(name, pinned)
                current.last_used = time.monotonic()
                return current
            if pinned is None:  # a reload, or a start after a crash, keeps the pin
                pinned = name in self.pins
            if found.refusal:
                raise LaunchRefused(found.refusal)
            if found.decision.refused:
                raise RouterError(f"cannot load {found.model.name!r}: "
                                  f"{found.decision.refused}", 409, "slots_pinned_error",
                                  "slots_pinned")
            if not explicit:  # an explicit /load is the user's retry
                self.admission.check_cooldown(found.model.name)
            try:
                server = await self._execute(found, bool(pinned))
            except StartError as exc:
                raise self.admission.failed_start(found.model.name, exc) from exc
            self.admission.started(found.model.name)
            self._pin(found.model.name, bool(pinned))
            self.fleet.add(server)
            self.loads += 1
            return server

    def _pin(self, name: str, pinned: bool) -> None:
        (self.pins.add if pinned else self.pins.discard)(name)

    async def _execute(self, found: LoadPlan, pinned: bool) -> LoadedServer:
        status = await self.backends.ensure_installed(await anyio.to_thread.run_sync(
            self.backends.status, found.recipe, found.backend.backend))  # the CLI may install
        try:
            model_path = await self.models.pull(found.model)
        except ModelError as exc:
            raise RouterError(str(exc), exc.status, "model_load_error") from exc
        if found.model_path is None and (refusal := await anyio.to_thread.run_sync(
                self.plugins.preflight, found.recipe, found.backend.backend, found.model,
                model_path, found.config, self.host, found.options)):
            raise LaunchRefused(refusal)  # a download just arrived: checked before evicting
        held = {w for s in self.servers.values() for w in s.workers}
        await self._require_workers(found, [w for w in found.workers if w not in held])
        await self.fleet.carry_out(found.decision)  # frees the workers loaded servers held
        await self._require_workers(found, [w for w in found.workers if w in held])
        assert status.install_dir is not None and self._tg is not None
        try:
            server = await self.launcher.start(found, status.install_dir, model_path, pinned,
                                               self._tg)
        except StartError as exc:
            retry = after_failed_start([s.resident() for s in self.servers.values()],
                                       Incoming(found.model.name, found.model.model_type,
                                                found.device, found.is_amd_gpu, found.policy))
            if exc.failure is not StartFailure.OUT_OF_MEMORY or not retry.evict \
                    or found.workers:
                raise  # (a worker that failed is not a want of local memory)
            log.warning("load failed; evicting every other model and retrying once",
                        model=found.model.name, error=str(exc).splitlines()[0])
            await self.fleet.carry_out(retry)
            server = await self.launcher.start(found, status.install_dir, model_path, pinned,
                                               self._tg)
        return server

    async def _require_workers(self, found: LoadPlan, workers: list[str]) -> None:
        """Refuse the load (503, ``Retry-After``), naming each, when one of ``workers`` does
        not answer the RPC handshake. Free workers are probed before any eviction; one a
        loaded server holds only once the plan's ``worker_busy`` eviction has freed it (it
        serves one client at a time: a probe would wait out its timeout)."""
        probes: list[WorkerProbe] = []

        async def probe(worker: str) -> None:
            probes.append(await probe_worker(worker, WORKER_PROBE_TIMEOUT))

        async with anyio.create_task_group() as tg:
            for worker in workers:
                tg.start_soon(probe, worker)
        if failed := [p.error for p in probes if not p.ok]:
            raise RouterError(f"cannot load {found.model.name!r}: {'; '.join(map(str, failed))}",
                              503, "server_error", "worker_unavailable", retry_after=5)

    async def _unload_idle(self) -> None:
        """Unload servers idle past their ``keep_alive``, one at a time, deciding again
        under the load lock (a request may have arrived meanwhile); sleep until the next
        may be, or until a request ends or a load changes the picture."""
        while True:
            self._idle_changed = anyio.Event()
            residents = [s.resident() for s in self.servers.values()]
            if idle(residents, time.monotonic()).evict:
                async with self._lock:
                    due = idle([s.resident() for s in self.servers.values()],
                               time.monotonic()).evict
                    if due and (server := self.servers.get(due[0].name)) is not None:
                        try:
                            await self.fleet.evict(server, due[0])
                        except Exception:  # it is out of service already: log, go on
                            log.exception("idle unload failed", model=server.model.name)
                continue
            until = next_idle(residents)
            with anyio.move_on_after(math.inf if until is None
                                     else max(0.0, until - time.monotonic())):
                await self._idle_changed.wait()

    async def unload(self, name: str, manage: bool = True) -> None:
        """Unload ``name``; without ``manage``, not a pinned model (:class:`PinnedModel`,
        decided under the load lock, so a pin that lands first holds)."""
        model = self.models.get(name)
        async with self._lock:
            server = self.servers.get(model.name) if model else None
            if server is None:
                raise RouterError(f"model not loaded: {name}", 404, code="model_not_loaded")
            if not manage and server.model.name in self.pins:
                raise PinnedModel(server.model.name, "unload")
            self.pins.discard(server.model.name)
            await self.fleet.evict(server, Eviction(server.model.name, "unload",
                                                    "unload requested"))

    async def unload_all(self) -> None:
        async with self._lock:
            self.pins.clear()
            await self.fleet.evict_all("unload all")
