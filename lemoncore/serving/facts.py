"""What a load would do, found without changing anything: :class:`Survey` gathers the
:class:`~lemoncore.serving.planner.Facts` (backend states from the status cache, the
model's saved options, its file looked up in a thread, the fleet's servers), asks the pure
:func:`~lemoncore.serving.planner.plan`, and has the owner plugin check the result
(:func:`preflight`, in a thread; the launcher asks again when the model's file has just
arrived)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.models import ModelStore
from lemoncore.plugins import PluginHost
from lemoncore.recipes import ModelInfo
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.planner import CurrentLoad, Facts, LoadPlan, plan
from lemoncore.settings import Settings


async def preflight(plugins: PluginHost, host: HostInfo, found: LoadPlan, model_path: Path) -> str:
    """Why the owner of ``found``'s backend refuses it with the model at ``model_path``
    ("" when it does not); run in a thread."""
    return await anyio.to_thread.run_sync(
        plugins.preflight,
        found.recipe,
        found.backend.backend,
        found.model,
        model_path,
        found.config,
        host,
        found.options,
    )


class Survey:
    """Plans loads from what ``settings``, ``backends``, ``models`` and ``fleet`` hold now."""

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

    async def plan(
        self, model: ModelInfo, request: Mapping[str, Any] | None, explicit: bool
    ) -> LoadPlan:
        """The plan for loading ``model`` with ``request``'s options (see
        :func:`~lemoncore.serving.planner.plan`), its ``refusal`` set by the owner's
        preflight when the model's file is present and the plan would start a server."""
        recipe = self.plugins.registry.recipes[model.recipe]
        await self.backends.refresh_statuses()
        current = self.fleet.running(model.name)
        facts = Facts(
            model,
            recipe,
            self.backends.configuration(recipe),
            self.models.saved_options(model.name),
            str(self.models.options_file),
            self.backends.cached_statuses(recipe),
            self.fleet.residents(),
            None if current is None else CurrentLoad(current.backend.name, current.options),
            await anyio.to_thread.run_sync(self.models.local_path, model),
            self.settings.max_loaded_models,
            self.settings.workers_for(model),
            self.settings.eviction,
        )
        found = plan(facts, request, self.plugins, self.host, explicit)
        if found.model_path is None or found.already_loaded or found.refusal:
            return found
        return replace(
            found, refusal=await preflight(self.plugins, self.host, found, found.model_path)
        )
