"""A request that names a collection goes to one of its components: a router
collection's routing policy picks it (:mod:`lemoncore.models.routing`), an omni
collection's first component of the endpoint's model type serves it. The answer is the
component's, with the decision added for a router as Lemonade adds it
(``src/cpp/server/server.cpp``, ``route_decision_response.h``): the ``x-lemonade-route``
header (the matched rule's id, or ``default``) and an ``x_lemonade_route`` object in the
JSON answer, or in a stream's first JSON event; ``route_trace: true`` in the request adds
the policy's trace to it."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import JsonValue
from starlette.responses import Response

from lemoncore.api.errors import ApiError
from lemoncore.core import Core
from lemoncore.models.collections import ROUTER, Collection
from lemoncore.models.routing import route
from lemoncore.recipes import Endpoint
from lemoncore.routing.decision import trace_requested
from lemoncore.serving.proxy import Framing, SSERelay

Infer = Callable[[dict[str, Any]], Awaitable[Response]]
HEADER, FIELD = "x-lemonade-route", "x_lemonade_route"
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # SSE's blank line, in each line ending


async def answer(
    core: Core, endpoint: Endpoint, collection: Collection, body: dict[str, Any], infer: Infer
) -> Response:
    """Answer ``body`` (addressed to ``collection``) with ``infer`` (the endpoint's handler)
    through the component it goes to."""
    trace = trace_requested(body)
    body.pop("route_trace", None)  # lemoncore's, not the engine's
    if collection.recipe == ROUTER:
        decision = await anyio.to_thread.run_sync(route, collection, body)  # regex searches
        response = await infer({**body, "model": decision.route_to})
        return annotated(response, decision.header, decision.as_json(trace))
    return await infer({**body, "model": _omni_component(core, collection, endpoint)})


def _omni_component(core: Core, collection: Collection, endpoint: Endpoint) -> str:
    for name in collection.components:
        model = core.models.get(name)
        if model is not None and model.model_type is endpoint.model_type:
            return model.name
    raise ApiError(
        f"collection {collection.id!r} has no {endpoint.model_type.value} model to serve "
        f"{endpoint.path}; its components: {', '.join(collection.components)}",
        code="model_type_mismatch",
        param="model",
    )


def annotated(response: Response, header: str, decision: dict[str, JsonValue]) -> Response:
    """``response`` with the route decision: in its header, and in its JSON body or its
    stream's first JSON event; an error answer gets the header only."""
    if isinstance(response, SSERelay):
        response.raw_headers.append((HEADER.encode(), header.encode()))
        response.framing = RouteFraming(response.framing, decision)
        return response
    response.headers[HEADER] = header
    kind, body = response.headers.get("content-type", ""), getattr(response, "body", None)
    if response.status_code != 200 or not kind.startswith("application/json"):
        return response
    if not isinstance(body, bytes | memoryview):  # a streamed answer of another kind
        return response
    try:
        data = json.loads(bytes(body))
    except ValueError:
        return response
    if not isinstance(data, dict):
        return response
    content = json.dumps({**data, FIELD: decision}).encode()
    response.body = content
    response.headers["content-length"] = str(len(content))
    return response


class RouteFraming:
    """A stream's framing with the decision added to its first JSON ``data:`` event; the
    bytes before that event's end are held (at most :data:`MAX_HELD`, then passed on
    unchanged), everything after passes as it came. Events end with a blank line in any
    of SSE's line endings (``\\n``, ``\\r\\n``, ``\\r``)."""

    MAX_HELD = 1 << 20

    def __init__(self, inner: Framing, decision: dict[str, JsonValue]) -> None:
        self.inner, self.decision = inner, decision
        self.held: bytearray | None = bytearray()  # None: added (or given up)
        self.scanned = 0  # where the held bytes hold no event's end before

    @property
    def error(self) -> bool:
        return self.inner.error

    @error.setter
    def error(self, value: bool) -> None:
        self.inner.error = value

    def chunk(self, data: bytes) -> bytes:
        data = self.inner.chunk(data)
        if self.held is None:
            return data
        self.held += data
        out = bytearray()
        while self.held is not None:
            found = _EVENT_END.search(self.held, max(self.scanned - 3, 0))  # a split end
            if found is None:
                self.scanned = len(self.held)
                break
            event, rest = bytes(self.held[: found.start()]), self.held[found.end() :]
            added = self._add(event)
            out += (event if added is None else added) + found.group()
            self.held, self.scanned = (rest, 0) if added is None else (None, 0)
            if added is not None:
                out += rest
        if self.held is not None and len(self.held) > self.MAX_HELD:
            out += self.held
            self.held = None
        return bytes(out)

    def _add(self, event: bytes) -> bytes | None:
        """The event with the decision in its JSON data line, or ``None`` when it has no
        JSON object to add it to (a comment, ``[DONE]``, an error)."""
        lines = event.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if not line.startswith(b"data:"):
                continue
            try:
                data = json.loads(line[5:])
            except ValueError:
                return None
            if not isinstance(data, dict) or "error" in data:
                return None
            ending = line[len(line.rstrip(b"\r\n")) :]
            added = json.dumps({**data, FIELD: self.decision}).encode()
            lines[i] = b"data: " + added + ending
            return b"".join(lines)
        return None

    def end(self) -> bytes:
        held, self.held = bytes(self.held or b""), None  # never a whole event: end it
        return held + (b"\n\n" if held else b"") + self.inner.end()

    def fail(
        self,
        message: str,
        status: int = 502,
        type_: str = "backend_error",
        code: str = "backend_error",
    ) -> bytes:
        held, self.held = bytes(self.held or b""), None
        return held + self.inner.fail(message, status, type_, code)
