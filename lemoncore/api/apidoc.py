"""The OpenAPI 3.1 document of a tuple of :class:`~lemoncore.api.operation.Operation`:
request schemas from the bodies' models (validation mode), answers and stream events from
the replies' models (serialization mode), every status an operation may answer with what
it means (:data:`ERRORS`), and the API's description. :func:`build` is pure over the
operations; :mod:`lemoncore.api.openapi` builds the route table's document once per set of
endpoints and serves it as ``GET /openapi.json``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NotRequired, TypedDict

from pydantic import BaseModel, JsonValue
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from lemoncore.api import anthropic_models, replies
from lemoncore.api.guard import required_key
from lemoncore.api.operation import Media, Operation

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
    501: "The engine does not support it as started (its `not_supported_error`, passed through)",
    502: "The backend failed",
    503: "The backend could not start or install, or the server is busy: `queue_full`, "
    "`model_loading`, `backend_cooldown`, `shutting_down` (with `Retry-After`)",
    "4XX": "The engine refused the request: its own OpenAI error object and status, passed "
    "through (any other engine error is wrapped as `backend_error`)",
}

ANTHROPIC_ENGINE_4XX = (
    "The engine refused the request: its message and status, in Anthropic's shape"
)
# Anthropic's error object (docs.anthropic.com, "Errors").
ANTHROPIC_ERROR: dict[str, JsonValue] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}

DESCRIPTION = (
    "OpenAI-compatible inference and Lemonade-style management. Every path under `/v1` "
    "is also served under `/api/v1`, and every path under `/api/v1` under `/v1`. Errors "
    'are OpenAI-shaped: `{"error": {message, type, code, param}}`, except on '
    "`/v1/messages` and for a client that sends `anthropic-version` (the anthropic SDK "
    'does), which get Anthropic\'s `{"type": "error", "error": {type, message}}`, the '
    "type by status as Anthropic's errors page lists them. Any request may get "
    "403: `host_not_allowed` (a Host that is not a loopback name, an IP literal, this "
    "machine's name or in `allowed_hosts`) or `cross_site_request` (a browser request "
    "from another site; `/live` excepted); management routes also `remote_admin_refused` "
    "(a non-loopback client while no admin key is set). Load and pull options are "
    "declared per recipe (`GET /api/v1/system-info` lists them with their types and "
    "scopes); an unknown, mistyped or administrator-only option is a 400 "
    "`invalid_option`."
)


class MediaType(TypedDict):
    schema: JsonValue


# A reference to a shared component (`#/components/responses/404`).
Ref = TypedDict("Ref", {"$ref": str})


class Header(TypedDict):
    description: str
    schema: JsonValue


class ResponseSpec(TypedDict):
    """An OpenAPI response object."""

    description: str
    content: dict[str, MediaType]
    headers: NotRequired[dict[str, Header]]


class RequestBody(TypedDict):
    required: bool
    content: dict[str, MediaType]


class OperationSpec(TypedDict):
    summary: str
    operationId: str
    responses: dict[str, ResponseSpec | Ref]
    description: NotRequired[str]
    parameters: NotRequired[list[dict[str, object]]]
    requestBody: NotRequired[RequestBody]


class Info(TypedDict):
    title: str
    version: str
    description: str


class Components(TypedDict):
    schemas: dict[str, JsonValue]
    responses: dict[str, ResponseSpec]


class Document(TypedDict):
    openapi: str
    info: Info
    paths: dict[str, dict[str, OperationSpec]]
    components: Components


def _models(media: Media) -> tuple[type[BaseModel], ...]:
    if isinstance(media, Mapping):
        return ()
    return (media,) if isinstance(media, type) else media


class _Schemas:
    """The JSON Schemas of every model the operations name, as references into the
    document's ``components.schemas`` (:attr:`defs`)."""

    def __init__(self, ops: tuple[Operation, ...]) -> None:
        keys: list[tuple[type[BaseModel], JsonSchemaMode]] = [(replies.ErrorReply, "serialization")]
        for op in ops:
            if op.body is not None:
                keys.append((op.body, "validation"))
            for media in (*op.ok.values(), *op.events.values()):
                keys += [(m, "serialization") for m in _models(media)]
        self.refs, defs = models_json_schema(
            list(dict.fromkeys(keys)), ref_template="#/components/schemas/{model}"
        )
        self.defs: dict[str, JsonValue] = defs.get("$defs", {})

    def of(self, media: Media, mode: JsonSchemaMode = "serialization") -> JsonValue:
        """``media``'s schema: as it is, a reference, or one of several references."""
        if isinstance(media, Mapping):
            return dict(media)
        models = _models(media)
        if len(models) == 1:
            return self.refs[models[0], mode]
        return {"oneOf": [self.refs[m, mode] for m in models]}


