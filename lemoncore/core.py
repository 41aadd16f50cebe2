"""The composed core: settings, plugins, host facts, backends, models and the router."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from lemoncore import trust
from lemoncore.hosts import HostInfo, detect_host
from lemoncore.installs import refresh
from lemoncore.installs.backends import Backends
from lemoncore.lock import load_lock
from lemoncore.models import ModelStore
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.serving.router import Router
from lemoncore.settings import Settings


@dataclass
class Core:
    settings: Settings
    plugins: PluginHost
    host: HostInfo
    backends: Backends
    models: ModelStore
    router: Router


async def run_startup_tasks(core: Core) -> None:
    """Await each plugin's startup tasks once; one failing is logged, never fatal."""
    for name, task in core.plugins.startup_tasks(core.backends.instance):
        try:
            await task()
        except Exception as exc:  # noqa: BLE001 - a plugin's chore must not stop startup
            structlog.get_logger("lemoncore").error(
                "plugin startup task failed", plugin=name, error=repr(exc)
            )


def build_core(
    settings: Settings, plugins: Mapping[str, object] | None = None, host: HostInfo | None = None
) -> Core:
    """Load plugins (entry points plus ``plugins``) and wire the core's parts together."""
    host = host or detect_host()
    plugin_host = load_plugins(settings.allowed_plugins, settings.denied_plugins, plugins)
    lock = load_lock(plugin_host.registry.locks, settings.lock_files)
    lock.adopt(trust.load(settings.cache_dir / trust.TRUST_FILE))
    # accepted refreshes, over the pins they replaced (a newer shipped pin wins)
    for left_out in refresh.apply(lock, refresh.read(settings.cache_dir / refresh.REFRESH_FILE)):
        structlog.get_logger("lemoncore").warning("refreshed pin superseded", detail=left_out)
    backends = Backends(plugin_host, host, settings, lock)
    models = ModelStore(
        plugin_host.registry.models,
        settings.cache_dir,
        settings.offline,
        settings.model_dirs,
        backends.declared_models,
        settings.extra_models_dir,
    )
    router = Router(settings, plugin_host, backends, models, host)
    return Core(settings, plugin_host, host, backends, models, router)
