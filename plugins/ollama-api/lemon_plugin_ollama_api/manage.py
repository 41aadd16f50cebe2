"""Ollama's model management over the gateway: list (``/api/tags``), running (``/api/ps``),
show, pull and delete; the version and the heartbeat at ``/``; and the calls lemoncore
cannot serve (create, copy, push, blobs), refused with 501 and what to do instead."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from lemoncore.plugin import Gateway, LemonError, LoadedModel, ModelInfo

from lemon_plugin_ollama_api.bodies import DeleteBody, PullBody, ShowBody, parse
from lemon_plugin_ollama_api.describe import FileFacts, digest, file_facts, listing, running
from lemon_plugin_ollama_api.describe import show as described
from lemon_plugin_ollama_api.inference import loaded_options
from lemon_plugin_ollama_api.names import find, lemon_name
from lemon_plugin_ollama_api.responses import (
    Handler,
    Line,
    NDJSONResponse,
    ollama_errors,
)

DISTRIBUTION = "lemon-plugin-ollama-api"


async def facts_of(gateway: Gateway, model: ModelInfo) -> FileFacts | None:
    """The facts of ``model``'s downloaded file; ``None`` when it is not downloaded (or
    lies outside the model directories, so lemoncore would not serve it)."""
    try:
        path = await gateway.local_path(model)
    except LemonError:
        return None
    if path is None:
        return None
    try:
        return await anyio.to_thread.run_sync(file_facts, path)
    except OSError:  # removed meanwhile
        return None


async def heartbeat(request: Request) -> Response:
    """``GET``/``HEAD /``: Ollama's CLI checks the server is up here before each command."""
    return PlainTextResponse("Ollama is running")


# The Ollama release whose API this plugin serves, as Ollama's clients read /api/version
# (they compare it with the release that brought a feature): v0.16.1
# (github.com/ollama/ollama/releases/tag/v0.16.1), what Lemonade Server reports too
# (src/cpp/server/ollama_api.cpp, OllamaApi::handle_version).
OLLAMA_VERSION = "0.16.1"


async def api_version(request: Request) -> Response:
    """The Ollama version served (:data:`OLLAMA_VERSION`); lemoncore's and this plugin's
    own versions in fields Ollama's clients ignore (the Go client decodes ``version``
    alone: ollama/ollama api/client.go ``Client.Version``)."""
    return JSONResponse(
        {
            "version": OLLAMA_VERSION,
            "lemoncore": _version("lemoncore"),
            "lemon_plugin_ollama_api": _version(DISTRIBUTION),
        }
    )


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:  # imported from a source tree
        return "0+unknown"


@ollama_errors
async def tags(request: Request) -> Response:
    """The downloaded models, and the collections whose every component is downloaded
    (as ``user.NAME``, described by their first component, sized by all of them: as
    Lemonade's ``handle_tags`` lists them from ``get_downloaded_models``)."""
    gateway = Gateway.of(request)
    entries = []
    for model in gateway.models():
        if (facts := await facts_of(gateway, model)) is not None:
            entries.append(listing(model, facts))
    for collection in gateway.collections():
        found = [await facts_of(gateway, m) for m in collection.models]
        every = [f for f in found if f is not None]
        if collection.complete and len(every) == len(found):
            size = sum(f.size for f in every)
            first = collection.models[0].model_copy(update={"name": collection.id})
            entries.append(listing(first, dataclasses.replace(every[0], size=size)))
    return JSONResponse({"models": entries})


