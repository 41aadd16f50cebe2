"""A plugin's own routes cannot take lemoncore's paths, and its WebSocket route passes the
same guards as HTTP (#30, items 2 and 6), with the hostile plugin of ``hostileplugin.py``.

The WebSocket tests run the app under a real Hypercorn on a loopback socket and shake
hands with ``wsproto`` (Hypercorn's own WebSocket library), so refusals are what a client
really gets: the status line and body of the denial response.
"""

from __future__ import annotations

import functools
import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    Event,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from lemoncore import Settings, create_app, routevet
from lemoncore.plugins import PluginHost
from lemoncore.plugins.registry import core_routes
from lemoncore.ui import STATIC

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from hostileplugin import ROUTES, Hostile, hostile, hostile_app

pytestmark = pytest.mark.anyio
KEY = {"Authorization": "Bearer user-secret"}
ADMIN = {"Authorization": "Bearer admin-secret"}


def make_app(tmp_path: Path, **settings: Any) -> Any:
    return create_app(
        Settings(
            cache_dir=tmp_path / "cache",
            plugins_allow="",
            api_key="user-secret",
            admin_api_key="admin-secret",
            **settings,
        ),
        plugins={"hostile": Hostile()},
    )


@asynccontextmanager
async def asgi(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = make_app(tmp_path)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:13305"
        ) as client,
    ):
        client.app = app  # type: ignore[attr-defined]
        yield client


# Load time ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "why"),
    ROUTES,
    ids=lambda v: routevet.describe(v) if isinstance(v, BaseRoute) else None,
)
def test_each_hostile_route_is_refused_at_load_saying_why(route: BaseRoute, why: str) -> None:
    assert (routevet.refusal(route, {"/tokenize", *core_routes()}) or "") == why


@pytest.mark.parametrize(
    ("route", "why"),
    [
        (Route("/ollama/api/tags", hostile), None),
        (Mount("/ollama", app=hostile_app), None),
        (Mount("/vee", app=hostile_app), None),
        (Route("/live/", hostile), "lemoncore routes it"),
        (Route("/metrics", hostile), "lemoncore routes it"),
        (Route("/openapi.json", hostile), "lemoncore routes it"),
        (Route("/v1", hostile), "lemoncore routes it"),
        (Route("/api/v1", hostile), "lemoncore routes it"),
        (Mount("/live", app=hostile_app), "lemoncore routes it or paths under it"),
        (Mount("/v1/", app=hostile_app), "lemoncore routes it or paths under it"),
        (Mount("//api", app=hostile_app), "lemoncore routes it or paths under it"),
        (Mount("/u", app=hostile_app), None),  # /u/... : /ui is not under it
        (Route("/u{x}", hostile), "lemoncore routes it or paths under it"),  # matches /ui
        (
            WebSocketRoute("/{x}", hostile),
            "its pattern starts at the root and could answer lemoncore's paths",
        ),
        (Route("/V1/models", hostile), None),  # matching is case-sensitive: another path
        (Route("/api/v1/pull/variants", hostile), None),  # an exact claim lemoncore leaves
        (Route("//v1/extra/", hostile), None),
        (Route("/api/v1/pull", hostile), "lemoncore routes it"),  # taken below
        (Route("/api/v1/models/x", hostile), "lemoncore routes it"),  # by the pattern
        (Route("/api/v1/x/{y}", hostile), "lemoncore routes it or paths under it"),
        (Mount("/api/v1/x", app=hostile_app), "lemoncore routes it or paths under it"),
        (WebSocketRoute("/api/v1/ws", hostile), "lemoncore routes it"),
    ],
)
def test_route_vetting_table(route: BaseRoute, why: str | None) -> None:
    assert routevet.refusal(route, {"/api/v1/pull", "/api/v1/models/{model_id}"}) == why


