"""Carries out a plan: what it needs on disk (the backend installed, the model downloaded
and, if it just arrived, checked again by its owner), room (the RPC workers probed, the
evictions done by the fleet), then the start: the launch context (port, key, runtime
environment, model files), the plugin's launch spec or runner, readiness, and the HTTP
client to it, retried once after evicting the others when memory ran out. The record it
returns is a :class:`~lemoncore.serving.server.LoadedServer`.

Two decisions are pure functions here: :func:`start_budget` (how long a start may take: a
backend may declare its own floor, the ``start_timeout`` option) and :func:`binding_refusal`
(a model an installed artifact declares loads only on the backend that declares it)."""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Callable, Container, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import structlog

from lemoncore.errors import LaunchRefused, LemonError
from lemoncore.exits import StartFailure
from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.installs.record import read_record
from lemoncore.launch import LaunchContext, LaunchSpec, Runner
from lemoncore.models import ModelError, ModelStore
from lemoncore.options import declared
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, ModelInfo, Recipe
from lemoncore.serving.eviction import after_failed_start
from lemoncore.serving.facts import preflight
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.planner import LoadPlan
from lemoncore.serving.refusals import RouterError
from lemoncore.serving.server import LoadedServer
from lemoncore.serving.transport import backend_transport
from lemoncore.serving.workers import require_workers, split_held
from lemoncore.settings import Settings
from lemoncore.supervisor import BackendProcess, StartError, free_port

log = structlog.get_logger("lemoncore.serving.launcher")

BACKEND_HOST = "127.0.0.1"
# No read limit: a long prefill or generation is legitimate; streams send heartbeats.
BACKEND_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)
# Idle connections are dropped well before servers close them (llama-server's HTTP
# library closes after 5 s), so a request never lands on a connection being closed.
BACKEND_LIMITS = httpx.Limits(
    max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0
)
# The admin option a backend declares (its default: the engine's own floor) for the
# seconds its start may take; set in the recipe's section, it wins over every default.
START_TIMEOUT = "start_timeout"


def start_budget(load_timeout: float, floor: float | None, configured: float | None) -> float:
    """Seconds a start may take: ``configured`` (``recipes.<recipe>.start_timeout``, the
    administrator's explicit choice for this backend) when set; otherwise ``load_timeout``
    raised to the backend's declared ``floor``, so a global value chosen for small models
    cannot kill an engine whose cold load its authors measure in tens of minutes (as
    Lemonade does for Halogen: ``max(1800, global timeout)``, halogen_server.cpp)."""
    if configured is not None:
        return configured
    return max(load_timeout, floor or 0.0)


def binding_refusal(model: ModelInfo, declared_by: str | None, recipe: str, backend: str) -> str:
    """Why ``model`` may not load on ``recipe:backend`` ("" when it may): a model that the
    artifact of ``recipe:declared_by`` declares (an image's ``org.lemonade.models`` label)
    was vetted only for that backend's confinement, so another backend of the recipe (a
    native, unconfined one) is refused."""
    if declared_by is None or declared_by == backend:
        return ""
    return (
        f"model {model.name!r} is declared by the {recipe}:{declared_by} image and loads "
        f"only on that backend, not on {recipe}:{backend}: load it without 'backend' (or "
        f"with backend '{declared_by}'), or register the checkpoint as a model of your own "
        "to run it elsewhere"
    )


def declared_on(recipe: Recipe, model: ModelInfo, target: Callable[[str], Path]) -> str | None:
    """The backend of ``recipe`` whose install record (in ``target("recipe:backend")``)
    declares ``model`` (this very entry: a catalogue or user model of the same name is
    not it), if any; reads the records."""
    for backend in recipe.backends:
        record = read_record(target(f"{recipe.name}:{backend.name}"))
        if record is not None and model in record.models:
            return backend.name
    return None


def budget_inputs(
    recipe: Recipe, backend: Backend, configured: Mapping[str, Any]
) -> tuple[float | None, float | None]:
    """The floor ``backend`` declares for its start (its ``start_timeout`` default) and
    the value ``configured`` (the recipe's checked section) sets, when it declares one."""
    spec = next((o for o in declared(recipe, backend) if o.name == START_TIMEOUT), None)
    if spec is None:
        return None, None
    value = configured.get(START_TIMEOUT)
    return (
        None if spec.default is None else float(spec.default),
        None if value is None else float(value),
    )


