"""Inference: the handler of every routed endpoint (``lemoncore.recipes.core_endpoints()``
and those plugins register). A handler checks what lemoncore reads of the body (JSON, or
a ``multipart/form-data`` upload kept byte for byte), finds the model, and forwards the
body to its engine: as it came, or through a :mod:`lemoncore.translation` when the
backend serves that translation's target instead. The engine's answer is relayed as a
stream or passed through whole (:mod:`lemoncore.api.upstream`). Errors, lemoncore's and
the engine's, are answered in the shape of the request's API surface
(:mod:`lemoncore.api.shapes`); an image for a model without the ``vision`` label is
refused with a 400 before it reaches the engine (:mod:`lemoncore.api.images`)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from lemoncore.api import bodies, collection_dispatch, telemetry
from lemoncore.api.bodies import parse
from lemoncore.api.disconnect import until_disconnect
from lemoncore.api.errors import ApiError, json_object
from lemoncore.api.guard import may_manage
from lemoncore.api.images import VISION, first_image
from lemoncore.api.upstream import backend_error, backend_response
from lemoncore.core import Core
from lemoncore.options import declared
from lemoncore.recipes import OPENAI_ENDPOINTS, Endpoint, ModelInfo
from lemoncore.serving.answer import Answer
from lemoncore.serving.forwarding import exchange, not_served
from lemoncore.serving.proxy import Body, Framing, Raw, SSERelay
from lemoncore.translation import TRANSLATIONS, TranslatedFraming, Translation


def routed(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """The handler of a routed endpoint (``lemoncore.recipes.Endpoint``); the errors it
    raises are answered in the request's shape (:mod:`lemoncore.api.errors`)."""
    schema = bodies.body_of(endpoint)

    async def handle(request: Request) -> Response:
        return await _infer(request, endpoint, schema)

    return handle


async def _infer(request: Request, endpoint: Endpoint, schema: type[bodies.RoutedBody]) -> Response:
    """Check what lemoncore reads of the body, then forward the body as it came (with
    the model's canonical name): every field the engine reads reaches it unchanged."""
    core: Core = request.app.state.core
    if endpoint.max_body_bytes is not None and len(await request.body()) > endpoint.max_body_bytes:
        raise ApiError(
            f"request body exceeds {endpoint.max_body_bytes} bytes, the limit of {endpoint.path}",
            413,
            code="request_too_large",
        )
    if endpoint.body == "multipart":
        model, upload, stream = await check_upload(core, endpoint, request)
        return await _forward(request, core, endpoint, model, upload, stream)
    return await infer_json(request, endpoint, schema, await json_object(request))


async def infer_json(
    request: Request,
    endpoint: Endpoint,
    schema: type[bodies.RoutedBody],
    body: dict[str, Any],
    collections: bool = True,
) -> Response:
    """Answer ``request`` with the JSON ``body`` (its own, or one a handler filled in) as
    ``endpoint``'s handler does; one naming a collection through the component it goes
    to (``collections``: whether the name may be one; a component's is a model)."""
    core: Core = request.app.state.core
    name = body.get("model")
    collection = core.models.collection(name) if collections and isinstance(name, str) else None
    if collection is not None:
        return await collection_dispatch.answer(
            core,
            endpoint,
            collection,
            body,
            lambda b: infer_json(request, endpoint, schema, b, collections=False),
        )
    model, checked = check_request(core, endpoint, schema, body)
    await _load_with_context(request, core, model, body)
    stream = isinstance(checked, bodies.StreamingBody) and bool(checked.stream)
    keep_alive = checked.keep_alive
    translation = await _translation(core, endpoint, model)
    if translation is None:
        return await _forward(request, core, endpoint, model, body, stream, keep_alive)
    if stream and translation.stream is not None:
        return await _translated_stream(core, model, endpoint, translation, body, keep_alive)
    return await _until_disconnect(
        request, _translated(core, model, endpoint, translation, body, keep_alive)
    )


