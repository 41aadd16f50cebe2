"""Vetting one plugin as it registers: every hook it implements must be a known,
synchronous hook, and what its registration hooks return must be of the declared types
(a lock must merge, field-check names must be unique); any breach is a
:class:`~lemoncore.errors.PluginError` that fails that plugin alone."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import pluggy
from starlette.routing import BaseRoute

from lemoncore.errors import ErrorShape, PluginError
from lemoncore.fieldchecks import FieldCheck
from lemoncore.lock import Lock
from lemoncore.plugins.registry import Contributions
from lemoncore.recipes import BackendContribution, Endpoint, ModelInfo, Recipe


def validate_hooks(pm: pluggy.PluginManager, name: str, plugin: object) -> None:
    """A :class:`PluginError` if ``plugin`` implements a hook no spec declares, or any
    hook as ``async def``."""
    for caller in pm.get_hookcallers(plugin) or []:
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


def collect(pm: pluggy.PluginManager, plugin: object) -> Contributions:
    """What ``plugin``'s own registration hooks return, each item checked for its type;
    a wrong item, a lock that does not merge or a repeated field-check name is a
    :class:`PluginError`."""

    def own(hook: str, kind: type[Any]) -> list[Any]:
        out: list[Any] = []
        for impl in getattr(pm.hook, hook).get_hookimpls():
            if impl.plugin is plugin:
                for item in impl.function() or ():
                    if not isinstance(item, kind):
                        raise PluginError(f"{hook} returned {item!r}, not a {kind.__name__}")
                    out.append(item)
        return out

    locks: list[Mapping[str, Any]] = []
    for impl in pm.hook.register_lock.get_hookimpls():
        if impl.plugin is plugin:
            data = impl.function()
            if not isinstance(data, Mapping):
                raise PluginError(f"register_lock returned {type(data).__name__}, not a mapping")
            Lock().merge(data, "this plugin")  # validate now: a bad lock fails the plugin
            locks.append(data)
    checks: list[FieldCheck] = own("register_field_checks", FieldCheck)
    names = [c.name for c in checks]
    if len(set(names)) != len(names):
        raise PluginError(f"register_field_checks returned a name twice: {names}")
    return Contributions(
        own("register_recipes", Recipe),
        own("register_backends", BackendContribution),
        own("register_models", ModelInfo),
        locks,
        own("register_endpoints", Endpoint),
        own("register_routes", BaseRoute),
        checks,
        own("register_error_shapes", ErrorShape),
    )
