"""The trust boundary through the real app: browsers, foreign Hosts, remote callers,
hostile model files. Each refusal has its status, and each succeeds with the right
headers, key or setting, so the refusals are not an accident of the test.

The recipe, model and options are the core test backend's (``tinyplugin.py``): nothing
here needs a backend plugin installed."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore import Settings, create_app
from lemoncore.api.boundary import BrowserBoundary, host_allowed, origin_allowed
from lemoncore.app import core_of
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.recipes import DeviceKind

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, PKG_CHECKPOINT, tiny_plugin

pytestmark = pytest.mark.anyio
HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
PULL = {"model_name": "csrf-model", "checkpoint": PKG_CHECKPOINT, "recipe": "tiny"}


@asynccontextmanager
async def lemon(
    tmp_path: Path, client: tuple[str, int] = ("127.0.0.1", 50000), **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with the core test backend; requests come from ``client``."""
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow="", **settings),
        plugins={"tiny": tiny_plugin(tmp_path / "cache")},
        host=HOST,
    )
    transport = httpx.ASGITransport(app, client=client)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:13305") as http,
    ):
        http.app = app  # type: ignore[attr-defined]
        yield http


def registered(http: httpx.AsyncClient) -> bool:
    return core_of(http.app).models.get("csrf-model") is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example", "Content-Type": "text/plain"},
        {"Origin": "null", "Content-Type": "text/plain"},  # sandboxed iframe, file:// page
        {"Origin": "http://127.0.0.1:8080", "Content-Type": "application/x-www-form-urlencoded"},
        {"Sec-Fetch-Site": "cross-site", "Content-Type": "multipart/form-data; boundary=x"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
async def test_a_cross_site_browser_request_never_reaches_a_handler(
    tmp_path: Path, anyio_backend: str, headers: dict[str, str]
) -> None:
    async with lemon(tmp_path) as http:
        refused = await http.post("/api/v1/pull", content=json.dumps(PULL), headers=headers)
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "cross_site_request" and "cors_origins" in error["message"]
        assert not registered(http)
        load = await http.post(
            "/api/v1/load", headers=headers, content=json.dumps({"model_name": MODEL})
        )
        assert load.status_code == 403
        assert (await http.get("/api/v1/health")).json()["all_models_loaded"] == []
        assert (await http.get("/live", headers=headers)).status_code == 200


async def test_requests_without_browser_markers_are_unaffected(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as http:
        # curl -d '{...}' sends a form content type and no Origin
        done = await http.post(
            "/api/v1/pull",
            content=json.dumps(PULL),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert done.status_code == 200, done.text
        assert registered(http)
        bad = await http.post(
            "/api/v1/pull", content="{not json", headers={"Content-Type": "text/plain"}
        )
        assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]


async def test_the_servers_own_origin_and_configured_origins_pass(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path, cors_origins=["http://localhost:3000"]) as http:
        own = await http.get(
            "/v1/models",
            headers={"Origin": "http://127.0.0.1:13305", "Sec-Fetch-Site": "same-origin"},
        )
        assert own.status_code == 200
        app = await http.get(
            "/v1/models",
            headers={"Origin": "http://localhost:3000", "Sec-Fetch-Site": "cross-site"},
        )
        assert app.status_code == 200
        assert app.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = await http.get("/v1/models", headers={"Origin": "http://localhost:3001"})
        assert other.status_code == 403


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example:13305",
        "attacker.example",
        "127.0.0.1.nip.io:13305",
        "localhost.attacker.example",
    ],
)
async def test_a_foreign_host_is_refused_naming_the_setting(
    tmp_path: Path, anyio_backend: str, host: str
) -> None:
    async with lemon(tmp_path) as http:
        for method, path in (
            ("GET", "/v1/models"),
            ("GET", "/api/v1/system-info"),
            ("POST", "/api/v1/pull"),
        ):
            refused = await http.request(method, path, headers={"Host": host}, json=PULL)
            assert refused.status_code == 403, (method, path)
            error = refused.json()["error"]
            assert error["code"] == "host_not_allowed" and "allowed_hosts" in error["message"]
        assert not registered(http)
    async with lemon(tmp_path, allowed_hosts=[host.partition(":")[0]]) as http:
        assert (await http.get("/v1/models", headers={"Host": host})).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "localhost:13305",
        "127.0.0.1:13305",
        "[::1]:13305",
        "app.localhost:13305",
        "192.168.1.20:13305",
        "LOCALHOST",
    ],
)
def test_loopback_names_and_ip_literals_are_served(host: str) -> None:
    assert host_allowed(host, frozenset())


