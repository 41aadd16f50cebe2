"""The plugin contract: every hook lemoncore calls, with its arguments, what it must
return and an example.

The docstrings of ``lemoncore/hookspecs.py`` (this module's and each hook's) are the
one hook reference: ``docs/hooks.md`` is generated from them (``python -m
lemoncore.hookdoc > docs/hooks.md``), so change them there and regenerate.

Plugins implement hooks as plain functions (or methods) decorated with
``lemoncore.hookimpl`` and are discovered through the ``lemon`` entry-point group (see
``docs/writing-a-plugin.md``). An implementation takes only the arguments it needs: any
subset of the hook's parameters, by name.

**Synchronous.** Every hook is synchronous: registration hooks return plain data,
decision hooks answer a question about that data, and the core performs all I/O. Return
data, never a coroutine: an ``async def`` implementation (or an async generator) is
rejected when the plugin loads, because pluggy would take its coroutine as the answer of
a first-result hook. What must be awaited goes in an object the hook returns and the core
awaits (``startup_tasks``, ``refresher``, an ``InstallPlan.installer``).

**Registration hooks** (``register_recipes``, ``register_backends``, ``register_models``,
``register_lock``) are called once per plugin when it loads; what they return is
validated, then merged. A plugin that fails to import, implements an unknown or
``async def`` hook, or contributes invalid data is unregistered and shown as ``failed``
with its error (``lemon plugins``, ``/api/v1/system-info``); the others load regardless.

**Decision hooks** (``effective_device``, ``effective_is_amd_gpu``, ``slot_policy``) are
pure and fast. They are asked once per load, with the selected backend and the resolved
options; the router stores the answers on the loaded server and the eviction policy only
ever reads those stored answers. ``POST /api/v1/load`` with ``"dry_run": true`` (or
``lemon explain MODEL``) shows the answers and the evictions they cause. Most plugins
implement none of them.

**First result.** A first-result hook (``firstresult=True``) stops at the first
implementation that returns something other than ``None``: return ``None`` to defer to
the next plugin and finally to lemoncore's built-in defaults (``lemoncore/defaults.py``,
registered like a plugin with ``trylast=True``).

**Owner hooks.** ``install``, ``refresher``, ``preflight``, ``launch`` and
``normalize_request`` are about one backend, and lemoncore calls them only on the plugin
that registered that backend (in its recipe from ``register_recipes``, or as a
``register_backends`` contribution). Never check "is this mine?": a backend another
plugin adds to your recipe goes to that plugin, and yours never reach it. Only the owner
is asked, so an owner hook's ``None`` is its answer, not a deferral. The conformance kit
(``lemoncore.conformance``) checks this with a second plugin that answers everything.
Before 0.2, ``install`` and ``launch`` were first-result hooks over every plugin and
``normalize_request`` was called on every plugin (see ``docs/compatibility.md``).

**Options.** Declare every option your engine reads as an ``OptionSpec`` on the recipe
(or on one backend, ``Backend.options``) with its ``type`` (``int``, ``float``, ``bool``,
``str``, ``list``, ``args``; inferred from ``default``), ``minimum``/``maximum`` or
``choices``, and ``scope``: ``request`` (a ``/load`` body or a model may set it) or
``admin`` (configuration only: paths, binaries, trust). lemoncore checks every value
before a load and hands them over apart: ``context.options`` (request scope) and
``context.config`` (admin scope). An engine command line is an ``args`` option listing
the ``ArgFlag`` entries it accepts (numbers and fixed words, never paths); lemoncore
refuses any other flag and adds the admin option ``<name>_allow``.

**Errors.** When a decision or owner hook raises anything but lemoncore's own
exceptions, the core reports a ``PluginError`` naming the hook. ``LaunchRefused`` and
``RequestRefused`` (from ``lemoncore.launch``) reach the user as they are: their message
says what was wrong and how to fix it.
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
    """Return the recipes this plugin owns, each with its own backends.

    Registration: called once, when the plugin loads; not an owner hook. Each ``Recipe``
    carries its backends (``Backend``: name, ``support`` rows, ``tier``, ``format``,
    optional ``slot_policy``, ``max_concurrency`` and ``options``) and its options
    (``OptionSpec``). The plugin owns every backend of its recipes: the owner hooks for
    them are called on it. A recipe name another plugin already owns fails this plugin
    (reported by ``lemon plugins``). A backend claiming tier ``core`` is listed as
    ``community`` unless lemoncore's registry grants it. A backend that serves one
    request at a time sets ``Backend.max_concurrency = 1``: the core queues the rest
    (``max_queue``, then 503 with ``Retry-After``), so clients never see the engine's own
    "busy" answer.

    :returns: a sequence of ``Recipe``; empty (or ``None``) when the plugin owns none.

    Example::

        @hookimpl
        def register_recipes() -> list[Recipe]:
            row = SupportRow(os={"linux"}, devices={DeviceKind.CPU: frozenset()})
            return [Recipe(name="mine", display_name="Mine",
                           backends=(Backend(name="cpu", support=(row,)),))]

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec
def register_backends() -> Sequence[BackendContribution]:
    """Return backends this plugin adds to recipes, including recipes other plugins own.

    Registration: called once, when the plugin loads; not an owner hook. Contributions
    are applied once every plugin has loaded. One naming a recipe that is not installed,
    or a backend the recipe already defines, is skipped with a warning on this plugin
    (``lemon plugins``), not a failure. The contributing plugin owns the backend: the
    owner hooks for it are called on this plugin, never on the recipe's owner.

    :returns: a sequence of ``BackendContribution`` (a recipe name and a ``Backend``);
        empty (or ``None``) when there are none.

    Example::

        @hookimpl
        def register_backends() -> list[BackendContribution]:
            return [BackendContribution(recipe="llamacpp",
                                        backend=Backend(name="boxed", support=(row,)))]

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec
def register_models() -> Sequence[ModelInfo]:
    """Return the catalogue models this plugin publishes.

    Registration: called once, when the plugin loads; not an owner hook. A ``ModelInfo``
    has a ``name``, its ``recipe`` and a ``checkpoint`` (``owner/repo:file.gguf`` on
    Hugging Face, ``file:/path``, or ``pkg:package/path`` inside a wheel), and may have
    ``labels``, ``aliases``, ``recipe_options`` (``backend`` among them selects the
    backend), and ``files``, ``sha256`` and ``sizes`` for a model of several files. A
    model whose recipe is not installed is skipped with a warning on this plugin.

    :returns: a sequence of ``ModelInfo``; empty (or ``None``) when there are none.

    Example::

        @hookimpl
        def register_models() -> list[ModelInfo]:
            return [ModelInfo(name="mine-small", recipe="mine",
                              checkpoint="owner/repo:small.gguf")]

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec
def register_lock() -> Mapping[str, Any]:
    """Return this plugin's lock data: pinned versions and artifacts with SHA-256 and
    provenance.

    Registration: called once, when the plugin loads; not an owner hook. The format is
    ``lemoncore.lock``'s: ``{"backends": {recipe: {backend: {"version": ...,
    "platforms": {"linux-x86_64": [{"url": ..., "sha256": ..., "provenance": ...}]}}}}}``.
    It is validated at load: malformed lock data fails the plugin. Later sources replace
    earlier ones per backend: lemoncore's own lock, the plugins', the administrator's
    ``lock_files``, then accepted refreshes (``lemon lock refresh``). The ``install``
    hook receives the merged entry for its backend as ``pin``.

    :returns: the lock data, a mapping.

    Example::

        @hookimpl
        def register_lock() -> dict:
            return json.loads(files(__package__).joinpath("lock.json").read_text())

    .. versionadded:: 0.1
    """
    raise NotImplementedError


