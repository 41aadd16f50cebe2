"""Lemonade-style management: health, load, unload, pull, delete, install, system-info."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from lemoncore import __version__
from lemoncore.api.errors import ApiError, json_object, required_str
from lemoncore.backends import THEROCK, BackendState
from lemoncore.core import Core
from lemoncore.install import ProgressCallback
from lemoncore.options import SELECTOR, Layer, check, declared, granted_flags, selector
from lemoncore.proxy import SSE_HEADERS
from lemoncore.recipes import RESERVED_OPTION_NAMES, ModelInfo, ModelType, Tier

LOAD_CONTROL_FIELDS = RESERVED_OPTION_NAMES - {SELECTOR}  # `backend` selects; the rest steer


async def live(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def openapi(request: Request) -> Response:
    """The API's OpenAPI document (lemoncore/data/openapi.json)."""
    from importlib.resources import files

    return Response(files("lemoncore").joinpath("data/openapi.json").read_bytes(),
                    media_type="application/json")


async def health(request: Request) -> Response:
    core: Core = request.app.state.core
    servers = list(core.router.servers.values())
    last = max(servers, key=lambda s: s.last_used, default=None)
    return JSONResponse({
        "status": "ok", "version": __version__,
        "model_loaded": last.model.name if last else None,
        "max_models": {t.value: core.settings.max_loaded_models for t in ModelType},
        "all_models_loaded": [s.as_health() for s in servers],
    })


async def load(request: Request) -> Response:
    core: Core = request.app.state.core
    body = await json_object(request)
    name = body.get("model_name") or body.get("model")
    if not isinstance(name, str) or not name:
        raise ApiError("missing field 'model_name'", param="model_name")
    pinned = body.get("pinned")
    if pinned is not None and not isinstance(pinned, bool):
        raise ApiError("'pinned' must be true or false", param="pinned")
    options = {k: v for k, v in body.items() if k not in LOAD_CONTROL_FIELDS}
    if body.get("dry_run"):
        plan = await core.router.plan(name, options)
        return JSONResponse({**plan.explain(), "dry_run": True})
    server = await core.router.load(name, options, pinned)
    if body.get("save_options") and options:
        core.models.save_options(server.model.name, options)
    return JSONResponse({"status": "success", "model_name": server.model.name,
                         "checkpoint": server.model.checkpoint, "recipe": server.recipe.name,
                         "backend": server.backend.name, "device": server.device.value,
                         "pinned": server.pinned})


async def unload(request: Request) -> Response:
    core: Core = request.app.state.core
    body = await json_object(request)
    name = body.get("model_name") or body.get("model")
    if name:
        await core.router.unload(str(name))
        return JSONResponse({"status": "success", "message": f"unloaded {name}"})
    await core.router.unload_all()
    return JSONResponse({"status": "success", "message": "unloaded all models"})


def _pull_target(core: Core, body: dict[str, Any]) -> ModelInfo:
    name = body.get("model_name") or body.get("model")
    if not isinstance(name, str) or not name:
        raise ApiError("missing field 'model_name'", param="model_name")
    existing = core.models.get(name)
    if "checkpoint" not in body:
        if existing is None:
            raise ApiError(f"model {name!r} is not registered; give 'checkpoint' and "
                           "'recipe' to register it", 404, code="model_not_found")
        return existing
    try:
        model = ModelInfo(name=name, recipe=body.get("recipe", ""),
                          checkpoint=body["checkpoint"], labels=tuple(body.get("labels", ())),
                          recipe_options=body.get("recipe_options", {}),
                          files=tuple(body.get("files", ())),
                          sha256=body.get("sha256", {}), sizes=body.get("sizes", {}))
    except (ValidationError, TypeError) as exc:
        raise ApiError(f"invalid model registration: {exc}") from exc
    recipe = core.plugins.registry.recipes.get(model.recipe)
    if recipe is None:
        raise ApiError(f"unknown recipe {model.recipe!r}; installed recipes: "
                       f"{sorted(core.plugins.registry.recipes)}", param="recipe")
    layer = Layer("in recipe_options", model.recipe_options)
    selector([layer])
    check(declared(recipe), layer, admin=False, section=f"recipes.{recipe.name}",
          allowed_flags=granted_flags(core.backends.configuration(recipe)))
    core.models.register(model)
    return model


async def pull(request: Request) -> Response:
    core: Core = request.app.state.core
    body = await json_object(request)
    model = _pull_target(core, body)

    async def run(progress: ProgressCallback | None) -> dict[str, Any]:
        path = await core.models.pull(model, progress)
        return {"model_name": model.name, "path": str(path)}

    if not body.get("stream"):
        return JSONResponse({"status": "success", **await run(None)})
    return StreamingResponse(_progress_events(run), media_type="text/event-stream",
                             headers=SSE_HEADERS)


async def delete(request: Request) -> Response:
    core: Core = request.app.state.core
    body = await json_object(request)
    name = required_str(body, "model_name")
    model = core.models.get(name)
    if model is None:
        raise ApiError(f"model {name!r} not found", 422, code="model_not_found")
    if core.router.loaded(name) is not None:
        await core.router.unload(name)
    core.models.delete(model)
    return JSONResponse({"status": "success", "message": f"deleted {model.name}"})


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    core: Core = request.app.state.core
    router = core.router
    lines = ["# HELP lemon_evictions_total Servers stopped by the router, by reason.",
             "# TYPE lemon_evictions_total counter"]
    lines += [f'lemon_evictions_total{{reason="{kind}"}} {count}'
              for kind, count in sorted(router.fleet.evictions.items())]
    lines += ["# HELP lemon_loads_total Backend servers started.",
              "# TYPE lemon_loads_total counter", f"lemon_loads_total {router.loads}",
              "# HELP lemon_loaded_models Backend servers running now.",
              "# TYPE lemon_loaded_models gauge", f"lemon_loaded_models {len(router.servers)}",
              "# HELP lemon_tokens_total Tokens backends reported in their answers' usage.",
              "# TYPE lemon_tokens_total counter"]
    lines += [f'lemon_tokens_total{{model="{model}",kind="{kind.removesuffix("_tokens")}"}} '
              f"{count}" for (model, kind), count in sorted(router.fleet.tokens.items())]
    return Response("\n".join(lines) + "\n",
                    media_type="text/plain; version=0.0.4; charset=utf-8")


