"""Registration hooks: called once per plugin when it loads; what they return is
validated, then merged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lemoncore.hookspecs.markers import hookspec
from lemoncore.recipes import (
    BackendContribution,
    Endpoint,
    ModelInfo,
    Recipe,
)

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from lemoncore.errors import ErrorShape
    from lemoncore.fieldchecks import FieldCheck


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


@hookspec
def register_endpoints() -> Sequence[Endpoint]:
    """Return the inference endpoints this plugin adds to the API.

    Registration: called once, when the plugin loads; not an owner hook. An ``Endpoint``
    is a JSON ``POST`` whose body names a model (``model``): lemoncore routes it to that
    model's backend with everything chat gets (auth, body limit, loading, queueing,
    disconnect handling, one retry on a dead backend, wedge detection, metrics) and lists
    it in ``/openapi.json``. A backend serves only the paths in its ``Backend.endpoints``
    (default: chat, completions and embeddings); a request for another is a 400 naming
    the backend. A path lemoncore already routes (see ``lemoncore.recipes.core_endpoints()``)
    or under ``/api/v1/`` is skipped with a warning on this plugin.

    :returns: a sequence of ``Endpoint``; empty (or ``None``) when there are none.

    Example::

        @hookimpl
        def register_endpoints() -> list[Endpoint]:
            return [Endpoint(path="/v1/infill", summary="Fill in the middle",
                             required="input_prefix")]

    .. versionadded:: 0.3
    """
    raise NotImplementedError


@hookspec
def register_routes() -> Sequence[BaseRoute]:
    """Return HTTP routes this plugin serves: another API surface over lemoncore.

    Registration: called once, when the plugin loads; not an owner hook. Each item is a
    Starlette route (``Route``, ``WebSocketRoute`` or ``Mount``), served after lemoncore's
    own and the web UI's, behind the same guards: host and cross-site checks, the API key
    (WebSockets included), the body limit; a path whose last segment is ``load``,
    ``unload``, ``pull``, ``delete``, ``install`` or ``uninstall`` needs the admin key (or
    this machine). Handlers reach the core only through
    ``lemoncore.api.gateway.Gateway.of(request)``: list, load, pull and delete models, and
    send inference requests through the same path as ``/v1/*``, with the request's own
    rights (one without the admin key cannot reload, unpin or unload a pinned model). A
    route that could answer a path lemoncore serves (on, under or above ``/v1``,
    ``/api/v1``, ``/ui``, ``/live``, ``/metrics``, ``/openapi.json`` or a routed
    endpoint), a root ``Mount("")`` and a ``Host`` route are skipped with a warning on
    this plugin. Routes are not in ``/openapi.json``: the plugin documents its API.
    ``lemon-plugin-ollama-api`` is the worked example.

    :returns: a sequence of Starlette routes; empty (or ``None``) when there are none.

    Example::

        @hookimpl
        def register_routes() -> list[Route]:
            async def version(request: Request) -> Response:
                return JSONResponse({"version": "1.0"})
            return [Route("/api/version", version)]

    .. versionadded:: 0.3
    """
    raise NotImplementedError


@hookspec
def register_error_shapes() -> Sequence[ErrorShape]:
    """Return how errors look on the paths this plugin's API serves.

    Registration: called once, when the plugin loads; not an owner hook. An API surface
    a plugin adds (``register_routes``) answers in its own shape not only from its
    handlers but for every error lemoncore gives on its paths: a missing API key (401),
    a foreign ``Host`` or ``Origin`` (403), a body over the limit (413), a path or method
    no route serves (404, 405), an error a handler lets through. Each
    ``lemoncore.errors.ErrorShape`` has ``paths`` (answered exactly) and ``prefixes``
    (a path equal to or under one) and a ``render`` function: given the
    ``LemonError`` (its message, ``status``, ``type``, ``code``, ``param``), the JSON
    object to answer with; the status and headers are the error's. lemoncore's own paths
    (``/v1``, ``/api/v1``, ``/ui``, ``/live``, ``/metrics``, ``/openapi.json``, routed
    endpoints) keep lemoncore's shapes: OpenAI's, and Anthropic's on ``/v1/messages``
    and for a client that sends ``anthropic-version``. Where two plugins cover a path,
    the first loaded answers. A ``render`` that raises or returns anything but a JSON
    object leaves that answer in OpenAI's shape, with a warning in the server log.
    ``lemon-plugin-ollama-api`` is the worked example.

    :returns: a sequence of ``ErrorShape``; empty (or ``None``) when the plugin's paths
        answer in OpenAI's shape.

    Example::

        @hookimpl
        def register_error_shapes() -> list[ErrorShape]:
            return [ErrorShape(prefixes=("/api",), paths=("/",),
                               render=lambda error: {"error": str(error)})]

    .. versionadded:: 0.4
    """
    raise NotImplementedError


@hookspec
def register_field_checks() -> Sequence[FieldCheck]:
    """Return the checks ``lemon validate`` runs on a user's machine for this plugin's
    backends, beyond the conformance kit: what only real hardware shows (the device the
    engine ended up on, the container it runs in, the build it reports).

    Registration: called once, when the plugin loads; not an owner hook. Each
    ``lemoncore.fieldchecks.FieldCheck`` has a ``name`` (unique in the plugin),
    a one-line ``description``, a ``function`` and ``backends`` (``recipe:backend`` names;
    empty: all). A plugin's checks run only for backends it registered (like owner
    hooks), in the validating process once the model has answered. The function takes a
    ``FieldContext`` (the validation's server and client, the model's ``/api/v1/health``
    entry, ``engine_log()``) and returns a ``FieldResult`` (facts for the report, and
    ``standin``: why what it saw is not the real engine or hardware); it fails by raising
    ``AssertionError`` with what was wrong, and skips with ``CheckSkipped``. See
    ``docs/validation.md``.

    :returns: a sequence of ``FieldCheck``; empty (or ``None``) when there are none.

    Example::

        @hookimpl
        def register_field_checks() -> list[FieldCheck]:
            def served_name(context: FieldContext) -> FieldResult:
                argv = context.loaded["launch_command"]
                assert context.model in argv, f"{context.model} is not in {argv}"
                return FieldResult({"engine": argv[0]})
            return [FieldCheck("served-name", "the engine is given the model's name",
                               served_name)]

    .. versionadded:: 0.3
    """
    raise NotImplementedError
