"""``create_app``: the ASGI application, standalone or mounted inside another app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route

from lemoncore import routevet
from lemoncore.api.boundary import BrowserBoundary
from lemoncore.api.errors import EXCEPTION_HANDLERS
from lemoncore.api.guard import Guard
from lemoncore.api.hostname import loopback_name
from lemoncore.api.intake import Intake
from lemoncore.api.openapi import operations
from lemoncore.api.shapes import ErrorShapes
from lemoncore.core import Core, build_core, run_startup_tasks
from lemoncore.hosts import HostInfo
from lemoncore.settings import Settings


def _routes(core: Core, ui: bool) -> list[BaseRoute]:
    """In the order Starlette tries them: every operation of the OpenAPI route table
    (lemoncore's own and the routed endpoints, plugins' included), prefixed ones under
    each prefix; the web UI's ``/ui`` routes and a browser's ``GET /``; the routes
    plugins serve themselves (``register_routes``), each
    :class:`~lemoncore.routevet.Fenced` off every path of the routes before it; last the
    UI's ``GET /`` redirect for other clients, which a plugin may take."""
    own: list[BaseRoute] = [
        Route(path, op.handler, methods=[op.method])
        for op in operations(core.plugins.registry.endpoints_tuple())
        for path in op.routes
    ]
    pages: list[BaseRoute] = []
    root: list[BaseRoute] = []
    if ui:
        from lemoncore import ui as web_ui

        pages, root = web_ui.routes(), [web_ui.root_redirect()]
    taken = {*core.plugins.registry.endpoints, *(getattr(r, "path", "") for r in own)}
    return [*own, *pages, *routevet.fenced(core.plugins.registry.routes, taken), *root]


def create_app(
    settings: Settings | None = None,
    *,
    plugins: Mapping[str, object] | None = None,
    host: HostInfo | None = None,
    ui: bool = True,
) -> Starlette:
    """Build the app. ``plugins`` adds in-process plugins beside the installed ones;
    ``ui=False`` leaves out the web UI (``/ui/``).

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
    middleware = [
        Middleware(
            Guard,
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
            admin_key=settings.admin_api_key.get_secret_value() if settings.admin_api_key else None,
            max_body_bytes=settings.max_body_bytes,
            allow_remote_admin=settings.allow_remote_admin,
        )
    ]
    if settings.cors_origins:
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["*"],
            ),
        )
    middleware.insert(
        0,
        Middleware(
            BrowserBoundary,
            allowed_hosts=settings.allowed_hosts,
            cors_origins=settings.cors_origins,
            machine_names=not loopback_name(settings.host),
        ),
    )
    middleware.insert(
        0,
        Middleware(
            Intake, body_timeout=settings.body_timeout, max_header_bytes=settings.max_header_bytes
        ),
    )
    app = Starlette(
        routes=_routes(core, ui),
        lifespan=run,
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=middleware,
    )
    app.state.core = core
    # every error answer's shape, found from the scope (lemoncore.api.shapes.shapes_of)
    app.state.error_shapes = ErrorShapes(core.plugins.registry.endpoints_tuple(), core.plugins)
    return app


def lifespan(app: Starlette) -> AbstractAsyncContextManager[Any]:
    """The lemoncore app's lifespan, for an outer app that mounts it."""
    return app.router.lifespan_context(app)


def core_of(app: Starlette) -> Core:
    core: Core = app.state.core
    return core
