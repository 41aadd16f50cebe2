"""The route table, and ``GET /openapi.json`` generated from it.

Each :class:`~lemoncore.api.operation.Operation` of :data:`OPERATIONS` (lemoncore's own)
and of :func:`~lemoncore.api.routed_operations.routed` (one per routed endpoint) names its
handler, what it accepts and what it answers per status. The app's routes
(:func:`lemoncore.app.create_app`) and the document (:mod:`lemoncore.api.apidoc`) both
come from :func:`operations`: an endpoint cannot be served without being documented, and
the document says what the handlers validate and build.
"""

from __future__ import annotations

import dataclasses
import functools

from pydantic import JsonValue
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lemoncore.api import (
    anthropic_models,
    apidoc,
    bodies,
    definitions,
    engine_routes,
    events,
    logs,
    manage,
    model_list,
    model_options,
    replies,
    shutdown,
    system_info,
    telemetry,
)
from lemoncore.api.operation import LEMONADE, OPENAI, Media, Operation
from lemoncore.api.routed_operations import ENGINE_ANSWER, INFERENCE_ERRORS, routed
from lemoncore.recipes import Endpoint
from lemoncore.serving.history import HISTORY_SIZE


def _progress_events(complete: Media) -> dict[str, Media]:
    return {"progress": replies.Progress, "complete": complete, "error": replies.StreamError}


_STREAMED = (
    "With `stream`, a `text/event-stream` of `progress` events (bytes of every "
    "file together), then one `complete` event (the answer without `status`) or "
    "one `error` event."
)
_ANTHROPIC_SHAPE = (
    "An Anthropic client (it sends `anthropic-version`) gets Anthropic's "
    "Models API shape, errors included; any other caller OpenAI's."
)


async def serve(request: Request) -> Response:
    """``GET /openapi.json``."""
    return JSONResponse(document(request.app.state.core.plugins.registry.endpoints_tuple()))


RERANK_ALIASES = ("/reranking", "/reranker")  # Lemonade's names of /v1/rerank


def operations(endpoints: tuple[Endpoint, ...]) -> tuple[Operation, ...]:
    """Every operation: lemoncore's own, one per routed endpoint, and Lemonade's other
    names of ``/v1/rerank`` (``src/cpp/server/server.cpp``: ``rerank``, ``reranking``
    and ``reranker`` route to one handler)."""
    aliases = (
        dataclasses.replace(routed(e), route=alias)
        for e in endpoints
        if e.path == "/v1/rerank"
        for alias in RERANK_ALIASES
    )
    return (*OPERATIONS, *(routed(e) for e in endpoints), *aliases)


def _param(
    name: str, where: str, schema: dict[str, JsonValue], required: bool = True
) -> dict[str, JsonValue]:
    return {"name": name, "in": where, "required": required, "schema": schema}


