"""One row of the route table: an :class:`Operation` names its handler, the route it is
served on, what it accepts (a model of :mod:`lemoncore.api.bodies`) and what it answers
per media type (models of :mod:`lemoncore.api.replies`, or a JSON Schema where the answer
is not lemoncore's to type). :mod:`lemoncore.api.openapi` holds the table;
:mod:`lemoncore.api.apidoc` documents it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, JsonValue
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api import bodies

Handler = Callable[[Request], Awaitable[Response]]
# What a 200 answers: per media type, a reply model, several (one of them), or a schema.
Media = type[BaseModel] | tuple[type[BaseModel], ...] | Mapping[str, JsonValue]

OPENAI, LEMONADE = "/v1", "/api/v1"  # each served under both; documented under one


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
    # OpenAPI parameter objects, copied into the document as they are
    parameters: tuple[Mapping[str, object], ...] = ()
    events: Mapping[str, Media] = field(default_factory=dict)  # with `stream`: SSE events
    engine: bool = False  # forwarded to an engine, whose own 4xx errors pass through
    anthropic_errors: bool = False  # lemoncore's errors are Anthropic-shaped here

    @property
    def routes(self) -> tuple[str, ...]:
        """The paths Starlette routes it at: under each prefix for a prefixed one."""
        return (LEMONADE + self.route, OPENAI + self.route) if self.prefix else (self.route,)

    @property
    def path(self) -> str:
        return self.prefix + re.sub(r"\{(\w+):\w+\}", r"{\1}", self.route)
