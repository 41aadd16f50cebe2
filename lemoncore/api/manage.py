"""Lemonade-style management: health, load, unload, pull, delete, install (a model's
registration is :mod:`~lemoncore.api.definitions`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from lemoncore import __version__
from lemoncore.api import bodies, collections, definitions, replies
from lemoncore.api.bodies import parse
from lemoncore.api.errors import ApiError, json_object
from lemoncore.api.loaded import loaded_models
from lemoncore.api.replies import reply
from lemoncore.core import Core
from lemoncore.installs.backends import THEROCK, BackendState
from lemoncore.launch import ProgressCallback
from lemoncore.options import SELECTOR
from lemoncore.recipes import RESERVED_OPTION_NAMES, ModelType, Tier
from lemoncore.serving.proxy import SSE_HEADERS

LOAD_CONTROL_FIELDS = RESERVED_OPTION_NAMES - {SELECTOR}  # `backend` selects; the rest steer


async def live(request: Request) -> Response:
    return reply(replies.Live(status="ok"))


async def health(request: Request) -> Response:
    core: Core = request.app.state.core
    servers = list(core.router.servers.values())
    last = max(servers, key=lambda server: server.last_used, default=None)
    return reply(
        replies.Health(
            version=__version__,
            model_loaded=last.model.name if last else None,
            max_models={t: core.settings.max_loaded_models for t in ModelType},
            all_models_loaded=loaded_models(core),
            held_off=[
                replies.HeldOff.model_validate(held, from_attributes=True)
                for held in core.router.held_off()
            ],
        )
    )


async def load(request: Request) -> Response:
    core: Core = request.app.state.core
    raw = await json_object(request)
    body = parse(bodies.LoadBody, raw)
    options = {k: v for k, v in raw.items() if k not in LOAD_CONTROL_FIELDS}
    if (collection := core.models.collection(body.model_name)) and not body.dry_run:
        return reply(await collections.load(core, collection))
    if body.dry_run:
        plan = await core.router.plan(body.model_name, options)
        return reply(replies.LoadPlanReply.of(plan))
    server = await core.router.load(
        body.model_name, options, body.pinned, keep_alive=body.keep_alive
    )
    # a null in a load is "not set here": it saves nothing (Lemonade's handle_load keeps
    # the saved value too); POST /api/v1/models/{id}/options clears a saved option
    kept = {k: v for k, v in options.items() if v is not None}
    if body.save_options and kept:
        core.models.save_options(server.model.name, kept)
    return reply(
        replies.Loaded(
            model_name=server.model.name,
            checkpoint=server.model.checkpoint,
            recipe=server.recipe.name,
            backend=server.backend.name,
            device=server.device,
            pinned=server.pinned,
        )
    )


async def unload(request: Request) -> Response:
    core: Core = request.app.state.core
    name = parse(bodies.UnloadBody, await json_object(request)).model_name
    if name is not None:
        await core.router.unload(name)
        return reply(replies.Done(message=f"unloaded {name}"))
    await core.router.unload_all()
    return reply(replies.Done(message="unloaded all models"))


async def pull(request: Request) -> Response:
    core: Core = request.app.state.core
    body = parse(bodies.PullBody, await json_object(request))
    if collections.asks_collection(core, body):
        collection = await collections.register(core, body, definitions.define)
        run: Pull = functools.partial(collections.fetch, core, collection)
    else:
        run = await _model_pull(core, body)
    if not body.stream:
        return reply(replies.Pulled(**(await run(None)).model_dump()))
    return StreamingResponse(
        _progress_events(run), media_type="text/event-stream", headers=SSE_HEADERS
    )


Pull = Callable[[ProgressCallback | None], Awaitable[replies.PullResult]]


async def _model_pull(core: Core, body: bodies.PullBody) -> Pull:
    """The download of the model ``body`` names, registered first when it defines one."""
    new = core.models.get(body.model_name) is None
    model = await definitions.define(core, body)

    async def run(progress: ProgressCallback | None) -> replies.PullResult:
        try:
            path = await core.models.pull(model, progress)
        except BaseException:  # a failed add leaves no model behind that has no files
            if new:
                core.models.unregister(model.name)
            raise
        return replies.PullResult(model_name=model.name, path=str(path))

    return run


async def delete(request: Request) -> Response:
    core: Core = request.app.state.core
    name = parse(bodies.DeleteBody, await json_object(request)).model_name
    if collection := core.models.collection(name):
        return reply(collections.delete(core, collection))
    model = core.models.get(name)
    if model is None:
        raise ApiError(f"model {name!r} not found", 422, code="model_not_found")
    if not core.models.deletable(model):  # raises its 422 before anything unloads
        core.models.delete(model)
    if core.router.loaded(name) is not None:
        await core.router.unload(name)
    core.models.delete(model)
    return reply(replies.Done(message=f"deleted {model.name}"))


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    core: Core = request.app.state.core
    counts = core.router.metrics()
    lines = [
        "# HELP lemon_evictions_total Servers stopped by the router, by reason.",
        "# TYPE lemon_evictions_total counter",
    ]
    lines += [
        f'lemon_evictions_total{{reason="{kind}"}} {count}'
        for kind, count in sorted(counts.evictions.items())
    ]
    lines += [
        "# HELP lemon_loads_total Backend servers started.",
        "# TYPE lemon_loads_total counter",
        f"lemon_loads_total {counts.loads}",
        "# HELP lemon_loaded_models Backend servers running now.",
        "# TYPE lemon_loaded_models gauge",
        f"lemon_loaded_models {counts.loaded}",
        "# HELP lemon_tokens_total Tokens backends reported in their answers' usage.",
        "# TYPE lemon_tokens_total counter",
    ]
    lines += [
        f'lemon_tokens_total{{model="{model}",kind="{kind.removesuffix("_tokens")}"}} {count}'
        for (model, kind), count in sorted(counts.tokens.items())
    ]
    lines += [
        "# HELP lemon_backend_crashes_total Engines that ended on their own while loaded.",
        "# TYPE lemon_backend_crashes_total counter",
    ]
    lines += [
        f'lemon_backend_crashes_total{{model="{model}"}} {count}'
        for model, count in sorted(counts.crashes.items())
    ]
    lines += [
        "# HELP lemon_backend_answers_total Answers backends gave, by model, endpoint and status.",
        "# TYPE lemon_backend_answers_total counter",
    ]
    lines += [
        f'lemon_backend_answers_total{{model="{model}",endpoint="{path}",'
        f'status="{status}"}} {count}'
        for (model, path, status), count in sorted(counts.answers.items())
    ]
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8")


def tier_notice(tier: Tier) -> str:
    return {
        Tier.COMMUNITY: "community backend: maintained by its plugin's authors, not "
        "supported for production",
        Tier.EXPERIMENTAL: "experimental backend: community-developed, use at your own risk",
    }.get(tier, "")


def _backend_name(body: bodies.UninstallBody) -> str:
    backend, recipe = body.backend, body.recipe
    return backend if ":" in backend or not recipe else f"{recipe}:{backend}"


async def install(request: Request) -> Response:
    """Install a backend (or ``runtime:therock``); with ``stream`` an SSE progress stream."""
    core: Core = request.app.state.core
    body = parse(bodies.InstallBody, await json_object(request))
    name, consent = _backend_name(body), body.consent
    trusted = (
        [
            replies.TrustedArtifact.model_validate(t.as_dict())
            for t in await core.backends.trust_download(name)
        ]
        if body.trust_download
        else []
    )
    status = (
        None
        if name == THEROCK
        else await anyio.to_thread.run_sync(core.backends.status, *core.backends.lookup(name))
    )
    if status is not None:  # refuse before any stream starts
        if status.state in {BackendState.UNSUPPORTED, BackendState.ACTION_REQUIRED}:
            raise ApiError(
                f"{name} is {status.state.value}: {status.message}"
                + (f". Fix: {status.action}" if status.action else ""),
                code=status.state.value,
            )
        if core.backends.needs_consent(status) and not consent:
            await core.backends.ensure_installed(status)  # raises the 403 that says how

    async def run(
        progress: ProgressCallback | None,
    ) -> replies.BackendInstallResult | replies.RuntimeInstallResult:
        if status is None:
            decision = await core.backends.rocm.install(progress)
            return replies.RuntimeInstallResult(
                backend=THEROCK,
                state="installed",
                runtime=decision.source,
                version=decision.version,
                trusted=trusted,
            )
        installed = await core.backends.ensure_installed(status, progress, consent=consent)
        return replies.BackendInstallResult(
            backend=name,
            state=installed.state,
            version=installed.version,
            tier=installed.backend.tier,
            notice=tier_notice(installed.backend.tier),
            trusted=trusted,
        )

    if not body.stream:
        result = await run(None)
        done = (
            replies.RuntimeInstalled
            if isinstance(result, replies.RuntimeInstallResult)
            else replies.BackendInstalled
        )
        return reply(done(**result.model_dump()))
    return StreamingResponse(
        _progress_events(run), media_type="text/event-stream", headers=SSE_HEADERS
    )


async def _progress_events(
    run: Callable[[ProgressCallback], Awaitable[replies.Reply]],
) -> AsyncIterator[bytes]:
    """Run ``run`` and stream its byte progress, then ``complete`` or ``error``."""
    send, receive = anyio.create_memory_object_stream[tuple[str, replies.Reply]](64)

    def progress(done: int, total: int) -> None:
        pct = round(100 * done / total, 1) if total else 0.0
        with contextlib.suppress(anyio.WouldBlock):  # drop a tick rather than block
            send.send_nowait(
                (
                    "progress",
                    replies.Progress(bytes_downloaded=done, bytes_total=total, percent=pct),
                )
            )

    async def main() -> None:
        async with send:
            try:
                result = await run(progress)
            except Exception as exc:  # noqa: BLE001 - reported to the client as an event
                await send.send(("error", replies.StreamError(error=str(exc))))
            else:
                await send.send(("complete", result))

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(main)
        async for event, data in receive:
            yield f"event: {event}\ndata: {data.model_dump_json()}\n\n".encode()


async def uninstall(request: Request) -> Response:
    core: Core = request.app.state.core
    name = _backend_name(parse(bodies.UninstallBody, await json_object(request)))
    if name != THEROCK:
        core.backends.lookup(name)
    for server in list(core.router.servers.values()):
        if f"{server.recipe.name}:{server.backend.name}" == name:
            await core.router.unload(server.model.name)
    removed = await core.backends.uninstall(name)
    return reply(replies.Uninstalled(backend=name, removed=removed))