_MODEL_QUERY = _param("model", "query", {"type": "string"}, required=False)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/live",
        manage.live,
        "Liveness",
        ok={"application/json": replies.Live},
        description="Needs no key, and answers browsers from any site.",
    ),
    Operation(
        "GET",
        "/metrics",
        manage.metrics,
        "Prometheus metrics",
        ok={"text/plain": {"type": "string"}},
        ok_description="Prometheus text "
        "exposition: evictions by reason, loads, loaded models, tokens by model",
    ),
    Operation(
        "GET",
        "/openapi.json",
        serve,
        "This document",
        description="Needs no key.",
        ok={"application/json": {"type": "object"}},
    ),
    Operation(
        "GET",
        "/models",
        model_list.list_models,
        "Models",
        prefix=OPENAI,
        description="Downloaded models; with `show_all`, every model of the "
        "catalogue (except models that only run on an experimental "
        "backend that is not installed). " + _ANTHROPIC_SHAPE + " "
        "A page of at most `limit` models (20 unless given), "
        "after `after_id` or before `before_id`.",
        parameters=(
            {
                "name": "show_all",
                "in": "query",
                "required": False,
                "description": "Case-insensitive; `true`, `1` or `yes` lists every model",
                "schema": {"type": "string", "enum": list(model_list.FLAG)},
            },
            *anthropic_models.LIST_PARAMETERS,
        ),
        ok={"application/json": (replies.ModelList, anthropic_models.AnthropicModelList)},
        errors=(400,),
    ),
    *(
        Operation(
            method,
            "/models/{model_id:path}/options",
            handler,
            summary,
            prefix=LEMONADE,
            errors=(400, 404),
            parameters=(
                {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}},
            ),
            description=model_options.DESCRIPTION,
            ok={"application/json": model_options.ModelOptions},
        )
        for method, handler, summary in (
            ("GET", model_options.get_options, "A model's saved and effective options"),
            ("POST", model_options.post_options, "Save options for a model"),
            ("DELETE", model_options.delete_options, "Clear a model's saved options"),
        )
    ),
    Operation(
        "GET",
        "/models/{model_id:path}",
        model_list.get_model,
        "A model",
        prefix=OPENAI,
        errors=(400, 404),
        description=_ANTHROPIC_SHAPE,
        parameters=(
            {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}},
            anthropic_models.HEADER,
        ),
        ok={"application/json": (replies.ModelCard, anthropic_models.AnthropicModel)},
    ),
    Operation(
        "GET",
        "/health",
        manage.health,
        "Loaded models",
        prefix=LEMONADE,
        ok={"application/json": replies.Health},
    ),
    Operation(
        "POST",
        "/load",
        manage.load,
        "Load a model",
        prefix=LEMONADE,
        body=bodies.LoadBody,
        ok={"application/json": (replies.Loaded, replies.LoadPlanReply)},
        ok_description="Loaded, or with `dry_run` the plan",
        errors=(400, 403, 404, 409, 500, 502, 503),
        description="Only options the recipe and backend declare for requests; "
        "`GET /api/v1/system-info` lists them with their types and "
        "bounds.",
    ),
    Operation(
        "POST",
        "/unload",
        manage.unload,
        "Unload a model, or all",
        prefix=LEMONADE,
        body=bodies.UnloadBody,
        body_required=False,
        ok={"application/json": replies.Done},
        errors=(400, 404),
    ),
    Operation(
        "POST",
        "/pull",
        manage.pull,
        "Download (and register) a model",
        prefix=LEMONADE,
        body=bodies.PullBody,
        description=_STREAMED,
        ok={"application/json": replies.Pulled},
        errors=(400, 403, 404, 502, 503),
        events=_progress_events(replies.PullResult),
    ),
    Operation(
        "POST",
        "/models/register",
        definitions.register,
        "Register a model or collection; download nothing",
        prefix=LEMONADE,
        body=bodies.ModelDefinition,
        description="A Lemonade `owner/repo:VARIANT` checkpoint is kept as given "
        "(the hub is not asked) until the model is first pulled or loaded.",
        ok={"application/json": replies.Registered},
        errors=(400, 403, 409),
    ),
    Operation(
        "POST",
        "/delete",
        manage.delete,
        "Remove a downloaded model",
        prefix=LEMONADE,
        body=bodies.DeleteBody,
        ok={"application/json": replies.Done},
        errors=(400, 422),
    ),
    Operation(
        "POST",
        "/install",
        manage.install,
        "Install a backend",
        prefix=LEMONADE,
        body=bodies.InstallBody,
        description="Install a backend or `runtime:therock`. With "
        '`"trust_download": true`, an artifact whose pin has no SHA-256 '
        "is downloaded once and its SHA-256 pinned (trust on first use; "
        "the answer lists what was trusted). " + _STREAMED,
        ok={"application/json": (replies.BackendInstalled, replies.RuntimeInstalled)},
        errors=(400, 403, 404, 503),
        events=_progress_events((replies.BackendInstallResult, replies.RuntimeInstallResult)),
    ),
    Operation(
        "POST",
        "/uninstall",
        manage.uninstall,
        "Uninstall a backend",
        prefix=LEMONADE,
        body=bodies.UninstallBody,
        ok={"application/json": replies.Uninstalled},
        errors=(400, 404),
    ),
    Operation(
        "GET",
        "/system-info",
        system_info.system_info,
        "Devices, recipes, plugins",
        prefix=LEMONADE,
        ok={"application/json": system_info.SystemInfo},
        description="Devices, recipes with each backend's state, message and fix and "
        "the options loads may set, and every plugin's load status.",
    ),
    Operation(
        "GET",
        "/stats",
        telemetry.stats,
        "The last answer's tokens and speed",
        prefix=LEMONADE,
        description="Input, output, prompt and cached tokens and the speed of the last "
        "answer an engine gave, and totals since the server started.",
        ok={"application/json": telemetry.Stats},
    ),
    Operation(
        "POST",
        "/tokenize",
        engine_routes.tokenize,
        "Text to tokens",
        prefix=LEMONADE,
        description="The routed `/tokenize`; without `model`, the loaded model used last.",
        engine=True,
        errors=INFERENCE_ERRORS,
        ok={"application/json": ENGINE_ANSWER},
    ),
    Operation(
        "GET",
        "/slots",
        engine_routes.slots,
        "The engine's slots",
        prefix=LEMONADE,
        description="llama-server's `GET /slots` of `model` (a query parameter), else of "
        "the loaded model used last.",
        parameters=(_MODEL_QUERY,),
        engine=True,
        errors=(400, 404, 502),
        ok={"application/json": ENGINE_ANSWER},
    ),
    Operation(
        "POST",
        "/slots/{slot_id:int}",
        engine_routes.slot_action,
        "An action on one of the engine's slots",
        prefix=LEMONADE,
        description="llama-server's `POST /slots/{id}?action=erase` of `model`, else of the "
        "loaded model used last: the slot's KV cache is dropped. `save` and `restore` are "
        "refused 501 `not_supported_error` (they would write KV caches to the server's disk).",
        parameters=(
            _param("slot_id", "path", {"type": "integer"}),
            _param("action", "query", {"type": "string", "enum": list(engine_routes.SLOT_ACTIONS)}),
            _MODEL_QUERY,
        ),
        body_required=False,
        engine=True,
        errors=(400, 404, 501, 502),
        ok={"application/json": ENGINE_ANSWER},
    ),
    Operation(
        "GET",
        "/logs",
        logs.logs,
        "The server's recent log lines",
        prefix=LEMONADE,
        description=logs.DESCRIPTION,
        parameters=logs.PARAMETERS,
        errors=(400,),
        ok={"application/json": replies.LogEntries},
        events={"line": replies.LogEntry},
    ),
    Operation(
        "GET",
        "/events",
        events.events,
        "What happened to each model",
        prefix=LEMONADE,
        description="Since the server started: each model's loads, unloads (`kind` says "
        "why: asked for, idle, or the eviction's reason), crashes and failed starts, the "
        f"newest {HISTORY_SIZE} kept; and crashes counted per model.",
        parameters=events.PARAMETERS,
        errors=(400,),
        ok={"application/json": events.ModelEvents},
    ),
    Operation(
        "POST",
        "/shutdown",
        shutdown.shutdown,
        "Stop the server",
        prefix=LEMONADE,
        description="Refuse new requests, give in-flight ones `stop_grace` seconds, stop "
        "every backend, and exit (what SIGTERM does; how `lemon stop` stops a server). "
        "Admin-only. The answer comes before the drain.",
        ok={"application/json": shutdown.ShuttingDown},
    ),
)


@functools.cache
def document(endpoints: tuple[Endpoint, ...]) -> apidoc.Document:
    """The OpenAPI 3.1 document of :func:`operations` (built once per set of endpoints)."""
    return apidoc.build(operations(endpoints))