def test_an_origin_is_own_only_with_the_same_host_and_port() -> None:
    assert origin_allowed("http://localhost:13305", "localhost:13305", frozenset())
    assert not origin_allowed("http://localhost:8080", "localhost:13305", frozenset())
    assert not origin_allowed("null", "localhost:13305", frozenset())


async def test_management_from_another_machine_needs_a_key_or_the_setting(
    tmp_path: Path, anyio_backend: str
) -> None:
    lan = ("192.168.1.50", 40000)
    async with lemon(tmp_path, client=lan) as http:
        refused = await http.post("/api/v1/pull", json=PULL)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "remote_admin_refused"
        assert not registered(http)
        assert (await http.get("/v1/models")).status_code == 200  # inference stays open
    async with lemon(tmp_path / "a", client=lan, allow_remote_admin=True) as http:
        assert (await http.post("/api/v1/pull", json=PULL)).status_code == 200
    async with lemon(tmp_path / "k", client=lan, api_key="k") as http:
        assert (
            await http.post("/api/v1/pull", json=PULL, headers={"Authorization": "Bearer k"})
        ).status_code == 200


@pytest.mark.parametrize(
    "checkpoint",
    [
        "file:/etc/passwd",
        "/etc/passwd",
        "file:{home}/.bashrc",
        "file:{link}",
        "pkg:lemoncore/../../../../etc/passwd",
        "pkg:../etc/passwd",
        "owner/repo:../../../../etc/passwd",
        "owner/repo:/etc/passwd",
    ],
)
async def test_host_files_outside_the_model_directories_are_refused(
    tmp_path: Path, anyio_backend: str, checkpoint: str
) -> None:
    link = tmp_path / "cache" / "models" / "innocent.gguf"
    link.parent.mkdir(parents=True)
    link.symlink_to("/etc/passwd")  # inside the store, pointing out of it
    async with lemon(tmp_path) as http:
        refused = await http.post(
            "/api/v1/pull",
            json={**PULL, "checkpoint": checkpoint.format(home=Path.home(), link=link)},
        )
        assert refused.status_code in {400, 403}, refused.text
        assert not registered(http)


async def test_model_dirs_admits_an_administrators_directory(
    tmp_path: Path, anyio_backend: str
) -> None:
    weights = tmp_path / "models" / "m.gguf"
    weights.parent.mkdir()
    weights.write_bytes(b"GGUF")
    checkpoint = {**PULL, "checkpoint": f"file:{weights}"}
    async with lemon(tmp_path) as http:
        refused = await http.post("/api/v1/pull", json=checkpoint)
        assert refused.status_code == 403
        assert "model_dirs" in refused.json()["error"]["message"]
    async with lemon(tmp_path, model_dirs=[weights.parent]) as http:
        done = await http.post("/api/v1/pull", json=checkpoint)
        assert done.status_code == 200, done.text
        assert done.json()["path"] == str(weights)


