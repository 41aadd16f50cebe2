"""``POST /api/v1/shutdown``: stop the server gracefully, as SIGTERM does on POSIX.

The router refuses new requests and gives in-flight ones ``stop_grace`` seconds; then
every backend is stopped and ``lemon serve`` exits (its Hypercorn waits on
:meth:`~lemoncore.serving.router.Router.shutdown_begun`). This is how ``lemon stop``
stops a server on every OS: on Windows no signal can drain a server that runs without the
caller's console (``os.kill`` is ``TerminateProcess`` there). Admin-only (guard's
``ADMIN_ENDPOINTS``), and, like every route, out of reach of other sites' pages (the
browser boundary). In an app that embeds lemoncore, the embedder's server stops only if
it waits on ``shutdown_begun``; until then requests get 503 ``shutting_down``.
"""

from __future__ import annotations

import os
from typing import Literal

import structlog
from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api.replies import Reply, reply
from lemoncore.core import Core

log = structlog.get_logger("lemoncore.api.shutdown")


class ShuttingDown(Reply):
    status: Literal["shutting_down"] = "shutting_down"
    pid: int = Field(description="The server's process id: it exits once it has drained")
    drain_s: float = Field(description="How long in-flight requests may still take")


async def shutdown(request: Request) -> Response:
    core: Core = request.app.state.core
    log.info("shutdown asked", client=request.client.host if request.client else None)
    core.router.begin_shutdown()
    return reply(ShuttingDown(pid=os.getpid(), drain_s=core.settings.stop_grace))
