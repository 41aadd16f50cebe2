"""OpenAI-compatible inference: chat completions, completions, embeddings, models."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable
from typing import Any

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lemoncore.api.errors import ApiError, json_object, required_str
from lemoncore.backends import BackendState
from lemoncore.core import Core
from lemoncore.errors import error_body
from lemoncore.forwarding import exchange
from lemoncore.proxy import SSERelay
from lemoncore.recipes import ModelInfo, ModelType, Tier


def model_card(core: Core, model: ModelInfo) -> dict[str, Any]:
    recipe = core.plugins.registry.recipes.get(model.recipe)
    backends = [{"name": b.name, "tier": b.tier.value, "format": b.format.value}
                for b in (recipe.backends if recipe else ())]
    return {"id": model.name, "object": "model", "created": 0, "owned_by": "lemoncore",
            "checkpoint": model.checkpoint, "recipe": model.recipe, "backends": backends,
            "downloaded": core.models.local_path(model) is not None,
            "suggested": model.suggested, "labels": list(model.labels),
            "aliases": list(model.aliases), "recipe_options": dict(model.recipe_options),
            **({"size_bytes": sum(model.sizes.values())} if model.sizes else {})}


async def list_models(request: Request) -> Response:
    """Downloaded models (with ``show_all``, every model), except models that only run on
    an experimental backend that is not installed yet."""
    core: Core = request.app.state.core
    show_all = request.query_params.get("show_all", "").lower() in {"1", "true", "yes"}
    hidden = await anyio.to_thread.run_sync(_experimental_only_recipes, core)
    cards = [model_card(core, m) for m in core.models.all().values()
             if m.recipe in core.plugins.registry.recipes and m.recipe not in hidden]
    return JSONResponse({"object": "list",
                         "data": [c for c in cards if show_all or c["downloaded"]]})


def _experimental_only_recipes(core: Core) -> set[str]:
    """Recipes whose only usable backends are experimental and none is installed."""
    hidden = set()
    for recipe in core.plugins.registry.recipes.values():
        statuses = [s for s in core.backends.statuses(recipe)
                    if s.state is not BackendState.UNSUPPORTED]
        if all(s.backend.tier is Tier.EXPERIMENTAL for s in statuses) and not any(
                s.state is BackendState.INSTALLED for s in statuses):
            hidden.add(recipe.name)
    return hidden


async def get_model(request: Request) -> Response:
    core: Core = request.app.state.core
    model = core.router.model(request.path_params["model_id"])
    return JSONResponse(model_card(core, model))


async def chat_completions(request: Request) -> Response:
    return await _infer(request, "/v1/chat/completions", "messages", ModelType.LLM)


async def completions(request: Request) -> Response:
    return await _infer(request, "/v1/completions", "prompt", ModelType.LLM)


async def embeddings(request: Request) -> Response:
    return await _infer(request, "/v1/embeddings", "input", ModelType.EMBEDDING)


async def _infer(request: Request, path: str, required: str, serves: ModelType) -> Response:
    core: Core = request.app.state.core
    body = await json_object(request)
    model = core.router.model(required_str(body, "model"))
    if body.get(required) is None:
        raise ApiError(f"missing field {required!r}", param=required)
    if model.model_type is not serves:
        raise ApiError(f"model {model.name!r} is a {model.model_type.value} model; it does "
                       f"not serve {path.removeprefix('/v1/')}", param="model")
    body["model"] = model.name
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is not None:
        body["max_tokens"] = body["max_completion_tokens"]
    if body.get("stream"):
        return await _stream(core, model, path, body)
    return await _until_disconnect(request, _complete(core, model, path, body))


async def _until_disconnect(request: Request, work: Awaitable[Response]) -> Response:
    """Await ``work`` (a request waiting for a load, a queue slot or a backend's answer);
    cancel it if the client disconnects first, which closes the backend connection.

    Streams skip this (a task per request costs ~0.2 ms of time to first token): their
    relay watches for the disconnect from the moment the backend answers.
    """
    result: Response | Exception = Response(status_code=499)  # for a client that left
    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            result = await work
        except Exception as exc:  # noqa: BLE001 - re-raised below, outside the task group
            result = exc
        tg.cancel_scope.cancel()
    if isinstance(result, Exception):
        raise result
    return result


async def _complete(core: Core, model: ModelInfo, path: str, body: dict[str, Any]
                    ) -> Response:
    answer = await exchange(core.router, model, path, body, stream=False)
    async with answer.resources:
        return backend_response(answer.upstream)


async def _stream(core: Core, model: ModelInfo, path: str, body: dict[str, Any]) -> Response:
    answer = await exchange(core.router, model, path, body, stream=True)
    if answer.upstream.status_code != 200:
        async with answer.resources:
            return backend_response(answer.upstream)
    return SSERelay(answer.upstream, core.settings.heartbeat_interval, answer.resources,
                    core.router.admission.cut_at_drain_deadline,
                    functools.partial(core.router.fleet.count_usage, model.name),
                    functools.partial(core.router.fleet.record_outcome, answer.server))


def backend_response(upstream: httpx.Response) -> Response:
    """Pass a backend answer through; wrap backend errors OpenAI-style."""
    if upstream.status_code < 400:
        return Response(upstream.content, upstream.status_code, media_type="application/json")
    try:
        detail = json.loads(upstream.content)
    except ValueError:
        detail = upstream.text[:500]
    if upstream.status_code < 500 and isinstance(detail, dict) and "error" in detail:
        return JSONResponse(detail, upstream.status_code)
    message = detail["error"].get("message") if isinstance(detail, dict) and isinstance(
        detail.get("error"), dict) else str(detail)
    status = upstream.status_code if upstream.status_code < 500 else 502
    return JSONResponse(error_body(f"backend error: {message}", "backend_error",
                                   "backend_error", details={"status": upstream.status_code}),
                        status)