async def _load_with_context(
    request: Request, core: Core, model: ModelInfo, body: dict[str, Any]
) -> None:
    """A request naming a ``ctx_size`` for a model that is not loaded loads it with that
    context size (checked as a load's option is; the body still reaches the engine, which
    ignores it); once loaded, a request's ``ctx_size`` changes nothing. As Lemonade's
    ``extract_auto_load_options`` and ``auto_load_model_if_needed``
    (``src/cpp/server/server.cpp``), whose only load option in a request is ``ctx_size``."""
    ctx_size = body.get("ctx_size")
    if ctx_size is None or core.router.loaded(model.name) is not None:
        return
    recipe = core.plugins.registry.recipes[model.recipe]
    if all(spec.name != "ctx_size" for spec in declared(recipe)):
        return  # not an option of this model's engine: the request goes on without it
    settings = core.settings
    key = settings.admin_api_key or settings.api_key
    manage = may_manage(
        request.scope, key.get_secret_value() if key else None, settings.allow_remote_admin
    )
    await core.router.load(model.name, {"ctx_size": ctx_size}, explicit=False, manage=manage)


async def _translation(core: Core, endpoint: Endpoint, model: ModelInfo) -> Translation | None:
    """``None`` when the model's backend serves ``endpoint`` itself (checked before any
    load: a backend that cannot serve it is refused without loading the model); the
    translation when it serves that translation's target instead."""
    if endpoint.path in OPENAI_ENDPOINTS:  # every engine's; exchange() checks it anyway
        return None
    recipe, backend = await core.router.backend_for(model.name)
    if endpoint.path in backend.endpoints:
        return None
    translation = TRANSLATIONS.get(endpoint.path)
    if translation is None or translation.target not in backend.endpoints:
        raise not_served(recipe, backend, endpoint.path)
    return translation


async def _translated(
    core: Core,
    model: ModelInfo,
    endpoint: Endpoint,
    translation: Translation,
    body: dict[str, Any],
    keep_alive: float | None,
) -> Response:
    started = time.monotonic()
    answer = await exchange(
        core.router,
        model,
        translation.target,
        {**translation.request(body), "stream": False},
        stream=False,
        retry=endpoint.retried,
        keep_alive=keep_alive,
        surface=endpoint.path,
    )
    telemetry.watch(core.router, answer, started, stream=False)
    async with answer:
        if answer.upstream.status_code != 200:
            raise backend_error(answer.upstream)
        return JSONResponse(translation.reply(json.loads(answer.upstream.content), body))


async def _translated_stream(
    core: Core,
    model: ModelInfo,
    endpoint: Endpoint,
    translation: Translation,
    body: dict[str, Any],
    keep_alive: float | None,
) -> Response:
    assert translation.stream is not None
    framing = TranslatedFraming(translation.stream(body), core.settings.max_answer_bytes)
    started = time.monotonic()
    answer = await exchange(
        core.router,
        model,
        translation.target,
        translation.request(body),
        stream=True,
        retry=endpoint.retried,
        keep_alive=keep_alive,
        surface=endpoint.path,
    )
    telemetry.watch(core.router, answer, started, stream=True)
    if answer.upstream.status_code != 200:
        async with answer:
            raise backend_error(answer.upstream)
    return _relay(core, answer, framing)


async def _forward(
    request: Request,
    core: Core,
    endpoint: Endpoint,
    model: ModelInfo,
    body: Body,
    stream: bool,
    keep_alive: float | None = None,
) -> Response:
    if stream and endpoint.streams:
        return await _stream(request.scope, core, model, endpoint, body, keep_alive)
    return await _until_disconnect(
        request, _complete(request.scope, core, model, endpoint, body, keep_alive)
    )


