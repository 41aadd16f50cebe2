"""``GET /api/v1/logs``: the server's recent log lines, or a stream of new ones.

Admin-only (:data:`lemoncore.api.guard.ADMIN_ENDPOINTS`): lines may name paths on this
machine. The lines come from :data:`lemoncore.logs.RECENT`, which ``lemon serve``'s
logging fills.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from lemoncore.api import replies
from lemoncore.api.errors import ApiError
from lemoncore.api.model_list import FLAG
from lemoncore.core import Core
from lemoncore.logs import RECENT, RING_SIZE, LogLine, RecentLines, matches
from lemoncore.serving.proxy import SSE_HEADERS

MAX_LIMIT = 2 * RING_SIZE
POLL_SECONDS = 0.25  # how often a follow stream looks for new lines
PING_SECONDS = 15.0  # a comment while quiet, so a vanished client is noticed

PARAMETERS = (
    {
        "name": "model",
        "in": "query",
        "required": False,
        "description": "Only lines about this model (its backend's output included)",
        "schema": {"type": "string"},
    },
    {
        "name": "event",
        "in": "query",
        "required": False,
        "description": "Only lines of this event (the message: `evicting`, `loaded`, ...)",
        "schema": {"type": "string"},
    },
    {
        "name": "after",
        "in": "query",
        "required": False,
        "description": "Only lines whose `seq` is greater (resume a stream)",
        "schema": {"type": "integer", "minimum": 0},
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": "At most this many of the newest lines (default 1000)",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    },
    {
        "name": "follow",
        "in": "query",
        "required": False,
        "description": "Case-insensitive; `true`, `1` or `yes`: an event stream of those "
        "lines, then of new lines as they are logged",
        "schema": {"type": "string", "enum": list(FLAG)},
    },
)
DESCRIPTION = (
    "The last lines of the server's log, as printed (without colour): lemoncore's own "
    f"and its backends' output, {RING_SIZE} of each at most. With `follow`, a "
    "`text/event-stream` of `line` events: the lines asked for, then each new line, "
    "until the client goes away or the server stops; when the server's logging does not "
    "feed this copy (`live` is false: an app that configures its own logging), the "
    "stream ends after the lines asked for."
)


def _integer(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and low <= int(raw) <= high):
        raise ApiError(
            f"invalid query parameter {name!r}: an integer from {low} to {high}", param=name
        )
    return int(raw)


def _entry(line: LogLine) -> replies.LogEntry:
    return replies.LogEntry(
        seq=line.seq,
        time=line.time,
        level=line.level,
        event=line.event,
        model=line.model,
        source="backend" if line.source == "backend" else "lemoncore",
        line=line.line,
        fields=line.fields,
    )


async def logs(request: Request) -> Response:
    core: Core = request.app.state.core
    model = request.query_params.get("model") or None
    event = request.query_params.get("event") or None
    after = _integer(request, "after", 0, 0, 2**63 - 1)
    limit = _integer(request, "limit", 1000, 1, MAX_LIMIT)
    follow = request.query_params.get("follow", "").lower()
    if follow not in FLAG:
        raise ApiError("invalid query parameter 'follow': true or false", param="follow")
    lines = RECENT.since(after, model, limit, event)
    if not FLAG[follow]:
        return replies.reply(
            replies.LogEntries(
                data=[_entry(x) for x in lines], last=RECENT.newest, live=RECENT.capturing
            )
        )
    return StreamingResponse(
        _follow(core, RECENT, lines, model, event),
        headers=SSE_HEADERS,
        media_type="text/event-stream",
    )


async def _follow(
    core: Core, recent: RecentLines, backlog: list[LogLine], model: str | None, event: str | None
) -> AsyncIterator[bytes]:
    """``line`` events: the backlog, then new lines until the server begins to stop.
    Starlette ends the stream when the client disconnects."""
    last = backlog[-1].seq if backlog else recent.newest
    for line in backlog:
        yield _event(line)
    quiet = 0.0
    while recent.capturing and not core.router.closing:
        await anyio.sleep(POLL_SECONDS)
        if recent.newest <= last:
            fresh: list[LogLine] = []
        elif fresh := recent.since(last, None, MAX_LIMIT):
            last = fresh[-1].seq
        about = [x for x in fresh if matches(x, model, event)]
        for line in about:
            yield _event(line)
        quiet = 0.0 if about else quiet + POLL_SECONDS
        if quiet >= PING_SECONDS:
            quiet = 0.0
            yield b": ping\n\n"


def _event(line: LogLine) -> bytes:
    return f"event: line\ndata: {_entry(line).model_dump_json()}\n\n".encode()