# What Ollama reports for a model kept loaded forever: a keep_alive < 0 is Go's longest
# duration (ollama/ollama api/types.go Duration.UnmarshalJSON and envconfig KeepAlive:
# time.Duration(math.MaxInt64), 292 years), and its scheduler sets expiresAt to the time
# the runner went idle plus that (server/sched.go Scheduler.processCompleted), which
# PsHandler (server/routes.go) answers as it is: a date about 292 years ahead. Ollama's
# CLI shows any expiry over 20 years ahead as "Forever" (format/time.go humanTime).
FOREVER = timedelta(microseconds=(2**63 - 1) // 1000)


def expires_at(server: LoadedModel, now: datetime) -> datetime:
    """When Ollama would say ``server`` expires: when its last request ended plus its
    keep_alive, or plus :data:`FOREVER` when it is kept until evicted (pinned, or
    keep_alive forever); while it is busy, from now (as Ollama estimates a runner that
    has not gone idle yet: ``Scheduler.loadedModels``)."""
    went_idle = now - timedelta(seconds=server.idle_seconds)
    if server.pinned or server.keep_alive is None:
        return went_idle + FOREVER
    return went_idle + timedelta(seconds=server.keep_alive)


@ollama_errors
async def ps(request: Request) -> Response:
    """The loaded models, the longest to live first (Ollama's ``PsHandler`` sorts them
    so, by whole seconds)."""
    gateway = Gateway.of(request)
    entries, now = [], datetime.now(UTC)
    for server in gateway.loaded():
        try:
            model = gateway.model(server.model_name)
        except LemonError:  # its plugin went away
            continue
        until = expires_at(server, now)
        entries.append(
            (
                int(until.timestamp()),
                running(
                    model,
                    await facts_of(gateway, model),
                    server.recipe_options,
                    server.peak_memory_bytes,
                    server.device == "gpu",
                    until,
                ),
            )
        )
    entries.sort(key=lambda entry: entry[0], reverse=True)  # stable, by whole seconds
    return JSONResponse({"models": [entry for _, entry in entries]})


@ollama_errors
async def show(request: Request) -> Response:
    """A model's details, template, parameters and capabilities: with the options it
    runs with, or (not loaded) those its next load would use; a model not downloaded
    yet is shown from what its registration says; a collection, as its first component."""
    body = parse(ShowBody, await request.body())
    gateway = Gateway.of(request)
    collection = gateway.collection(lemon_name(body.target))
    if collection is not None and collection.models:  # shown as its first component
        model = collection.models[0]
        shown = model.model_copy(update={"name": collection.id})
    else:
        model = shown = find(gateway, body.target)
    options = loaded_options(gateway, model.name)
    if options is None:
        options = await gateway.load_options(model.name)
    return JSONResponse(described(shown, await facts_of(gateway, model), options))


async def pulling(gateway: Gateway, model: ModelInfo) -> AsyncIterator[Line]:
    """Ollama's pull lines: the manifest, the download's progress in bytes of all the
    model's files (once their sizes are known), then success. The last progress line is
    always complete: a download that was quick, or already done, reports its end."""
    yield {"status": "pulling manifest"}
    hexdigest = digest(model)
    send, receive = anyio.create_memory_object_stream[tuple[int, int]](math.inf)
    outcome: Path | LemonError | None = None
    reported: tuple[int, int] | None = None

    def step(done: int, total: int) -> Line:
        return {
            "status": f"pulling {hexdigest[:12]}",
            "digest": f"sha256:{hexdigest}",
            "total": total,
            "completed": done,
        }

    async def run() -> None:
        nonlocal outcome
        with send:
            try:
                outcome = await gateway.pull(model.name, lambda *p: send.send_nowait(p))
            except LemonError as exc:  # raised below, not as a task group's
                outcome = exc

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        async with receive:
            async for done, total in receive:
                if total:  # 0 until the sizes are known
                    reported = done, total
                    yield step(done, total)
    if isinstance(outcome, LemonError):
        raise outcome
    assert outcome is not None
    if reported is None or reported[0] < reported[1]:
        total = reported[1] if reported else (await anyio.to_thread.run_sync(outcome.stat)).st_size
        yield step(total, total)
    yield {"status": "success"}


@ollama_errors
async def pull(request: Request) -> Response:
    """Download a catalogue or registered model (``stream: false``: one answer)."""
    body = parse(PullBody, await request.body())
    gateway = Gateway.of(request)
    model = find(gateway, body.target)
    if body.stream:
        return NDJSONResponse(pulling(gateway, model))
    if await Gateway.until_disconnect(request, gateway.pull(model.name)) is None:
        return Response(status_code=499)
    return JSONResponse({"status": "success"})


@ollama_errors
async def delete(request: Request) -> Response:
    """Remove a downloaded model; a model that is not downloaded is a 404, as for Ollama,
    whose models all are."""
    body = parse(DeleteBody, await request.body())
    gateway = Gateway.of(request)
    model = find(gateway, body.target)
    try:
        await gateway.delete(model.name)
    except LemonError as exc:
        if exc.status == 422:  # lemoncore: known, but no download to delete
            raise LemonError(f"model {body.target!r} not found: {exc}", 404) from exc
        raise
    return Response(status_code=200)


REFUSALS = {
    "create": "creating models is not supported by lemoncore: register a model file "
    'instead with POST /api/v1/pull {"model_name", "checkpoint": '
    '"owner/repo:file.gguf", "recipe": "llamacpp"} (or \'lemon pull NAME '
    "--checkpoint owner/repo:file.gguf --recipe llamacpp'); load-time options "
    'such as the context size go in "recipe_options"',
    "copy": "copying models is not supported by lemoncore: register the same checkpoint "
    'under the new name with POST /api/v1/pull {"model_name", "checkpoint", '
    '"recipe"} (the file is not copied)',
    "push": "pushing models is not supported by lemoncore: it serves models, it does not "
    "publish them; upload GGUF files to a Hugging Face repository instead",
    "blobs": "uploading blobs is not supported by lemoncore: put the GGUF file in "
    "lemoncore's model directory and register it with POST /api/v1/pull "
    '{"model_name", "checkpoint": "file:/path/to/file.gguf", "recipe"}',
}


def refusal(what: str) -> Handler:
    """A handler answering 501 with why ``what`` is refused and what to do instead."""
    message = REFUSALS[what]

    async def refuse(request: Request) -> Response:
        return JSONResponse({"error": message}, 501)

    return refuse
