"""Router policy against real processes: device, AMD-ness and slot policy are decided from
the selected backend before eviction.

Test plugins register recipes modelled on real ones and launch ``tinyserver.py``, a tiny
real HTTP server, because the hardware (AMD/NVIDIA GPUs) is missing here. The host's
devices are given as data.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping, Sequence
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

pytestmark = pytest.mark.anyio

TINY = Path(__file__).with_name("tinyserver.py")
CPU = HostDevice(DeviceKind.CPU, "cpu")
RX7600 = HostDevice(DeviceKind.AMD_GPU, "Radeon RX 7600", "gfx1102")
RTX = HostDevice(DeviceKind.NVIDIA_GPU, "GeForce RTX 4060")
MIXED_HOST = HostInfo("linux", (CPU, RX7600, RTX))
AMD_HOST = HostInfo("linux", (CPU, RX7600))


def row(**devices: frozenset[str]) -> SupportRow:
    return SupportRow(os=frozenset({"linux", "windows"}),
                      devices={DeviceKind(k): v for k, v in devices.items()})


ALL: frozenset[str] = frozenset()
CPU_ROW, AMD_ROW, NVIDIA_ROW = row(cpu=ALL), row(amd_gpu=ALL), row(nvidia_gpu=ALL)
CTX = OptionSpec(name="ctx_size", default=4096)
RECIPES = [
    Recipe(name="vtelike", display_name="VTE-like", slot_policy=SlotPolicy.EXCLUSIVE_GPU,
           options=(CTX,), backends=(
               Backend(name="rocm", support=(row(amd_gpu=frozenset({"gfx1102"})),)),)),
    Recipe(name="llamalike", display_name="llama.cpp-like", options=(CTX,), backends=(
        Backend(name="cpu", support=(CPU_ROW,)), Backend(name="rocm", support=(AMD_ROW,)),
        Backend(name="vulkan", support=(row(amd_gpu=ALL, nvidia_gpu=ALL, intel_gpu=ALL),)),
        Backend(name="cuda", support=(NVIDIA_ROW,)))),
    Recipe(name="whisperlike", display_name="Whisper-like", default_device=Device.CPU,
           options=(CTX,), backends=(Backend(name="cpu", support=(CPU_ROW,)),
                                     Backend(name="rocm", support=(AMD_ROW,)))),
    Recipe(name="sdlike", display_name="sd-cpp-like", options=(CTX,), backends=(
        Backend(name="rocm", support=(row(amd_gpu=frozenset({"gfx1102", "gfx1151"})),)),
        Backend(name="cpu", support=(CPU_ROW,)))),
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
        return [ModelInfo(name=name, recipe=recipe, labels=labels,
                          checkpoint=f"file:{self.weights}",
                          recipe_options={"backend": backend})
                for name, (recipe, backend, labels) in MODELS.items()]

    @hookimpl
    def install(self, recipe: Recipe) -> InstallPlan | None:
        return InstallPlan("1", location=TINY.parent) if recipe in RECIPES else None

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        weights = context.model_path if model.name != "llama-missing" else Path("/nonexistent")
        argv = [sys.executable, str(TINY), "--port", str(context.port), "--name", model.name,
                "--model", str(weights), "--ctx-size", str(context.options["ctx_size"]),
                "--registry", str(self.root / "running")]
        if model.name == "llama-alone":
            argv.append("--alone")
        if model.name.startswith("slow-"):
            argv += ["--start-delay", str(SLOW_START)]
        # llama.cpp's out-of-memory words, declared as its plugin declares them
        return LaunchSpec(argv=tuple(argv),
                          out_of_memory=(r"failed to allocate \S+ buffer of size",))


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
async def lemon_for(tmp_path: Path, host: HostInfo, **settings: Any
                    ) -> AsyncIterator[Lemon]:
    app = create_app(Settings(cache_dir=tmp_path / "cache", plugins_allow="",
                              **{"max_loaded_models": 8, **settings}),
                     plugins={"tiny": TinyBackends(tmp_path)}, host=host)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30) as client:
        yield Lemon(client, core_of(app).router)


@pytest.fixture
async def lemon(tmp_path: Path, anyio_backend: str) -> AsyncIterator[Lemon]:
    async with lemon_for(tmp_path, MIXED_HOST) as instance:
        yield instance


@pytest.mark.parametrize(
    ("order", "survivors"),
    [
        (["llama-rocm", "vte"], {"vte"}),  # 1. VTE evicts an AMD-GPU model
        (["vte", "llama-rocm"], {"llama-rocm"}),  # 2. an AMD-GPU model evicts VTE
        (["vte", "llama-cpu"], {"vte", "llama-cpu"}),  # 3. CPU variant coexists...
        (["llama-cpu", "vte"], {"vte", "llama-cpu"}),  # ...in both orders
        (["vte", "whisper-rocm"], {"whisper-rocm"}),  # 4. rocm Whisper (default cpu) is AMD
        (["whisper-rocm", "vte"], {"vte"}),
        (["vte", "whisper-cpu"], {"vte", "whisper-cpu"}),
        (["vte", "llama-cuda"], {"vte", "llama-cuda"}),  # 5. NVIDIA coexists, both orders
        (["llama-cuda", "vte"], {"vte", "llama-cuda"}),
        (["vte", "sd-rocm"], {"sd-rocm"}),  # 6. sd-cpp-like rocm, both orders
        (["sd-rocm", "vte"], {"vte"}),
        (["sd-cpu", "vte"], {"vte", "sd-cpu"}),
        # 7. Vulkan spans vendors: on a host with AMD and NVIDIA GPUs its vendor is not
        # known from the rows, so it is not treated as AMD unless a plugin says so.
        (["vte", "llama-vulkan"], {"vte", "llama-vulkan"}),
    ],
)
async def test_exclusive_gpu_follows_the_selected_backend(
    lemon: Lemon, order: list[str], survivors: set[str]
) -> None:
    assert await lemon.sequence(*order) == survivors


async def test_stored_answers_describe_the_loaded_servers(lemon: Lemon) -> None:
    loaded = await lemon.sequence("vte", "whisper-rocm", "llama-cuda", "sd-cpu")
    assert loaded == {"whisper-rocm", "llama-cuda", "sd-cpu"}
    servers = await lemon.loaded()
    assert {n: (s["device"], s["is_amd_gpu"], s["slot_policy"]) for n, s in
            servers.items()} == {"whisper-rocm": ("gpu", True, "standard"),
                                 "llama-cuda": ("gpu", False, "standard"),
                                 "sd-cpu": ("cpu", False, "standard")}


@pytest.mark.parametrize("order", [["vte", "llama-vulkan"], ["llama-vulkan", "vte"]])
async def test_vulkan_on_an_amd_only_host_is_on_the_amd_gpu(
    tmp_path: Path, anyio_backend: str, order: list[str]
) -> None:
    async with lemon_for(tmp_path, AMD_HOST) as lemon:
        assert await lemon.sequence(*order) == {order[-1]}


async def test_dry_run_explains_without_evicting(lemon: Lemon) -> None:
    await lemon.sequence("llama-rocm", "whisper-rocm", "llama-cuda")
    plan = (await lemon.load("vte", dry_run=True)).json()
    assert plan["device"] == "gpu" and plan["is_amd_gpu"] is True
    assert plan["slot_policy"] == "exclusive_gpu"
    assert {e["model_name"]: e["kind"] for e in plan["evict"]} == {
        "llama-rocm": "exclusive_gpu", "whisper-rocm": "exclusive_gpu"}
    assert all("vte needs the AMD GPU" in e["reason"] for e in plan["evict"])
    assert set(await lemon.loaded()) == {"llama-rocm", "whisper-rocm", "llama-cuda"}


async def test_evictions_are_counted_by_reason(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon_for(tmp_path, MIXED_HOST, max_loaded_models=1) as lemon:
        await lemon.sequence("llama-rocm", "vte", "llama-cuda", "llama-cpu")
        text = (await lemon.client.get("/metrics")).text
    assert 'lemon_evictions_total{reason="exclusive_gpu"} 1' in text
    assert 'lemon_evictions_total{reason="lru"} 2' in text
    assert "lemon_loads_total 4" in text
    assert "lemon_loaded_models 1" in text


async def test_pinned_models_survive_and_the_load_is_refused(lemon: Lemon) -> None:
    assert (await lemon.load("llama-rocm", pinned=True)).status_code == 200
    refused = await lemon.load("vte")
    assert refused.status_code == 409
    assert "llama-rocm is pinned" in refused.json()["error"]["message"]
    assert set(await lemon.loaded()) == {"llama-rocm"}


async def test_busy_models_are_waited_for_not_killed(lemon: Lemon) -> None:
    await lemon.sequence("llama-rocm")
    results: dict[str, Any] = {}

    async def slow_chat() -> None:
        results["chat"] = await lemon.client.post("/v1/chat/completions", json={
            "model": "llama-rocm", "messages": [{"role": "user", "content": "hi"}],
            "delay": 1.0})
        results["chat_done"] = anyio.current_time()

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow_chat)
        await in_flight(lemon, "llama-rocm", 1)
        assert (await lemon.load("vte")).status_code == 200
        loaded_at = anyio.current_time()
    assert results["chat"].status_code == 200
    assert results["chat"].json()["choices"][0]["message"]["content"] == "ok from llama-rocm"
    assert loaded_at >= results["chat_done"]  # the eviction waited for the answer
    assert set(await lemon.loaded()) == {"vte"}


async def in_flight(lemon: Lemon, model: str, count: int) -> None:
    """Wait until ``model``'s server counts ``count`` requests in flight."""
    with anyio.fail_after(10):
        while (server := lemon.router.servers.get(model)) is None or \
                server.in_flight < count:
            await anyio.sleep(0.01)


