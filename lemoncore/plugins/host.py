"""The plugin host: discovers plugins and loads them one at a time (one that fails to
import, registers an unknown or ``async def`` hook, or contributes invalid data is
unregistered and recorded as failed; the others load regardless), then calls their hooks
through typed methods. The hooks about one backend (``install``, ``refresher``,
``preflight``, ``launch``, ``normalize_request``) are called on that backend's owner
only, so no plugin can answer for another's backend. A plugin's error shape
(``register_error_shapes``) is applied through :meth:`PluginHost.error_body`, which never
lets a broken one break an error answer."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pluggy
import structlog
from pydantic import JsonValue

from lemoncore import defaults, hookspecs, routevet
from lemoncore.errors import ErrorShape, LemonError, PluginError
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
from lemoncore.lock import Pin
from lemoncore.plugins.collect import collect, validate_hooks
from lemoncore.plugins.registry import (
    Contributions,
    PluginRecord,
    Registry,
    merge_contributions,
    merge_recipes,
)
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy

ENTRY_POINT_GROUP = "lemon"


log = structlog.get_logger("lemoncore.plugins")


class PluginHost:
    """The plugin manager, the load records, the merged registry and typed hook calls."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.register(defaults, name="lemoncore.defaults")
        self.records: list[PluginRecord] = []
        self.registry = Registry()
        self._pending: list[tuple[PluginRecord, Contributions]] = []

    # Loading -----------------------------------------------------------------------

    def load_entry_points(
        self, allow: Sequence[str] | None = None, deny: Sequence[str] = ()
    ) -> None:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else ""
            if ep.name in deny or (allow is not None and ep.name not in allow):
                self.records.append(
                    PluginRecord(
                        ep.name,
                        "disabled",
                        _version(ep),
                        error="disabled by LEMON_PLUGINS_ALLOW/DENY",
                        distribution=dist,
                    )
                )
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
            validate_hooks(self.pm, name, plugin)
            contributions = collect(self.pm, plugin)
            merge_recipes(self.registry, record, contributions.recipes)
        except Exception as exc:  # noqa: BLE001 - isolating plugin failures is the point
            if plugin is not None and self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
        else:
            record.recipes = [r.name for r in contributions.recipes]
            record.hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])
            self._pending.append((record, contributions))
        self.records.append(record)

    def finish(self) -> Registry:
        """Apply cross-plugin backend contributions and catalogue models; return the registry."""
        for record, contrib in self._pending:
            merge_contributions(self.registry, record, contrib)
        self._pending.clear()
        return self.registry

    # Typed hook calls ------------------------------------------------------------------

    def effective_device(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> Device:
        return Device(
            self._ask(
                "effective_device", recipe=recipe, backend=backend, options=options, host=host
            )
        )

    def effective_is_amd_gpu(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> bool:
        return bool(
            self._ask(
                "effective_is_amd_gpu", recipe=recipe, backend=backend, options=options, host=host
            )
        )

    def slot_policy(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> SlotPolicy:
        return SlotPolicy(
            self._ask("slot_policy", recipe=recipe, backend=backend, options=options, host=host)
        )

    def install_plan(
        self,
        recipe: Recipe,
        backend: Backend,
        host: HostInfo,
        config: Mapping[str, Any],
        pin: Pin | None,
    ) -> InstallPlan | None:
        plan = self._ask_owner(
            "install", recipe=recipe, backend=backend, host=host, config=config, pin=pin
        )
        return plan if isinstance(plan, InstallPlan) else None

    def refresher(
        self, recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin
    ) -> PinRefresher | None:
        found = self._ask_owner("refresher", recipe=recipe, backend=backend, config=config, pin=pin)
        return found if hasattr(found, "latest") else None

    def launch_spec(
        self,
        recipe: Recipe,
        backend: Backend,
        model: ModelInfo,
        context: LaunchContext,
        host: HostInfo,
    ) -> LaunchSpec | Runner | None:
        spec = self._ask_owner(
            "launch", recipe=recipe, backend=backend, model=model, context=context, host=host
        )
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

    def preflight(
        self,
        recipe: Recipe,
        backend: Backend,
        model: ModelInfo,
        model_path: Path,
        config: Mapping[str, Any],
        host: HostInfo,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        """Why the backend's owner refuses this load, or "" when it does not."""
        try:
            self._ask_owner(
                "preflight",
                recipe=recipe,
                backend=backend,
                model=model,
                model_path=model_path,
                config=config,
                host=host,
                options=options or {},
            )
        except LaunchRefused as exc:
            return str(exc)
        return ""

    def normalize_request(
        self,
        recipe: Recipe,
        backend: Backend,
        endpoint: str,
        body: dict[str, JsonValue],
        surface: str,
    ) -> None:
        self._ask_owner(
            "normalize_request",
            recipe=recipe,
            backend=backend,
            endpoint=endpoint,
            body=body,
            surface=surface,
        )

    def field_checks(self, recipe: Recipe, backend: Backend) -> list[FieldCheck]:
        """The field checks the backend's owner declares for it (``lemon validate``)."""
        owner, name = self.owner(recipe, backend), f"{recipe.name}:{backend.name}"
        return [
            check
            for plugin, check in self.registry.field_checks
            if plugin == owner and check.applies_to(name)
        ]

    def error_shape(self, path: str) -> tuple[str, ErrorShape] | None:
        """The first plugin (and its error shape) whose ``register_error_shapes`` covers
        ``path``; ``None`` for lemoncore's own paths and paths no plugin's covers."""
        if routevet.reserved(path, self.registry.endpoints):
            return None
        return next(
            ((plugin, shape) for plugin, shape in self.registry.error_shapes if shape.covers(path)),
            None,
        )

    def error_body(self, path: str, error: LemonError) -> bytes | None:
        """``error`` as the JSON body of the plugin's error shape for ``path``
        (:meth:`error_shape`), or ``None``: no plugin's covers it, or its ``render`` raised
        or returned anything but a JSON object, which is logged; the caller then answers
        in OpenAI's shape."""
        found = self.error_shape(path)
        if found is None:
            return None
        plugin, shape = found
        try:
            rendered = shape.render(error)
            if inspect.isawaitable(rendered):
                getattr(rendered, "close", lambda: None)()  # never awaited: no warning
                raise TypeError("render returned an awaitable; it must be a plain function")
            if not isinstance(rendered, Mapping) or not all(isinstance(k, str) for k in rendered):
                raise TypeError(f"render returned {type(rendered).__name__}, not a JSON object")
            return json.dumps(dict(rendered), allow_nan=False).encode()
        except Exception as exc:  # noqa: BLE001 - a broken shape must not break the answer
            log.warning(
                "a plugin's error shape failed; answering in OpenAI's shape",
                plugin=plugin,
                path=path,
                error=f"{type(exc).__name__}: {exc}",
            )
            return None

    def owner(self, recipe: Recipe, backend: Backend) -> str | None:
        """The plugin that registered ``recipe``'s ``backend``."""
        return self.registry.backend_owners.get((recipe.name, backend.name))

    def _ask_owner(self, hook: str, recipe: Recipe, backend: Backend, **kwargs: Any) -> Any:
        """Call ``hook`` on the backend's owner only; ``None`` when it has no such hook."""
        owner = self.owner(recipe, backend)
        impl = next(
            (i for i in getattr(self.pm.hook, hook).get_hookimpls() if i.plugin_name == owner), None
        )
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
            raise PluginError(
                f"hook {hook!r} failed in a plugin: {type(exc).__name__}: {exc}"
            ) from exc


def _version(ep: EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else ""


def load_plugins(
    allow: Sequence[str] | None, deny: Sequence[str], extra: Mapping[str, object] | None = None
) -> PluginHost:
    """Build a host from installed entry points plus ``extra`` in-process plugins."""
    host = PluginHost()
    host.load_entry_points(allow, deny)
    for name, plugin in (extra or {}).items():
        host.add(name, plugin)
    host.finish()
    return host