class Launcher:
    """Starts servers for plans; makes room through ``fleet``."""

    def __init__(
        self,
        settings: Settings,
        plugins: PluginHost,
        backends: Backends,
        models: ModelStore,
        host: HostInfo,
        fleet: Fleet,
    ) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host, self.fleet = models, host, fleet

    async def execute(
        self, plan: LoadPlan, pins: Container[str], task_group: anyio.abc.TaskGroup
    ) -> LoadedServer:
        """Carry out ``plan`` (under the router's load lock): :meth:`prepare`, probe the
        RPC workers no loaded server holds before any eviction and those the evictions
        free after them (:func:`~lemoncore.serving.workers.require_workers`), evict what
        it decided, :meth:`start`. A start that fails for want of memory evicts what
        :func:`~lemoncore.serving.eviction.after_failed_start` says and is tried once more;
        any other ``StartError`` is raised."""
        install_dir, model_path = await self.prepare(plan)
        free, held = split_held(plan.workers, self.fleet.servers.values())
        await require_workers(plan.model.name, free)
        await self.fleet.carry_out(plan.decision)
        await require_workers(plan.model.name, held)
        start = functools.partial(self.start, plan, install_dir, model_path, pins, task_group)
        try:
            return await start()
        except StartError as exc:
            retry = after_failed_start(
                self.fleet.residents(), plan.incoming(), exc.failure is StartFailure.OUT_OF_MEMORY
            )
            if not retry.evict:
                raise
            log.warning(
                "load failed; evicting every other model and retrying once",
                model=plan.model.name,
                error=str(exc).splitlines()[0],
            )
            await self.fleet.carry_out(retry)
            return await start()

    async def prepare(self, plan: LoadPlan) -> tuple[Path, Path]:
        """The backend's install directory (installed when missing and no user action is
        needed: the CLI may install) and the model's file (downloaded; a failure is a
        :class:`~lemoncore.serving.refusals.RouterError`). A model that just arrived is
        checked by its owner's preflight again (:class:`~lemoncore.errors.LaunchRefused`),
        so nothing is evicted for a load that would be refused. A model an installed
        artifact declares is refused on any other backend first
        (:func:`binding_refusal`)."""
        declared_by = await anyio.to_thread.run_sync(
            declared_on, plan.recipe, plan.model, self.backends.target
        )
        if refusal := binding_refusal(
            plan.model, declared_by, plan.recipe.name, plan.backend.backend.name
        ):
            raise LaunchRefused(refusal)
        status = await self.backends.ensure_installed(
            await anyio.to_thread.run_sync(self.backends.status, plan.recipe, plan.backend.backend)
        )
        try:
            model_path = await self.models.pull(plan.model)
        except ModelError as exc:
            raise RouterError(str(exc), exc.status, "model_load_error") from exc
        if plan.model_path is None and (
            refusal := await preflight(self.plugins, self.host, plan, model_path)
        ):
            raise LaunchRefused(refusal)
        assert status.install_dir is not None
        return status.install_dir, model_path

    async def start(
        self,
        plan: LoadPlan,
        install_dir: Path,
        model_path: Path,
        pins: Container[str],
        task_group: anyio.abc.TaskGroup,
    ) -> LoadedServer:
        """Start ``plan``'s server and return it once it answers its health check; a
        ``StartError`` (with the server's last output) when it does not. ``pins`` are the
        router's: the server reads its pin from them (a pin is the model's)."""
        model, recipe, backend = plan.model, plan.recipe, plan.backend.backend
        port = free_port(BACKEND_HOST)
        key = secrets.token_urlsafe(24)
        model_dir, model_roots = self.models.checkpoint_dir(model)
        record = read_record(install_dir)
        context = LaunchContext(
            model_path,
            plan.options,
            install_dir,
            BACKEND_HOST,
            port,
            os.getpid(),
            self._runtime_env(plan),
            {} if record is None else record.as_json(),
            self.backends.instance,
            config=plan.config,
            model_owned=self.models.owns(model_path),
            backend_key=key,
            model_dir=model_dir,
            model_roots=model_roots,
            rpc_workers=plan.workers,
        )
        spec = self.plugins.launch_spec(recipe, backend, model, context, self.host)
        if spec is None:
            raise LemonError(f"no plugin launches {recipe.name}:{backend.name}", code="no_launcher")
        process: Runner = (
            BackendProcess(model.name, spec, BACKEND_HOST, port)
            if isinstance(spec, LaunchSpec)
            else spec
        )
        started = time.monotonic()
        budget = start_budget(
            self.settings.load_timeout,
            *budget_inputs(recipe, backend, self.backends.configuration(recipe)),
        )
        await process.start(task_group, budget)
        log.info(
            "model loaded",
            model=model.name,
            backend=f"{recipe.name}:{backend.name}",
            device=plan.device.value,
            amd_gpu=plan.is_amd_gpu,
            policy=plan.policy.value,
            seconds=round(time.monotonic() - started, 3),
            budget=budget,
        )
        client = httpx.AsyncClient(
            base_url=process.base_url,
            transport=process.transport
            or backend_transport(BACKEND_LIMITS, uds=getattr(process, "uds", None)),
            timeout=BACKEND_TIMEOUT,
            limits=BACKEND_LIMITS,
            headers={"Authorization": f"Bearer {key}"},
        )
        server = LoadedServer(
            model,
            recipe,
            backend,
            plan.options,
            plan.device,
            plan.is_amd_gpu,
            plan.policy,
            process,
            client,
            pins,
            keep_alive=self.settings.keep_alive_for(model),
            workers=plan.workers,
            residency=plan.residency,
            load_seconds=time.monotonic() - started,
            downsize=process.spec.downsize if isinstance(process, BackendProcess) else None,
        )
        server.drained.set()
        limits = [n for n in (backend.max_concurrency, self.settings.max_concurrency) if n]
        if limits:
            server.gate = anyio.Semaphore(min(limits))
        return server

    def _runtime_env(self, plan: LoadPlan) -> dict[str, str]:
        """The recorded ROCm runtime's environment, for a backend that needs it."""
        if plan.backend.install_plan is None or plan.backend.install_plan.runtime != "rocm":
            return {}
        decision = self.backends.rocm.decision()
        if decision is None:
            raise LemonError(
                f"{plan.backend.name} needs a ROCm runtime and none is "
                f"recorded; run 'lemon backends install {plan.backend.name}'",
                503,
                "backend_error",
            )
        return decision.env(self.host.os, os.environ)