async def test_ctx_size_precedence_reaches_the_argv(tmp_path: Path, anyio_backend: str) -> None:
    recipes = {"llamalike": {"ctx_size": 8192}}
    async with lemon_for(tmp_path, MIXED_HOST, recipes=recipes) as lemon:
        def ctx(server: Mapping[str, Any]) -> str:
            argv = server["launch_command"]
            return str(argv[argv.index("--ctx-size") + 1])

        await lemon.sequence("llama-cpu", "vte")
        servers = await lemon.loaded()
        assert ctx(servers["llama-cpu"]) == "8192"  # recipe-level config
        assert ctx(servers["vte"]) == "4096"  # recipe default
        assert (await lemon.load("llama-cpu", ctx_size=1024, save_options=True)).is_success
        assert ctx((await lemon.loaded())["llama-cpu"]) == "1024"  # request, saved
        await lemon.client.post("/api/v1/unload", json={"model_name": "llama-cpu"})
        await lemon.sequence("llama-cpu")
        assert ctx((await lemon.loaded())["llama-cpu"]) == "1024"  # saved beats config


async def test_failed_load_evicts_the_others_and_retries_once(lemon: Lemon) -> None:
    await lemon.sequence("llama-cpu", "vte")
    assert set(await lemon.sequence("llama-alone")) == {"llama-alone"}
    text = (await lemon.client.get("/metrics")).text
    assert 'lemon_evictions_total{reason="load_failure"} 2' in text


