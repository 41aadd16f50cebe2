"""Owner hooks: about one backend, called only on the plugin that registered it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lemoncore.hookspecs.markers import hookspec
from lemoncore.hosts import HostInfo
from lemoncore.launch import (
    InstallPlan,
    LaunchContext,
    LaunchSpec,
    PinRefresher,
    Runner,
)
from lemoncore.lock import Pin
from lemoncore.recipes import (
    Backend,
    ModelInfo,
    Recipe,
)


@hookspec(firstresult=True)
def install(
    recipe: Recipe,
    backend: Backend,
    host: HostInfo,
    config: Mapping[str, Any],
    pin: Pin | None,
) -> InstallPlan | None:
    """Return where the backend's executable comes from: pinned artifacts, a location,
    an action the user must take, or an installer.

    Owner hook: called only on the plugin that registered ``backend``. First result, but
    only the owner is asked: ``None`` does not defer, it leaves the backend
    ``action_required`` ("no installed plugin knows how to provide this backend"). The
    core asks whenever it needs the backend's state (``/api/v1/system-info``, ``lemon
    backends``, an install, a load), so no I/O beyond quick checks: the core downloads,
    verifies, extracts and records.

    The plan gives one of: the ``pin``'s ``artifacts`` (the core downloads them,
    verifies each SHA-256, extracts and records them); a ``location`` already on disk; an
    ``action`` the user must take (with a ``message``); or an ``installer`` for
    artifacts the core cannot download (a container image). An installer's ``async
    install(on_progress)`` returns ``Installed(record, models)``: ``record`` (an image ID)
    comes back at launch as ``context.installed["result"]``; ``models`` are
    ``ModelInfo`` objects the artifact itself declares (the OCI plugin reads them from an
    image label), which the core lists while the backend stays installed. ``unsupported``
    (with a ``message``) says the backend cannot run on this host at all, for what
    support rows cannot express. ``runtime="rocm"`` asks the core for its recorded ROCm
    decision, which ``launch`` finds in ``context.runtime_env``.

    :param recipe: the recipe the backend belongs to.
    :param backend: the backend to provide.
    :param host: this machine: its OS and devices.
    :param config: the recipe's configuration section, checked against the declared
        options, with their defaults (both scopes).
    :param pin: the merged lock's entry for this backend on this platform; ``None`` when
        nothing is pinned.
    :returns: an ``InstallPlan``, or ``None`` when the plugin cannot provide the backend.

    Example::

        @hookimpl
        def install(backend: Backend, pin: Pin | None) -> InstallPlan:
            if pin is None:
                return InstallPlan("", message="nothing pinned here",
                                   action="use another backend")
            return InstallPlan(pin.version, artifacts=pin.artifacts)

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
       Called only on the backend's owner (before: a first-result hook over every
       plugin); ``config`` holds declared, checked options.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def refresher(
    recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin
) -> PinRefresher | None:
    """Return an object whose ``async latest()`` asks the publisher what ``pin``'s name (a
    container image's tag) points at now, for ``lemon lock refresh``.

    Owner hook: called only on the plugin that registered ``backend``. First result, but
    only the owner is asked: ``None`` does not defer, it means the pin cannot be
    refreshed. Called for each platform of each pin that has artifacts, whatever the host
    (a maintainer refreshes pins where the backend cannot run). No I/O in the hook: the
    core awaits ``latest()``, which returns the new ``Artifact``; an exception it raises
    is reported for that pin alone. ``lemon lock refresh`` shows old -> new (with
    ``--check``, for CI, it exits 1 when a pin is stale or a publisher could not be
    asked) and records accepted pins in ``<cache_dir>/refreshed-lock.json``, loaded after
    every other lock source.

    :param recipe: the recipe the backend belongs to.
    :param backend: the backend whose pin is refreshed.
    :param config: the recipe's configuration section, checked, with defaults.
    :param pin: the pin for one platform, with at least one artifact.
    :returns: a ``PinRefresher`` (an object with ``async latest() -> Artifact``), or
        ``None`` when the pin cannot be refreshed.

    Example::

        @hookimpl
        def refresher(pin: Pin) -> TagRefresher | None:
            return TagRefresher(*parse_tagged(pin.artifacts[0].url))  # the OCI plugin's

    .. versionadded:: 0.2
    """
    raise NotImplementedError


