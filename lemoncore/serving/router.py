"""Sequences loads and unloads: plan (:mod:`~lemoncore.serving.facts` gathers,
:mod:`~lemoncore.serving.planner` decides), refuse (:mod:`~lemoncore.serving.refusals`,
:mod:`~lemoncore.serving.pins`) or admit (:mod:`~lemoncore.serving.admission`), then have
:mod:`~lemoncore.serving.launcher` carry the plan out (files, RPC workers, the evictions
:mod:`~lemoncore.serving.eviction` decides, done by :mod:`~lemoncore.serving.fleet`, the
start). Loads are serialised by one lock (so concurrent first requests for a model spawn
it once); requests for loaded models never take it. A background task
(:mod:`~lemoncore.serving.idle`) unloads servers left idle past their ``keep_alive``. The
API and the CLI use the router's own methods and ``servers``, never its parts. The router
makes no decision of its own.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import structlog

from lemoncore.hosts import HostInfo
from lemoncore.installs.backend_status import BackendState
from lemoncore.installs.backends import Backends
from lemoncore.models import ModelStore
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, ModelInfo, Recipe
from lemoncore.serving import refusals
from lemoncore.serving.admission import Admission, HeldOff
from lemoncore.serving.autoevict import AutoEvictor
from lemoncore.serving.eviction import Decision, EvictionKind, EvictionOrder
from lemoncore.serving.facts import Survey
from lemoncore.serving.fleet import Fleet, Metrics
from lemoncore.serving.history import History, ModelEventKind
from lemoncore.serving.idle import IdleUnloader
from lemoncore.serving.launcher import Launcher
from lemoncore.serving.pending import PendingLoad
from lemoncore.serving.pins import Pins
from lemoncore.serving.planner import LoadPlan
from lemoncore.serving.runtime import RuntimeChange, RuntimeConfig, RuntimePlan, plan_change
from lemoncore.serving.server import LoadedServer
from lemoncore.settings import Settings
from lemoncore.supervisor import StartError

USABLE = {BackendState.INSTALLED, BackendState.INSTALLABLE, BackendState.UPDATE_REQUIRED}


class Router:
    """Use as ``async with Router(...) as router``; leaving stops every backend."""

    def __init__(
        self,
        settings: Settings,
        plugins: PluginHost,
        backends: Backends,
        models: ModelStore,
        host: HostInfo,
    ) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host = models, host
        self.admission = Admission(settings)
        self.fleet = Fleet(self.admission, settings.stop_grace)
        self.launcher = Launcher(settings, plugins, backends, models, host, self.fleet)
        self.servers = self.fleet.servers
        self.survey = Survey(settings, plugins, backends, models, host, self.fleet)
        self.pins = Pins()  # outlive a crash
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self.idle = IdleUnloader(self.fleet, self._lock)
        self.auto_evictor = AutoEvictor(settings, self.fleet, self._lock)

    async def __aenter__(self) -> Router:
        self._tg = self.fleet.task_group = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self.idle.run)
        self._tg.start_soon(self.auto_evictor.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.begin_shutdown()
        with anyio.CancelScope(shield=True):
            async with self._lock:
                await self.fleet.evict_all(
                    "shutdown", max(0.0, self.admission.drain_deadline - anyio.current_time())
                )
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)

    @property
    def closing(self) -> bool:
        """Whether a shutdown began: new requests are refused."""
        return self.admission.closing

    def begin_shutdown(self) -> None:
        """Refuse new requests (503) and give in-flight ones ``stop_grace`` seconds to
        finish (:meth:`Admission.begin_shutdown`); idempotent."""
        self.admission.begin_shutdown()

    async def shutdown_begun(self) -> None:
        """Return once :meth:`begin_shutdown` was called: what ends the HTTP server
        (Hypercorn's ``shutdown_trigger`` in ``lemon serve``; an embedding app's server
        may await it the same way)."""
        await self.admission.shutdown_begun()

    @property
    def history(self) -> History:
        """What happened to each model since the start (``GET /api/v1/events``)."""
        return self.fleet.history

    def held_off(self) -> list[HeldOff]:
        """The models whose starts are held off after failing, and why."""
        return self.admission.held_off()

    def metrics(self) -> Metrics:
        """The counts ``/metrics`` shows, now."""
        return self.fleet.metrics()

    def model(self, name: str) -> ModelInfo:
        return refusals.check_model(name, self.models.get(name), self.plugins.registry.recipes)

    def loaded(self, name: str) -> LoadedServer | None:
        """The running server of ``name`` (or the model it is an alias of), if any."""
        model = self.models.get(name)
        return self.fleet.running(model.name) if model else None

    async def plan(
        self, name: str, request: Mapping[str, Any] | None = None, explicit: bool = True
    ) -> LoadPlan:
        """What a load of ``name`` would do, changing nothing
        (:meth:`~lemoncore.serving.facts.Survey.plan`)."""
        return await self.survey.plan(self.model(name), request, explicit)

    async def backend_for(self, name: str) -> tuple[Recipe, Backend]:
        """The backend that serves ``name``: its loaded server's, else the one a load of it
        would choose now (nothing is loaded)."""
        server = self.loaded(name)
        if server is not None:
            return server.recipe, server.backend
        found = await self.plan(name, explicit=False)
        return found.recipe, found.backend.backend

    @asynccontextmanager
    async def acquire(
        self, name: str, keep_alive: float | None = None
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

    async def load(
        self,
        name: str,
        request: Mapping[str, Any] | None = None,
        pinned: bool | None = None,
        explicit: bool = True,
        hold: bool = False,
        keep_alive: float | None = None,
        manage: bool = True,
    ) -> LoadedServer:
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
        self._tg.start_soon(
            pending.run, functools.partial(self._load, name, request, pinned, explicit, manage)
        )
        server = await pending.wait(self.settings.load_timeout)
        if keep_alive is not None:
            server.keep_alive = keep_alive
        self.idle.wake()
        return server

    async def _load(
        self,
        name: str,
        request: Mapping[str, Any] | None,
        pinned: bool | None,
        explicit: bool,
        manage: bool,
    ) -> LoadedServer:
        await self.models.resolved(self.model(name))  # as /models/register left it; no lock held
        async with self._lock:
            found = await self.plan(name, request, explicit)
            current, name = self.loaded(found.model.name), found.model.name
            pin = self.pins.for_load(found, current is not None, pinned, request, manage)
            if current is not None and not found.reload:
                self.pins.set(name, pin)
                if explicit:  # its auto-eviction options change without a reload
                    current.residency = found.residency
                current.last_used = time.monotonic()
                return current
            refusals.check_plan(found)
            if not explicit:  # an explicit /load is the user's retry
                self.admission.check_cooldown(name, found.model.checkpoint)
            assert self._tg is not None
            try:
                server = await self.launcher.execute(found, self.pins, self._tg)
            except StartError as exc:
                refusal = self.admission.failed_start(name, exc, found.model.checkpoint)
                self.fleet.history.record(name, ModelEventKind.LOAD_FAILED, str(refusal))
                raise refusal from exc
            self.admission.started(name)
            self.pins.set(name, pin)
            self.fleet.add(server)
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
            self.pins.unload(server.model.name, manage)
            await self.fleet.evict(
                server, EvictionOrder(server.model.name, EvictionKind.UNLOAD, "unload requested")
            )

    async def unload_all(self) -> None:
        async with self._lock:
            self.pins.clear()
            await self.fleet.evict_all("unload all")

    def runtime(self) -> RuntimeConfig:
        """The run-time settings in force (:mod:`~lemoncore.serving.runtime`)."""
        return RuntimeConfig.of(self.settings)

    async def configure(self, change: RuntimeChange) -> RuntimePlan:
        """Apply ``change`` without a restart, under the load lock: the settings the
        router, the planner and the API read change in place, the llama.cpp section new
        loads use is replaced, the log level is set, and the evictions
        :func:`~lemoncore.serving.runtime.plan_change` implies are carried out (a
        ``ValueError`` refuses the whole change)."""
        async with self._lock:
            recipe = self.plugins.registry.recipes.get("llamacpp")
            names: dict[str, str] = {}
            if recipe is not None and change.llamacpp_backend is not None:
                await self.backends.refresh_statuses()
                names = {
                    s.backend.name: "" if s.state in USABLE else f"{s.state.value}: {s.message}"
                    for s in self.backends.cached_statuses(recipe)
                }
            section = dict(self.settings.recipes.get("llamacpp", {}))
            found = plan_change(self.runtime(), change, self.fleet.residents(), section, names)
            config = found.config
            if "extra_models_dir" in found.changed:  # first: a folder it cannot read refuses
                folder = Path(config.extra_models_dir) if config.extra_models_dir else None
                self.models.set_extra_models_dir(folder)
                self.settings.extra_models_dir = folder
            self.settings.max_loaded_models = config.max_loaded_models
            self.settings.eviction = config.eviction
            if found.llamacpp_section is not None:
                self.settings.recipes["llamacpp"] = dict(found.llamacpp_section)
                self.backends.reconfigure("llamacpp", self.settings.recipes["llamacpp"])
            if config.log_level != self.settings.log_level:
                self.settings.log_level = config.log_level
                level = logging.getLevelNamesMapping()[config.log_level.upper()]
                structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
            await self.fleet.carry_out(found.evict)
        self.idle.wake()
        return found

    def set_pin(self, name: str, pinned: bool) -> LoadedServer:
        """Pin or unpin loaded model ``name`` (Lemonade's ``/internal/pin``,
        ``Router::set_model_pinned``: a model that is not loaded is a 404 here)."""
        server = self.loaded(name)
        if server is None:
            raise refusals.not_loaded(name)
        self.pins.set(server.model.name, pinned)
        self.idle.wake()
        return server

    async def evaluate_eviction(self, used: float | None) -> Decision:
        """One auto-eviction pass now with ``used`` memory (a fraction; below 0 or
        ``None``: idle only), as Lemonade's ``/internal/simulate-vram-pressure``."""
        return await self.auto_evictor.evaluate(used)
