"""Lemonade's native DS4, replaced by the ds4:rocm container: found where Lemonade put it,
pointed at, and removed only with the user's word."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, Settings, create_app

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.migration import native_ds4


def lemonade_tree(cache: Path) -> Path:
    """What Lemonade's ds4-backend branch leaves: <cache>/bin/ds4/rocm/ with version.txt
    and the extracted release (ds4-server found by a recursive search)."""
    install = cache / "bin" / "ds4" / "rocm"
    (install / "ds4-b0001-linux-rocm-gfx1151-x64").mkdir(parents=True)
    (install / "version.txt").write_text("b0001\n")
    (install / "ds4-b0001-linux-rocm-gfx1151-x64" / "ds4-server").write_text("#!binary")
    (cache / "bin" / "llamacpp").mkdir(parents=True)  # another backend: not ours to touch
    return install


def test_found_in_each_place_lemonade_resolves_its_cache(tmp_path: Path) -> None:
    home, system = tmp_path / "home", tmp_path / "var-cache-lemonade"
    assert native_ds4({}, home, system) is None
    for env, cache in (
        ({"LEMONADE_CACHE_DIR": str(tmp_path / "a")}, tmp_path / "a"),
        ({}, system),  # lemond.service's CACHE_DIRECTORY
        ({"XDG_CACHE_HOME": str(tmp_path / "c")}, tmp_path / "c/lemonade"),
        ({}, home / ".cache/lemonade"),
    ):
        install = lemonade_tree(cache)
        found = native_ds4(env, home, system)
        assert found is not None and found.paths == (install,), env
        assert "b0001" in found.message and "Hugging Face cache are kept" in found.message
        shutil.rmtree(install)


def lemon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LEMON_CACHE_DIR": str(tmp_path / "cache"),
        "LEMONADE_CACHE_DIR": str(tmp_path / "lemonade"),
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("lemon")), "backends", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_lemon_backends_migrate_lists_and_removes_only_when_told(tmp_path: Path) -> None:
    install = lemonade_tree(tmp_path / "lemonade")
    listed = lemon(tmp_path, "migrate", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)[0]["paths"] == [str(install)]
    refused = lemon(tmp_path, "migrate", "ds4")  # not a terminal, no --yes
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert install.exists()
    done = lemon(tmp_path, "migrate", "ds4", "--yes")
    assert done.returncode == 0, done.stderr
    assert not install.exists() and (tmp_path / "lemonade/bin/llamacpp").exists()
    assert "nothing to migrate" in lemon(tmp_path, "migrate").stdout


@pytest.mark.anyio
async def test_the_ds4_backend_points_at_the_migration(tmp_path: Path, anyio_backend: str) -> None:
    install = lemonade_tree(tmp_path / "lemonade")
    plugin = OciPlugin(
        find_native_ds4=lambda: native_ds4(
            {"LEMONADE_CACHE_DIR": str(tmp_path / "lemonade")}, tmp_path
        )
    )
    host = HostInfo("linux", (HostDevice(DeviceKind.AMD_GPU, "Radeon 8060S", "gfx1151"),))
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow="llamacpp"),
        plugins={"oci": plugin},
        host=host,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://localhost"
    ) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["ds4"]["backends"][
            "rocm"
        ]
    assert state["state"] == "action_required"
    assert "Lemonade's native DS4 (b0001)" in state["message"]
    assert state["action"] == f"lemon backends migrate ds4 --yes (removes {install})"
