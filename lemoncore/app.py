"""``create_app``: the ASGI application, standalone or mounted inside another app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route

from lemoncore.api import inference, manage
from lemoncore.api.boundary import BrowserBoundary
from lemoncore.api.errors import EXCEPTION_HANDLERS
from lemoncore.api.guard import Guard
from lemoncore.api.hostname import loopback_name
from lemoncore.core import Core, build_core, run_startup_tasks
from lemoncore.hosts import HostInfo
from lemoncore.settings import Settings

API_PREFIXES = ("/api/v1", "/v1")

_ENDPOINTS = [
    ("/models", inference.list_models, ["GET"]),
    ("/models/{model_id:path}", inference.get_model, ["GET"]),
    ("/chat/completions", inference.chat_completions, ["POST"]),
    ("/completions", inference.completions, ["POST"]),
    ("/embeddings", inference.embeddings, ["POST"]),
    ("/health", manage.health, ["GET"]),
    ("/load", manage.load, ["POST"]),
    ("/unload", manage.unload, ["POST"]),
    ("/pull", manage.pull, ["POST"]),
    ("/delete", manage.delete, ["POST"]),
    ("/install", manage.install, ["POST"]),
    ("/uninstall", manage.uninstall, ["POST"]),
    ("/system-info", manage.system_info, ["GET"]),
]


def _routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = [Route("/live", manage.live, methods=["GET"]),
                               Route("/metrics", manage.metrics, methods=["GET"]),
                               Route("/openapi.json", manage.openapi, methods=["GET"])]
    for prefix in API_PREFIXES:
        routes += [Route(prefix + path, fn, methods=methods) for path, fn, methods in _ENDPOINTS]
    return routes


def create_app(settings: Settings | None = None, *,
               plugins: Mapping[str, object] | None = None,
               host: HostInfo | None = None) -> Starlette:
    """Build the app. ``plugins`` adds in-process plugins beside the installed ones.

    Mounted inside another Starlette app, the mounted app's lifespan does not run by
    itself: enter :func:`lifespan` from the outer app's lifespan so backends start and
    stop with it.
    """
    core = build_core(settings or Settings(), plugins, host)

    @asynccontextmanager
    async def run(app: Starlette) -> AsyncIterator[None]:
        async with core.router:
            await run_startup_tasks(core)
            yield

    settings = core.settings
    middleware = [Middleware(
        Guard, api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        admin_key=settings.admin_api_key.get_secret_value() if settings.admin_api_key
        else None, max_body_bytes=settings.max_body_bytes,
        allow_remote_admin=settings.allow_remote_admin)]
    if settings.cors_origins:
        middleware.insert(0, Middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                                        allow_methods=["GET", "POST"], allow_headers=["*"]))
    middleware.insert(0, Middleware(BrowserBoundary, allowed_hosts=settings.allowed_hosts,
                                    cors_origins=settings.cors_origins,
                                    machine_names=not loopback_name(settings.host)))
    app = Starlette(routes=_routes(), lifespan=run, exception_handlers=EXCEPTION_HANDLERS,
                    middleware=middleware)
    app.state.core = core
    return app


def lifespan(app: Starlette) -> AbstractAsyncContextManager[Any]:
    """The lemoncore app's lifespan, for an outer app that mounts it."""
    return app.router.lifespan_context(app)


def core_of(app: Starlette) -> Core:
    core: Core = app.state.core
    return core