def test_the_plugin_loads_with_a_warning_per_refused_route() -> None:
    host = PluginHost()
    host.add("hostile", Hostile())
    registry = host.finish()
    [record] = [r for r in host.records if r.name == "hostile"]
    assert record.status == "loaded"
    assert record.warnings == [
        f"route {routevet.describe(r)} skipped: {why}" for r, why in ROUTES if why
    ]
    assert "route Mount('') skipped: it mounts at the root, over every route" in record.warnings
    assert registry.routes == [r for r, why in ROUTES if not why]


@pytest.mark.parametrize(
    "path",
    [
        "/live",
        "/metrics",
        "/openapi.json",
        "/v1",
        "/v1/x",
        "/api/v1/pull",
        "//api//v1/logs/",
        "/ui",
        "/ui/app.js",
        "/tokenize",
    ],
)
def test_reserved_request_paths(path: str) -> None:
    assert routevet.reserved(path, {"/tokenize"})


@pytest.mark.parametrize("path", ["/", "/ws", "/api/tags", "/v/x", "/uix", "/V1/models"])
def test_paths_a_plugin_may_answer(path: str) -> None:
    assert not routevet.reserved(path, {"/tokenize"})


# Request time (in process) ----------------------------------------------------------


async def test_core_and_ui_paths_answer_from_the_core(tmp_path: Path, anyio_backend: str) -> None:
    async with asgi(tmp_path) as c:
        put = await c.put("/api/v1/pull", json={}, headers=ADMIN)
        assert put.status_code == 405, put.text  # the core's route: POST only
        logs = await c.post("/api/v1/logs", json={}, headers=ADMIN)
        assert logs.status_code == 405, logs.text  # GET only
        missing = await c.get("/api/v1/nothing-here", headers=KEY)
        assert missing.status_code == 404 and "hostile" not in missing.text
        for path in ("/v1/x", "/live/x", "/ui/nope.js"):  # no core route: still not theirs
            assert "hostile" not in (await c.get(path, headers=KEY)).text, path
        app_js = await c.get("/ui/app.js")
        assert app_js.status_code == 200
        assert app_js.content == (STATIC / "app.js").read_bytes()
        assert (await c.get("/ui/")).content == (STATIC / "index.html").read_bytes()
        assert (await c.get("/live")).json() == {"status": "ok"}
        assert (await c.get("/v1/models", headers=KEY)).json()["object"] == "list"


async def test_the_kept_routes_answer_behind_the_key(tmp_path: Path, anyio_backend: str) -> None:
    async with asgi(tmp_path) as c:
        paths = ("/hostile/hello", "/v/x", "/api/blobs/sha", "/api/v1/hostile/claim", "/any")
        for path in paths:
            assert (await c.get(path)).status_code == 401, path
            assert (await c.get(path, headers=KEY)).json() == {"hostile": path}
        for path in ("/api/v1/hostile/claim/x", "/api/v1/hostile", "/v1/hostile/claim"):
            answer = await c.get(path, headers=KEY)
            assert answer.status_code == 404 and "hostile" not in answer.json(), path
        # "/" is open for the UI's redirect; a plugin's "/" still needs the key
        root = await c.get("/")
        assert root.status_code == 401 and root.json()["error"]["code"] == "invalid_api_key"
        assert (await c.get("/", headers=KEY)).json() == {"hostile": "/"}
        assert (await c.get("/", headers=ADMIN)).json() == {"hostile": "/"}  # a superset
        # a browser opening the address gets the page, whatever the plugin answers there
        browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
        page = await c.get("/", headers=browser)
        assert page.status_code == 307 and page.headers["location"] == "/ui/"


async def test_without_a_plugin_at_root_the_ui_redirect_stays_open(
    tmp_path: Path, anyio_backend: str
) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow="", api_key="user-secret")
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:13305"
        ) as c,
    ):
        answer = await c.get("/")
        assert answer.status_code == 307 and answer.headers["location"] == "/ui/"