async def check_upload(
    core: Core, endpoint: Endpoint, request: Request
) -> tuple[ModelInfo, Raw, bool]:
    """A ``multipart/form-data`` body: its model and required field checked, its bytes kept
    as they came, and whether it asks for a stream (``stream=true``)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(
            f"{endpoint.path} takes multipart/form-data (a file upload), not "
            f"{content_type or 'a body without Content-Type'}"
        )
    raw = await request.body()
    try:
        async with request.form() as form:
            name = form.get(endpoint.model_field)
            present = endpoint.required is None or endpoint.required in form
            stream = str(form.get("stream", "")).lower() in {"true", "1"}
    except MultiPartException as exc:
        raise ApiError(f"malformed multipart body: {exc}") from exc
    if not isinstance(name, str) or not name:
        raise ApiError(
            f"missing form field {endpoint.model_field!r}: the model", param=endpoint.model_field
        )
    if not present:
        raise ApiError(f"missing form field {endpoint.required!r}", param=endpoint.required)
    model = _serving(core, endpoint, bodies.checked_name(name, endpoint.model_field))
    return model, Raw(raw, content_type), stream


def _serving(core: Core, endpoint: Endpoint, name: str) -> ModelInfo:
    model = core.router.model(name)
    if model.model_type is not endpoint.model_type:
        raise ApiError(
            f"model {model.name!r} is a {model.model_type.value} model; {endpoint.path} "
            f"serves only {endpoint.model_type.value} models (GET /v1/models gives each "
            "model's model_type)",
            code="model_type_mismatch",
            param=endpoint.model_field,
        )
    return model


def check_request(
    core: Core, endpoint: Endpoint, schema: type[bodies.RoutedBody], body: dict[str, Any]
) -> tuple[ModelInfo, bodies.RoutedBody]:
    """Check what lemoncore reads of ``body``, that its model serves ``endpoint`` and
    that it carries no image unless the model has the ``vision`` label; put the model's
    canonical name (and ``max_tokens`` for ``max_completion_tokens``) in it and take
    lemoncore's own ``keep_alive`` out."""
    checked = parse(schema, body)
    model = _serving(core, endpoint, checked.model)
    if VISION not in model.labels and (where := first_image(body)) is not None:
        raise ApiError(
            f"model {model.name!r} does not take images, and {where} is one: "
            f"send text only, or a model labelled {VISION!r} (one whose engine "
            "can read images)",
            code="images_not_supported",
            param=where,
        )
    body.pop("keep_alive", None)
    body["model"] = model.name
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is not None:
        body["max_tokens"] = body["max_completion_tokens"]
    return model, checked


async def _until_disconnect(request: Request, work: Awaitable[Response]) -> Response:
    return await until_disconnect(request, work) or Response(status_code=499)  # client left


async def _complete(
    scope: Scope,
    core: Core,
    model: ModelInfo,
    endpoint: Endpoint,
    body: Body,
    keep_alive: float | None,
) -> Response:
    started = time.monotonic()
    answer = await exchange(
        core.router,
        model,
        endpoint.path,
        body,
        stream=False,
        retry=endpoint.retried,
        keep_alive=keep_alive,
    )
    telemetry.watch(core.router, answer, started, stream=False)
    async with answer:
        return backend_response(answer.upstream, scope)


async def _stream(
    scope: Scope,
    core: Core,
    model: ModelInfo,
    endpoint: Endpoint,
    body: Body,
    keep_alive: float | None,
) -> Response:
    started = time.monotonic()
    answer = await exchange(
        core.router,
        model,
        endpoint.path,
        body,
        stream=True,
        retry=endpoint.retried,
        keep_alive=keep_alive,
    )
    telemetry.watch(core.router, answer, started, stream=True)
    if answer.upstream.status_code != 200:
        async with answer:
            return backend_response(answer.upstream, scope)
    return _relay(core, answer)


def _relay(core: Core, answer: Answer, framing: Framing | None = None) -> SSERelay:
    assert answer.server is not None
    return SSERelay(
        answer, core.settings.heartbeat_interval, framing, _worker_hint(answer.server.workers)
    )


def _worker_hint(workers: tuple[str, ...]) -> str:
    """What a broken stream's error frame adds for a server on RPC workers: llama-server
    aborts when one drops, without saying which."""
    if not workers:
        return ""
    which = (
        f"the RPC worker {workers[0]}"
        if len(workers) == 1
        else f"one of its RPC workers ({', '.join(workers)})"
    )
    return (
        f"; the model runs on {which}, which may have stopped or dropped off the "
        "network: check 'lemon worker' there; the next request reloads the model once "
        "every worker answers"
    )
