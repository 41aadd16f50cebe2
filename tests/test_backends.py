"""Backend states and installs through the core: lock pins, unverified refusals, pin
changes, offline mode, uninstall, and the ROCm runtime decided once at install."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.core import Core
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import InstallPlan
from lemoncore.lock import Pin, platform_key
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, Recipe, SupportRow, Tier
from lemoncore.testing import serve_directory

pytestmark = pytest.mark.anyio

HOST = HostInfo(
    "linux",
    (HostDevice(DeviceKind.CPU, "cpu"), HostDevice(DeviceKind.AMD_GPU, "RX 7600", "gfx1102")),
)
ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
AMD = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.AMD_GPU: frozenset()})
KEY = platform_key("linux")


class Engine:
    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [
            Recipe(
                name="engine",
                display_name="Engine",
                backends=(
                    Backend(name="native", support=(ROW,)),
                    Backend(name="hip", support=(AMD,)),
                ),
            ),
            Recipe(
                name="risky",
                display_name="Risky",
                backends=(Backend(name="native", support=(ROW,), tier=Tier.EXPERIMENTAL),),
            ),
        ]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(name="risky-model", recipe="risky", checkpoint="x/y:z.gguf"),
            ModelInfo(name="engine-model", recipe="engine", checkpoint="x/y:z.gguf"),
        ]

    @hookimpl
    def install(self, recipe: Recipe, backend: Backend, pin: Pin | None) -> InstallPlan | None:
        if recipe.name not in {"engine", "risky"} or pin is None:
            return None
        return InstallPlan(
            pin.version, pin.artifacts, runtime="rocm" if backend.name == "hip" else None
        )


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def therock_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        data = b"\x7fELF stand-in for the HIP runtime"
        info = tarfile.TarInfo("lib/libamdhip64.so.7")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class World:
    """A served directory of archives, an admin lock file pinning them, and the app."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.www = root / "www"
        self.lock_file = root / "admin-lock.json"
        self.core: Core | None = None
        self.client: httpx.AsyncClient | None = None

    def publish(self, name: str, data: bytes) -> dict[str, str]:
        (self.www / name).write_bytes(data)
        return {"url": f"{self.url}/{name}", "sha256": hashlib.sha256(data).hexdigest()}

    def pin(
        self,
        backends: dict[str, tuple[str, dict[str, Any]]],
        therock: dict[str, Any] | None = None,
        recipe: str = "engine",
    ) -> None:
        lock: dict[str, Any] = {
            "backends": {
                recipe: {
                    name: {"version": version, "platforms": {KEY: [artifact]}}
                    for name, (version, artifact) in backends.items()
                }
            }
        }
        if therock is not None:
            lock["runtimes"] = {"therock": {"version": "7.14.0", "platforms": {KEY: [therock]}}}
        self.lock_file.write_text(json.dumps(lock))

    @asynccontextmanager
    async def app(self, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
        app = create_app(
            Settings(
                cache_dir=self.root / "cache",
                plugins_allow="",
                lock_files=[self.lock_file],
                **settings,
            ),
            plugins={"engine": Engine()},
            host=HOST,
        )
        self.core = app.state.core
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost"
        ) as client:
            yield client

    async def state(self, client: httpx.AsyncClient, backend: str) -> dict[str, Any]:
        info = (await client.get("/api/v1/system-info")).json()
        state: dict[str, Any] = info["recipes"]["engine"]["backends"][backend]
        return state


