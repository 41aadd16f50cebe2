"""The plugin contract: every hook lemoncore calls, with its arguments, what it must
return and an example.

The docstrings of the ``lemoncore.hookspecs`` package (this one's and each hook's, in its
modules ``registration``, ``decisions``, ``owner`` and ``upkeep``) are the one hook
reference: ``docs/hooks.md`` is generated from them (``python -m
lemoncore.hookdoc > docs/hooks.md``), so change them there and regenerate.

Plugins implement hooks as plain functions (or methods) decorated with
``lemoncore.hookimpl`` and are discovered through the ``lemon`` entry-point group (see
``docs/writing-a-plugin.md``). An implementation takes only the arguments it needs: any
subset of the hook's parameters, by name.

**Synchronous.** Every hook is synchronous. Return data, never a coroutine: an ``async
def`` implementation (or an async generator) is rejected when the plugin loads, because
pluggy would take its coroutine as the answer of a first-result hook. What a hook may do
itself depends on where the core calls it:

* registration hooks, at load: read the plugin's own package files;
* decision hooks and ``launch``, ``normalize_request``, on the event loop: no I/O at all
  (they answer from their arguments);
* ``install``, ``refresher`` and ``preflight``, in a worker thread: read local files and
  run quick local probes (the OCI plugin runs ``podman info``, cached for 30 s), never
  downloads.

What takes time or waits (downloads, image pulls, a process's life, network checks) goes
in an object the hook returns and the core awaits: an ``InstallPlan.installer``, a
``Runner`` from ``launch``, what ``refresher`` returns, ``startup_tasks``.

**Registration hooks** (``register_recipes``, ``register_backends``, ``register_models``,
``register_lock``, ``register_endpoints``, ``register_routes``, ``register_error_shapes``,
``register_field_checks``) are called once per plugin when it loads; what they return is
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

from lemoncore.hookspecs.decisions import effective_device, effective_is_amd_gpu, slot_policy
from lemoncore.hookspecs.markers import PROJECT, hookimpl, hookspec
from lemoncore.hookspecs.owner import install, launch, normalize_request, preflight, refresher
from lemoncore.hookspecs.registration import (
    register_backends,
    register_endpoints,
    register_error_shapes,
    register_field_checks,
    register_lock,
    register_models,
    register_recipes,
    register_routes,
)
from lemoncore.hookspecs.upkeep import migrations, startup_tasks

# Every hook, in the reference's order (docs/hooks.md).
HOOKS = (
    register_recipes,
    register_backends,
    register_models,
    register_lock,
    register_endpoints,
    register_routes,
    register_error_shapes,
    register_field_checks,
    effective_device,
    effective_is_amd_gpu,
    slot_policy,
    install,
    refresher,
    preflight,
    launch,
    normalize_request,
    startup_tasks,
    migrations,
)
__all__ = [
    "HOOKS",
    "PROJECT",
    "effective_device",
    "effective_is_amd_gpu",
    "hookimpl",
    "hookspec",
    "install",
    "launch",
    "migrations",
    "normalize_request",
    "preflight",
    "refresher",
    "register_backends",
    "register_endpoints",
    "register_error_shapes",
    "register_field_checks",
    "register_lock",
    "register_models",
    "register_recipes",
    "register_routes",
    "slot_policy",
    "startup_tasks",
]
