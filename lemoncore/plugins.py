"""Discover, load and validate plugins one at a time; merge what they contribute.

A plugin that fails to import, registers an unknown or ``async def`` hook, or contributes
invalid data is unregistered and recorded as failed; the others load regardless.

The registry records which plugin registered each recipe and each backend; the hooks
about one backend (``install``, ``launch``, ``normalize_request``) are called on that
backend's owner only, so no plugin can answer for another's backend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pluggy
import structlog
from starlette.routing import BaseRoute

from lemoncore import defaults, hookspecs, routevet
from lemoncore.errors import LemonError
from lemoncore.errors import PluginError as PluginError  # re-exported
from lemoncore.fieldchecks import FieldCheck
from lemoncore.hosts import HostInfo
from lemoncore.launch import (
    InstallPlan,
    LaunchContext,
    LaunchRefused,
    LaunchSpec,
    Migration,
    PinRefresher,
    Runner,
    StartupTask,
)
from lemoncore.lock import Lock, Pin
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Device,
    Endpoint,
    ModelInfo,
    Recipe,
    SlotPolicy,
    Tier,
    core_endpoints,
)
from lemoncore.tiers import core_granted

ENTRY_POINT_GROUP = "lemon"


log = structlog.get_logger("lemoncore.plugins")

@dataclass
class PluginRecord:
    name: str
    status: str  # loaded | failed | disabled
    version: str = ""
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    recipes: list[str] = field(default_factory=list)
    distribution: str = ""
    hooks: list[str] = field(default_factory=list)
    tiers: dict[str, str] = field(default_factory=dict)  # recipe:backend -> tier

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "version": self.version,
                "distribution": self.distribution, "error": self.error,
                "warnings": self.warnings, "recipes": self.recipes, "hooks": self.hooks,
                "tiers": self.tiers}


@dataclass
class Registry:
    """Recipes (with backends from every plugin) and catalogue models, merged."""

    recipes: dict[str, Recipe] = field(default_factory=dict)
    models: dict[str, ModelInfo] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # recipe -> plugin
    backend_owners: dict[tuple[str, str], str] = field(default_factory=dict)
    locks: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    endpoints: dict[str, Endpoint] = field(
        default_factory=lambda: {e.path: e for e in core_endpoints()})
    routes: list[BaseRoute] = field(default_factory=list)  # plugins' own API surfaces
    # (plugin, check) for lemon validate; a plugin's checks run only for its backends
    field_checks: list[tuple[str, FieldCheck]] = field(default_factory=list)

    def endpoints_tuple(self) -> tuple[Endpoint, ...]:
        return tuple(self.endpoints.values())


@dataclass
class _Contributions:
    recipes: list[Recipe]
    backends: list[BackendContribution]
    models: list[ModelInfo]
    locks: list[Mapping[str, Any]]
    endpoints: list[Endpoint]
    routes: list[BaseRoute]
    field_checks: list[FieldCheck]


class PluginHost:
    """The plugin manager, the load records, the merged registry and typed hook calls."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.register(defaults, name="lemoncore.defaults")
        self.records: list[PluginRecord] = []
        self.registry = Registry()
        self._pending: list[tuple[PluginRecord, _Contributions]] = []

    # Loading -----------------------------------------------------------------------

    def load_entry_points(
        self, allow: Sequence[str] | None = None, deny: Sequence[str] = ()
    ) -> None:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else ""
            if ep.name in deny or (allow is not None and ep.name not in allow):
                self.records.append(PluginRecord(ep.name, "disabled", _version(ep),
                                                 error="disabled by LEMON_PLUGINS_ALLOW/DENY",
                                                 distribution=dist))
                continue
            self._load(ep.name, _version(ep), ep.load, dist)

    def add(self, name: str, plugin: object, version: str = "") -> None:
        """Register an in-process plugin object (module or instance), isolated like any."""
        self._load(name, version, lambda: plugin)

    def _load(self, name: str, version: str, importer: Any, distribution: str = "") -> None:
        record = PluginRecord(name, "loaded", version, distribution=distribution)
        plugin: object | None = None
        try:
            plugin = importer()
            self.pm.register(plugin, name=name)
            self._validate_hooks(name, plugin)
            contributions = self._collect(plugin)
            self._merge_recipes(record, contributions.recipes)
        except Exception as exc:  # noqa: BLE001 - isolating plugin failures is the point
            if plugin is not None and self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
        else:
            record.recipes = [r.name for r in contributions.recipes]
            record.hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])
            self._pending.append((record, contributions))
        self.records.append(record)

    def _validate_hooks(self, name: str, plugin: object) -> None:
        for caller in self.pm.get_hookcallers(plugin) or []:
            if caller.spec is None:
                raise PluginError(f"plugin {name!r} implements unknown hook {caller.name!r}")
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and (
                    inspect.iscoroutinefunction(impl.function)
                    or inspect.isasyncgenfunction(impl.function)
                ):
                    raise PluginError(
                        f"plugin {name!r}: hook {caller.name!r} is 'async def'. lemoncore "
                        "hooks are synchronous: a coroutine would be taken as the answer. "
                        "Make it a plain 'def' that returns data; the core does the I/O."
                    )

    def _collect(self, plugin: object) -> _Contributions:
        def own(hook: str, kind: type[Any]) -> list[Any]:
            out: list[Any] = []
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                if impl.plugin is plugin:
                    for item in impl.function() or ():
                        if not isinstance(item, kind):
                            raise PluginError(f"{hook} returned {item!r}, not a {kind.__name__}")
                        out.append(item)
            return out

        locks: list[Mapping[str, Any]] = []
        for impl in self.pm.hook.register_lock.get_hookimpls():
            if impl.plugin is plugin:
                data = impl.function()
                if not isinstance(data, Mapping):
                    raise PluginError(f"register_lock returned {type(data).__name__}, not a "
                                      "mapping")
                Lock().merge(data, "this plugin")  # validate now: a bad lock fails the plugin
                locks.append(data)
        checks: list[FieldCheck] = own("register_field_checks", FieldCheck)
        names = [c.name for c in checks]
        if len(set(names)) != len(names):
            raise PluginError(f"register_field_checks returned a name twice: {names}")
        return _Contributions(own("register_recipes", Recipe),
                              own("register_backends", BackendContribution),
                              own("register_models", ModelInfo), locks,
                              own("register_endpoints", Endpoint),
                              own("register_routes", BaseRoute), checks)

    def _merge_recipes(self, record: PluginRecord, recipes: Iterable[Recipe]) -> None:
        for recipe in recipes:
            if recipe.name in self.registry.recipes:
                raise PluginError(f"recipe {recipe.name!r} is already registered by plugin "
                                  f"{self.registry.owners[recipe.name]!r}")
        for recipe in recipes:
            vetted = recipe.model_copy(update={"backends": tuple(
                _vet_tier(record, recipe.name, b) for b in recipe.backends)})
            self.registry.recipes[recipe.name] = vetted
            self.registry.owners[recipe.name] = record.name
            for backend in recipe.backends:
                self.registry.backend_owners[recipe.name, backend.name] = record.name

    def finish(self) -> Registry:
        """Apply cross-plugin backend contributions and catalogue models; return the registry."""
        reg = self.registry
        for record, contrib in self._pending:
            reg.locks += [(record.name, data) for data in contrib.locks]
            for c in contrib.backends:
                recipe = reg.recipes.get(c.recipe)
                if recipe is None:
                    record.warnings.append(f"backend {c.backend.name!r} skipped: recipe "
                                           f"{c.recipe!r} is not installed")
                elif recipe.backend(c.backend.name) is not None:
                    record.warnings.append(f"backend {c.recipe}:{c.backend.name} skipped: "
                                           "already defined")
                else:
                    reg.recipes[c.recipe] = recipe.model_copy(update={"backends": (
                        *recipe.backends, _vet_tier(record, c.recipe, c.backend))})
                    reg.backend_owners[c.recipe, c.backend.name] = record.name
            for model in contrib.models:
                if model.recipe not in reg.recipes:
                    record.warnings.append(f"model {model.name!r} skipped: recipe "
                                           f"{model.recipe!r} is not installed")
                else:
                    reg.models[model.name] = model
            for endpoint in contrib.endpoints:
                if endpoint.path in reg.endpoints or endpoint.path.startswith("/api/v1/"):
                    record.warnings.append(f"endpoint {endpoint.path} skipped: already routed")
                else:
                    reg.endpoints[endpoint.path] = endpoint
            reg.field_checks += [(record.name, check) for check in contrib.field_checks]
            for route in contrib.routes:
                why = routevet.refusal(route, reg.endpoints)
                if why:
                    record.warnings.append(f"route {routevet.describe(route)} skipped: {why}")
                else:
                    reg.routes.append(route)
        self._pending.clear()
        return reg

    # Typed hook calls ------------------------------------------------------------------

    def effective_device(self, recipe: Recipe, backend: Backend,
                         options: Mapping[str, Any], host: HostInfo) -> Device:
        return Device(self._ask("effective_device", recipe=recipe, backend=backend,
                                options=options, host=host))

    def effective_is_amd_gpu(self, recipe: Recipe, backend: Backend,
                             options: Mapping[str, Any], host: HostInfo) -> bool:
        return bool(self._ask("effective_is_amd_gpu", recipe=recipe, backend=backend,
                              options=options, host=host))

    def slot_policy(self, recipe: Recipe, backend: Backend,
                    options: Mapping[str, Any], host: HostInfo) -> SlotPolicy:
        return SlotPolicy(self._ask("slot_policy", recipe=recipe, backend=backend,
                                    options=options, host=host))

    def install_plan(self, recipe: Recipe, backend: Backend, host: HostInfo,
                     config: Mapping[str, Any], pin: Pin | None) -> InstallPlan | None:
        plan = self._ask_owner("install", recipe=recipe, backend=backend, host=host,
                               config=config, pin=pin)
        return plan if isinstance(plan, InstallPlan) else None

    def refresher(self, recipe: Recipe, backend: Backend, config: Mapping[str, Any],
                  pin: Pin) -> PinRefresher | None:
        found = self._ask_owner("refresher", recipe=recipe, backend=backend, config=config,
                                pin=pin)
        return found if hasattr(found, "latest") else None

    def launch_spec(self, recipe: Recipe, backend: Backend, model: ModelInfo,
                    context: LaunchContext, host: HostInfo) -> LaunchSpec | Runner | None:
        spec = self._ask_owner("launch", recipe=recipe, backend=backend, model=model,
                               context=context, host=host)
        if spec is None or isinstance(spec, LaunchSpec) or hasattr(spec, "start"):
            return spec  # type: ignore[no-any-return]
        raise PluginError(f"launch returned {type(spec).__name__}, not a LaunchSpec or Runner")

    def migrations(self) -> list[Migration]:
        """Every plugin's pending migrations; a failing plugin contributes none."""
        found: list[Migration] = []
        for impl in self.pm.hook.migrations.get_hookimpls():
            try:
                returned = self._guarded("migrations", impl.function) or ()
            except PluginError as exc:
                log.warning("plugin migrations failed", plugin=impl.plugin_name, error=str(exc))
                continue
            found += [m for m in returned if isinstance(m, Migration)]
        return found

    def startup_tasks(self, instance: str) -> list[tuple[str, StartupTask]]:
        """(plugin name, task) for every task plugins want awaited when the server starts."""
        tasks: list[tuple[str, StartupTask]] = []
        for impl in self.pm.hook.startup_tasks.get_hookimpls():
            returned = impl.function(instance=instance) or ()
            tasks += [(impl.plugin_name, task) for task in returned]  # type: ignore[attr-defined]
        return tasks

    def preflight(self, recipe: Recipe, backend: Backend, model: ModelInfo, model_path: Path,
                  config: Mapping[str, Any], host: HostInfo,
                  options: Mapping[str, Any] | None = None) -> str:
        """Why the backend's owner refuses this load, or "" when it does not."""
        try:
            self._ask_owner("preflight", recipe=recipe, backend=backend, model=model,
                            model_path=model_path, config=config, host=host,
                            options=options or {})
        except LaunchRefused as exc:
            return str(exc)
        return ""

    def normalize_request(self, recipe: Recipe, backend: Backend, endpoint: str,
                          body: dict[str, Any]) -> None:
        self._ask_owner("normalize_request", recipe=recipe, backend=backend,
                        endpoint=endpoint, body=body)

    def field_checks(self, recipe: Recipe, backend: Backend) -> list[FieldCheck]:
        """The field checks the backend's owner declares for it (``lemon validate``)."""
        owner, name = self.owner(recipe, backend), f"{recipe.name}:{backend.name}"
        return [check for plugin, check in self.registry.field_checks
                if plugin == owner and check.applies_to(name)]

    def owner(self, recipe: Recipe, backend: Backend) -> str | None:
        """The plugin that registered ``recipe``'s ``backend``."""
        return self.registry.backend_owners.get((recipe.name, backend.name))

    def _ask_owner(self, hook: str, recipe: Recipe, backend: Backend, **kwargs: Any) -> Any:
        """Call ``hook`` on the backend's owner only; ``None`` when it has no such hook."""
        owner = self.owner(recipe, backend)
        impl = next((i for i in getattr(self.pm.hook, hook).get_hookimpls()
                     if i.plugin_name == owner), None)
        if impl is None:
            return None
        args = {"recipe": recipe, "backend": backend, **kwargs}
        return self._guarded(hook, lambda: impl.function(*(args[a] for a in impl.argnames)))

    def _ask(self, hook: str, **kwargs: Any) -> Any:
        return self._guarded(hook, lambda: getattr(self.pm.hook, hook)(**kwargs))

    @staticmethod
    def _guarded(hook: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:
            if isinstance(exc, LemonError):  # LaunchRefused and friends: for the user
                raise
            raise PluginError(f"hook {hook!r} failed in a plugin: {type(exc).__name__}: "
                              f"{exc}") from exc


def _vet_tier(record: PluginRecord, recipe: str, backend: Backend) -> Backend:
    """Plugins declare their tier, but ``core`` only where lemoncore's registry grants it."""
    name = f"{recipe}:{backend.name}"
    if backend.tier is Tier.CORE and not core_granted(record.distribution, name):
        record.warnings.append(f"{name} claims tier core, which only lemoncore's registry "
                               "grants; it is listed as community")
        backend = backend.model_copy(update={"tier": Tier.COMMUNITY})
    record.tiers[name] = backend.tier.value
    return backend


def _version(ep: EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else ""


def load_plugins(allow: Sequence[str] | None, deny: Sequence[str],
                 extra: Mapping[str, object] | None = None) -> PluginHost:
    """Build a host from installed entry points plus ``extra`` in-process plugins."""
    host = PluginHost()
    host.load_entry_points(allow, deny)
    for name, plugin in (extra or {}).items():
        host.add(name, plugin)
    host.finish()
    return host


__all__ = ["ENTRY_POINT_GROUP", "PluginError", "PluginHost", "PluginRecord", "Registry",
           "load_plugins"]
