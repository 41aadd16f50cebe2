"""Hostile and failing engines through the real app (issue #30 items 10 and 11): a
stand-in engine (``hostile_engine.py``) prints ANSI escapes, a fake lemoncore log line and
a 50,000-line flood; a VTE-style engine refuses its GPU in Portuguese; a llama.cpp-style
one (``tinyserver.py --alone``) runs out of memory while another model is loaded.
Another model keeps serving throughout."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, MutableMapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from lemoncore import Settings, create_app, hookimpl, outputlines
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, Recipe, SupportRow

pytestmark = pytest.mark.anyio
HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
HOSTILE = Path(__file__).with_name("hostile_engine.py")
TINY = Path(__file__).with_name("tinyserver.py")
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
FLOOD = 50_000
# what the test plugins declare, as the llama.cpp and VTE plugins do for their engines
OUT_OF_MEMORY = (r"failed to allocate \S+ buffer of size",)
REFUSED = (r"não pertence a essa família|Recusando escolher",)


class Engines:
    """Recipe ``hostile``: ``healthy`` (tinyserver), ``flood`` (floods, then serves),
    ``flood-dies`` (floods, then exits 1), ``refuses`` (VTE's family refusal, declared
    hopeless), ``oom`` and ``oom-undeclared`` (out of memory while another tiny server
    runs; only ``oom`` declares llama.cpp's words)."""

    def __init__(self, root: Path) -> None:
        (root / "cache" / "models").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "models" / "w.bin").write_bytes(b"w")
        self.root = root

    def runs(self, model: str) -> int:
        path = self.root / f"{model}.runs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        row = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
        return [
            Recipe(
                name="hostile",
                display_name="Hostile",
                backends=(Backend(name="cpu", support=(row,)),),
            )
        ]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        weights = f"file:{self.root}/cache/models/w.bin"
        return [
            ModelInfo(name=name, recipe="hostile", checkpoint=weights)
            for name in ("healthy", "flood", "flood-dies", "refuses", "oom", "oom-undeclared")
        ]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=self.root)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        runs = str(self.root / f"{model.name}.runs")
        if model.name in ("flood", "flood-dies", "refuses"):
            then = {"flood": "serve", "flood-dies": "exit", "refuses": "refuse"}[model.name]
            return LaunchSpec(
                argv=(
                    sys.executable,
                    str(HOSTILE),
                    "--port",
                    str(context.port),
                    "--runs",
                    runs,
                    "--then",
                    then,
                    "--flood",
                    str(FLOOD),
                ),
                hopeless=REFUSED,
                out_of_memory=OUT_OF_MEMORY,
            )
        with open(runs, "a") as counted:
            counted.write("ran\n")
        tiny = (
            sys.executable,
            str(TINY),
            "--port",
            str(context.port),
            "--name",
            model.name,
            "--model",
            str(context.model_path),
            "--ctx-size",
            "1",
            "--registry",
            str(self.root / "reg"),
        )
        if model.name == "healthy":
            return LaunchSpec(argv=tiny)
        return LaunchSpec(
            argv=(*tiny, "--alone"), out_of_memory=OUT_OF_MEMORY if model.name == "oom" else ()
        )


@asynccontextmanager
async def lemon(engines: Engines) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(cache_dir=engines.root / "cache", plugins_allow="", max_loaded_models=3),
        plugins={"hostile": engines},
        host=HOST,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=60
        ) as client,
    ):
        yield client


async def chat(client: httpx.AsyncClient, model: str) -> httpx.Response:
    return await client.post("/v1/chat/completions", json={**CHAT, "model": model})


async def loaded(client: httpx.AsyncClient) -> set[str]:
    health = (await client.get("/api/v1/health")).json()
    return {m["model_name"] for m in health["all_models_loaded"]}


def of(logs: Sequence[MutableMapping[str, Any]], model: str, event: str) -> list[Any]:
    return [e for e in logs if e.get("model") == model and e["event"] == event]


