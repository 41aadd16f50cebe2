"""Loads, evicts and unloads backend servers; owns every running child.

For each load the router resolves options, then the backend, then asks the decision
hooks for device, AMD-ness and slot policy, stores those answers on the server, and
executes what :func:`lemoncore.policy.decide` returns. Loads are serialised by one lock
(so concurrent first requests for a model spawn it once); requests for loaded models
never take it.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx
import structlog

from lemoncore.backends import Backends, BackendStatus
from lemoncore.errors import LemonError
from lemoncore.hosts import HostInfo
from lemoncore.install import installed_record
from lemoncore.launch import LaunchContext, LaunchRefused, LaunchSpec, Runner
from lemoncore.models import ModelError, ModelStore
from lemoncore.options import Layer, declared, resolve, selector
from lemoncore.plugins import PluginHost
from lemoncore.policy import Decision, Eviction, Incoming, Resident, decide
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.settings import Settings
from lemoncore.supervisor import BackendProcess, StartError, free_port

log = structlog.get_logger("lemoncore.router")

BACKEND_HOST = "127.0.0.1"
# No read limit: a long prefill or generation is legitimate; streams send heartbeats.
BACKEND_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)
# Idle connections are dropped well before servers close them (llama-server's HTTP
# library closes after 5 s), so a request never lands on a connection being closed.
BACKEND_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64,
                              keepalive_expiry=2.0)


# A backend that fails to start this many times in a row is held off, with a back-off
# doubling from COOLDOWN_S up to COOLDOWN_MAX_S, instead of being respawned per request.
CRASH_LOOP_FAILURES, COOLDOWN_S, COOLDOWN_MAX_S = 3, 5.0, 300.0
# Consecutive failed requests (5xx or broken connections) that mark a live server wedged.
WEDGED_AFTER = 3

EVICTION_KINDS = ("lru", "exclusive_gpu", "exclusive_npu", "coexist_by_type", "reload",
                  "load_failure", "wedged", "unload")


class RouterError(LemonError):
    """A load or lookup failed."""


@dataclass(frozen=True)
class LoadPlan:
    """A load decided but not executed: resolved options, backend, hook answers, evictions."""

    model: ModelInfo
    recipe: Recipe
    backend: BackendStatus
    options: dict[str, Any]  # request scope
    config: dict[str, Any]  # admin scope
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    decision: Decision
    model_path: Path | None = None  # the model file, when present at planning
    refusal: str = ""  # the backend's owner refuses the load (preflight of model_path)

    def serves_as(self, server: LoadedServer) -> bool:
        """Whether ``server`` already runs this plan's backend with its options."""
        return server.backend.name == self.backend.backend.name and \
            server.options == self.options

    def explain(self) -> dict[str, Any]:
        return {"model_name": self.model.name, "recipe": self.recipe.name,
                "backend": self.backend.backend.name,
                "backend_state": self.backend.state.value, "device": self.device.value,
                "is_amd_gpu": self.is_amd_gpu, "slot_policy": self.policy.value,
                "options": self.options, "refused": self.refusal or self.decision.refused,
                "evict": [{"model_name": e.name, "kind": e.kind, "reason": e.reason}
                          for e in self.decision.evict]}


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
    process: Runner
    client: httpx.AsyncClient
    pinned: bool = False
    in_flight: int = 0
    queued: int = 0
    failures: int = 0  # consecutive failed requests
    last_used: float = field(default_factory=time.monotonic)
    drained: anyio.Event = field(default_factory=anyio.Event)
    gate: anyio.Semaphore | None = None  # the backend's max_concurrency, when it has one

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
                "in_flight": self.in_flight, "queued": self.queued,
                "recipe_options": self.options,
                "launch_command": list(self.process.argv),
                "peak_memory_bytes": self.process.peak_memory()}


