"""Containers changed or left behind, with real containers under podman (and docker where
a test takes ``tool``): a killed container, one recreated by hand or updated from outside
(drift: the model is relaunched with its own arguments), the boot sweep of this
installation's leftovers, and a real ``lemon serve`` (``boxed.py``) stopped by SIGTERM or
killed by SIGKILL, whose containers stop with it or are swept at its next start."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from lemoncore.plugin import running_server

from lemon_plugin_oci.server import OWNER_LABEL

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import lock_url
from containers_support import (
    BOXED_SERVER,
    CHAT,
    SMOLLM2,
    Registry,
    Tool,
    chatted,
    lemon,
    loaded,
    lock_for,
    podman,
    require_container_tools,
)

require_container_tools()
pytestmark = pytest.mark.anyio


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
    theirs = podman("create", "--label", "org.lemoncore.owner=someone-else", image, "llama-server")
    try:
        async with lemon(tmp_path, lock):
            pass
        assert podman("ps", "-a", "--filter", f"id={ours}", "--format", "{{.ID}}") == ""
        assert podman("ps", "-a", "--filter", f"id={theirs}", "--format", "{{.ID}}")
    finally:
        podman("rm", "-f", ours, theirs, check=False)


def containers_of(owner: str) -> list[str]:
    return podman(
        "ps", "-a", "--filter", f"label={OWNER_LABEL}={owner}", "--format", "{{.ID}}"
    ).split()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_containers_stop_with_the_server_or_are_swept_at_its_next_start(
    registry: Registry, images: dict[str, str], tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM stops the container with the server. SIGKILL leaves it running (podman's
    conmon, not the server, is its parent); the next start removes it before serving."""
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock_for(registry, "llama", images["plain"])))
    served = functools.partial(
        running_server,
        tmp_path / "cache",
        command=(str(BOXED_SERVER),),
        args=("--lock", str(lock_file)),
    )
    with served() as server:
        for call in (
            ("/api/v1/install", {"backend": "boxed:llama"}),
            (
                "/api/v1/pull",
                {"model_name": "boxed-smol", "recipe": "boxed", "checkpoint": SMOLLM2},
            ),
            ("/v1/chat/completions", CHAT),
        ):
            httpx.post(server.url + call[0], json=call[1], timeout=120).raise_for_status()
        argv = httpx.get(server.api + "/health").json()["all_models_loaded"][0]["launch_command"]
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
        assert (
            httpx.post(server.api + "/chat/completions", json=CHAT, timeout=120).status_code == 200
        )
    print(
        f"SIGKILL to the server: its container outlived it; the next start swept it "
        f"before serving (start to ready {swept:.2f} s)"
    )


async def test_a_container_changed_from_outside_is_relaunched_with_the_right_arguments(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        argv, name, first = await chatted(client, tool)

        async def current() -> str:
            found = await anyio.run_process(
                [tool.kind, "inspect", "--format", "{{.Id}}", name], check=False
            )
            return found.stdout.decode().strip()

        with capture_logs() as logs:
            await anyio.run_process(
                [tool.kind, "update", "--memory", "256m", "--memory-swap", "512m", name]
            )
            with anyio.fail_after(30):  # the event loop keeps running while it is noticed
                while await current() in {"", first}:
                    await anyio.sleep(0.1)
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert (await loaded(client))["launch_command"] == argv
        seen = [e for e in logs if e["event"] == "container drift; relaunching"]
        assert seen and any("268435456" in d for d in seen[0]["differences"]), seen
        assert any(e["event"] == "container relaunched after drift" for e in logs)