async def test_an_engines_output_is_escaped_and_a_flood_is_limited_while_others_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    monkeypatch.setattr(outputlines, "REPORT_EVERY_S", 0.2)  # the quiet after the flood
    engines = Engines(tmp_path)
    with capture_logs() as logs:
        async with lemon(engines) as client:
            assert (await chat(client, "healthy")).status_code == 200
            async with anyio.create_task_group() as tg:
                tg.start_soon(chat, client, "flood")
                while not of(logs, "flood", "engine output"):  # the flood has begun
                    await anyio.sleep(0.01)
                assert (await chat(client, "healthy")).status_code == 200  # meanwhile
            assert (await chat(client, "flood")).status_code == 200
            with anyio.fail_after(10):
                while not of(logs, "flood", "engine output dropped"):
                    await anyio.sleep(0.01)  # the report after the quiet: no event to await
            assert await loaded(client) == {"healthy", "flood"}
    lines = [e["line"] for e in of(logs, "flood", "engine output")]
    assert lines[:3] == [
        "\\x1b[31mred\\x1b[0m \\x1b]0;title\\x1b\\ \\x07bell",
        "progress 10%\\x0dprogress 100%",
        outputlines.escaped(lines[2]),
    ]
    assert lines[2].startswith("2026-01-01T00:00:00.000000Z [error    ] all models")
    assert not [e for e in logs if "all models unloaded" in e["event"]]  # never a message
    assert all(e["source"] == "backend" for e in of(logs, "flood", "engine output"))
    dropped = sum(e["dropped"] for e in of(logs, "flood", "engine output dropped"))
    assert len(lines) + dropped == FLOOD + 4  # every line is logged or counted
    assert outputlines.BURST_LINES <= len(lines) < FLOOD // 2


async def test_a_crash_report_shows_the_real_last_lines_of_a_flood(
    tmp_path: Path, anyio_backend: str
) -> None:
    engines = Engines(tmp_path)
    async with lemon(engines) as client:
        failed = await chat(client, "flood-dies")
    message = failed.json()["error"]["message"]
    assert failed.status_code == 503 and "exited with code 1 while starting" in message
    assert message.endswith(f"flood {FLOOD - 1}\nreal last line")  # not the log's last


async def test_a_vte_family_refusal_in_portuguese_evicts_nothing_and_runs_once(
    tmp_path: Path, anyio_backend: str
) -> None:
    engines = Engines(tmp_path)
    async with lemon(engines) as client:
        assert (await chat(client, "healthy")).status_code == 200
        refused = await chat(client, "refuses")
        assert refused.status_code == 503 and refused.headers["x-should-retry"] == "false"
        assert "pertence a essa família" in refused.json()["error"]["message"]
        again = await chat(client, "refuses")  # held off at once: no second spawn
        assert again.json()["error"]["code"] == "backend_cooldown"
        assert await loaded(client) == {"healthy"}
        assert (await chat(client, "healthy")).status_code == 200
    assert engines.runs("refuses") == 1 and engines.runs("healthy") == 1


async def test_a_declared_out_of_memory_evicts_the_others_and_retries_once(
    tmp_path: Path, anyio_backend: str
) -> None:
    engines = Engines(tmp_path)
    async with lemon(engines) as client:
        assert (await chat(client, "healthy")).status_code == 200
        assert (await chat(client, "oom")).status_code == 200  # after evicting healthy
        assert await loaded(client) == {"oom"}
    assert engines.runs("oom") == 2


async def test_an_undeclared_failure_evicts_nothing(tmp_path: Path, anyio_backend: str) -> None:
    """The same llama.cpp words, undeclared: the core reads no English into them."""
    engines = Engines(tmp_path)
    async with lemon(engines) as client:
        assert (await chat(client, "healthy")).status_code == 200
        assert (await chat(client, "oom-undeclared")).status_code == 503
        assert await loaded(client) == {"healthy"}
    assert engines.runs("oom-undeclared") == 1


async def test_an_output_that_cannot_be_read_ends_that_engine_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """A failure reading one engine's output kills that engine (its start fails, as a
    crash would); the router and the other model go on."""
    feed = outputlines.EngineOutput.feed

    def broken(self: outputlines.EngineOutput, chunk: bytes) -> None:
        if self.fields.get("model") == "flood":
            raise OSError("the pipe broke")
        feed(self, chunk)

    monkeypatch.setattr(outputlines.EngineOutput, "feed", broken)
    engines = Engines(tmp_path)
    with capture_logs() as logs:
        async with lemon(engines) as client:
            assert (await chat(client, "healthy")).status_code == 200
            failed = await chat(client, "flood")
            assert failed.status_code == 503, failed.text
            assert (await chat(client, "healthy")).status_code == 200
            assert await loaded(client) == {"healthy"}
    assert of(logs, "flood", "backend output could not be read")
    assert engines.runs("flood") == 1  # not taken for a want of memory and retried
