"""The router tests' world: a test plugin whose recipes are modelled on real ones (a
VTE-like exclusive-GPU recipe, llama.cpp-, Whisper- and sd-cpp-like ones) and whose models
launch ``tinyserver.py``, a tiny real HTTP server, because the hardware (AMD/NVIDIA GPUs)
is missing here; hosts given as data; and lemoncore serving it in process (``lemon_for``,
and the ``lemon`` fixture on a host with an AMD and an NVIDIA GPU)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.app import core_of
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import (
    Backend,
    Device,
    DeviceKind,
    ModelInfo,
    OptionSpec,
    Recipe,
    SlotPolicy,
    SupportRow,
)
from lemoncore.serving.router import Router

TINY = Path(__file__).with_name("tinyserver.py")
CPU = HostDevice(DeviceKind.CPU, "cpu")
RX7600 = HostDevice(DeviceKind.AMD_GPU, "Radeon RX 7600", "gfx1102")
RTX = HostDevice(DeviceKind.NVIDIA_GPU, "GeForce RTX 4060")
MIXED_HOST = HostInfo("linux", (CPU, RX7600, RTX))
AMD_HOST = HostInfo("linux", (CPU, RX7600))


def row(**devices: frozenset[str]) -> SupportRow:
    return SupportRow(
        os=frozenset({"linux", "windows"}), devices={DeviceKind(k): v for k, v in devices.items()}
    )


ALL: frozenset[str] = frozenset()
CPU_ROW, AMD_ROW, NVIDIA_ROW = row(cpu=ALL), row(amd_gpu=ALL), row(nvidia_gpu=ALL)
CTX = OptionSpec(name="ctx_size", default=4096)
RECIPES = [
    Recipe(
        name="vtelike",
        display_name="VTE-like",
        slot_policy=SlotPolicy.EXCLUSIVE_GPU,
        options=(CTX,),
        backends=(Backend(name="rocm", support=(row(amd_gpu=frozenset({"gfx1102"})),)),),
    ),
    Recipe(
        name="llamalike",
        display_name="llama.cpp-like",
        options=(CTX,),
        backends=(
            Backend(name="cpu", support=(CPU_ROW,)),
            Backend(name="rocm", support=(AMD_ROW,)),
            Backend(name="vulkan", support=(row(amd_gpu=ALL, nvidia_gpu=ALL, intel_gpu=ALL),)),
            Backend(name="cuda", support=(NVIDIA_ROW,)),
        ),
    ),
    Recipe(
        name="whisperlike",
        display_name="Whisper-like",
        default_device=Device.CPU,
        options=(CTX,),
        backends=(
            Backend(name="cpu", support=(CPU_ROW,)),
            Backend(name="rocm", support=(AMD_ROW,)),
        ),
    ),
    Recipe(
        name="sdlike",
        display_name="sd-cpp-like",
        options=(CTX,),
        backends=(
            Backend(name="rocm", support=(row(amd_gpu=frozenset({"gfx1102", "gfx1151"})),)),
            Backend(name="cpu", support=(CPU_ROW,)),
        ),
    ),
]
MODELS = {  # name: (recipe, backend, labels)
    "vte": ("vtelike", "rocm", ()),
    "llama-cpu": ("llamalike", "cpu", ()),
    "llama-rocm": ("llamalike", "rocm", ()),
    "llama-vulkan": ("llamalike", "vulkan", ()),
    "llama-cuda": ("llamalike", "cuda", ()),
    "whisper-cpu": ("whisperlike", "cpu", ("transcription",)),
    "whisper-rocm": ("whisperlike", "rocm", ("transcription",)),
    "sd-rocm": ("sdlike", "rocm", ("image",)),
    "sd-cpu": ("sdlike", "cpu", ("image",)),
    "llama-alone": ("llamalike", "cpu", ()),
    "llama-missing": ("llamalike", "cpu", ()),
    "slow-a": ("llamalike", "cpu", ()),  # each takes SLOW_START s to start
    "slow-b": ("llamalike", "cpu", ()),
}
SLOW_START = 1.5


class TinyBackends:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.weights = root / "cache" / "models" / "weights.bin"  # in the model store
        self.weights.parent.mkdir(parents=True, exist_ok=True)
        self.weights.write_bytes(b"weights")

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return RECIPES

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(
                name=name,
                recipe=recipe,
                labels=labels,
                checkpoint=f"file:{self.weights}",
                recipe_options={"backend": backend},
            )
            for name, (recipe, backend, labels) in MODELS.items()
        ]

    @hookimpl
    def install(self, recipe: Recipe) -> InstallPlan | None:
        return InstallPlan("1", location=TINY.parent) if recipe in RECIPES else None

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        weights = context.model_path if model.name != "llama-missing" else Path("/nonexistent")
        argv = [
            sys.executable,
            str(TINY),
            "--port",
            str(context.port),
            "--name",
            model.name,
            "--model",
            str(weights),
            "--ctx-size",
            str(context.options["ctx_size"]),
            "--registry",
            str(self.root / "running"),
        ]
        if model.name == "llama-alone":
            argv.append("--alone")
        if model.name.startswith("slow-"):
            argv += ["--start-delay", str(SLOW_START)]
        # llama.cpp's out-of-memory words, declared as its plugin declares them
        return LaunchSpec(
            argv=tuple(argv), out_of_memory=(r"failed to allocate \S+ buffer of size",)
        )


class Lemon:
    def __init__(self, client: httpx.AsyncClient, router: Router) -> None:
        self.client, self.router = client, router

    async def load(self, name: str, **body: Any) -> httpx.Response:
        return await self.client.post("/api/v1/load", json={"model_name": name, **body})

    async def loaded(self) -> dict[str, dict[str, Any]]:
        health = (await self.client.get("/api/v1/health")).json()
        return {m["model_name"]: m for m in health["all_models_loaded"]}

    async def sequence(self, *names: str) -> set[str]:
        for name in names:
            response = await self.load(name)
            assert response.status_code == 200, response.text
        return set(await self.loaded())


@asynccontextmanager
async def lemon_for(tmp_path: Path, host: HostInfo, **settings: Any) -> AsyncIterator[Lemon]:
    app = create_app(
        Settings(
            cache_dir=tmp_path / "cache", plugins_allow="", **{"max_loaded_models": 8, **settings}
        ),
        plugins={"tiny": TinyBackends(tmp_path)},
        host=host,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        yield Lemon(client, core_of(app).router)


@pytest.fixture
async def lemon(tmp_path: Path, anyio_backend: str) -> AsyncIterator[Lemon]:
    async with lemon_for(tmp_path, MIXED_HOST) as instance:
        yield instance


async def in_flight(lemon: Lemon, model: str, count: int) -> None:
    """Wait until ``model``'s server counts ``count`` requests in flight."""
    with anyio.fail_after(10):
        while (server := lemon.router.servers.get(model)) is None or server.in_flight < count:
            await anyio.sleep(0.01)
