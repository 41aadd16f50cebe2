"""``GET /api/v1/events``: what happened to each model since the server started (loads,
unloads and why, crashes, failed starts), from the router's
:class:`~lemoncore.serving.history.History`. Admin-only, like the logs: a reason may
quote an engine's output, which can name paths on this machine."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api.errors import ApiError
from lemoncore.api.replies import Reply, reply
from lemoncore.core import Core
from lemoncore.serving.eviction import EvictionKind
from lemoncore.serving.history import HISTORY_SIZE, ModelEvent, ModelEventKind

PARAMETERS = (
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": f"At most this many of the newest events (default {HISTORY_SIZE // 2})",
        "schema": {"type": "integer", "minimum": 1, "maximum": HISTORY_SIZE},
    },
)


class ModelEventReply(Reply):
    time: str = Field(description="UTC, ISO 8601, milliseconds")
    model: str
    event: ModelEventKind
    kind: EvictionKind | None = Field(
        description="Why it was unloaded (`unload`: asked for; `idle`: its keep-alive "
        "passed; the rest are evictions); null for the other events"
    )
    reason: str = Field(description="One line")

    @classmethod
    def of(cls, event: ModelEvent) -> ModelEventReply:
        when = datetime.fromtimestamp(event.time, UTC).isoformat(timespec="milliseconds")
        return cls(
            time=when.replace("+00:00", "Z"),
            model=event.model,
            event=event.event,
            kind=event.kind,
            reason=event.reason,
        )


class ModelEvents(Reply):
    object: Literal["list"] = "list"
    data: list[ModelEventReply] = Field(description="Oldest first")
    crashes: dict[str, int] = Field(description="Crashes per model since the server started")


async def events(request: Request) -> Response:
    core: Core = request.app.state.core
    raw = request.query_params.get("limit", str(HISTORY_SIZE // 2))
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= HISTORY_SIZE):
        raise ApiError(
            f"invalid query parameter 'limit': an integer from 1 to {HISTORY_SIZE}", param="limit"
        )
    history = core.router.history
    return reply(
        ModelEvents(
            data=[ModelEventReply.of(e) for e in history.recent(int(raw))],
            crashes=dict(history.crashes),
        )
    )
