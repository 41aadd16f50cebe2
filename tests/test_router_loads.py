"""Loading and stopping through the router against real processes (``tinyserver.py``
behind recipes modelled on real ones): option precedence reaching the argv, a failed
load that evicts the others and retries once, a missing file that is not retried,
shutdown refusing new requests and cutting stragglers at the deadline, and a request
that waits for its model at most ``load_timeout`` while the load goes on."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from router_policy_support import MIXED_HOST, SLOW_START, Lemon, in_flight, lemon, lemon_for

__all__ = ["lemon"]  # the fixture
pytestmark = pytest.mark.anyio


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
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon_for(tmp_path, MIXED_HOST, stop_grace=1.0) as lemon:
        await lemon.sequence("llama-cpu")
        results: dict[str, httpx.Response] = {}

        async def chat(key: str, delay: float) -> None:
            results[key] = await lemon.client.post(
                "/v1/chat/completions",
                json={
                    "model": "llama-cpu",
                    "messages": [{"role": "user", "content": "hi"}],
                    "delay": delay,
                },
            )

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
    tmp_path: Path, anyio_backend: str
) -> None:
    """slow-b's load waits behind slow-a's: together longer than load_timeout."""
    async with lemon_for(tmp_path, MIXED_HOST, load_timeout=2.0) as lemon:
        answers: dict[str, httpx.Response] = {}

        async def chat(name: str) -> None:
            answers[name] = await lemon.client.post(
                "/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "hi"}]},
            )

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
