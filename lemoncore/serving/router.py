"""Sequences a load: gather facts, plan (:mod:`~lemoncore.serving.planner`), refuse
(:mod:`~lemoncore.serving.refusals`) or admit (:mod:`~lemoncore.serving.admission`),
check the RPC workers (:mod:`~lemoncore.serving.workers`), make room as
:mod:`~lemoncore.serving.eviction` decides (:mod:`~lemoncore.serving.fleet` evicts),
start (:mod:`~lemoncore.serving.launcher`). Loads are serialised by one lock (so
concurrent first requests for a model spawn it once); requests for loaded models never
take it. A background task (:mod:`~lemoncore.serving.idle`) unloads servers left idle
past their ``keep_alive``. The router makes no decision of its own.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import structlog

from lemoncore.errors import LaunchRefused
from lemoncore.exits import StartFailure
from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.models import ModelError, ModelStore
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, ModelInfo, Recipe
from lemoncore.serving import refusals
from lemoncore.serving.admission import Admission
from lemoncore.serving.eviction import EvictionKind, EvictionOrder, after_failed_start
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.idle import IdleUnloader
from lemoncore.serving.launcher import Launcher
from lemoncore.serving.pending import PendingLoad
from lemoncore.serving.planner import CurrentLoad, Facts, LoadPlan, plan
from lemoncore.serving.server import LoadedServer
from lemoncore.serving.workers import require_workers, split_held
from lemoncore.settings import Settings
from lemoncore.supervisor import StartError

log = structlog.get_logger("lemoncore.serving.router")


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
        self.idle = IdleUnloader(self.fleet, self._lock)

    async def __aenter__(self) -> Router:
        self._tg = self.fleet.task_group = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self.idle.run)
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
        return refusals.check_model(name, self.models.get(name), self.plugins.registry.recipes)

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
                      self.backends.cached_statuses(recipe), self.fleet.residents(),
                      None if current is None else CurrentLoad(current.backend.name,
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
            self.idle.wake()

    async def load(self, name: str, request: Mapping[str, Any] | None = None,
                   pinned: bool | None = None, explicit: bool = True,
                   hold: bool = False, keep_alive: float | None = None,
                   manage: bool = True) -> LoadedServer:
        """Load ``name`` (or return it when loaded); an explicit load with new options
        reloads it, pinned as it was (a pin outlives a crash: :attr:`pins`) unless
        ``pinned`` says. Without ``manage`` (a caller who may not use management routes) a
        pinned model is neither reloaded, started with request options, nor unpinned:
        :class:`~lemoncore.serving.refusals.PinnedModel`. With ``hold`` the server comes
        back counted busy, so no other load evicts it before the caller uses it; a
        ``keep_alive`` (seconds) replaces the server's. The load runs in the router's own
        task (:class:`~lemoncore.serving.pending.PendingLoad`): a caller that gives up does
        not cancel it, and one that waits ``load_timeout`` seconds gets 503
        ``model_loading`` with ``Retry-After`` while it goes on."""
        self.model(name)  # an unknown name fails now, without waiting for other loads
        pending = PendingLoad(name, hold)
        assert self._tg is not None, "use the router as an async context manager"
        self._tg.start_soon(pending.run, functools.partial(
            self._load, name, request, pinned, explicit, manage))
        server = await pending.wait(self.settings.load_timeout)
        if keep_alive is not None:
            server.keep_alive = keep_alive
        self.idle.wake()
        return server

    async def _load(self, name: str, request: Mapping[str, Any] | None,
                    pinned: bool | None, explicit: bool, manage: bool) -> LoadedServer:
        async with self._lock:
            found = await self.plan(name, request, explicit)
            current, name = self.loaded(found.model.name), found.model.name
            refusals.check_load_pin(self.pins, found, current is not None, pinned, request, manage)
            if current is not None and not found.reload:
                if pinned is not None:
                    current.pinned = pinned
                    self._pin(name, pinned)
                current.last_used = time.monotonic()
                return current
            if pinned is None:  # a reload, or a start after a crash, keeps the pin
                pinned = name in self.pins
            refusals.check_plan(found)
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
            raise refusals.RouterError(str(exc), exc.status, "model_load_error") from exc
        if found.model_path is None and (refusal := await anyio.to_thread.run_sync(
                self.plugins.preflight, found.recipe, found.backend.backend, found.model,
                model_path, found.config, self.host, found.options)):
            raise LaunchRefused(refusal)  # a download just arrived: checked before evicting
        free, held = split_held(found.workers, self.servers.values())
        await require_workers(found.model.name, free)  # before any eviction
        await self.fleet.carry_out(found.decision)  # frees the workers loaded servers held
        await require_workers(found.model.name, held)
        assert status.install_dir is not None and self._tg is not None
        try:
            server = await self.launcher.start(found, status.install_dir, model_path, pinned,
                                               self._tg)
        except StartError as exc:
            retry = after_failed_start(self.fleet.residents(), found.incoming(),
                                       exc.failure is StartFailure.OUT_OF_MEMORY)
            if not retry.evict:
                raise
            log.warning("load failed; evicting every other model and retrying once",
                        model=found.model.name, error=str(exc).splitlines()[0])
            await self.fleet.carry_out(retry)
            server = await self.launcher.start(found, status.install_dir, model_path, pinned,
                                               self._tg)
        return server

    async def unload(self, name: str, manage: bool = True) -> None:
        """Unload ``name``; without ``manage``, not a pinned model
        (:class:`~lemoncore.serving.refusals.PinnedModel`, decided under the load lock, so
        a pin that lands first holds)."""
        model = self.models.get(name)
        async with self._lock:
            server = self.servers.get(model.name) if model else None
            if server is None:
                raise refusals.not_loaded(name)
            refusals.check_unload_pin(self.pins, server.model.name, manage)
            self.pins.discard(server.model.name)
            await self.fleet.evict(server, EvictionOrder(server.model.name, EvictionKind.UNLOAD,
                                                         "unload requested"))

    async def unload_all(self) -> None:
        async with self._lock:
            self.pins.clear()
            await self.fleet.evict_all("unload all")
