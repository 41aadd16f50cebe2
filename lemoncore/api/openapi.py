"""The route table and the OpenAPI 3.1 document generated from it.

Each :class:`Operation` names its handler, what it accepts (a model of
:mod:`lemoncore.api.bodies`) and what it answers per status (models of
:mod:`lemoncore.api.replies`). The app's routes (:func:`lemoncore.app.create_app`) and
``GET /openapi.json`` both come from :data:`OPERATIONS`: an endpoint cannot be served
without being documented, and the document says what the handlers validate and build.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lemoncore.api import bodies, inference, logs, manage, replies
from lemoncore.api.guard import required_key
from lemoncore.recipes import Endpoint

Handler = Callable[[Request], Awaitable[Response]]
# What a 200 answers: per media type, a reply model, several (one of them), or a schema.
Media = type[BaseModel] | tuple[type[BaseModel], ...] | Mapping[str, Any]

OPENAI, LEMONADE = "/v1", "/api/v1"  # each served under both; documented under one

ERRORS: dict[int | str, str] = {
    400: "A bad body or field (`param` names it); `invalid_option` for an unknown, "
         "mistyped or administrator-only option",
    401: "A missing or wrong API key",
    403: "A refused caller: `host_not_allowed`, `cross_site_request`, "
         "`remote_admin_refused`; an experimental backend without consent; a model file "
         "outside the model directories",
    404: "Unknown model, backend or route",
    409: "Every slot is pinned",
    413: "Body too large",
    422: "Model not found",
    500: "`invalid_configuration`: a bad `[recipes.*]` section",
    502: "The backend failed",
    503: "The backend could not start or install, or the server is busy: `queue_full`, "
         "`model_loading`, `backend_cooldown`, `shutting_down` (with `Retry-After`)",
    "4XX": "The engine refused the request: its own OpenAI error object and status, passed "
           "through (any other engine error is wrapped as `backend_error`)",
}
# One event of an inference stream (schemathesis reads an event stream's `schema` per
# event, as Open API 3.2's `itemSchema`); the engine's chunks are not lemoncore's to type.
_ENGINE_EVENT: dict[str, Any] = {
    "type": "object", "required": ["data"], "properties": {"data": {
        "type": "string", "description": "A JSON chunk of the engine's answer; `[DONE]` "
        "last, or an OpenAI error object when the backend fails"}}}


# Anthropic's error object (docs.anthropic.com, "Errors").
ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"},
        "error": {"type": "object", "required": ["type", "message"], "properties": {
            "type": {"type": "string"}, "message": {"type": "string"}}}}}


@dataclass(frozen=True)
class Operation:
    method: str
    route: str  # as Starlette routes it, without the prefix
    handler: Handler
    summary: str
    prefix: str = ""  # OPENAI or LEMONADE: served under both; "": only as it is
    description: str = ""
    body: type[bodies.Body] | None = None
    body_media: str = "application/json"
    body_required: bool = True
    ok: Mapping[str, Media] = field(default_factory=dict)
    ok_description: str = "OK"
    errors: tuple[int, ...] = ()
    parameters: tuple[Mapping[str, Any], ...] = ()
    events: Mapping[str, Media] = field(default_factory=dict)  # with `stream`: SSE events
    engine: bool = False  # forwarded to an engine, whose own 4xx errors pass through
    anthropic_errors: bool = False  # lemoncore's errors are Anthropic-shaped here

    @property
    def path(self) -> str:
        return self.prefix + re.sub(r"\{(\w+):\w+\}", r"{\1}", self.route)


def _progress_events(complete: Media) -> dict[str, Media]:
    return {"progress": replies.Progress, "complete": complete, "error": replies.StreamError}


_STREAMED = ("With `stream`, a `text/event-stream` of `progress` events (bytes of every "
             "file together), then one `complete` event (the answer without `status`) or "
             "one `error` event.")
_INFERENCE_ERRORS = (400, 404, 409, 502, 503)
_ENGINE_ANSWER: dict[str, Any] = {"type": "object",
                                   "description": "The engine's answer, passed through"}


async def serve(request: Request) -> Response:
    """``GET /openapi.json``."""
    return JSONResponse(document(request.app.state.core.plugins.registry.endpoints_tuple()))


_DESCRIPTIONS = {
    "/v1/chat/completions": "Loads the model when needed. Usage on every non-streaming "
                            "answer and on streams with `stream_options.include_usage`; a "
                            "stream ends with `data: [DONE]`, or with an error frame when "
                            "the backend fails.",
    "/v1/embeddings": "For models labelled `embeddings`.",
    "/v1/messages": "Anthropic's Messages API: passed through to backends that serve it "
                    "(llama.cpp), translated to chat completions for the others; "
                    "lemoncore's own errors are Anthropic-shaped here.",
    "/v1/messages/count_tokens": "Passed through, or counted with a one-token chat "
                                 "completion on backends that serve only chat.",
    "/v1/responses": "OpenAI's Responses API: passed through to backends that serve it, "
                     "translated to chat completions for the others (which keep no "
                     "responses: `previous_response_id` is refused there).",
}


def routed(endpoint: Endpoint) -> Operation:
    """The operation of a routed endpoint: served under ``/v1`` and ``/api/v1`` when its
    path starts with ``/v1/``, else as it is."""
    prefix, route = (OPENAI, endpoint.path[3:]) if endpoint.path.startswith("/v1/") \
        else ("", endpoint.path)
    form = endpoint.body == "multipart"
    answer = _ENGINE_ANSWER if endpoint.media_type == "application/json" else \
        {"type": "string", "format": "binary"}
    return Operation(
        "POST", route, inference.routed(endpoint), endpoint.summary, prefix=prefix,
        body=bodies.form_of(endpoint) if form else bodies.body_of(endpoint),
        body_media="multipart/form-data" if form else "application/json",
        engine=True, errors=_INFERENCE_ERRORS, ok={endpoint.media_type: answer, **(
            {"text/event-stream": _ENGINE_EVENT} if endpoint.streams else {})},
        description=_DESCRIPTIONS.get(endpoint.path, f"Served by backends whose engine "
                                      f"answers `{endpoint.path}` itself."),
        anthropic_errors=endpoint.errors == "anthropic")


def operations(endpoints: tuple[Endpoint, ...]) -> tuple[Operation, ...]:
    """Every operation: lemoncore's own and one per routed endpoint."""
    return (*OPERATIONS, *(routed(e) for e in endpoints))


OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/live", manage.live, "Liveness", ok={"application/json": replies.Live},
              description="Needs no key, and answers browsers from any site."),
    Operation("GET", "/metrics", manage.metrics, "Prometheus metrics",
              ok={"text/plain": {"type": "string"}}, ok_description="Prometheus text "
              "exposition: evictions by reason, loads, loaded models, tokens by model"),
    Operation("GET", "/openapi.json", serve, "This document", description="Needs no key.",
              ok={"application/json": {"type": "object"}}),
    Operation("GET", "/models", inference.list_models, "Models", prefix=OPENAI,
              description="Downloaded models; with `show_all`, every model of the "
                          "catalogue (except models that only run on an experimental "
                          "backend that is not installed).",
              parameters=({"name": "show_all", "in": "query", "required": False,
                           "description": "Case-insensitive; `true`, `1` or `yes` lists "
                                          "every model",
                           "schema": {"type": "string", "enum": list(inference.FLAG)}},),
              ok={"application/json": replies.ModelList}, errors=(400,)),
    Operation("GET", "/models/{model_id:path}", inference.get_model, "A model",
              prefix=OPENAI, errors=(400, 404),
              parameters=({"name": "model_id", "in": "path", "required": True,
                           "schema": {"type": "string"}},),
              ok={"application/json": replies.ModelCard}),
    Operation("GET", "/health", manage.health, "Loaded models", prefix=LEMONADE,
              ok={"application/json": replies.Health}),
    Operation("POST", "/load", manage.load, "Load a model", prefix=LEMONADE, body=bodies.LoadBody,
              ok={"application/json": (replies.Loaded, replies.LoadPlanReply)},
              ok_description="Loaded, or with `dry_run` the plan",
              errors=(400, 403, 404, 409, 500, 502, 503),
              description="Only options the recipe and backend declare for requests; "
                          "`GET /api/v1/system-info` lists them with their types and "
                          "bounds."),
    Operation("POST", "/unload", manage.unload, "Unload a model, or all", prefix=LEMONADE,
              body=bodies.UnloadBody, body_required=False, ok={"application/json": replies.Done},
              errors=(400, 404)),
    Operation("POST", "/pull", manage.pull, "Download (and register) a model",
              prefix=LEMONADE, body=bodies.PullBody, description=_STREAMED,
              ok={"application/json": replies.Pulled},
              errors=(400, 403, 404, 502, 503),
              events=_progress_events(replies.PullResult)),
    Operation("POST", "/delete", manage.delete, "Remove a downloaded model",
              prefix=LEMONADE, body=bodies.DeleteBody, ok={"application/json": replies.Done},
              errors=(400, 422)),
    Operation("POST", "/install", manage.install, "Install a backend", prefix=LEMONADE,
              body=bodies.InstallBody,
              description="Install a backend or `runtime:therock`. With "
                          '`"trust_download": true`, an artifact whose pin has no SHA-256 '
                          "is downloaded once and its SHA-256 pinned (trust on first use; "
                          "the answer lists what was trusted). " + _STREAMED,
              ok={"application/json": (replies.BackendInstalled, replies.RuntimeInstalled)},
              errors=(400, 403, 404, 503),
              events=_progress_events((replies.BackendInstallResult,
                                       replies.RuntimeInstallResult))),
    Operation("POST", "/uninstall", manage.uninstall, "Uninstall a backend",
              prefix=LEMONADE, body=bodies.UninstallBody,
              ok={"application/json": replies.Uninstalled},
              errors=(400, 404)),
    Operation("GET", "/system-info", manage.system_info, "Devices, recipes, plugins",
              prefix=LEMONADE, ok={"application/json": replies.SystemInfo},
              description="Devices, recipes with each backend's state, message and fix and "
                          "the options loads may set, and every plugin's load status."),
    Operation("GET", "/logs", logs.logs, "The server's recent log lines", prefix=LEMONADE,
              description=logs.DESCRIPTION, parameters=logs.PARAMETERS, errors=(400,),
              ok={"application/json": replies.LogEntries},
              events={"line": replies.LogEntry}),
)

