"""Loads, evicts and unloads backend servers; owns every running child.

For each load the router resolves options, then the backend, then asks the decision
hooks for device, AMD-ness and slot policy, stores those answers on the server, and
executes what :func:`lemoncore.policy.decide` returns. Loads are serialised by one lock
(so concurrent first requests for a model spawn it once); requests for loaded models
never take it.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import httpx
import structlog

from lemoncore.backends import Backends
from lemoncore.hosts import HostInfo
from lemoncore.launch import LaunchContext
from lemoncore.models import ModelError, ModelStore
from lemoncore.options import resolve_options
from lemoncore.plugins import PluginHost
from lemoncore.policy import Incoming, Resident, decide
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.settings import Settings
from lemoncore.supervisor import BackendProcess, free_port

log = structlog.get_logger("lemoncore.router")

BACKEND_HOST = "127.0.0.1"
# No read limit: a long prefill or generation is legitimate; streams send heartbeats.
BACKEND_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)


class RouterError(Exception):
    """A load or lookup failed; carries the HTTP status and OpenAI error type."""

    def __init__(self, message: str, status: int, type_: str, code: str | None = None):
        super().__init__(message)
        self.status, self.type, self.code = status, type_, code


@dataclass
class LoadedServer:
    """A running backend with the decisions made when it was loaded."""

    model: ModelInfo
    recipe: Recipe
    backend: Backend
    options: dict[str, Any]
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    process: BackendProcess
    client: httpx.AsyncClient
    pinned: bool = False
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    drained: anyio.Event = field(default_factory=anyio.Event)

    def resident(self) -> Resident:
        return Resident(self.model.name, self.model.model_type, self.device, self.is_amd_gpu,
                        self.policy, self.pinned, self.in_flight > 0, self.last_used)

    def as_health(self) -> dict[str, Any]:
        return {"model_name": self.model.name, "checkpoint": self.model.checkpoint,
                "recipe": self.recipe.name, "backend": self.backend.name,
                "type": self.model.model_type.value, "device": self.device.value,
                "is_amd_gpu": self.is_amd_gpu, "slot_policy": self.policy.value,
                "backend_url": self.process.base_url, "pid": self.process.pid,
                "status": "busy" if self.in_flight else "ready", "pinned": self.pinned,
                "in_flight": self.in_flight, "recipe_options": self.options,
                "launch_command": list(self.process.spec.argv)}


class Router:
    """Use as ``async with Router(...) as router``; leaving stops every backend."""

    def __init__(self, settings: Settings, plugins: PluginHost, backends: Backends,
                 models: ModelStore, host: HostInfo) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host = models, host
        self.servers: dict[str, LoadedServer] = {}
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Router:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        with anyio.CancelScope(shield=True):
            await self.unload_all(drain_timeout=self.settings.stop_grace)
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)

    # Queries ---------------------------------------------------------------------------

    def model(self, name: str) -> ModelInfo:
        model = self.models.get(name)
        if model is None:
            raise RouterError(f"model {name!r} not found; list models with GET /v1/models",
                              404, "invalid_request_error", "model_not_found")
        if model.recipe not in self.plugins.registry.recipes:
            raise RouterError(f"model {name!r} needs recipe {model.recipe!r}; install its "
                              "plugin", 400, "invalid_request_error", "recipe_not_installed")
        return model

    def loaded(self, name: str) -> LoadedServer | None:
        model = self.models.get(name)
        server = self.servers.get(model.name) if model else None
        return server if server is not None and server.process.alive else None

    # Loading ---------------------------------------------------------------------------

    @asynccontextmanager
    async def acquire(self, name: str) -> AsyncIterator[LoadedServer]:
        """Yield a ready server for ``name``, loading it if needed; count it busy meanwhile."""
        server = self.loaded(name) or await self.load(name, explicit=False)
        if server.in_flight == 0:
            server.drained = anyio.Event()
        server.in_flight += 1
        try:
            yield server
        finally:
            server.in_flight -= 1
            server.last_used = time.monotonic()
            if server.in_flight == 0:
                server.drained.set()

    async def load(self, name: str, request: Mapping[str, Any] | None = None,
                   pinned: bool | None = None, explicit: bool = True) -> LoadedServer:
        model = self.model(name)
        async with self._lock:
            recipe = self.plugins.registry.recipes[model.recipe]
            options = resolve_options(recipe.option_defaults,
                                      self.settings.recipes.get(recipe.name, {}),
                                      model.recipe_options, request or {})
            options.pop("pinned", None)
            current = self.loaded(model.name)
            if current is not None and not (explicit and current.options != options):
                if pinned is not None:
                    current.pinned = pinned
                current.last_used = time.monotonic()
                return current
            if current is not None:
                await self._evict(current, "reload with new options")
            server = await self._start(model, recipe, options, bool(pinned))
            self.servers[model.name] = server
            return server

    async def _start(self, model: ModelInfo, recipe: Recipe, options: dict[str, Any],
                     pinned: bool) -> LoadedServer:
        status = self.backends.select(recipe, options.get("backend"))
        backend = status.backend
        device = self.plugins.effective_device(recipe, backend, options, self.host)
        is_amd = self.plugins.effective_is_amd_gpu(recipe, backend, options, self.host)
        policy = self.plugins.slot_policy(recipe, backend, options, self.host)
        incoming = Incoming(model.name, model.model_type, device, is_amd, policy)
        decision = decide([s.resident() for s in self.servers.values()], incoming,
                          self.settings.max_loaded_models)
        if decision.refused:
            raise RouterError(f"cannot load {model.name!r}: {decision.refused}", 409,
                              "slots_pinned_error", "slots_pinned")
        status = await self.backends.ensure_installed(status)
        assert status.install_dir is not None
        try:
            model_path = await self.models.pull(model)
        except ModelError as exc:
            raise RouterError(str(exc), exc.status, "model_load_error") from exc
        for eviction in decision.evict:
            await self._evict(self.servers[eviction.name], eviction.reason)
        port = free_port(BACKEND_HOST)
        context = LaunchContext(model_path, options, status.install_dir, BACKEND_HOST, port,
                                os.getpid())
        spec = self.plugins.launch_spec(recipe, backend, model, context)
        if spec is None:
            raise RouterError(f"no plugin launches {recipe.name}:{backend.name}", 500,
                              "server_error", "no_launcher")
        process = BackendProcess(model.name, spec, BACKEND_HOST, port)
        assert self._tg is not None
        started = time.monotonic()
        await process.start(self._tg, self.settings.load_timeout)
        log.info("model loaded", model=model.name, backend=f"{recipe.name}:{backend.name}",
                 device=device.value, seconds=round(time.monotonic() - started, 3))
        server = LoadedServer(model, recipe, backend, options, device, is_amd, policy, process,
                              httpx.AsyncClient(base_url=process.base_url,
                                                timeout=BACKEND_TIMEOUT),
                              pinned)
        server.drained.set()
        process.on_exit(lambda p: self._forget_if_crashed(server))
        return server

    def _forget_if_crashed(self, server: LoadedServer) -> None:
        if server.process.crashed and self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
            log.warning("model unloaded: backend crashed; the next request reloads it",
                        model=server.model.name, code=server.process.returncode)

    # Unloading -------------------------------------------------------------------------

    async def _evict(self, server: LoadedServer, reason: str,
                     drain_timeout: float | None = None) -> None:
        """Remove from service, wait for in-flight requests to finish, then stop."""
        if self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
        log.info("evicting", model=server.model.name, reason=reason,
                 in_flight=server.in_flight)
        with anyio.move_on_after(drain_timeout):
            await server.drained.wait()
        await server.process.stop(self.settings.stop_grace)
        await server.client.aclose()

    async def unload(self, name: str) -> None:
        model = self.models.get(name)
        server = self.servers.get(model.name) if model else None
        if server is None:
            raise RouterError(f"model not loaded: {name}", 404, "invalid_request_error",
                              "model_not_loaded")
        async with self._lock:
            await self._evict(server, "unload requested")

    async def unload_all(self, drain_timeout: float | None = None) -> None:
        async with self._lock, anyio.create_task_group() as tg:
            for server in list(self.servers.values()):
                tg.start_soon(self._evict, server, "unload all", drain_timeout)

    async def recover(self, server: LoadedServer) -> bool:
        """After a transport error: True when the backend died (so a retry reloads it)."""
        with anyio.move_on_after(1.0):
            await server.process.exited.wait()
        if server.process.crashed:
            self._forget_if_crashed(server)
            return True
        return False
