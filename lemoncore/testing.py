"""Helpers for testing lemoncore and its plugins against real processes.

``running_server`` starts ``lemon serve`` as a real subprocess on a free loopback port
with its own cache directory and yields its base URL; leaving stops it with SIGTERM.
``serve_directory`` serves files over real HTTP on loopback (installs, downloads, web
pages); ``serve_hub`` serves model files the way Hugging Face does (``HF_ENDPOINT``).
``chromium`` drives a real headless browser (Debian's ``chromium`` and
``chromium-driver``, through Selenium) for anything a browser touches.

As a pytest plugin (``pytest_plugins = ["lemoncore.testing"]`` in a conftest) it also
provides fixtures: ``lemon_settings`` (a temporary cache and config), ``lemon_plugins``
(a fresh plugin manager with your plugin objects), ``lemon_app`` (the ASGI app with its
lifespan running) and ``lemon_client`` (an ``httpx.AsyncClient`` over ASGI). Override
``lemon_extra_plugins`` to add in-process plugins.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from lemoncore.supervisor import free_port as free_port  # re-exported
from lemoncore.validation.server import ServerProcess as ServerProcess  # re-exported
from lemoncore.validation.server import serving

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from lemoncore.plugins import PluginHost
    from lemoncore.settings import Settings


@contextmanager
def running_server(
    cache_dir: Path,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
    ready_within: float = 30.0,
    command: tuple[str, ...] = ("-m", "lemoncore.cli", "serve"),
) -> Iterator[ServerProcess]:
    """Run ``lemon serve`` until the context exits; raise with its log if it never starts.

    ``command`` (Python's arguments, before ``--port N`` and ``args``) runs another server
    instead, such as a script serving an app with in-process plugins.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    full_env = {
        "LEMON_CACHE_DIR": str(cache_dir),
        "LEMON_CONFIG_FILE": str(cache_dir / "config.toml"),
        **(env or {}),
    }
    with serving(cache_dir / "server.log", command, full_env, ready_within, args) as server:
        yield server


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def browser_missing() -> str | None:
    """Why :func:`chromium` cannot run here, or ``None`` when it can."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium missing: pip install selenium"
    return None


@contextmanager
def chromium(profile: Path, host_rules: str = "") -> Iterator[Any]:
    """A headless Chromium (a Selenium ``WebDriver``) with a fresh profile in ``profile``.

    ``host_rules`` is Chromium's ``--host-resolver-rules`` (``MAP name 127.0.0.1``): a
    name that resolves to loopback, as after a DNS rebind. Background networking is off:
    these machines have no internet and Chromium would retry its services forever.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-sync",
        "--disable-component-update",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    if host_rules:
        options.add_argument(f"--host-resolver-rules={host_rules}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on a free loopback port; yield its base URL."""
    with _serving(functools.partial(_QuietHandler, directory=str(root))) as url:
        yield url


@contextmanager
def _serving(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """Run an HTTP server with ``handler`` on a free loopback port; yield its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _HubHandler(BaseHTTPRequestHandler):
    """The two requests ``huggingface_hub`` makes for a file: HEAD and GET on
    ``/{owner}/{repo}/resolve/{revision}/{file}``; every revision serves the same files
    and reports one commit, as a snapshot does. And a repository's recursive file list
    (``HfApi.list_repo_tree``: GET ``/api/models/{owner}/{repo}/tree/{revision}``, one
    page of files and folders; an unknown repo a 404 with ``X-Error-Code: RepoNotFound``,
    which huggingface_hub's ``hf_raise_for_status`` makes ``RepositoryNotFoundError``)."""

    files: Mapping[str, bytes] = {}

    def _head(self) -> bytes | None:
        repo_path = re.sub(r"^/([^/]+/[^/]+)/resolve/[^/]+/", r"\1/", self.path)
        data = self.files.get(repo_path)
        if data is None:
            self.send_error(404)
            return None
        self.send_response(200)
        self.send_header("X-Repo-Commit", "c" * 40)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        return data

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        if (tree := re.match(r"^/api/models/([^/]+/[^/]+)/tree/", self.path)) is not None:
            self._tree(tree.group(1))
        elif (data := self._head()) is not None:
            self.wfile.write(data)

    def _tree(self, repo: str) -> None:
        paths = [p.removeprefix(f"{repo}/") for p in self.files if p.startswith(f"{repo}/")]
        if not paths:
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.end_headers()
            return
        folders = {str(parent) for p in paths for parent in PurePosixPath(p).parents} - {"."}
        entries: list[dict[str, object]] = [
            {"type": "directory", "path": f, "oid": "d" * 40} for f in sorted(folders)
        ]
        for path in sorted(paths):
            data = self.files[f"{repo}/{path}"]
            entries.append({"type": "file", "path": path, "size": len(data), "oid": "f" * 40})
        body = json.dumps(entries).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_hub(files: Mapping[str, bytes]) -> Iterator[str]:
    """A Hugging Face-shaped file server on a free loopback port (point ``HF_ENDPOINT``
    at the URL it yields). ``files`` maps ``owner/repo/path/in/repo`` to contents."""
    with _serving(type("Hub", (_HubHandler,), {"files": dict(files)})) as url:
        yield url


@pytest.fixture
def lemon_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings over a temporary cache, with no config file and no LEMON_* environment."""
    from lemoncore.settings import Settings

    for name in [n for n in os.environ if n.startswith("LEMON_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / "config.toml"))
    return Settings(cache_dir=tmp_path / "cache")


@pytest.fixture
def lemon_extra_plugins() -> dict[str, object]:
    """In-process plugins to load beside the installed ones; override in your conftest."""
    return {}


@pytest.fixture
def lemon_plugins(lemon_settings: Settings, lemon_extra_plugins: dict[str, object]) -> PluginHost:
    """A fresh plugin manager: installed entry points plus ``lemon_extra_plugins``."""
    from lemoncore.plugins import load_plugins

    return load_plugins(
        lemon_settings.allowed_plugins, lemon_settings.denied_plugins, lemon_extra_plugins
    )


@pytest.fixture
async def lemon_app(
    lemon_settings: Settings, lemon_extra_plugins: dict[str, object]
) -> AsyncIterator[Starlette]:
    """The app, its lifespan running (backends stop when the test ends)."""
    from lemoncore.app import create_app

    app = create_app(lemon_settings, plugins=lemon_extra_plugins)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def lemon_client(lemon_app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``lemon_app`` in-process."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(lemon_app), base_url="http://localhost", timeout=120
    ) as client:
        yield client