async def test_request_options_are_declared_and_typed(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path) as http:
        for body, param in (
            ({"ctx_sise": 4096}, "ctx_sise"),
            ({"ctx_size": "lots"}, "ctx_size"),
            ({"system_bin": "/bin/sh"}, "system_bin"),
            ({"tiny_args_allow": ["--log-file"]}, "tiny_args_allow"),
            ({"tiny_args": "--log-file /tmp/x"}, "tiny_args"),
        ):
            for route in ("/api/v1/load", "/api/v1/pull"):
                sent = (
                    {"model_name": MODEL, **body}
                    if route.endswith("load")
                    else {**PULL, "recipe_options": body}
                )
                refused = await http.post(route, json=sent)
                assert refused.status_code == 400, (route, body, refused.text)
                assert refused.json()["error"]["param"] == param
        assert not registered(http)
        assert (await http.get("/api/v1/health")).json()["all_models_loaded"] == []


async def test_clients_of_a_reverse_proxy_on_this_machine_count_as_remote(
    tmp_path: Path, anyio_backend: str
) -> None:
    """A proxy connects from 127.0.0.1: its clients are known by the name it serves or by
    the forwarding headers it adds, and get no management without a key."""
    async with lemon(tmp_path, allowed_hosts=["llm.example.com"]) as http:
        for headers in (
            {"Host": "llm.example.com"},
            {"X-Forwarded-For": "203.0.113.9"},
            {"Forwarded": "for=203.0.113.9"},
        ):
            refused = await http.post("/api/v1/pull", json=PULL, headers=headers)
            assert refused.status_code == 403, headers
            assert refused.json()["error"]["code"] == "remote_admin_refused"
        assert (
            await http.get("/v1/models", headers={"Host": "llm.example.com"})
        ).status_code == 200
        assert not registered(http)
    async with lemon(tmp_path / "dual", client=("::ffff:127.0.0.1", 5)) as http:
        assert (await http.post("/api/v1/pull", json=PULL)).status_code == 200  # local


def test_this_machines_name_is_served_only_beyond_loopback() -> None:
    name = socket.gethostname()
    assert not BrowserBoundary(None, [], [])._host_ok(name)  # type: ignore[arg-type]
    assert BrowserBoundary(None, [], [], machine_names=True)._host_ok(  # type: ignore[arg-type]
        f"{name}.local:13305"
    )


def ws(
    origin: str | None = None, host: str = "127.0.0.1:13305", path: str = "/ws", **headers: str
) -> dict[str, Any]:
    listed = [
        (b"host", host.encode()),
        *((k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()),
    ]
    return {
        "type": "websocket",
        "path": path,
        "client": ("127.0.0.1", 50000),
        "extensions": {"websocket.http.response": {}},
        "headers": listed + ([(b"origin", origin.encode())] if origin else []),
    }


async def refused(scope: dict[str, Any], cors_origins: tuple[str, ...] = ()) -> str | None:
    """The error code a WebSocket handshake is refused with, or ``None`` if it passes."""
    sent: list[dict[str, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        sent.append({"passed": True})

    async def send(message: Any) -> None:
        sent.append(message)

    boundary = BrowserBoundary(inner, allowed_hosts=(), cors_origins=cors_origins)
    await boundary(scope, None, send)  # type: ignore[arg-type]
    if sent == [{"passed": True}]:
        return None
    assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == 403
    code: str = json.loads(sent[1]["body"])["error"]["code"]
    return code


async def test_a_websocket_from_another_origin_is_refused_on_every_path(anyio_backend: str) -> None:
    assert await refused(ws()) is None  # a non-browser client
    assert await refused(ws("http://127.0.0.1:13305")) is None  # the server's own page
    for path in ("/ws", "/live", "/ui/"):
        assert await refused(ws("http://evil.example", path=path)) == "cross_site_request"
    assert await refused(ws("null")) == "cross_site_request"
    assert await refused(ws(sec_fetch_site="cross-site")) == "cross_site_request"
    for cors in (("http://app.example",), ("*",)):  # CORS does not extend to WebSockets
        assert await refused(ws("http://app.example"), cors) == "cross_site_request"
    assert await refused(ws(host="attacker.example")) == "host_not_allowed"