def _spec(op: Operation, schemas: _Schemas) -> OperationSpec:
    content = {t: MediaType(schema=schemas.of(m)) for t, m in op.ok.items()}
    if op.events:  # one event: its name, and its data as JSON of the event's schema
        content["text/event-stream"] = {
            "schema": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["event", "data"],
                        "properties": {
                            "event": {"const": event},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": schemas.of(m),
                            },
                        },
                    }
                    for event, m in op.events.items()
                ]
            }
        }
    responses: dict[str, ResponseSpec | Ref] = {
        "200": {"description": op.ok_description, "content": content}
    }
    statuses = {
        403,
        *op.errors,
        *((400, 413) if op.body else ()),
        *((401,) if required_key(op.path) else ()),
    }
    # an operation that takes anthropic-version answers an Anthropic client's errors in
    # Anthropic's shape, anyone else's in OpenAI's
    either = anthropic_models.HEADER in op.parameters
    for status in sorted(statuses):
        if op.anthropic_errors or either:
            error: JsonValue = (
                {"oneOf": [schemas.of(replies.ErrorReply), ANTHROPIC_ERROR]}
                if either
                else ANTHROPIC_ERROR
            )
            responses[str(status)] = _component(status, ERRORS[status], error)
        else:
            responses[str(status)] = {"$ref": f"#/components/responses/{status}"}
    if op.engine:
        responses["4XX"] = (
            _component("4XX", ANTHROPIC_ENGINE_4XX, ANTHROPIC_ERROR)
            if op.anthropic_errors
            else {"$ref": "#/components/responses/4XX"}
        )
    spec: OperationSpec = {
        "summary": op.summary,
        "operationId": _operation_id(op),
        "responses": responses,
    }
    if op.description:
        spec["description"] = op.description
    if op.parameters:
        spec["parameters"] = [dict(p) for p in op.parameters]
    if op.body is not None:
        spec["requestBody"] = {
            "required": op.body_required,
            "content": {op.body_media: {"schema": schemas.of(op.body, "validation")}},
        }
    return spec


def _component(status: int | str, text: str, error: JsonValue) -> ResponseSpec:
    spec: ResponseSpec = {"description": text, "content": {"application/json": {"schema": error}}}
    if status == 503:
        spec["headers"] = {
            "Retry-After": {
                "description": "Seconds to wait before retrying",
                "schema": {"type": "integer"},
            }
        }
    return spec


def build(ops: tuple[Operation, ...]) -> Document:
    """The OpenAPI 3.1 document of ``ops``, in their order."""
    from lemoncore import __version__

    schemas = _Schemas(ops)
    paths: dict[str, dict[str, OperationSpec]] = {}
    for op in ops:
        paths.setdefault(op.path, {})[op.method.lower()] = _spec(op, schemas)
    error = schemas.of(replies.ErrorReply)
    return {
        "openapi": "3.1.0",
        "info": {"title": "lemoncore", "version": __version__, "description": DESCRIPTION},
        "paths": paths,
        "components": {
            "schemas": schemas.defs,
            "responses": {
                str(status): _component(status, text, error) for status, text in ERRORS.items()
            },
        },
    }


def _operation_id(op: Operation) -> str:
    words = re.findall(r"[a-z0-9]+", op.route.split("{")[0].lower())
    return (
        op.method.lower() + "".join(w.title() for w in words) + ("ById" if "{" in op.route else "")
    )