@hookspec
def preflight(
    recipe: Recipe,
    backend: Backend,
    model: ModelInfo,
    model_path: Path,
    config: Mapping[str, Any],
    host: HostInfo,
    options: Mapping[str, Any],
) -> None:
    """Refuse a load of ``model`` from ``model_path`` that cannot work here: a model
    architecture the engine cannot run, a GPU it refuses.

    Owner hook: called only on the plugin that registered ``backend``. lemoncore calls it
    once the model file is present and **before anything is evicted or spawned**, so a
    refused load costs the user nothing (again after a download arrives); ``dry_run`` and
    ``lemon explain`` call it too when the file is already local, and show the refusal.
    Read at most the file's header.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param model: the model being loaded.
    :param model_path: the model file, resolved and present.
    :param config: the load's admin-scope options.
    :param host: this machine: its OS and devices.
    :param options: the load's request-scope options, checked against their declared
        types (what ``LaunchContext.options`` will hold): refuse values the engine cannot
        apply here, before the server they would replace is stopped.
    :returns: nothing: returning is consent; the value is ignored.
    :raises LaunchRefused: saying why and the fix, when the load cannot work here.

    Example::

        @hookimpl
        def preflight(model_path: Path) -> None:
            with model_path.open("rb") as f:
                if f.read(4) != b"GGUF":
                    raise LaunchRefused(f"{model_path.name} is not a GGUF file")

    .. versionadded:: 0.2
    .. versionchanged:: 0.3
       ``options``, the load's request-scope options.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def launch(
    recipe: Recipe, backend: Backend, model: ModelInfo, context: LaunchContext, host: HostInfo
) -> LaunchSpec | Runner | None:
    """Return the argv and environment that start a server for ``model`` (a
    ``LaunchSpec``), or a ``Runner`` the plugin starts and stops itself.

    Owner hook: called only on the plugin that registered ``backend``. First result, but
    only the owner is asked: ``None`` does not defer, the load fails ("no plugin launches
    recipe:backend"). A ``LaunchSpec`` (argv, env, health path) is a native process the
    core spawns and supervises; it polls the health path until it answers 200. A
    ``Runner`` can subclass ``lemoncore.launch.Lifecycle``, the state machine
    ``starting -> ready -> draining -> stopped | crashed`` (``state``, ``exited``,
    ``crashed``, ``on_exit``; call ``mark_ready()`` when started, ``begin_stop()`` before
    stopping, ``mark_exited()`` once it has ended), as the OCI plugin's containers and
    lemoncore's own processes do.

    ``context`` has the model file (resolved, inside a model directory), the
    request-scope ``options`` and the admin-scope ``config``, the install directory,
    loopback host and free port, lemoncore's pid, the runtime environment
    (``runtime_env``: the recorded ROCm runtime), the install record (``installed``), and
    ``backend_key``: a fresh secret lemoncore sends as ``Authorization: Bearer`` on every
    request to this server. If the engine can require a key, make it (through the
    environment, not argv, which ``/health`` shows): its loopback port is otherwise open
    to every local program and web page.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param model: the model being loaded.
    :param context: everything about this launch (``LaunchContext``).
    :param host: this machine: its OS and devices.
    :returns: a ``LaunchSpec`` or a ``Runner``; ``None`` fails the load.
    :raises LaunchRefused: with the fix, for a launch that must not happen.

    Example::

        @hookimpl
        def launch(context: LaunchContext) -> LaunchSpec:
            return LaunchSpec(argv=(str(context.install_dir / "mine-server"), "--model",
                                    str(context.model_path), "--port", str(context.port)))

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
       Called only on the backend's owner (before: a first-result hook over every
       plugin); ``context`` gained ``config`` (admin values, no longer in ``options``),
       ``model_owned`` and ``backend_key``.
    """
    raise NotImplementedError


@hookspec
def normalize_request(
    recipe: Recipe, backend: Backend, endpoint: str, body: dict[str, Any], surface: str
) -> None:
    """Adjust an inference request body in place before it is forwarded to the backend.

    Owner hook: called only on the plugin that registered ``backend``, on every
    inference request the backend serves. Make it idempotent: a request retried after a
    backend failure is normalized again.

    :param recipe: the recipe of the loaded model.
    :param backend: the backend serving the request.
    :param endpoint: the OpenAI path, such as ``/v1/chat/completions``.
    :param body: the request's JSON body, to change in place.
    :param surface: the path the client called: ``endpoint`` itself, or the API lemoncore
        translates from (``/v1/messages``, ``/v1/responses``, or a plugin's route such as
        Ollama's ``/api/chat``) when the body is lemoncore's translation of it.
    :returns: nothing; the value is ignored.
    :raises RequestRefused: for a request the backend cannot serve (answered with a 400).

    Example::

        @hookimpl
        def normalize_request(endpoint: str, body: dict) -> None:
            if "repeat_penalty" in body:
                body["repetition_penalty"] = body.pop("repeat_penalty")

    .. versionadded:: 0.1
    .. versionchanged:: 0.2
       Called only on the backend's owner (before: on every plugin).
    .. versionchanged:: 0.4
       ``surface``.
    """
