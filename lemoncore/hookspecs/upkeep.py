"""Upkeep hooks: what the core awaits at startup and what earlier installs left."""

from __future__ import annotations

from collections.abc import Sequence

from lemoncore.hookspecs.markers import hookspec
from lemoncore.launch import (
    Migration,
    StartupTask,
)


@hookspec
def startup_tasks(instance: str) -> Sequence[StartupTask]:
    """Return coroutine functions the core awaits once when the server starts (a sweep of
    leftovers, say).

    Called on every plugin when the server starts (the app's lifespan); not an owner
    hook. The tasks are awaited one after another before the server answers requests; a
    failing task is logged, never fatal.

    :param instance: identifies this lemoncore installation (a hash of its cache
        directory): the label for what it owns, such as containers it may sweep.
    :returns: the tasks, each a ``Callable[[], Awaitable[None]]``; an empty sequence (or
        ``None``) for none.

    Example::

        @hookimpl
        def startup_tasks(instance: str) -> list:
            async def sweep() -> None: ...
            return [sweep]

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec
def migrations() -> Sequence[Migration]:
    """Return what earlier installs left that this plugin's backends replace (Lemonade's
    native DS4, say).

    Called on every plugin whenever ``lemon backends migrate`` runs; not an owner hook.
    Check a few paths; no other I/O. ``lemon backends migrate`` lists them, and ``lemon
    backends migrate NAME`` removes a migration's paths only when the user confirms
    (``--yes`` or the prompt). A plugin whose hook raises contributes none (logged).
    Point at it yourself too: an ``action`` in the install plan, a notice at startup.

    :returns: a sequence of ``Migration`` (a name, a message, the paths to remove);
        empty (or ``None``) when there is nothing to migrate.

    Example::

        @hookimpl
        def migrations() -> Sequence[Migration]:
            old = Path.home() / ".cache/lemonade/bin/ds4/rocm"
            if not old.is_dir():
                return []
            return [Migration("ds4", f"{old} is replaced by ds4:rocm", (old,))]

    .. versionadded:: 0.2
    """
    raise NotImplementedError