DESCRIPTION = (
    "OpenAI-compatible inference and Lemonade-style management. Every path under `/v1` "
    "is also served under `/api/v1`, and every path under `/api/v1` under `/v1`. Errors "
    "are OpenAI-shaped: `{\"error\": {message, type, code, param}}`. Any request may get "
    "403: `host_not_allowed` (a Host that is not a loopback name, an IP literal, this "
    "machine's name or in `allowed_hosts`) or `cross_site_request` (a browser request "
    "from another site; `/live` excepted); management routes also `remote_admin_refused` "
    "(a non-loopback client while no admin key is set). Load and pull options are "
    "declared per recipe (`GET /api/v1/system-info` lists them with their types and "
    "scopes); an unknown, mistyped or administrator-only option is a 400 "
    "`invalid_option`.")


def _models(media: Media) -> tuple[type[BaseModel], ...]:
    if isinstance(media, Mapping):
        return ()
    return (media,) if isinstance(media, type) else media


@functools.cache
def document(endpoints: tuple[Endpoint, ...]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of :func:`operations` (built once per set of endpoints)."""
    ops = operations(endpoints)
    from lemoncore import __version__

    keys: list[tuple[type[BaseModel], JsonSchemaMode]] = [(replies.ErrorReply, "serialization")]
    for op in ops:
        if op.body is not None:
            keys.append((op.body, "validation"))
        for media in (*op.ok.values(), *op.events.values()):
            keys += [(m, "serialization") for m in _models(media)]
    refs, defs = models_json_schema(list(dict.fromkeys(keys)),
                                    ref_template="#/components/schemas/{model}")

    def schema(media: Media, mode: JsonSchemaMode = "serialization") -> Any:
        if isinstance(media, Mapping):
            return dict(media)
        models = _models(media)
        if len(models) == 1:
            return refs[models[0], mode]
        return {"oneOf": [refs[m, mode] for m in models]}

    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        content = {t: {"schema": schema(m)} for t, m in op.ok.items()}
        if op.events:  # one event: its name, and its data as JSON of the event's schema
            content["text/event-stream"] = {"schema": {"oneOf": [{
                "type": "object", "required": ["event", "data"],
                "properties": {"event": {"const": event}, "data": {
                    "type": "string", "contentMediaType": "application/json",
                    "contentSchema": schema(m)}}} for event, m in op.events.items()]}}
        responses: dict[str, Any] = {"200": {"description": op.ok_description,
                                             "content": content}}
        statuses = {403, *op.errors, *((400, 413) if op.body else ()),
                    *((401,) if required_key(op.path) else ())}
        for status in sorted(statuses):
            responses[str(status)] = {"description": ERRORS[status], "content": {
                "application/json": {"schema": ANTHROPIC_ERROR}}} if op.anthropic_errors \
                else {"$ref": f"#/components/responses/{status}"}
        if op.engine:
            responses["4XX"] = {"$ref": "#/components/responses/4XX"}
        spec: dict[str, Any] = {"summary": op.summary, "operationId": _operation_id(op),
                                "responses": responses}
        if op.description:
            spec["description"] = op.description
        if op.parameters:
            spec["parameters"] = [dict(p) for p in op.parameters]
        if op.body is not None:
            spec["requestBody"] = {"required": op.body_required, "content": {
                op.body_media: {"schema": schema(op.body, "validation")}}}
        paths.setdefault(op.path, {})[op.method.lower()] = spec

    error = refs[replies.ErrorReply, "serialization"]
    return {
        "openapi": "3.1.0",
        "info": {"title": "lemoncore", "version": __version__, "description": DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "responses": {str(status): {
                "description": text, "content": {"application/json": {"schema": error}},
                **({"headers": {"Retry-After": {
                    "description": "Seconds to wait before retrying",
                    "schema": {"type": "integer"}}}} if status == 503 else {}),
            } for status, text in ERRORS.items()}},
    }


def _operation_id(op: Operation) -> str:
    words = re.findall(r"[a-z0-9]+", op.route.split("{")[0].lower())
    return op.method.lower() + "".join(w.title() for w in words) + (
        "ById" if "{" in op.route else "")
