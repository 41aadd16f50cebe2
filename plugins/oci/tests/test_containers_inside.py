"""lemoncore inside a container, starting its engine through the host's podman socket: a
real rootful ``podman system service`` on a socket, lemoncore (the test recipe's server,
``boxed.py``) in a container that sees that socket and the host's share at ``/data``
(``LEMON_OCI_HOST_PATHS``), and the engine container started by the host's service
beside it (not inside it). The chat answers over the engine's unix socket, whose
directory lemoncore creates under ``/data`` and the host's service mounts by the host's
path; stopping lemoncore's container stops the engine's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from lemoncore.plugin import free_port

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from containers_support import (
    BOXED_SERVER,
    CHAT,
    SMOLLM2,
    Registry,
    lock_for,
    podman,
    require_container_tools,
)

require_container_tools()
VENV = Path(sys.prefix)  # lemoncore's, seen inside at the same path (the host's root)


@contextmanager
def podman_service(root: Path) -> Iterator[str]:
    """``podman system service`` on ``root/podman.sock`` (no idle timeout), as a host
    running lemoncore in a container would offer it; its URL."""
    socket = root / "podman.sock"
    url = f"unix://{socket}"
    with (root / "service.log").open("wb") as log:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", url], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert service.poll() is None and time.monotonic() < deadline, (
                root / "service.log"
            ).read_text()
            time.sleep(0.05)
        yield url
    finally:
        service.terminate()
        service.wait(10)


def test_lemoncore_in_a_container_starts_its_engine_through_the_hosts_socket(
    registry: Registry, images: dict[str, str]
) -> None:
    root = Path(tempfile.mkdtemp(prefix="lemon-inside-", dir="/tmp"))  # short socket paths
    share = root / "share"
    share.mkdir()
    (share / "lock.json").write_text(json.dumps(lock_for(registry, "llama", images["plain"])))
    port, name = free_port(), f"lemon-inside-{os.getpid()}"
    with podman_service(root) as service:
        # The host's root as the container's (an overlay: nothing it writes reaches the
        # host), so lemoncore, its Python and the podman client are there; the host's
        # network, so the test reaches its port. What it shares with the host's service
        # is the socket and /data.
        podman(
            "run",
            "-d",
            "--name",
            name,
            "--rootfs",  # a flag: the "image" argument below is a root directory
            "--network=host",
            "-v",
            f"{service.removeprefix('unix://')}:/run/podman/podman.sock",
            "-v",
            f"{share}:/data",
            "--env",
            "CONTAINER_HOST=unix:///run/podman/podman.sock",
            "--env",
            "LEMON_OCI_ENGINE=podman",
            "--env",
            f"LEMON_OCI_HOST_PATHS=/data={share},{VENV}={VENV}",
            "--env",
            "LEMON_CACHE_DIR=/data/cache",
            "--env",
            "LEMON_CONFIG_FILE=/data/config.toml",
            *(
                a
                for key in ("CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF")  # the test's
                for a in ("--env", f"{key}={os.environ[key]}")
            ),
            "/:O",
            sys.executable,
            str(BOXED_SERVER),
            "--port",
            str(port),
            "--lock",
            "/data/lock.json",
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/live", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, podman("logs", name, check=False)
                    time.sleep(0.2)
            registered = httpx.post(
                url + "/api/v1/pull",
                json={"model_name": "boxed-smol", "recipe": "boxed", "checkpoint": SMOLLM2},
                timeout=60,
            )
            assert registered.status_code == 200, registered.text
            chat = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=300)
            assert chat.status_code == 200, (chat.text, podman("logs", name, check=False))
            [loaded] = httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
            argv = loaded["launch_command"]
            engine = argv[argv.index("--name") + 1]
            # started by the host's service, beside lemoncore's container, with the
            # host's paths: the socket directory lemoncore made under /data is in `share`
            assert podman("inspect", "--format", "{{.State.Running}}", engine) == "true"
            volume = argv[argv.index("-v", argv.index("--name")) + 1]
            assert volume.startswith(f"{share}/cache/") and volume.endswith(":/run/lemon:rw,Z")
            mounts = podman("inspect", "--format", "{{range .Mounts}}{{.Source}} {{end}}", engine)
            assert f"{share}/cache/" in mounts and str(VENV) in mounts, mounts  # socket, model
        finally:
            podman("stop", "-t", "20", name, check=False)  # lemoncore drains, stops the engine
            logs = podman("logs", name, check=False)
            podman("rm", "-f", name, check=False)
        gone = podman("ps", "-a", "--filter", "label=org.lemoncore.model=boxed-smol", "-q")
        assert gone == "", logs[-3000:]