# WebSockets on a real server -------------------------------------------------------


@asynccontextmanager
async def hypercorn(tmp_path: Path, **settings: Any) -> AsyncIterator[int]:
    """The hostile app served by Hypercorn on a loopback port bound (and listening)
    before the server starts, so connections queue instead of racing its start."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = int(sock.getsockname()[1])
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = config.errorlog = None
    stop = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(
            functools.partial(serve, shutdown_trigger=stop.wait),
            make_app(tmp_path, **settings),
            config,
        )
        try:
            yield port
        finally:
            stop.set()


async def handshake(
    port: int, headers: dict[str, str], host: str = "", send: str | None = None, target: str = "/ws"
) -> tuple[int, bytes]:
    """Open ``target``: ``(101, echo of send)`` when accepted, else ``(status, body)``."""
    ws = WSConnection(ConnectionType.CLIENT)
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(
            ws.send(
                Request(
                    host=host or f"127.0.0.1:{port}",
                    target=target,
                    extra_headers=[(k.encode(), v.encode()) for k, v in headers.items()],
                )
            )
        )
        status, body = 0, b""
        while True:
            events: list[Event] = []
            while not events:
                ws.receive_data(await stream.receive())
                events = list(ws.events())
            for event in events:
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        return status, body
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        return status, body
                elif isinstance(event, AcceptConnection):
                    if send is None:
                        return 101, b""
                    await stream.send(ws.send(TextMessage(data=send)))
                    status = 101
                elif isinstance(event, TextMessage):
                    return status, event.data.encode()


def error_code(body: bytes) -> str:
    code: str = json.loads(body)["error"]["code"]
    return code


async def test_a_plugin_websocket_passes_the_key_and_browser_guards(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with hypercorn(tmp_path, cors_origins=["http://app.example"]) as port:
        with anyio.fail_after(20):
            status, body = await handshake(port, {})
            assert (status, error_code(body)) == (401, "invalid_api_key")
            status, body = await handshake(port, {"x-api-key": "wrong"})
            assert (status, error_code(body)) == (401, "invalid_api_key")
            status, body = await handshake(port, {**KEY, "Origin": "http://evil.example"})
            assert (status, error_code(body)) == (403, "cross_site_request")
            # CORS does not cover WebSockets: a configured origin is still another site
            status, body = await handshake(port, {**KEY, "Origin": "http://app.example"})
            assert (status, error_code(body)) == (403, "cross_site_request")
            status, body = await handshake(port, KEY, host="attacker.example")
            assert (status, error_code(body)) == (403, "host_not_allowed")
            assert await handshake(port, KEY, send="hi") == (101, b"hostile: hi")
            assert await handshake(
                port, {"x-api-key": "user-secret", "Origin": f"http://127.0.0.1:{port}"}
            ) == (101, b"")
            status, body = await handshake(port, {**KEY, "X-Pad": "a" * 20_000})
            assert (status, error_code(body)) == (431, "request_header_fields_too_large")
            # no plugin route answers a handshake on a core path: the router's refusal
            assert await handshake(port, KEY, target="/api/v1/ws") == (403, b"")
            async with httpx.AsyncClient() as http:  # and the server keeps serving
                live = await http.get(f"http://127.0.0.1:{port}/live")
                assert live.json() == {"status": "ok"}


def test_core_and_ui_routes_come_before_every_plugin_route(tmp_path: Path) -> None:
    routes = make_app(tmp_path).routes
    fenced = [i for i, r in enumerate(routes) if isinstance(r, routevet.Fenced)]
    assert len(fenced) == len([r for r, why in ROUTES if not why])
    before = [getattr(r, "path", "") for r in routes[: fenced[0]]]
    assert {"/api/v1/pull", "/v1/models", "/live", "/ui", "/ui/{name}"} <= set(before)
    assert [getattr(r, "path", "") for r in routes[fenced[-1] + 1 :]] == ["/"]  # the redirect