class Router:
    """Use as ``async with Router(...) as router``; leaving stops every backend."""

    def __init__(self, settings: Settings, plugins: PluginHost, backends: Backends,
                 models: ModelStore, host: HostInfo) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host = models, host
        self.servers: dict[str, LoadedServer] = {}
        self.evictions: Counter[str] = Counter({k: 0 for k in EVICTION_KINDS})
        self.loads = 0
        # tokens backends reported in their answers' usage, per model and kind
        self.tokens: Counter[tuple[str, str]] = Counter()
        self._failed_starts: dict[str, tuple[int, float]] = {}  # model: (count, held until)
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self.closing = False  # a shutdown began: new requests are refused
        self.drain_deadline = math.inf
        self._cuttable: set[anyio.CancelScope] = set()  # in-flight requests

    async def __aenter__(self) -> Router:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for name, task in self.plugins.startup_tasks(self.backends.instance):
            try:
                await task()
            except Exception as exc:  # noqa: BLE001 - a plugin's chore must not stop startup
                log.error("plugin startup task failed", plugin=name, error=repr(exc))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.begin_shutdown()
        with anyio.CancelScope(shield=True):
            await self.unload_all(
                drain_timeout=max(0.0, self.drain_deadline - anyio.current_time()))
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(exc_type, exc, tb)

    def begin_shutdown(self) -> None:
        """Refuse new requests (503) and give in-flight ones ``stop_grace`` seconds to
        finish; then their :meth:`cut_at_drain_deadline` scopes expire. Idempotent."""
        if self.closing:
            return
        self.closing, self.drain_deadline = True, anyio.current_time() + self.settings.stop_grace
        for scope in self._cuttable:
            scope.deadline = self.drain_deadline
        log.info("shutting down: draining in-flight requests", in_flight=len(self._cuttable),
                 deadline_s=self.settings.stop_grace)

    @contextmanager
    def cut_at_drain_deadline(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that expires at a shutdown's drain deadline (never before one
        begins); check ``cancelled_caught`` to tell the client why it was cut."""
        with anyio.CancelScope(deadline=self.drain_deadline) as scope:
            self._cuttable.add(scope)
            try:
                yield scope
            finally:
                self._cuttable.discard(scope)

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
        """Yield a ready server for ``name``, loading it if needed; count it busy meanwhile.

        A backend with ``max_concurrency`` gets at most that many requests at once; up to
        ``max_queue`` more wait their turn, and beyond that the request is refused with
        503 and ``Retry-After``. Once shutdown has begun every request is refused (503).
        """
        if self.closing:
            raise RouterError("the server is shutting down; retry once it is back", 503,
                              "server_error", "shutting_down",
                              retry_after=self.settings.stop_grace)
        server = self.loaded(name)
        if server is None:
            server = await self.load(name, explicit=False, hold=True)
        else:
            self._hold(server)
        try:
            async with self._turn(server):
                yield server
        finally:
            self._release(server)

    def count_usage(self, model: str, usage: Any) -> None:
        """Add a backend answer's ``usage`` (prompt and completion tokens) to the totals."""
        if isinstance(usage, dict):
            for kind in ("prompt_tokens", "completion_tokens"):
                if isinstance(n := usage.get(kind), int) and n >= 0:
                    self.tokens[model, kind] += n

    @staticmethod
    def _hold(server: LoadedServer) -> None:
        """Count a request on ``server``: a busy server is never evicted."""
        if server.in_flight == 0:
            server.drained = anyio.Event()
        server.in_flight += 1

    @staticmethod
    def _release(server: LoadedServer) -> None:
        server.in_flight -= 1
        server.last_used = time.monotonic()
        if server.in_flight == 0:
            server.drained.set()

    @asynccontextmanager
    async def _turn(self, server: LoadedServer) -> AsyncIterator[None]:
        if server.gate is None:
            yield
            return
        if server.gate.value == 0 and server.queued >= self.settings.max_queue:
            raise RouterError(
                f"{server.model.name} is busy: {server.queued} requests already wait for a "
                "free slot; retry shortly", 503,
                "server_busy", "queue_full", retry_after=1)
        server.queued += 1
        try:
            await server.gate.acquire()
        finally:
            server.queued -= 1
        try:
            yield
        finally:
            server.gate.release()

    def plan(self, name: str, request: Mapping[str, Any] | None = None) -> LoadPlan:
        """Everything a load of ``name`` would do, decided now, changing nothing."""
        model = self.model(name)
        recipe = self.plugins.registry.recipes[model.recipe]
        config = self.backends.configuration(recipe)
        layers = (Layer(f"in model {model.name}'s recipe_options", model.recipe_options),
                  Layer(f"in the options saved for {model.name} (remove them from "
                        f"{self.models.options_file} to reset)",
                        self.models.saved_options(model.name)),
                  Layer("in the request", request or {}))
        status = self.backends.select(recipe, selector((Layer("", config), *layers)))
        backend = status.backend
        options, admin = resolve(declared(recipe, backend), config, layers,
                                 f"recipes.{recipe.name}")
        device = self.plugins.effective_device(recipe, backend, options, self.host)
        is_amd = self.plugins.effective_is_amd_gpu(recipe, backend, options, self.host)
        policy = self.plugins.slot_policy(recipe, backend, options, self.host)
        incoming = Incoming(model.name, model.model_type, device, is_amd, policy)
        decision = decide([s.resident() for s in self.servers.values()], incoming,
                          self.settings.max_loaded_models)
        model_path = self.models.local_path(model)
        refusal = "" if model_path is None else self.plugins.preflight(
            recipe, backend, model, model_path, admin, self.host)
        return LoadPlan(model, recipe, status, options, admin, device, is_amd, policy,
                        decision, model_path, refusal)

    async def load(self, name: str, request: Mapping[str, Any] | None = None,
                   pinned: bool | None = None, explicit: bool = True,
                   hold: bool = False) -> LoadedServer:
        """Load ``name`` (or return it when loaded); an explicit load with new options
        reloads it. With ``hold`` (as :meth:`acquire` loads) the server comes back already
        counted busy, so no other load can evict it before the caller uses it.

        The load runs in the router's own task, so a caller that gives up (a client that
        disconnects or times out) does not cancel it: a retry finds the model loading or
        loaded. A caller waits at most ``load_timeout`` seconds; then it gets 503
        ``model_loading`` with ``Retry-After`` while the load goes on.
        """
        self.model(name)  # an unknown name fails now, without waiting for other loads
        done, outcome = anyio.Event(), list[LoadedServer | Exception]()
        waiting = True
        held: LoadedServer | None = None  # counted busy for this caller

        async def run() -> None:
            nonlocal held
            try:
                server = await self._load(name, request, pinned, explicit)
                if hold and waiting:  # no checkpoint since the load lock was released
                    self._hold(server)
                    held = server
                outcome.append(server)
            except Exception as exc:  # noqa: BLE001 - handed to the caller below
                outcome.append(exc)
            finally:
                done.set()

        assert self._tg is not None, "use the router as an async context manager"
        self._tg.start_soon(run)
        try:
            with anyio.move_on_after(self.settings.load_timeout):
                await done.wait()
        except BaseException:  # the caller was cancelled: give back what was held for it
            if held is not None:
                self._release(held)
            raise
        finally:
            waiting = False
        if not outcome:
            raise RouterError(
                f"{name} is still loading after {self.settings.load_timeout:.0f} s (a large "
                "download or a slow start); the load goes on, retry shortly", 503,
                "server_busy", "model_loading", retry_after=5)
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    async def _load(self, name: str, request: Mapping[str, Any] | None,
                    pinned: bool | None, explicit: bool) -> LoadedServer:
        async with self._lock:
            plan = self.plan(name, request)
            current = self.loaded(plan.model.name)
            if current is not None and not (explicit and not plan.serves_as(current)):
                if pinned is not None:
                    current.pinned = pinned
                current.last_used = time.monotonic()
                return current
            if plan.refusal:
                raise LaunchRefused(plan.refusal)
            if plan.decision.refused:
                raise RouterError(f"cannot load {plan.model.name!r}: {plan.decision.refused}",
                                  409, "slots_pinned_error", "slots_pinned")
            if not explicit:  # an explicit /load is the user's retry
                self._check_cooldown(plan.model.name)
            if current is not None:
                await self._evict(current, Eviction(current.model.name, "reload",
                                                    "reload with new options or backend"))
            try:
                server = await self._execute(plan, bool(pinned))
            except StartError as exc:
                raise self._failed_start(plan.model.name, exc) from exc
            self._failed_starts.pop(plan.model.name, None)
            self.servers[plan.model.name] = server
            self.loads += 1
            return server

    def _check_cooldown(self, name: str) -> None:
        count, until = self._failed_starts.get(name, (0, 0.0))
        wait = until - time.monotonic()
        if wait > 0:
            raise RouterError(
                f"{name} failed to start {count} times in a row; lemoncore holds it off for "
                f"{wait:.0f} s more instead of respawning it per request. Check its log "
                "(the last failure is above), then retry or reload it explicitly",
                503, "model_load_error", "backend_cooldown",
                retry_after=wait)

    def _failed_start(self, name: str, exc: StartError) -> StartError:
        count = self._failed_starts.get(name, (0, 0.0))[0] + 1
        until = 0.0
        if count >= CRASH_LOOP_FAILURES:
            until = time.monotonic() + min(COOLDOWN_MAX_S,
                                           COOLDOWN_S * 2 ** (count - CRASH_LOOP_FAILURES))
        self._failed_starts[name] = (count, until)
        if until:
            return StartError(f"{exc}\n({name} failed to start {count} times in a row: "
                              f"held off for {until - time.monotonic():.0f} s)")
        return exc

    async def _execute(self, plan: LoadPlan, pinned: bool) -> LoadedServer:
        status = await self.backends.ensure_installed(plan.backend)
        try:
            model_path = await self.models.pull(plan.model)
        except ModelError as exc:
            raise RouterError(str(exc), exc.status, "model_load_error") from exc
        if plan.model_path is None and (refusal := self.plugins.preflight(
                plan.recipe, plan.backend.backend, plan.model, model_path, plan.config,
                self.host)):
            raise LaunchRefused(refusal)  # a download just arrived: checked before evicting
        for eviction in plan.decision.evict:
            if (victim := self.servers.get(eviction.name)) is not None:
                await self._evict(victim, eviction)
        try:
            return await self._spawn(plan, status.install_dir, model_path, pinned)
        except StartError as exc:
            others = [s for s in self.servers.values() if not s.pinned]
            if not exc.retryable or not others:
                raise
            log.warning("load failed; evicting every other model and retrying once",
                        model=plan.model.name, error=str(exc).splitlines()[0])
            for other in others:
                await self._evict(other, Eviction(
                    other.model.name, "load_failure",
                    f"loading {plan.model.name} failed; freeing memory to retry"))
            return await self._spawn(plan, status.install_dir, model_path, pinned)

    async def _spawn(self, plan: LoadPlan, install_dir: Path | None, model_path: Path,
                     pinned: bool) -> LoadedServer:
        assert install_dir is not None and self._tg is not None
        model, recipe, backend = plan.model, plan.recipe, plan.backend.backend
        port = free_port(BACKEND_HOST)
        runtime_env: dict[str, str] = {}
        if plan.backend.plan is not None and plan.backend.plan.runtime == "rocm":
            decision = self.backends.rocm_decision()
            if decision is None:
                raise RouterError(f"{plan.backend.name} needs a ROCm runtime and none is "
                                  f"recorded; run 'lemon backends install "
                                  f"{plan.backend.name}'", 503, "backend_error")
            runtime_env = decision.env(self.host.os, os.environ)
        key = secrets.token_urlsafe(24)
        model_dir, model_roots = self.models.checkpoint_dir(model)
        context = LaunchContext(model_path, plan.options, install_dir, BACKEND_HOST, port,
                                os.getpid(), runtime_env,
                                installed_record(install_dir) or {}, self.backends.instance,
                                config=plan.config,
                                model_owned=self.models.owns(model_path),
                                backend_key=key, model_dir=model_dir,
                                model_roots=model_roots)
        spec = self.plugins.launch_spec(recipe, backend, model, context, self.host)
        if spec is None:
            raise RouterError(f"no plugin launches {recipe.name}:{backend.name}", 500,
                              "server_error", "no_launcher")
        process: Runner = BackendProcess(model.name, spec, BACKEND_HOST, port) \
            if isinstance(spec, LaunchSpec) else spec
        started = time.monotonic()
        await process.start(self._tg, self.settings.load_timeout)
        log.info("model loaded", model=model.name, backend=f"{recipe.name}:{backend.name}",
                 device=plan.device.value, amd_gpu=plan.is_amd_gpu, policy=plan.policy.value,
                 seconds=round(time.monotonic() - started, 3))
        server = LoadedServer(model, recipe, backend, plan.options, plan.device,
                              plan.is_amd_gpu, plan.policy, process,
                              httpx.AsyncClient(base_url=process.base_url,
                                                transport=process.transport,
                                                timeout=BACKEND_TIMEOUT,
                                                limits=BACKEND_LIMITS,
                                                headers={"Authorization": f"Bearer {key}"}),
                              pinned)
        server.drained.set()
        limits = [n for n in (backend.max_concurrency, self.settings.max_concurrency) if n]
        if limits:
            server.gate = anyio.Semaphore(min(limits))
        process.on_exit(lambda p: self._forget_if_crashed(server))
        return server

    def _forget_if_crashed(self, server: LoadedServer) -> None:
        if server.process.crashed and self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
            assert self._tg is not None
            self._tg.start_soon(server.client.aclose)
            log.warning("model unloaded: backend crashed; the next request reloads it",
                        model=server.model.name, code=server.process.returncode)

    # Unloading -------------------------------------------------------------------------

    async def _evict(self, server: LoadedServer, why: Eviction,
                     drain_timeout: float | None = None) -> None:
        """Remove from service, wait for in-flight requests to finish, then stop."""
        if self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
        self.evictions[why.kind] += 1
        log.info("evicting", model=server.model.name, kind=why.kind, reason=why.reason,
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
            await self._evict(server, Eviction(server.model.name, "unload", "unload requested"))

    async def unload_all(self, drain_timeout: float | None = None) -> None:
        async with self._lock, anyio.create_task_group() as tg:
            for server in list(self.servers.values()):
                tg.start_soon(self._evict, server,
                              Eviction(server.model.name, "unload", "unload all"), drain_timeout)

    def record_outcome(self, server: LoadedServer, failed: bool) -> None:
        """Count consecutive failed requests (5xx, broken connections) of a server that
        still looks alive; at ``WEDGED_AFTER`` it is wedged: restart it (the next request
        gets a fresh process)."""
        server.failures = server.failures + 1 if failed else 0
        if server.failures >= WEDGED_AFTER and self.servers.get(server.model.name) is server:
            log.warning("backend wedged: restarting it", model=server.model.name,
                        failures=server.failures)
            del self.servers[server.model.name]
            assert self._tg is not None
            self._tg.start_soon(self._evict, server, Eviction(
                server.model.name, "wedged",
                f"{server.failures} consecutive failed requests while its health was fine"))

    async def recover(self, server: LoadedServer) -> bool:
        """After a transport error: True when the backend died (so a retry reloads it)."""
        with anyio.move_on_after(1.0):
            await server.process.exited.wait()
        if server.process.crashed:
            self._forget_if_crashed(server)
            return True
        return False
