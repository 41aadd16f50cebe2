"""Serving requests through the real VTE plugin to the stand-in ``vte-server``: requests
normalised to VTE's fields with shapes passed through, concurrent requests queued by
lemoncore instead of meeting VTE's 429, a full queue answered 503 with Retry-After, and a
client that leaves mid-stream (over real TCP, Hypercorn) never costing the next one a 429."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import (
    SMOLLM2,
    World,
    chat,
    in_flight_and_queued,
    over_http,
    register,
    until,
)

pytestmark = pytest.mark.anyio


async def test_requests_are_normalised_and_shapes_pass_through(world: World) -> None:
    async with world.lemon() as client:
        reply = (
            await client.post(
                "/v1/chat/completions", json=chat(max_completion_tokens=2, repeat_penalty=1.2)
            )
        ).json()
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"]["completion_tokens"] == 2
        sent = world.reports("request")[-1]["body"]
        assert sent["max_tokens"] == 2 and sent["repetition_penalty"] == 1.2
        assert "repeat_penalty" not in sent

        async def frames(**extra: Any) -> list[dict[str, Any]]:
            text = (await client.post("/v1/chat/completions", json=chat(stream=True, **extra))).text
            return [
                json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")
            ]

        plain = await frames()
        assert plain[-1]["choices"][0]["finish_reason"] == "stop"
        assert all("total_tokens" not in f.get("usage", {}) for f in plain)
        with_usage = await frames(stream_options={"include_usage": True})
        assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"]["total_tokens"] > 0

        refused = await client.post(
            "/v1/completions", json={"model": "vte-smol", "prompt": "one two", "stream": True}
        )
        assert refused.status_code == 400
        assert "does not stream /v1/completions" in refused.json()["error"]["message"]
        completion = await client.post(
            "/v1/completions", json={"model": "vte-smol", "prompt": "one two"}
        )
        assert completion.json()["choices"][0]["text"] == "one two"


def in_process_sdk(client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    """The openai SDK, as a user's app uses it, on lemoncore served in process."""
    return openai.AsyncOpenAI(
        base_url="http://localhost/v1", api_key="none", http_client=client, max_retries=0
    )


def streamed(text: str) -> str:
    """The content a server-sent stream carried."""
    frames = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    return "".join(c["delta"].get("content", "") for f in frames for c in f["choices"])


async def test_concurrent_streams_queue_instead_of_meeting_vtes_429(world: World) -> None:
    """VTE serves a stream from a thread and answers any other generation meanwhile with
    429 (``http_server.py`` ``chat_completions``), so only lemoncore's one-request gate
    (``max_concurrency = 1``) keeps three of four streams out of VTE until the first ends.
    The prefill lasts until all four are counted, in VTE or in lemoncore's queue."""
    release = world.root / "release"
    world.env.setenv("VTE_STANDIN_HOLD", str(release))
    async with world.lemon(max_queue=8) as client:
        (await client.post("/api/v1/load", json={"model_name": "vte-smol"})).raise_for_status()
        results: list[tuple[int, str]] = []

        async def one() -> None:
            reply = await client.post("/v1/chat/completions", json=chat(stream=True))
            results.append((reply.status_code, streamed(reply.text)))

        async def held() -> bool:
            return (await in_flight_and_queued(client))[0] == 4

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(one)
            try:
                await until(held)
                counted = await in_flight_and_queued(client)
            finally:
                release.touch()
    assert counted == (4, 3)  # one in VTE, three waiting in lemoncore
    assert results == [(200, "one two three four")] * 4
    assert world.reports("busy") == [] and len(world.reports("request")) == 4


async def test_a_full_queue_answers_503_with_retry_after(world: World) -> None:
    """VTE's one slot busy and the queue of one full, the next request gets 503. The
    engine's prefill lasts until the test releases it, and each request is sent once the
    server counts the one before (in the slot, then queued): no timing decides the order."""
    release = world.root / "release"
    world.env.setenv("VTE_STANDIN_HOLD", str(release))
    async with world.lemon(max_queue=1) as client:
        loaded = await client.post("/api/v1/load", json={"model_name": "vte-smol"})
        assert loaded.status_code == 200, loaded.text
        results: dict[str, httpx.Response] = {}

        async def one(name: str) -> None:
            results[name] = await client.post("/v1/chat/completions", json=chat())

        async def counted(want: tuple[int, int]) -> bool:
            return await in_flight_and_queued(client) == want

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "runs")
            await until(lambda: counted((1, 0)))
            tg.start_soon(one, "waits")
            await until(lambda: counted((2, 1)))
            with anyio.fail_after(10):  # at once: nothing is waited for
                await one("refused")
            release.touch()
    assert {name: r.status_code for name, r in results.items()} == {
        "runs": 200,
        "waits": 200,
        "refused": 503,
    }
    busy = results["refused"]
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["error"]["code"] == "queue_full"
    assert len(world.reports("request")) == 2 and world.reports("busy") == []