async def test_missing_file_failure_is_not_retried(lemon: Lemon) -> None:
    await lemon.sequence("llama-cpu", "vte")
    response = await lemon.load("llama-missing")
    assert response.status_code == 503
    assert "failed to load model" in response.json()["error"]["message"]
    assert set(await lemon.loaded()) == {"llama-cpu", "vte"}


async def test_shutdown_refuses_new_requests_and_cuts_stragglers_at_the_deadline(
        tmp_path: Path, anyio_backend: str) -> None:
    async with lemon_for(tmp_path, MIXED_HOST, stop_grace=1.0) as lemon:
        await lemon.sequence("llama-cpu")
        results: dict[str, httpx.Response] = {}

        async def chat(key: str, delay: float) -> None:
            results[key] = await lemon.client.post("/v1/chat/completions", json={
                "model": "llama-cpu", "messages": [{"role": "user", "content": "hi"}],
                "delay": delay})

        async with anyio.create_task_group() as tg:
            tg.start_soon(chat, "finishes", 0.5)
            tg.start_soon(chat, "straggler", 5.0)
            await in_flight(lemon, "llama-cpu", 2)
            lemon.router.begin_shutdown()
            await chat("new", 0)
    assert results["finishes"].status_code == 200
    for key in ("straggler", "new"):
        assert results[key].status_code == 503
        assert results[key].json()["error"]["code"] == "shutting_down"
    assert results["new"].headers["retry-after"] == "1"


async def test_a_request_waits_for_its_model_at_most_load_timeout_and_the_load_goes_on(
        tmp_path: Path, anyio_backend: str) -> None:
    """slow-b's load waits behind slow-a's: together longer than load_timeout."""
    async with lemon_for(tmp_path, MIXED_HOST, load_timeout=2.0) as lemon:
        answers: dict[str, httpx.Response] = {}

        async def chat(name: str) -> None:
            answers[name] = await lemon.client.post("/v1/chat/completions", json={
                "model": name, "messages": [{"role": "user", "content": "hi"}]})

        async with anyio.create_task_group() as tg:
            tg.start_soon(chat, "slow-a")
            await anyio.sleep(0.2)
            tg.start_soon(chat, "slow-b")
        assert answers["slow-a"].status_code == 200
        assert answers["slow-b"].status_code == 503
        assert answers["slow-b"].json()["error"]["code"] == "model_loading"
        assert answers["slow-b"].headers["retry-after"] == "5"
        with anyio.fail_after(SLOW_START + 2):
            while "slow-b" not in await lemon.loaded():
                await anyio.sleep(0.05)
        await chat("slow-b")
        assert answers["slow-b"].status_code == 200
