"""Lemonade's ``/internal/*`` control endpoints, over :class:`lemoncore.plugin.RuntimeControl`
(every one admin-only: the key guard's ``/internal/`` rule, and the control's own check).

- ``POST /internal/set`` (``Server::handle_config_set``): a JSON object of settings;
  Lemonade's nested ``{"llamacpp": {"backend": …}}`` is lemoncore's ``llamacpp_backend``.
  Answers ``{"status": "success", "updated": {…}}``; a bad key or value is a 400 and
  nothing changes, except a llama.cpp backend that cannot load on this host (lemoncore's
  ``llamacpp:cpu`` where its unhashed download is not trusted, say): the other settings
  apply, the backend does not change, and ``message`` says why.
- ``GET /internal/config`` (``handle_config_get``): the run-time settings in force.
- ``POST /internal/pin`` (``handle_pin``): ``{"model" | "model_name", "pinned": bool}``,
  with Lemonade's 400 messages for a bad body; a model that is not loaded is a 404.
- ``POST /internal/simulate-vram-pressure`` (``handle_simulate_vram_pressure``):
  ``{"pct": f}`` runs one auto-eviction pass as if memory were that full (-1: idle only).
- ``GET``/``POST /internal/aliases``, ``DELETE /internal/aliases/{alias}``
  (``handle_aliases_get``, ``_add``, ``_remove``): run-time aliases, each
  ``{"alias", "target", "downloaded", "recipe"}`` in the list; ``{"alias", "target"}`` (or
  ``model``) sets one (``{"status": "ok", …}``), a delete answers ``{"status":
  "deleted"}`` or a 404 ``alias_not_found``. Errors as Lemonade's: OpenAI-shaped, ``param``
  ``alias``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lemoncore.plugin import Gateway, LemonError, RuntimeControl

MAX_BODY = 64 * 1024  # a settings body is small


async def body_of(request: Request) -> dict[str, Any]:
    """The request's JSON object; a 400 ``Invalid JSON body: …`` (Lemonade's words)."""
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise LemonError(f"body over {MAX_BODY} bytes", 413, code="request_too_large")
    try:
        value = json.loads(raw or b"{}")
    except ValueError as exc:
        raise LemonError(f"Invalid JSON body: {exc}", 400) from None
    if not isinstance(value, dict):
        raise LemonError("Invalid JSON body: expected an object", 400)
    return value


def flattened(body: dict[str, Any]) -> dict[str, Any]:
    """Lemonade's settings body in lemoncore's names: ``llamacpp.backend`` is
    ``llamacpp_backend``; any other nested section is refused by name."""
    flat = {k: v for k, v in body.items() if k != "llamacpp"}
    llamacpp = body.get("llamacpp")
    if isinstance(llamacpp, dict):
        unknown = sorted(set(llamacpp) - {"backend"})
        if unknown:
            raise LemonError(f"llamacpp.{unknown[0]} cannot be set at run time here", 400)
        if "backend" in llamacpp:
            flat["llamacpp_backend"] = llamacpp["backend"]
    elif llamacpp is not None:
        raise LemonError("'llamacpp' must be an object", 400)
    return flat


async def config_set(request: Request) -> Response:
    control = RuntimeControl.of(request)
    body = await body_of(request)
    if not body:
        raise LemonError("Request body must be a non-empty JSON object", 400)
    values = flattened(body)
    try:
        await control.set(values)
    except LemonError as exc:
        if exc.code != "backend_unusable":
            raise
        # Lemonade's clients (its test harness among them) set the backend they know with
        # other settings; one lemoncore cannot run here must not cost the rest: they apply
        # without it, new loads keep choosing as before, and the answer says why
        if rest := {k: v for k, v in values.items() if k != "llamacpp_backend"}:
            await control.set(rest)
        updated = {k: v for k, v in body.items() if k != "llamacpp"}
        return JSONResponse({"status": "success", "updated": updated, "message": str(exc)})
    return JSONResponse({"status": "success", "updated": body})


async def config_get(request: Request) -> Response:
    return JSONResponse(RuntimeControl.of(request).config().shown())


async def pin(request: Request) -> Response:
    control = RuntimeControl.of(request)
    body = await body_of(request)
    name = body.get("model", body.get("model_name"))
    if not isinstance(name, str) or not name:
        raise LemonError("Parameter 'model' or 'model_name' is required", 400, param="model")
    pinned = body.get("pinned")
    if not isinstance(pinned, bool):
        raise LemonError("Parameter 'pinned' is required and must be a boolean", 400)
    control.pin(name, pinned)
    return JSONResponse({"status": "success", "model_name": name, "pinned": pinned})


async def simulate_pressure(request: Request) -> Response:
    control = RuntimeControl.of(request)
    pct = (await body_of(request)).get("pct", 0.0)
    if isinstance(pct, bool) or not isinstance(pct, int | float):
        raise LemonError("'pct' must be a number", 400)
    evicted = await control.evaluate_eviction(float(pct))
    return JSONResponse({"status": "ok", "evicted": evicted})


async def aliases_get(request: Request) -> Response:
    gateway, control = Gateway.of(request), RuntimeControl.of(request)
    listed = []
    for alias, target in control.aliases().items():
        try:
            model = gateway.model(alias)
        except LemonError:  # its target is gone: listed as Lemonade lists it then
            listed.append({"alias": alias, "target": target, "downloaded": False})
            continue
        downloaded = await gateway.local_path(model) is not None
        entry = {"alias": alias, "target": target, "downloaded": downloaded}
        listed.append({**entry, "recipe": model.recipe})
    return JSONResponse({"aliases": listed})


async def aliases_add(request: Request) -> Response:
    control = RuntimeControl.of(request)
    body = await body_of(request)
    alias, target = body.get("alias", ""), body.get("target", body.get("model", ""))
    if not isinstance(alias, str) or not isinstance(target, str) or not alias or not target:
        raise LemonError(
            "Alias and target fields are required", 400, code="invalid_request", param="alias"
        )
    control.set_alias(alias, target)
    return JSONResponse({"status": "ok", "alias": alias, "target": target})


async def aliases_remove(request: Request) -> Response:
    alias = request.path_params["alias"]
    if not RuntimeControl.of(request).remove_alias(alias):
        raise LemonError(f"Alias not found: {alias}", 404, code="alias_not_found", param="alias")
    return JSONResponse({"status": "deleted", "alias": alias})


def routes() -> list[Route]:
    return [
        Route("/internal/set", config_set, methods=["POST"]),
        Route("/internal/config", config_get, methods=["GET"]),
        Route("/internal/pin", pin, methods=["POST"]),
        Route("/internal/simulate-vram-pressure", simulate_pressure, methods=["POST"]),
        Route("/internal/aliases", aliases_get, methods=["GET"]),
        Route("/internal/aliases", aliases_add, methods=["POST"]),
        Route("/internal/aliases/{alias:path}", aliases_remove, methods=["DELETE"]),
    ]
