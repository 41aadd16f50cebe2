"""Lemonade's ``POST /api/v1/routing/validate`` (and ``/v1/routing/validate``; the
``/api/v0``, ``/v0`` prefixes come through :mod:`lemon_plugin_lemonade_api.aliases`): run an
ad-hoc ``collection.router`` document over one prompt, registering nothing
(``Server::handle_routing_validate`` and ``parse_required_json_body`` in
src/cpp/server/server.cpp, lemonade-sdk/lemonade @e385039).

The body is ``{"policy": {...}, "prompt"?: str, "has_images"?: bool, "has_tools"?: bool,
"metadata"?: {str: str}}``. Errors are Lemonade's, 400 ``{"error": "<message>"}``: an empty
body, invalid JSON, a field of the wrong type (``'prompt' must be a string``, ``'metadata'
value for key 'k' must be a string``…), and ``Invalid routing policy: <parser message>``
(:mod:`lemoncore.routing.policy`). The answer is ``{"decision": <decision
with its trace>, "normalized_policy": <the policy with its core-form routing>}``.
Components are names only: none needs to be a registered model. Classifiers are not run
(:func:`lemoncore.routing.decision.decide_route`).
"""

from __future__ import annotations

import json
import math
import re

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from lemoncore.plugin import PolicyError, RouteFeatures, decide_route, parse_route_policy

PATHS = ("/api/v1/routing/validate", "/v1/routing/validate")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class Refused(ValueError):
    """A request Lemonade answers 400 ``{"error": message}``."""


def _constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def load_body(body: bytes) -> object:
    """``parse_required_json_body``: strict JSON (no NaN, no out-of-range number, no lone
    surrogate, which nlohmann refuses too)."""
    if not body:
        raise Refused("Request body is required but was empty")
    try:
        doc = json.loads(body, parse_constant=_constant, parse_float=_finite)
        if _SURROGATE_ESCAPE.search(body):
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError) as exc:  # UnicodeError is a ValueError
        raise Refused(f"Invalid JSON in request body: {exc}") from None
    return doc


def request_inputs(doc: object) -> tuple[dict[str, object], RouteFeatures]:
    """The handler's field checks, in its order: the policy and the route context."""
    fields = doc if isinstance(doc, dict) else {}
    policy = fields.get("policy")
    if not isinstance(policy, dict):
        raise Refused("'policy' must be a JSON object")
    prompt = fields.get("prompt", "")
    if not isinstance(prompt, str):
        raise Refused("'prompt' must be a string")
    flags = []
    for name in ("has_images", "has_tools"):
        value = fields.get(name, False)
        if not isinstance(value, bool):
            raise Refused(f"'{name}' must be a boolean")
        flags.append(value)
    raw = fields.get("metadata", {})
    if not isinstance(raw, dict):
        raise Refused("'metadata' must be a JSON object of string values")
    for key in sorted(raw):  # nlohmann iterates an object in key order
        if not isinstance(raw[key], str):
            raise Refused(f"'metadata' value for key '{key}' must be a string")
    return policy, RouteFeatures(prompt, flags[1], flags[0], dict(raw))


def answer(doc: object) -> dict[str, object]:
    """The whole validation, pure: the success body, or :class:`Refused`."""
    policy_json, features = request_inputs(doc)
    try:
        policy = parse_route_policy(policy_json)
    except PolicyError as exc:
        raise Refused(f"Invalid routing policy: {exc}") from None
    decision = decide_route(policy, features, trace=True)
    normalized = {**policy_json, "routing": dict(policy.normalized_routing)}
    return {"decision": decision.to_json(), "normalized_policy": normalized}


async def validate(request: Request) -> Response:
    body = await request.body()
    try:  # off the event loop: a large policy or prompt is CPU work
        reply = await anyio.to_thread.run_sync(lambda: answer(load_body(body)))
    except Refused as exc:
        return JSONResponse({"error": str(exc)}, 400)
    return JSONResponse(reply)


def routes() -> list[BaseRoute]:
    return [Route(path, validate, methods=["POST"]) for path in PATHS]