def tier_notice(tier: Tier) -> str:
    return {Tier.COMMUNITY: "community backend: maintained by its plugin's authors, not "
                            "supported for production",
            Tier.EXPERIMENTAL: "experimental backend: community-developed, use at your own "
                               "risk"}.get(tier, "")


def _backend_name(body: dict[str, Any]) -> str:
    backend = body.get("backend")
    if not isinstance(backend, str) or not backend:
        raise ApiError("missing field 'backend': 'recipe:backend', or give 'recipe' too",
                       param="backend")
    recipe = body.get("recipe")
    return backend if ":" in backend or not recipe else f"{recipe}:{backend}"


async def install(request: Request) -> Response:
    """Install a backend (or ``runtime:therock``); with ``stream`` an SSE progress stream."""
    core: Core = request.app.state.core
    body = await json_object(request)
    name = _backend_name(body)

    consent = body.get("consent") is True
    trusted = [t.as_dict() for t in await core.backends.trust_download(name)] \
        if body.get("trust_download") is True else []
    status = None if name == THEROCK else core.backends.status(*core.backends.lookup(name))
    if status is not None:  # refuse before any stream starts
        if status.state in {BackendState.UNSUPPORTED, BackendState.ACTION_REQUIRED}:
            raise ApiError(f"{name} is {status.state.value}: {status.message}"
                           + (f". Fix: {status.action}" if status.action else ""),
                           code=status.state.value)
        if core.backends.needs_consent(status) and not consent:
            await core.backends.ensure_installed(status)  # raises the 403 that says how

    async def run(progress: ProgressCallback | None) -> dict[str, Any]:
        if status is None:
            decision = await core.backends.rocm.install(progress)
            return {"backend": name, "state": "installed", "runtime": decision.source,
                    "version": decision.version, "trusted": trusted}
        installed = await core.backends.ensure_installed(status, progress, consent=consent)
        return {"backend": name, "state": installed.state.value, "version": installed.version,
                "tier": installed.backend.tier.value,
                "notice": tier_notice(installed.backend.tier), "trusted": trusted}

    if not body.get("stream"):
        return JSONResponse({"status": "success", **await run(None)})
    return StreamingResponse(_progress_events(run), media_type="text/event-stream",
                             headers=SSE_HEADERS)


async def _progress_events(
    run: Callable[[ProgressCallback], Awaitable[dict[str, Any]]]
) -> AsyncIterator[bytes]:
    """Run ``run`` and stream its byte progress, then ``complete`` or ``error``."""
    send, receive = anyio.create_memory_object_stream[tuple[str, dict[str, Any]]](64)

    def progress(done: int, total: int) -> None:
        pct = round(100 * done / total, 1) if total else 0.0
        with contextlib.suppress(anyio.WouldBlock):  # drop a tick rather than block
            send.send_nowait(("progress", {"bytes_downloaded": done, "bytes_total": total,
                                           "percent": pct}))

    async def main() -> None:
        async with send:
            try:
                result = await run(progress)
            except Exception as exc:  # noqa: BLE001 - reported to the client as an event
                await send.send(("error", {"error": str(exc)}))
            else:
                await send.send(("complete", result))

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(main)
        async for event, data in receive:
            yield f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def uninstall(request: Request) -> Response:
    core: Core = request.app.state.core
    name = _backend_name(await json_object(request))
    if name != THEROCK:
        core.backends.lookup(name)
    for server in list(core.router.servers.values()):
        if f"{server.recipe.name}:{server.backend.name}" == name:
            await core.router.unload(server.model.name)
    removed = await core.backends.uninstall(name)
    return JSONResponse({"status": "success", "backend": name, "removed": removed})


def system_info_data(core: Core) -> dict[str, Any]:
    devices: dict[str, Any] = {}
    for d in core.host.devices:
        devices.setdefault(d.kind.value, []).append(
            {"name": d.name, "family": d.family, "index": d.index})
    recipes: dict[str, Any] = {}
    for recipe in core.plugins.registry.recipes.values():
        statuses = core.backends.statuses(recipe)
        supported = [s for s in statuses if s.state is not BackendState.UNSUPPORTED]
        default = next((s for s in supported if s.state is BackendState.INSTALLED),
                       supported[0] if supported else None)
        recipes[recipe.name] = {
            "display_name": recipe.display_name,
            "plugin": core.plugins.registry.owners.get(recipe.name),
            "default_backend": default.backend.name if default else None,
            "default_device": recipe.default_device.value,
            "slot_policy": recipe.slot_policy.value,
            "options": [o.model_dump() for o in recipe.options],
            "backends": {s.backend.name: s.as_dict() for s in statuses},
        }
    return {"version": __version__, "os": core.host.os, "devices": devices,
            "recipes": recipes, "plugins": [r.as_dict() for r in core.plugins.records]}


async def system_info(request: Request) -> Response:
    core: Core = request.app.state.core
    info = await anyio.to_thread.run_sync(system_info_data, core)
    return JSONResponse(info)
