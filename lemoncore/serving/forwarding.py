"""One path for every routed request, streamed or not: acquire the model's server
(loading it if needed), let the backend's owner adjust the body, send it (waiting out a
single-slot engine's 429), retry once on a fresh server when the backend died (an error
that is not retried names how it died; a death retrying cannot help, SIGILL, holds the
model off like a failed start). What comes back is an :class:`~lemoncore.serving.answer.
Answer`, which records the outcome and usage when its relay closes it; a request that
got no answer (the backend could not be reached) is recorded here."""

from __future__ import annotations

import contextlib
import json
from contextlib import AsyncExitStack

import anyio
import httpx

from lemoncore.errors import LemonError
from lemoncore.recipes import Backend, ModelInfo, Recipe
from lemoncore.serving.answer import Answer, failed
from lemoncore.serving.proxy import (
    CUT_AT_SHUTDOWN,
    BackendFailure,
    Body,
    broken,
    send_request,
)
from lemoncore.serving.router import Router
from lemoncore.serving.server import LoadedServer
from lemoncore.supervisor import StartError

# Back-off while a single-slot engine still works on an abandoned request.
BUSY_RETRY_S, BUSY_RETRY_MAX_S = 0.05, 1.0


async def exchange(
    router: Router,
    model: ModelInfo,
    path: str,
    body: Body,
    stream: bool,
    retry: bool = True,
    keep_alive: float | None = None,
    surface: str | None = None,
) -> Answer:
    """Send ``body`` to ``model``'s server; with ``retry``, once more to a fresh server
    when the backend died before answering. A ``keep_alive`` (seconds) replaces the
    server's (:meth:`Router.acquire`); ``surface`` is the path the client called when
    ``body`` translates it (the owner's ``normalize_request`` is told). The answer must
    be closed (``async with``); a complete one (or a stream's failed start) has ended
    already, a stream that started ends as its relay says. A non-streaming request still
    waiting at a shutdown's drain deadline is cut (503). A backend that does not serve
    ``path`` is refused (400 ``endpoint_not_served``) before the model is loaded."""
    if router.loaded(model.name) is None:  # refused before any load or eviction
        recipe, backend = await router.backend_for(model.name)
        if path not in backend.endpoints:
            raise not_served(recipe, backend, path)
    for attempt in (1, 2) if retry else (2,):  # only a first attempt is retried
        resources = AsyncExitStack()
        try:
            server = await resources.enter_async_context(router.acquire(model.name, keep_alive))
            if path not in server.backend.endpoints:
                raise not_served(server.recipe, server.backend, path)
            if isinstance(body, dict):
                router.plugins.normalize_request(
                    server.recipe, server.backend, path, body, surface or path
                )
            try:
                with router.admission.cut_at_drain_deadline() as deadline:
                    upstream = await send_when_free(router, server, path, body, stream)
                if deadline.cancelled_caught:
                    raise LemonError(CUT_AT_SHUTDOWN, 503, "server_error", "shutting_down")
            except BackendFailure as exc:
                death = await router.fleet.death(server)
                if attempt == 1 and death is not None and death.retryable:
                    await resources.aclose()
                    continue
                router.fleet.record_outcome(server, failed=True)
                if death is None:
                    raise
                failure = BackendFailure(broken("backend connection failed", exc, death))
                if not death.retryable:  # SIGILL: a fresh engine would die the same way
                    router.admission.failed_start(
                        model.name, StartError(str(failure), death), model.checkpoint
                    )
                    failure.should_retry = False
                raise failure from exc
            resources.push_async_callback(upstream.aclose)
        except BaseException:
            await resources.aclose()
            raise
        router.fleet.answers[model.name, path, upstream.status_code] += 1
        answer = Answer(
            server, upstream, resources, router.fleet, router.admission.cut_at_drain_deadline
        )
        if not stream or upstream.status_code != 200:
            answer.end(failed(upstream.status_code))
        if not stream and upstream.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError):
                answer.usage = json.loads(upstream.content).get("usage")
        return answer
    raise AssertionError("unreachable")


def not_served(recipe: Recipe, backend: Backend, path: str) -> LemonError:
    return LemonError(
        f"{recipe.name}:{backend.name} does not serve {path} (it serves "
        f"{', '.join(sorted(backend.endpoints))}); load the model on a backend "
        "that does",
        400,
        code="endpoint_not_served",
        param="model",
    )


async def send_when_free(
    router: Router, server: LoadedServer, path: str, body: Body, stream: bool
) -> httpx.Response:
    """Send the request. A single-slot engine may still be finishing a request whose client
    left (VTE notices a disconnect only at its next token, and never on a non-streaming
    request) and answer 429: lemoncore holds the slot, so it retries with back-off for up
    to ``load_timeout`` seconds, then answers 503 ``backend_busy`` with ``Retry-After``.
    The engine's 429 never reaches the client."""
    delay = BUSY_RETRY_S
    deadline = anyio.current_time() + router.settings.load_timeout
    while True:
        upstream = await send_request(
            server.client, path, body, stream, router.settings.max_answer_bytes
        )
        if upstream.status_code != 429 or server.backend.max_concurrency != 1:
            return upstream
        await upstream.aclose()
        if anyio.current_time() + delay > deadline:
            raise LemonError(
                f"{server.model.name} is still finishing an earlier request; retry shortly",
                503,
                "server_busy",
                "backend_busy",
                retry_after=1,
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, BUSY_RETRY_MAX_S)
