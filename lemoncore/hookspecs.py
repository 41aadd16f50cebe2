"""The plugin contract.

Plugins implement these hooks with ``@hookimpl`` and are discovered through the
``lemon`` entry-point group. Every hook is synchronous: registration hooks return plain
data, decision hooks answer a question about that data, and the core performs all I/O.
An ``async def`` implementation is rejected when the plugin loads.

First-result hooks (``firstresult=True``) stop at the first implementation that returns
something other than ``None``; return ``None`` to defer to the next plugin and finally to
lemoncore's built-in defaults (``lemoncore.defaults``).

Owner hooks (``install``, ``preflight``, ``launch``, ``normalize_request``) are called only
on the plugin
that registered the backend in question (with its recipe, or as a contribution), so an
implementation never needs to ask "is this mine?".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pluggy

from lemoncore.hosts import HostInfo
from lemoncore.launch import (
    InstallPlan,
    LaunchContext,
    LaunchSpec,
    Migration,
    PinRefresher,
    Runner,
    StartupTask,
)
from lemoncore.lock import Pin
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Device,
    ModelInfo,
    Recipe,
    SlotPolicy,
)

PROJECT = "lemon"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# Registration hooks: called once per plugin at load; results are validated then merged.


@hookspec
def register_recipes() -> Sequence[Recipe]:
    """Return the recipes this plugin owns (with their own backends)."""
    raise NotImplementedError


@hookspec
def register_backends() -> Sequence[BackendContribution]:
    """Return backends this plugin adds to recipes, including recipes owned by other plugins."""
    raise NotImplementedError


@hookspec
def register_models() -> Sequence[ModelInfo]:
    """Return catalogue models this plugin publishes."""
    raise NotImplementedError


@hookspec
def register_lock() -> Mapping[str, Any]:
    """Return this plugin's lock data (see ``lemoncore.lock``): pinned versions and hashes."""
    raise NotImplementedError


# Decision hooks: pure and fast, called with the resolved backend and options of a load.


@hookspec(firstresult=True)
def effective_device(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> Device | None:
    """Return the device a server of ``recipe`` on ``backend`` with ``options`` occupies."""
    raise NotImplementedError


@hookspec(firstresult=True)
def effective_is_amd_gpu(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> bool | None:
    """Return whether such a server occupies an AMD GPU (used for GPU exclusivity)."""
    raise NotImplementedError


@hookspec(firstresult=True)
def slot_policy(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> SlotPolicy | None:
    """Return how such a server counts against the router's slots."""
    raise NotImplementedError


@hookspec(firstresult=True)
def install(
    recipe: Recipe, backend: Backend, host: HostInfo, config: Mapping[str, Any],
    pin: Pin | None,
) -> InstallPlan | None:
    """Owner hook. Return where the backend's executable comes from: pinned artifacts, or
    a location.

    ``pin`` is the merged lock's entry for this backend on this platform (``None`` when
    nothing is pinned); ``config`` is the recipe's section of the administrator's
    configuration, checked against the declared options. The core downloads, verifies,
    extracts and commits the artifacts; the plugin never does I/O here.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def refresher(
    recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin
) -> PinRefresher | None:
    """Owner hook. Return an object whose ``async latest()`` asks the publisher what
    ``pin``'s name (a container image's tag) points at now, for ``lemon lock refresh``;
    ``None`` when the pin cannot be refreshed. No I/O here: the core awaits ``latest``.
    Works whatever the host (a maintainer refreshes pins on any machine).
    """
    raise NotImplementedError


@hookspec
def migrations() -> Sequence[Migration]:
    """Return what earlier installs left that this plugin's backends replace (found by
    checking a few paths: fast, no other I/O). ``lemon backends migrate`` lists them and
    removes one only when the user confirms; the plugin should also point at it (an
    ``action`` in its install plan, a notice at startup)."""
    raise NotImplementedError


@hookspec
def startup_tasks(instance: str) -> Sequence[StartupTask]:
    """Return coroutine functions the core awaits once when the server starts (a sweep of
    leftovers, say). ``instance`` identifies this lemoncore installation."""
    raise NotImplementedError


@hookspec
def preflight(
    recipe: Recipe, backend: Backend, model: ModelInfo, model_path: Path,
    config: Mapping[str, Any], host: HostInfo
) -> None:
    """Owner hook. Raise ``lemoncore.launch.LaunchRefused`` (saying why and the fix) when a
    load of ``model`` from ``model_path`` cannot work here: a model architecture the
    engine cannot run, a GPU it refuses. Called before anything is evicted or spawned, and
    by dry runs when the file is present; read at most the file's header.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def launch(
    recipe: Recipe, backend: Backend, model: ModelInfo, context: LaunchContext, host: HostInfo
) -> LaunchSpec | Runner | None:
    """Owner hook. Return the argv and environment that start a server for ``model`` (a
    ``LaunchSpec``), or a ``Runner`` the plugin starts and stops itself.

    ``context.options`` are request-scope options, ``context.config`` admin values. Raise
    ``lemoncore.launch.LaunchRefused`` with a message naming the fix when the request
    cannot be honoured.
    """
    raise NotImplementedError


@hookspec
def normalize_request(
    recipe: Recipe, backend: Backend, endpoint: str, body: dict[str, Any]
) -> None:
    """Owner hook. Adjust an inference request body in place before it is forwarded.

    Raise ``lemoncore.launch.RequestRefused`` for a request the backend cannot serve.
    """
