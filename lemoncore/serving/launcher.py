"""Starts the server a plan chose: the launch context (port, key, runtime environment,
model files), the plugin's launch spec or runner, readiness, and the HTTP client to it;
the record it returns is a :class:`~lemoncore.serving.server.LoadedServer`."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import anyio
import anyio.abc
import httpx
import structlog

from lemoncore.errors import LemonError
from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.installs.install import installed_record
from lemoncore.launch import LaunchContext, LaunchSpec, Runner
from lemoncore.models import ModelStore
from lemoncore.plugins import PluginHost
from lemoncore.serving.planner import LoadPlan
from lemoncore.serving.server import LoadedServer
from lemoncore.serving.transport import backend_transport
from lemoncore.settings import Settings
from lemoncore.supervisor import BackendProcess, free_port

log = structlog.get_logger("lemoncore.serving.launcher")

BACKEND_HOST = "127.0.0.1"
# No read limit: a long prefill or generation is legitimate; streams send heartbeats.
BACKEND_TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)
# Idle connections are dropped well before servers close them (llama-server's HTTP
# library closes after 5 s), so a request never lands on a connection being closed.
BACKEND_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64,
                              keepalive_expiry=2.0)


class Launcher:
    def __init__(self, settings: Settings, plugins: PluginHost, backends: Backends,
                 models: ModelStore, host: HostInfo) -> None:
        self.settings, self.plugins, self.backends = settings, plugins, backends
        self.models, self.host = models, host

    async def start(self, plan: LoadPlan, install_dir: Path, model_path: Path, pinned: bool,
                    task_group: anyio.abc.TaskGroup) -> LoadedServer:
        """Start ``plan``'s server and return it once it answers its health check; a
        ``StartError`` (with the server's last output) when it does not."""
        model, recipe, backend = plan.model, plan.recipe, plan.backend.backend
        port = free_port(BACKEND_HOST)
        key = secrets.token_urlsafe(24)
        model_dir, model_roots = self.models.checkpoint_dir(model)
        context = LaunchContext(model_path, plan.options, install_dir, BACKEND_HOST, port,
                                os.getpid(), self._runtime_env(plan),
                                installed_record(install_dir) or {}, self.backends.instance,
                                config=plan.config,
                                model_owned=self.models.owns(model_path),
                                backend_key=key, model_dir=model_dir,
                                model_roots=model_roots, rpc_workers=plan.workers)
        spec = self.plugins.launch_spec(recipe, backend, model, context, self.host)
        if spec is None:
            raise LemonError(f"no plugin launches {recipe.name}:{backend.name}",
                             code="no_launcher")
        process: Runner = BackendProcess(model.name, spec, BACKEND_HOST, port) \
            if isinstance(spec, LaunchSpec) else spec
        started = time.monotonic()
        await process.start(task_group, self.settings.load_timeout)
        log.info("model loaded", model=model.name, backend=f"{recipe.name}:{backend.name}",
                 device=plan.device.value, amd_gpu=plan.is_amd_gpu, policy=plan.policy.value,
                 seconds=round(time.monotonic() - started, 3))
        client = httpx.AsyncClient(base_url=process.base_url,
                                   transport=process.transport or backend_transport(
                                       BACKEND_LIMITS, uds=getattr(process, "uds", None)),
                                   timeout=BACKEND_TIMEOUT, limits=BACKEND_LIMITS,
                                   headers={"Authorization": f"Bearer {key}"})
        server = LoadedServer(model, recipe, backend, plan.options, plan.device,
                              plan.is_amd_gpu, plan.policy, process, client, pinned,
                              keep_alive=self.settings.keep_alive_for(model),
                              workers=plan.workers)
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
            raise LemonError(f"{plan.backend.name} needs a ROCm runtime and none is "
                             f"recorded; run 'lemon backends install {plan.backend.name}'",
                             503, "backend_error")
        return decision.env(self.host.os, os.environ)