@pytest.fixture
def world(tmp_path: Path, anyio_backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.delenv("ROCM_PATH", raising=False)
    (tmp_path / "www").mkdir()
    with serve_directory(tmp_path / "www") as url:
        yield World(tmp_path, url)


def sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_install_streams_progress_then_a_pin_change_needs_a_reinstall(world: World) -> None:
    world.pin({"native": ("1.0", world.publish("e1.zip", zip_bytes({"engine": b"one"})))})
    async with world.app() as client:
        assert (await world.state(client, "native"))["state"] == "installable"
        response = await client.post(
            "/api/v1/install", json={"backend": "engine:native", "stream": True}
        )
        events = sse(response.text)
        assert events[-1][0] == "complete"
        assert {
            "backend": "engine:native",
            "state": "installed",
            "version": "1.0",
            "tier": "community",
        }.items() <= events[-1][1].items()
        assert "not supported for production" in events[-1][1]["notice"]
        assert any(e == "progress" and d["bytes_total"] > 0 for e, d in events)
        assert (await world.state(client, "native"))["state"] == "installed"
    world.pin({"native": ("2.0", world.publish("e2.zip", zip_bytes({"engine": b"two"})))})
    async with world.app() as client:
        state = await world.state(client, "native")
        assert state["state"] == "update_required"
        assert state["message"] == "installed 1.0, pinned 2.0"
        response = await client.post(
            "/api/v1/install", json={"recipe": "engine", "backend": "native"}
        )
        assert response.json()["version"] == "2.0"
    assert (world.root / "cache/bin/engine/native/engine").read_bytes() == b"two"


async def test_unverified_pins_are_refused_with_the_fix(world: World) -> None:
    artifact = world.publish("e1.zip", zip_bytes({"engine": b"one"}))
    world.pin({"native": ("1.0", {**artifact, "sha256": None})})
    async with world.app() as client:
        state = await world.state(client, "native")
        assert state["state"] == "action_required"
        assert "lemon backends install engine:native --trust-download" in state["action"]
        refused = await client.post("/api/v1/install", json={"backend": "engine:native"})
        assert refused.status_code == 400
        assert "gives no SHA-256" in refused.json()["error"]["message"]
        plan = await client.post(  # what `lemon explain engine-model` shows
            "/api/v1/load", json={"model_name": "engine-model", "dry_run": True}
        )
        assert plan.json()["backend_state"] == "action_required"
        assert plan.json()["refused"].startswith("backend engine:native is action_required: ")
        assert "--trust-download" in plan.json()["refused"] and plan.json()["evict"] == []
    assert not (world.root / "cache/bin").exists()
    async with world.app(allow_unverified="engine:native") as client:
        assert (await world.state(client, "native"))["state"] == "installable"
        assert (
            await client.post("/api/v1/install", json={"backend": "engine:native"})
        ).status_code == 200


async def test_offline_uses_what_is_installed_or_says_why_not(world: World) -> None:
    world.pin({"native": ("1.0", world.publish("e1.zip", zip_bytes({"engine": b"one"})))})
    async with world.app(offline=True) as client:
        refused = await client.post("/api/v1/install", json={"backend": "engine:native"})
        assert refused.status_code == 503
        assert "offline" in refused.json()["error"]["message"]
    async with world.app() as client:
        await client.post("/api/v1/install", json={"backend": "engine:native"})
    async with world.app(offline=True) as client:
        assert (await world.state(client, "native"))["state"] == "installed"


async def test_uninstall_removes_the_install(world: World) -> None:
    world.pin({"native": ("1.0", world.publish("e1.zip", zip_bytes({"engine": b"one"})))})
    async with world.app() as client:
        await client.post("/api/v1/install", json={"backend": "engine:native"})
        removed = await client.post("/api/v1/uninstall", json={"backend": "engine:native"})
        assert removed.json()["removed"] is True
        assert (await world.state(client, "native"))["state"] == "installable"
        unknown = await client.post("/api/v1/uninstall", json={"backend": "engine:nope"})
        assert unknown.status_code == 404


async def test_rocm_backend_install_installs_therock_and_records_the_decision(world: World) -> None:
    world.pin(
        {"hip": ("1.0", world.publish("hip.zip", zip_bytes({"engine": b"hip"})))},
        therock=world.publish("therock.tar.gz", therock_tarball()),
    )
    async with world.app() as client:
        assert (
            await client.post("/api/v1/install", json={"backend": "engine:hip"})
        ).status_code == 200
        assert (await world.state(client, "hip"))["state"] == "installed"
    record = json.loads((world.root / "cache/runtime/rocm.json").read_text())
    assert record == {
        "source": "therock",
        "version": "7.14.0",
        "root": str(world.root / "cache/bin/runtime/therock"),
    }


async def test_a_matching_system_rocm_is_used_without_downloading_therock(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = world.root / "opt-rocm"
    (system / ".info").mkdir(parents=True)
    (system / ".info/version").write_text("7.14.3-12")
    monkeypatch.setenv("ROCM_PATH", str(system))
    world.pin(
        {"hip": ("1.0", world.publish("hip.zip", zip_bytes({"engine": b"hip"})))},
        therock={"url": f"{world.url}/absent.tar.gz", "sha256": "0" * 64},
    )
    async with world.app() as client:
        assert (
            await client.post("/api/v1/install", json={"backend": "engine:hip"})
        ).status_code == 200
    assert json.loads((world.root / "cache/runtime/rocm.json").read_text())["source"] == "system"
    assert not (world.root / "cache/bin/runtime").exists()


async def test_experimental_backends_need_consent_and_hide_their_models(world: World) -> None:
    world.pin(
        {"native": ("1.0", world.publish("r.zip", zip_bytes({"engine": b"r"})))}, recipe="risky"
    )

    async def listed(client: httpx.AsyncClient) -> dict[str, Any]:
        data = (await client.get("/v1/models", params={"show_all": "true"})).json()["data"]
        return {m["id"]: m for m in data}

    async with world.app() as client:
        assert "risky-model" not in await listed(client)
        refused = await client.post(
            "/api/v1/install", json={"backend": "risky:native", "stream": True}
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "consent_required"
        assert "LEMON_ALLOW_EXPERIMENTAL=risky:native" in refused.json()["error"]["message"]
        assert not (world.root / "cache/bin/risky").exists()
        done = await client.post(
            "/api/v1/install", json={"backend": "risky:native", "consent": True}
        )
        assert done.status_code == 200
        assert done.json()["notice"].startswith("experimental backend")
        card = (await listed(client))["risky-model"]
        assert card["backends"] == [{"name": "native", "tier": "experimental", "format": "native"}]
        await client.post("/api/v1/uninstall", json={"backend": "risky:native"})
        again = await client.post("/api/v1/install", json={"backend": "risky:native"})
        assert again.status_code == 200  # consent is remembered
        community = await client.post("/api/v1/install", json={"backend": "engine:native"})
        assert community.status_code == 400  # nothing pinned for it here, but no consent asked
