"""``GET /api/v1/logs`` (the in-memory copy of the log) and the web UI's static routes,
in-process over ASGI: admin-only, filters, JSON and event-stream shapes, headers."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
from starlette.applications import Starlette

from lemoncore import Settings, create_app
from lemoncore.logs import RECENT, configure_logging

pytestmark = pytest.mark.anyio
KEY, ADMIN = "sk-user", "sk-admin"


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    return out


@pytest.fixture
def logging_on(stderr: io.StringIO) -> Iterator[None]:
    """lemon serve's logging (the tee into RECENT) onto ``stderr``, restored afterwards."""
    saved = structlog.get_config()
    RECENT.clear()
    configure_logging()
    try:
        yield
    finally:
        structlog.configure(**saved)
        RECENT.capturing = False
        RECENT.clear()


async def client_for(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c,
    ):
        yield c


@pytest.fixture
async def client(tmp_path: Path, logging_on: None) -> AsyncIterator[httpx.AsyncClient]:
    async for c in client_for(Settings(cache_dir=tmp_path, plugins_allow="")):
        yield c


@pytest.fixture
async def keyed(tmp_path: Path, logging_on: None) -> AsyncIterator[httpx.AsyncClient]:
    async for c in client_for(
        Settings(cache_dir=tmp_path, plugins_allow="", api_key=KEY, admin_api_key=ADMIN)
    ):
        yield c


def log_some() -> None:
    log = structlog.get_logger("test")
    log.info("loaded", model="alpha", backend="cpu")
    log.info("llama-server says hi", model="alpha", source="backend")
    log.info("evicting", model="beta", kind="lru", reason="least recently used")
    log.info("unrelated")


async def test_recent_lines_as_json_with_filters(
    client: httpx.AsyncClient, stderr: io.StringIO
) -> None:
    log_some()
    printed = stderr.getvalue().splitlines()
    body = (await client.get("/api/v1/logs")).json()
    assert body["live"] is True and body["object"] == "list"
    lines = [
        x
        for x in body["data"]
        if x["event"] in {"loaded", "llama-server says hi", "evicting", "unrelated"}
    ]
    assert [x["event"] for x in lines] == [
        "loaded",
        "llama-server says hi",
        "evicting",
        "unrelated",
    ]
    assert body["last"] == body["data"][-1]["seq"]
    backend = lines[1]
    assert backend["source"] == "backend" and backend["model"] == "alpha"
    assert "llama-server says hi" in backend["line"] and "\x1b[" not in backend["line"]
    assert [x["line"] for x in lines] == printed[-4:]  # as printed on stderr
    assert lines[0]["fields"] == {"backend": "cpu"} and lines[0]["source"] == "lemoncore"
    alpha = (await client.get("/v1/logs?model=alpha")).json()["data"]
    assert [x["event"] for x in alpha] == ["loaded", "llama-server says hi"]
    evicted = (await client.get("/api/v1/logs?event=evicting")).json()["data"]
    assert [(x["model"], x["fields"]["kind"], x["fields"]["reason"]) for x in evicted] == [
        ("beta", "lru", "least recently used")
    ]
    newest = (await client.get("/api/v1/logs?limit=1")).json()["data"]
    assert newest == body["data"][-1:]
    after = (await client.get(f"/api/v1/logs?after={lines[2]['seq']}")).json()["data"]
    assert [x["event"] for x in after][:1] == ["unrelated"]
    for bad in ("limit=0", "limit=x", "after=-1", "follow=maybe", "limit=99999"):
        response = await client.get(f"/api/v1/logs?{bad}")
        assert response.status_code == 400, bad
        assert response.json()["error"]["param"] == bad.split("=")[0]


async def follow(app: Starlette, query: str, until: str) -> list[dict[str, str]]:
    """Read ``GET /api/v1/logs?<query>`` as a real server would serve it (httpx's ASGI
    transport waits for the whole body), and go away once an event ``until`` arrives:
    the stream must then end."""
    body, gone, asked = bytearray(), anyio.Event(), False

    async def receive() -> dict[str, object]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200
        body.extend(message.get("body", b""))
        if f'"event":"{until}"'.encode() in body:
            gone.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/logs",
        "root_path": "",
        "raw_path": b"/api/v1/logs",
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    with anyio.fail_after(10):
        await app(scope, receive, send)  # returns: the stream ended
    return [
        json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")
    ]


async def test_follow_streams_new_lines_until_the_client_goes_away(
    tmp_path: Path, logging_on: None
) -> None:
    app = create_app(Settings(cache_dir=tmp_path, plugins_allow=""))
    async with app.router.lifespan_context(app):
        log_some()

        async def later() -> None:
            await anyio.sleep(0.5)
            for event, model in (("later", "alpha"), ("other", "gamma"), ("last", "alpha")):
                structlog.get_logger("test").info(event, model=model)

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            seen = await follow(app, "follow=true&model=alpha", until="last")
    assert [x["event"] for x in seen] == ["loaded", "llama-server says hi", "later", "last"]


async def test_follow_ends_when_nothing_feeds_the_log(tmp_path: Path) -> None:
    """An app whose logging lemon serve did not configure has no new lines to follow:
    the stream ends after the recent ones (a client such as the fuzzer cannot hang)."""
    RECENT.capturing = False
    async for client in client_for(Settings(cache_dir=tmp_path, plugins_allow="")):
        with anyio.fail_after(5):
            response = await client.get("/api/v1/logs?follow=1")
        assert response.status_code == 200
        assert (await client.get("/api/v1/logs")).json()["live"] is False


async def test_logs_need_the_admin_key(keyed: httpx.AsyncClient) -> None:
    structlog.get_logger("test").info("a line")
    for key in (None, KEY):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = await keyed.get("/api/v1/logs", headers=headers)
        assert response.status_code == 401
        assert "admin API key" in response.json()["error"]["message"]
    response = await keyed.get("/api/v1/logs", headers={"Authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 200 and response.json()["data"]


async def test_remote_clients_get_no_logs_without_an_admin_key(tmp_path: Path) -> None:
    app = create_app(Settings(cache_dir=tmp_path, plugins_allow=""))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app, client=("192.0.2.7", 5000)),
            base_url="http://127.0.0.1",
        ) as c,
    ):
        response = await c.get("/api/v1/logs")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "remote_admin_refused"


async def test_ui_pages_are_open_and_locked_down(keyed: httpx.AsyncClient) -> None:
    """The static pages need no key (they hold no data), carry a strict CSP, and are the
    only files served; ``/`` redirects to them."""
    for path, media in (
        ("/ui/", "text/html"),
        ("/ui/index.html", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ):
        response = await keyed.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith(media)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    for path in ("/", "/ui"):
        response = await keyed.get(path)
        assert response.status_code == 307 and response.headers["location"] == "/ui/"
    for path in ("/ui/../logs.py", "/ui/%2e%2e/__init__.py", "/ui/__init__.py", "/ui/nope"):
        response = await keyed.get(path)  # httpx folds the first into /logs.py: a 401
        assert response.status_code in {401, 404} and "import" not in response.text, path
    assert (await keyed.get("/v1/models")).status_code == 401  # the API still needs a key
    page = (await keyed.get("/ui/")).text
    assert not re.search(r"<script(?![^>]*\bsrc=)|\son[a-z]+=|style=", page)  # no inline code


async def test_an_embedding_app_can_leave_the_ui_out(tmp_path: Path) -> None:
    app = create_app(Settings(cache_dir=tmp_path, plugins_allow=""), ui=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c,
    ):
        assert (await c.get("/ui/")).status_code == 404
