"""Auth, body limits, CORS and crash-loop cooldown, through the real app; WebSocket and
other ASGI scopes on the middleware itself."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.api.boundary import BrowserBoundary
from lemoncore.api.guard import ADMIN_ENDPOINTS, Guard
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, Recipe, SupportRow

pytestmark = pytest.mark.anyio
HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
TINY = Path(__file__).with_name("tinyserver.py")


class Broken:
    """A backend whose engine always fails to start (its model file is missing)."""

    def __init__(self, root: Path) -> None:
        (root / "cache" / "models").mkdir(parents=True, exist_ok=True)  # the model store
        (root / "cache" / "models" / "w.bin").write_bytes(b"w")
        self.root = root

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        row = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
        return [
            Recipe(
                name="broken",
                display_name="Broken",
                backends=(Backend(name="cpu", support=(row,)),),
            )
        ]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(
                name="flaky", recipe="broken", checkpoint=f"file:{self.root}/cache/models/w.bin"
            )
        ]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=TINY.parent)

    @hookimpl
    def launch(self, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                "flaky",
                "--model",
                "/missing",
                "--ctx-size",
                "1",
                "--registry",
                str(self.root / "reg"),
            )
        )


@asynccontextmanager
async def lemon(tmp_path: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow="", **settings),
        plugins={"broken": Broken(tmp_path)},
        host=HOST,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost"
        ) as client,
    ):
        yield client


async def test_api_and_admin_keys(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path, api_key="user-secret", admin_api_key="admin-secret") as c:
        assert (await c.get("/live")).status_code == 200
        refused = await c.get("/v1/models")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert (await c.get("/v1/models", headers={"x-api-key": "nope"})).status_code == 401
        bearer = {"Authorization": "Bearer user-secret"}
        assert (await c.get("/v1/models", headers=bearer)).status_code == 200
        assert (
            await c.get("/api/v1/health", headers={"x-api-key": "user-secret"})
        ).status_code == 200
        assert (await c.post("/api/v1/unload", json={}, headers=bearer)).status_code == 401
        admin = {"Authorization": "Bearer admin-secret"}
        assert (await c.post("/api/v1/unload", json={}, headers=admin)).status_code == 200
        # the admin key serves the API too: a client sends one key (an Ollama client does)
        assert (await c.get("/v1/models", headers=admin)).status_code == 200


async def test_admin_key_defaults_to_the_api_key_and_secrets_stay_hidden(
    tmp_path: Path, anyio_backend: str
) -> None:
    settings = Settings(cache_dir=tmp_path, api_key="only-key")
    assert "only-key" not in repr(settings) and "only-key" not in str(settings.model_dump())
    async with lemon(tmp_path, api_key="only-key") as c:
        response = await c.post(
            "/api/v1/unload", json={}, headers={"Authorization": "Bearer only-key"}
        )
        assert response.status_code == 200


async def test_oversized_bodies_get_413(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path, max_body_bytes=2048) as c:
        big = {"model": "flaky", "messages": [{"role": "user", "content": "x" * 4096}]}
        declared = await c.post("/v1/chat/completions", json=big)
        assert declared.status_code == 413
        assert "max_body_bytes" in declared.json()["error"]["message"]

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b" " * 1024

        streamed = await c.post("/v1/chat/completions", content=chunks())
        assert streamed.status_code == 413


async def test_cors_is_off_unless_origins_are_configured(
    tmp_path: Path, anyio_backend: str
) -> None:
    origin = {"Origin": "http://app.example"}
    async with lemon(tmp_path) as c:
        assert (
            "access-control-allow-origin" not in (await c.get("/v1/models", headers=origin)).headers
        )
    async with lemon(tmp_path, cors_origins=["http://app.example"]) as c:
        response = await c.get("/v1/models", headers=origin)
        assert response.headers["access-control-allow-origin"] == "http://app.example"


async def test_a_crash_looping_backend_is_held_off(tmp_path: Path, anyio_backend: str) -> None:
    chat = {"model": "flaky", "messages": [{"role": "user", "content": "hi"}]}
    async with lemon(tmp_path) as c:
        for _ in range(3):
            failed = await c.post("/v1/chat/completions", json=chat)
            assert failed.status_code == 503
            assert failed.json()["error"]["code"] == "backend_start_failed"
        assert "held off" in failed.json()["error"]["message"]
        held = await c.post("/v1/chat/completions", json=chat)
        assert held.status_code == 503
        assert held.json()["error"]["code"] == "backend_cooldown"
        assert int(held.headers["retry-after"]) >= 1
        explicit = await c.post("/api/v1/load", json={"model_name": "flaky"})
        assert explicit.json()["error"]["code"] == "backend_start_failed"  # the user's retry


class Wedged(Broken):
    """Starts and answers /health fine, but every request fails with a 500."""

    @hookimpl
    def launch(self, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                "flaky",
                "--model",
                str(context.model_path),
                "--ctx-size",
                "1",
                "--registry",
                str(self.root / "reg"),
                "--answer",
                "500",
            )
        )


async def test_a_wedged_backend_is_restarted(tmp_path: Path, anyio_backend: str) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"wedged": Wedged(tmp_path)},
        host=HOST,
    )
    chat = {"model": "flaky", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://localhost") as c,
    ):
        pids = []
        for _ in range(3):
            assert (await c.post("/v1/chat/completions", json=chat)).status_code == 502
            pids += [m["pid"] for m in (await c.get("/api/v1/health")).json()["all_models_loaded"]]
        assert len(set(pids[:2])) == 1 and len(pids) == 2  # third failure: restarted
        assert (await c.post("/v1/chat/completions", json=chat)).status_code == 502
        new_pid = (await c.get("/api/v1/health")).json()["all_models_loaded"][0]["pid"]
        assert new_pid != pids[0]
        assert 'lemon_evictions_total{reason="wedged"} 1' in (await c.get("/metrics")).text


class Slow(Broken):
    """Starts fine; answers each request after the body's "delay", or once the file its
    "hold" names exists."""

    @hookimpl
    def launch(self, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                "flaky",
                "--model",
                str(context.model_path),
                "--ctx-size",
                "1",
                "--registry",
                str(self.root / "reg"),
            )
        )


async def test_per_model_concurrency_queues_then_refuses(
    tmp_path: Path, anyio_backend: str
) -> None:
    """One request runs, one waits, a third is refused. The engine holds each answer until
    the test releases it, and the test moves on only once the server counts the previous
    request (in its slot, then in the queue): no timing decides who is where."""
    import anyio

    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow="", max_concurrency=1, max_queue=1),
        plugins={"slow": Slow(tmp_path)},
        host=HOST,
    )
    release = tmp_path / "release"
    chat = {"model": "flaky", "messages": [{"role": "user", "content": "hi"}], "hold": str(release)}
    codes: dict[str, int] = {}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as c,
    ):
        assert (await c.post("/api/v1/load", json={"model_name": "flaky"})).status_code == 200

        async def counts() -> tuple[int, int]:
            [server] = (await c.get("/api/v1/health")).json()["all_models_loaded"]
            return server["in_flight"], server["queued"]

        async def until(want: tuple[int, int]) -> None:
            with anyio.fail_after(10):
                while await counts() != want:
                    await anyio.sleep(0.01)

        async def one(name: str) -> None:
            response = await c.post("/v1/chat/completions", json=chat)
            codes[name] = response.status_code
            if response.status_code == 503:
                assert response.headers["retry-after"] == "1"
                assert response.json()["error"]["code"] == "queue_full"

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "runs")
            await until((1, 0))  # in the slot, held by the engine
            tg.start_soon(one, "waits")
            await until((2, 1))  # in the queue
            with anyio.fail_after(10):  # answered at once: the slot and the queue are full
                await one("refused")
            assert codes == {"refused": 503}
            release.touch()
    assert codes == {"refused": 503, "runs": 200, "waits": 200}


class Garbled(Broken):
    """Streams malformed SSE and ends without [DONE]."""

    @hookimpl
    def launch(self, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                "flaky",
                "--model",
                str(context.model_path),
                "--ctx-size",
                "1",
                "--registry",
                str(self.root / "reg"),
                "--garbage-stream",
            )
        )


async def test_malformed_sse_from_a_backend_is_relayed_and_closed(
    tmp_path: Path, anyio_backend: str
) -> None:
    import anyio

    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"garbled": Garbled(tmp_path)},
        host=HOST,
    )
    chat = {"model": "flaky", "messages": [{"role": "user", "content": "hi"}]}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as c,
    ):
        with anyio.fail_after(10):  # never a hang
            streamed = await c.post("/v1/chat/completions", json={**chat, "stream": True})
        assert streamed.status_code == 200
        assert streamed.content.startswith(b"data: {not json")
        assert streamed.content.endswith(b"data: [DONE]\n\n")  # the stream is closed cleanly
        assert (await c.post("/v1/chat/completions", json=chat)).status_code == 200


# WebSocket and other ASGI scopes, on the middleware itself ----------------------------


def ws_scope(
    path: str = "/ws", denial: bool = True, client: str = "127.0.0.1", **headers: str
) -> dict[str, Any]:
    """A WebSocket handshake scope; ``denial``: the server offers the denial response."""
    return {
        "type": "websocket",
        "path": path,
        "client": (client, 50000),
        "extensions": {"websocket.http.response": {}} if denial else {},
        "headers": [
            (b"host", b"localhost:13305"),
            *((k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()),
        ],
    }


async def through(
    app_class: Any, scope: dict[str, Any], **options: Any
) -> tuple[list[dict[str, Any]], bool]:
    """Run one scope through a middleware: what it sent, and whether the app was reached."""
    reached, sent = [], []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        sent.append(message)

    await app_class(inner, **options)(scope, receive, send)
    return sent, bool(reached)


GUARD = {"api_key": "k", "admin_key": None, "max_body_bytes": 1024}


async def test_a_websocket_needs_the_key_and_is_refused_before_accept(anyio_backend: str) -> None:
    sent, reached = await through(Guard, ws_scope(), **GUARD)
    assert not reached and sent[0] == {
        "type": "websocket.http.response.start",
        "status": 401,
        "headers": sent[0]["headers"],
    }
    assert json.loads(sent[1]["body"])["error"]["code"] == "invalid_api_key"
    # a server without the denial-response extension: close before accept (it sends 403)
    sent, reached = await through(Guard, ws_scope(denial=False), **GUARD)
    assert not reached
    assert sent == [{"type": "websocket.close", "code": 1008, "reason": "invalid_api_key"}]
    # no WebSocket path is open, /ui and / included; the key alone lets one through
    for path in ("/", "/ui/x", "/live"):
        assert not (await through(Guard, ws_scope(path), **GUARD))[1], path
    assert await through(Guard, ws_scope(authorization="Bearer k"), **GUARD) == ([], True)
    assert await through(Guard, ws_scope(x_api_key="k"), **GUARD) == ([], True)
    # a bearer token as a subprotocol is not a key
    assert not (await through(Guard, ws_scope(sec_websocket_protocol="bearer, k"), **GUARD))[1]
    # management paths need the admin key, or this machine, as for HTTP
    remote = ws_scope("/api/v1/pull", client="10.0.0.2")
    sent, reached = await through(Guard, remote, **{**GUARD, "api_key": None})
    assert not reached and json.loads(sent[1]["body"])["error"]["code"] == "remote_admin_refused"


async def test_lifespan_passes_and_unknown_scope_types_are_refused(anyio_backend: str) -> None:
    boundary = {"allowed_hosts": (), "cors_origins": ()}
    for middleware, options in ((Guard, GUARD), (BrowserBoundary, boundary)):
        assert await through(middleware, {"type": "lifespan"}, **options) == ([], True)
        with pytest.raises(ValueError, match="webtransport"):
            await through(
                middleware, {"type": "webtransport", "path": "/", "headers": []}, **options
            )


def test_the_web_ui_sends_the_admin_key_to_the_routes_the_guard_guards() -> None:
    """The UI decides which key a call needs with its own copy of the rule (``ADMIN_ROUTE``
    in ``app.js``); it must name the guard's management endpoints, no more, no fewer."""
    app_js = Path(__file__).resolve().parents[1] / "lemoncore" / "ui" / "static" / "app.js"
    found = re.search(r"const ADMIN_ROUTE = /\\/\(([a-z|]+)\)", app_js.read_text())
    assert found is not None, "app.js no longer defines ADMIN_ROUTE as this test reads it"
    assert set(found.group(1).split("|")) == ADMIN_ENDPOINTS