async def test_a_client_that_leaves_never_causes_a_429_for_the_next(world: World) -> None:
    """VTE notices a stream's disconnect only at its next token (after the prefill), and
    holds its one-generation lock until then: the next request meets its 429, which
    lemoncore absorbs by retrying. The prefill lasts until the engine has refused the next
    request: the client leaves once the engine has its request, and the prefill ends once
    the engine has said busy, so each step waits for the one before, not for a timer."""
    release = world.root / "release"
    world.env.setenv("VTE_STANDIN_HOLD", str(release))

    async def reported(kind: str) -> bool:
        return bool(world.reports(kind))

    async with over_http(world.app()) as client:
        await register(client)
        (await client.post("/api/v1/load", json={"model_name": "vte-smol"})).raise_for_status()

        async def stream() -> None:
            async with client.stream(
                "POST", "/v1/chat/completions", json=chat(stream=True)
            ) as response:
                async for _ in response.aiter_raw():
                    pass

        async with anyio.create_task_group() as leaving:
            leaving.start_soon(stream)
            await until(lambda: reported("request"))  # the engine is in its prefill
            leaving.cancel_scope.cancel()  # the client leaves

        async def release_once_refused() -> None:
            await until(lambda: reported("busy"))
            release.touch()

        async with (
            anyio.create_task_group() as tg,
            openai.AsyncOpenAI(
                base_url=f"{client.base_url}/v1", api_key="none", max_retries=0
            ) as sdk,
        ):  # what a user's app uses
            tg.start_soon(release_once_refused)
            reply = await sdk.chat.completions.create(**chat())
        assert reply.choices[0].message.content == "one two three four"
    assert world.reports("busy")  # the engine did refuse; the client never saw it
    assert len(world.reports("request")) == 2


async def test_multi_part_text_reaches_vte_as_one_string(world: World) -> None:
    """The openai SDK's multi-part content: VTE's Qwen2.5 template would put the list's
    Python repr into the prompt, so its text parts are joined first."""
    async with (
        world.lemon() as client,
        in_process_sdk(client) as sdk,
    ):
        reply = await sdk.chat.completions.create(
            model="vte-smol",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "one two"},
                        {"type": "text", "text": "three four"},
                    ],
                }
            ],
        )
    assert reply.choices[0].message.content == "one two three four"
    sent = world.reports("request")[-1]["body"]["messages"]
    assert sent == [{"role": "user", "content": "one two\nthree four"}]


@pytest.mark.parametrize("labels", [[], ["vision"]])  # refused by lemoncore / by the plugin
async def test_an_image_is_refused_with_the_models_name(world: World, labels: list[str]) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    async with (
        world.lemon() as client,
        in_process_sdk(client) as sdk,
    ):
        pulled = await client.post(
            "/api/v1/pull",
            json={
                "model_name": "vte-eyes",
                "recipe": "vte",
                "checkpoint": SMOLLM2,
                "labels": labels,
            },
        )
        assert pulled.status_code == 200, pulled.text
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.chat.completions.create(
                model="vte-eyes",
                messages=[{"role": "user", "content": [{"type": "text", "text": "what?"}, image]}],
            )
    assert "'vte-eyes'" in refused.value.message
    assert world.reports("request") == []


async def test_vram_pressure_unload_is_vtes_own_business(world: World) -> None:
    """VTE's VRAMPressureGuard unloads the model behind lemoncore's back and VTE reloads it
    inside the next request (``model.py`` ``ensure_loaded``): lemoncore needs to do
    nothing, and does nothing (the same process answers)."""
    pressure = world.root / "pressure"
    world.env.setenv("VTE_STANDIN_PRESSURE", str(pressure))
    async with world.lemon() as client:
        assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200
        pressure.touch()
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
        assert not pressure.exists()  # the guard did unload, and VTE reloaded
    assert len(world.reports("start")) == 1
    assert len(world.reports("device")) == 1  # the reload is inside the process


async def test_panic_mode_is_ended_by_a_restart(world: World) -> None:
    """After a kernel watchdog timeout VTE fails every generation with a 500 until its
    runtime is re-created (``hip_runtime.py`` ``launch_kernel``); lemoncore counts three
    failed requests in a row as wedged and restarts it."""
    panic = world.root / "panic"
    world.env.setenv("VTE_STANDIN_PANIC", str(panic))
    async with world.lemon() as client:
        assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200
        panic.touch()
        failed = [await client.post("/v1/chat/completions", json=chat()) for _ in range(3)]
        assert all("PANIC MODE" in r.text for r in failed), [r.text for r in failed]
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
    assert len(world.reports("start")) == 2