# Decision hooks: pure and fast, called with the resolved backend and options of a load.


@hookspec(firstresult=True)
def effective_device(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> Device | None:
    """Return the device a server of ``recipe`` on ``backend`` with ``options`` occupies.

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default, which derives the device from the backend's support
    rows: the device kinds the rows name for this OS, narrowed to those present on the
    host; when one device class remains, that is the device, otherwise the recipe's
    ``default_device``. Answer only when that is not enough (the options choose the
    device).

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices.
    :returns: the ``Device`` (``cpu``, ``gpu``, ``npu``), or ``None`` to defer.

    Example::

        @hookimpl
        def effective_device(backend: Backend, options: Mapping) -> Device | None:
            if backend.name == "mine" and options.get("cpu_only"):
                return Device.CPU
            return None

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def effective_is_amd_gpu(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> bool | None:
    """Return whether such a server occupies an AMD GPU (used for GPU exclusivity,
    ``exclusive_gpu``).

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default: the device kinds the backend's rows name for this OS,
    narrowed to those present on the host, are exactly ``amd_gpu``. So a ``rocm`` backend
    whose only row is ``amd_gpu`` is on an AMD GPU and a ``cpu`` backend is not, whatever
    the recipe's ``default_device`` says. A backend whose rows span vendors needs an
    answer when the options decide the device: a Vulkan backend on a host with both AMD
    and NVIDIA GPUs, where the chosen device index decides.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices (``host.devices``).
    :returns: ``True`` or ``False``, or ``None`` to defer.

    Example::

        @hookimpl
        def effective_is_amd_gpu(recipe: Recipe, backend: Backend, options, host: HostInfo):
            mine = (recipe.name, backend.name) == ("llamacpp", "vulkan")
            if not mine or "vulkan_device" not in options:
                return None  # defer: the next plugin, then lemoncore's derivation, answers
            gpus = [d for d in host.devices if d.kind is not DeviceKind.CPU]
            return gpus[int(options["vulkan_device"])].kind is DeviceKind.AMD_GPU

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def slot_policy(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> SlotPolicy | None:
    """Return how such a server counts against the router's slots.

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default, ``backend.slot_policy`` or else
    ``recipe.slot_policy`` (the static policy). Implement it only when options change the
    policy.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices.
    :returns: the ``SlotPolicy``, or ``None`` to defer.

    Example::

        @hookimpl
        def slot_policy(recipe: Recipe, options: Mapping) -> SlotPolicy | None:
            if recipe.name == "mine" and options.get("remote"):
                return SlotPolicy.UNMETERED
            return None

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def install(
    recipe: Recipe, backend: Backend, host: HostInfo, config: Mapping[str, Any],
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
def preflight(
    recipe: Recipe, backend: Backend, model: ModelInfo, model_path: Path,
    config: Mapping[str, Any], host: HostInfo
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
    :returns: nothing: returning is consent; the value is ignored.
    :raises LaunchRefused: saying why and the fix, when the load cannot work here.

    Example::

        @hookimpl
        def preflight(model_path: Path) -> None:
            with model_path.open("rb") as f:
                if f.read(4) != b"GGUF":
                    raise LaunchRefused(f"{model_path.name} is not a GGUF file")

    .. versionadded:: 0.2
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
    ``Runner`` can subclass ``lemoncore.launch.ExitTracking`` for its end-of-life
    bookkeeping (``exited``, ``crashed``, ``on_exit``; call ``_mark_exited()`` once when
    it ends), as the OCI plugin's containers and lemoncore's own processes do.

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
    recipe: Recipe, backend: Backend, endpoint: str, body: dict[str, Any]
) -> None:
    """Adjust an inference request body in place before it is forwarded to the backend.

    Owner hook: called only on the plugin that registered ``backend``, on every
    inference request the backend serves. Make it idempotent: a request retried after a
    backend failure is normalized again.

    :param recipe: the recipe of the loaded model.
    :param backend: the backend serving the request.
    :param endpoint: the OpenAI path, such as ``/v1/chat/completions``.
    :param body: the request's JSON body, to change in place.
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
    """
