"""Router policy against real processes (``tinyserver.py`` behind recipes modelled on real
ones, hosts given as data): device, AMD-ness and slot policy decided from the selected
backend before eviction, the answers stored for loaded servers, dry runs, eviction
counts, pinned models and busy models waited for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from router_policy_support import AMD_HOST, MIXED_HOST, Lemon, in_flight, lemon, lemon_for

__all__ = ["lemon"]  # the fixture
pytestmark = pytest.mark.anyio


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
    assert {n: (s["device"], s["is_amd_gpu"], s["slot_policy"]) for n, s in servers.items()} == {
        "whisper-rocm": ("gpu", True, "standard"),
        "llama-cuda": ("gpu", False, "standard"),
        "sd-cpu": ("cpu", False, "standard"),
    }


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
        "llama-rocm": "exclusive_gpu",
        "whisper-rocm": "exclusive_gpu",
    }
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
        results["chat"] = await lemon.client.post(
            "/v1/chat/completions",
            json={
                "model": "llama-rocm",
                "messages": [{"role": "user", "content": "hi"}],
                "delay": 1.0,
            },
        )
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
