"""Installing VTE and its ROCm runtime through the production paths, run end to end on
Linux with the stand-in ``vte-server``: the release zip verified against the lock pin and
launched with TheRock's runtime, a matching system ROCm (``HIP_PATH``) preferred, and the
shipped TheRock pin (TheRock's URL, no hash published) trusted once (``--trust-download``),
then verified."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import World, chat, shipped_therock, therock_tarball

from lemon_plugin_vte.vte_source import TARGET_FAMILY

# TheRock's stable index for releases before ROCm 10.0 (TheRock docs/development/
# s3_buckets.md, docs/packaging/legacy_multi_arch_releases.md at commit 1a70157f2)
THEROCK_STABLE = "https://repo.amd.com/rocm/tarball-multi-arch/"

pytestmark = pytest.mark.anyio


async def test_install_verifies_then_launches_with_therock(world: World) -> None:
    async with world.lemon() as client:
        info = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]
        assert info["backends"]["rocm"]["state"] == "installable"
        assert "validated on real hardware (RX 7600)" in info["backends"]["rocm"]["message"]
        assert info["backends"]["rocm"]["tier"] == "experimental"
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["total_tokens"] == (
            reply.json()["usage"]["prompt_tokens"] + reply.json()["usage"]["completion_tokens"]
        )
        health = (await client.get("/api/v1/health")).json()["all_models_loaded"][0]
        assert (health["device"], health["is_amd_gpu"], health["slot_policy"]) == (
            "gpu",
            True,
            "exclusive_gpu",
        )
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
    assert world.reports("device") == [
        {
            "index": 0,
            "name": "AMD Radeon RX 7600",
            "arch": "gfx1102",
            "dll": str(therock / "bin/amdhip64_7.dll"),  # the tarball's, found by HIP_PATH
        }
    ]


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


def test_the_shipped_therock_url_is_the_one_therock_publishes() -> None:
    """TheRock names a dist tarball ``therock-dist-{platform}-{family}-{version}.tar.gz``
    (``build_tools/build_tarballs.py``) and serves stable releases before 10.0 from
    ``repo.amd.com/rocm/tarball-multi-arch/`` (``docs/development/s3_buckets.md``:
    ``therock-release-tarball``; ``docs/packaging/legacy_multi_arch_releases.md``); VTE
    needs the gfx110X family. No checksum is published beside it, so none is pinned."""
    version, artifact = shipped_therock()
    name = f"therock-dist-windows-{TARGET_FAMILY}-all-{version}.tar.gz"
    assert artifact["url"].format(version=version) == THEROCK_STABLE + name
    assert artifact["sha256"] is None


async def test_a_clean_windows_host_installs_the_shipped_therock(world: World) -> None:
    """No HIP SDK, and the shipped TheRock pin (its version, URL path, ``sha256: null``;
    only its origin is this test's server, which serves a tarball laid out as TheRock
    builds it at TheRock's path for it): VTE's status names the trust-on-first-use
    command; after it the load finds the HIP runtime in the tarball, and a different file
    at the same URL is refused."""
    version, artifact = shipped_therock()
    name = f"therock-dist-windows-{TARGET_FAMILY}-all-{version}.tar.gz"
    world.serve_at(THEROCK_STABLE + name, therock_tarball())
    pinned = {**artifact, "url": world.url + urlsplit(artifact["url"]).path}
    async with world.lemon(therock=(version, pinned)) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]["backends"][
            "rocm"
        ]
        assert state["state"] == "action_required"
        assert "lemon backends install runtime:therock --trust-download" in state["action"]
        refused = await client.post("/v1/chat/completions", json=chat())
        assert refused.status_code == 503 and "--trust-download" in refused.text
        done = await client.post(
            "/api/v1/install", json={"backend": "runtime:therock", "trust_download": True}
        )
        assert done.status_code == 200, done.text
        [trusted] = done.json()["trusted"]
        assert (trusted["sha256"], trusted["size"]) == (
            hashlib.sha256(therock_tarball()).hexdigest(),
            len(therock_tarball()),
        )
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
    therock = world.root / "cache/bin/runtime/therock"
    assert world.reports("start")[-1]["env"]["HIP_PATH"] == str(therock)
    assert world.reports("device")[-1]["dll"] == str(therock / "bin/amdhip64_7.dll")
    # The publisher's file changes under the same URL: the pin holds.
    world.serve_at(THEROCK_STABLE + name, therock_tarball() + b"\0")
    async with world.lemon(therock=(version, pinned)) as client:
        await client.post("/api/v1/uninstall", json={"backend": "runtime:therock"})
        again = await client.post("/api/v1/install", json={"backend": "runtime:therock"})
        assert again.status_code == 503
        assert "does not match the pinned" in again.json()["error"]["message"]
