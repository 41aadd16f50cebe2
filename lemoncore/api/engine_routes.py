"""Lemonade Server's llama.cpp routes under ``/api/v1`` and ``/v1``: ``POST /tokenize``
(the routed ``/tokenize``, its ``model`` optional), ``GET /slots`` and ``POST
/slots/{id}?action=…``, each answered by
the named model or, without one, the loaded model used last, as Lemonade's
``Server::handle_tokenize`` and ``Server::handle_slots`` (``src/cpp/server/server.cpp``)
send them to its loaded model. With no model named and none loaded: a 400."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api import bodies
from lemoncore.api.errors import ApiError, json_object
from lemoncore.api.inference import infer_json
from lemoncore.api.upstream import backend_response
from lemoncore.core import Core
from lemoncore.recipes import ModelType
from lemoncore.serving.server import LoadedServer

TOKENIZE = "/tokenize"


def last_used(core: Core, what: str) -> LoadedServer:
    """The loaded LLM used last; a 400 saying ``what`` needs one when none is."""
    servers = [s for s in core.router.servers.values() if s.model.model_type is ModelType.LLM]
    if not servers:
        raise ApiError(
            f"no model is loaded for {what}: name one in 'model' (GET /v1/models lists "
            "them), or load one with POST /api/v1/load",
            code="no_model_loaded",
            param="model",
        )
    return max(servers, key=lambda s: s.last_used)


async def tokenize(request: Request) -> Response:
    """``POST /api/v1/tokenize``: the routed ``/tokenize``; without ``model``, the loaded
    model used last tokenizes."""
    core: Core = request.app.state.core
    endpoint = core.plugins.registry.endpoints[TOKENIZE]
    body = await json_object(request)
    if body.get("model") is None:
        body["model"] = last_used(core, "tokenization").model.name
    return await infer_json(request, endpoint, bodies.body_of(endpoint), body)


async def slots(request: Request) -> Response:
    """``GET /api/v1/slots[?model=M]``: the engine's ``GET /slots`` (llama-server's slot
    states), passed through."""
    core: Core = request.app.state.core
    server = _server_of(core, request.query_params.get("model"), "the slots query")
    return await _passed_through(request, server, "GET", "/slots")


SLOT_ACTIONS = ("erase", "save", "restore")  # Server::handle_slots_by_id's known actions


async def slot_action(request: Request) -> Response:
    """``POST /api/v1/slots/{id}?action=erase[&model=M]``: the engine's ``POST
    /slots/{id}`` with the body as it came (llama-server's ``post_slots``,
    ``tools/server/server-context.cpp``; an engine started without ``--slot-save-path``
    answers 501 ``not_supported_error``, passed on). The action is checked first, in
    ``Server::handle_slots_by_id``'s words; ``save`` and ``restore`` are refused 501: they
    would write and read KV caches (gigabytes each) on the server's disk for any client."""
    core: Core = request.app.state.core
    action = request.query_params.get("action", "")
    if action not in SLOT_ACTIONS:
        raise ApiError(
            f"Unknown action: {action}. Supported actions: {', '.join(SLOT_ACTIONS)}"
            if action
            else "POST /api/v1/slots/{id} requires action query parameter (e.g., ?action=erase)",
            param="action",
        )
    if action != "erase":
        raise ApiError(
            f"lemoncore does not serve slot {action}: it would write KV caches to the "
            "server's disk for any client; erase is served",
            501,
            "not_supported_error",
            param="action",
        )
    body = await json_object(request) if await request.body() else {}
    server = _server_of(core, request.query_params.get("model"), f"slots {action}")
    path = f"/slots/{request.path_params['slot_id']}"
    not_supported = frozenset({501})  # its answer, not a failure: passed on as it came
    return await _passed_through(
        request, server, "POST", path, {"action": action}, body, not_supported
    )


def _server_of(core: Core, name: str | None, what: str) -> LoadedServer:
    """The loaded server of ``name``, else the loaded model used last."""
    if not name:
        return last_used(core, what)
    server = core.router.loaded(bodies.checked_name(name))
    if server is None:
        raise ApiError(
            f"model {name!r} is not loaded; load it with POST /api/v1/load",
            404,
            code="model_not_loaded",
            param="model",
        )
    return server


async def _passed_through(
    request: Request,
    server: LoadedServer,
    method: str,
    path: str,
    params: dict[str, str] | None = None,
    body: dict[str, object] | None = None,
    answers: frozenset[int] = frozenset(),
) -> Response:
    try:
        upstream = await server.client.request(method, path, params=params, json=body)
    except httpx.HTTPError as exc:
        raise ApiError(
            f"backend error: {server.model.name}'s engine did not answer {method} {path} ({exc})",
            502,
            "backend_error",
            "backend_error",
        ) from exc
    return backend_response(upstream, request.scope, answers)
