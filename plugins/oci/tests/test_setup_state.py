"""The setup assistant's answers reach users: backend state, message and fix."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, Settings, create_app

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.setup import Facts

STRIX_HALO = HostInfo(
    "linux",
    (
        HostDevice(DeviceKind.CPU, "Ryzen AI Max+ 395"),
        HostDevice(DeviceKind.AMD_GPU, "Radeon 8060S", "gfx1151", integrated=True),
    ),
)
NO_PODMAN = Facts(
    engine=None,
    engine_works=False,
    groups=frozenset(),
    present_devices=frozenset(),
    selinux_enforcing=False,
    selinux_devices_allowed=True,
    oci_runtime="",
)


@pytest.mark.anyio
async def test_missing_podman_is_action_required_with_the_install_command(
    tmp_path: Path, anyio_backend: str
) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow="llamacpp"),
        plugins={"oci": OciPlugin(facts=lambda: NO_PODMAN)},
        host=STRIX_HALO,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://localhost"
    ) as client:
        info = (await client.get("/api/v1/system-info")).json()["recipes"]
    for recipe, backend in (("halogen", "rocm"), ("llamacpp", "nathanw"), ("ds4", "rocm")):
        state = info[recipe]["backends"][backend]
        assert state["state"] == "action_required", (recipe, state)
        assert "no container tool" in state["message"]
        assert "apt-get install -y podman" in state["action"]
        assert (state["tier"], state["format"]) == ("experimental", "container")


@pytest.mark.anyio
async def test_an_unpinned_image_points_at_lock_refresh_not_at_an_unverified_install(
    tmp_path: Path, anyio_backend: str
) -> None:
    from dataclasses import replace

    from lemon_plugin_oci.engine import Engine

    ready = replace(
        NO_PODMAN,
        engine=Engine("podman", "/usr/bin/podman"),
        engine_works=True,
        groups=frozenset({"render", "video"}),
        oci_runtime="crun",
        present_devices=frozenset({"/dev/dri", "/dev/kfd"}),
        gpu_group_ids=(993,),
    )
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow="llamacpp"),
        plugins={"oci": OciPlugin(facts=lambda: ready)},
        host=STRIX_HALO,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://localhost"
    ) as client:
        info = (await client.get("/api/v1/system-info")).json()["recipes"]
    state = info["rocmfpx"]["backends"]["rocm"]  # the one pin without a public digest
    assert state["state"] == "action_required", state
    assert "no digest is pinned" in state["message"]
    assert "lemon lock refresh rocmfpx:rocm --yes" in state["action"]
    assert "UNVERIFIED" not in state["action"] and "trust" not in state["action"]
    for recipe in ("halogen", "ds4"):
        assert info[recipe]["backends"]["rocm"]["state"] == "installable"
