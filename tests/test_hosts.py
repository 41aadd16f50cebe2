"""Linux GPU detection from sysfs: gfx target, render node and ROCm UUID per AMD GPU."""

from __future__ import annotations

from pathlib import Path

from lemoncore.hosts import _linux_gpus
from lemoncore.recipes import DeviceKind


def fake_sysfs(root: Path) -> Path:
    nodes = root / "class/kfd/kfd/topology/nodes"
    # node 0 is the CPU; nodes 1, 2 and 10 are GPUs (10 sorts before 2 as text)
    for node, props in {
        "0": "gfx_target_version 0\n",
        "1": "gfx_target_version 110000\ndrm_render_minor 128\nunique_id 170\n",
        "2": "gfx_target_version 110501\ndrm_render_minor 129\nunique_id 1958007344816222594\n",
        "10": "gfx_target_version 110002\ndrm_render_minor 130\nunique_id 0\n",
    }.items():
        (nodes / node).mkdir(parents=True)
        (nodes / node / "properties").write_text(props)
    for card in ("card0", "card1", "card2"):
        device = root / "class/drm" / card / "device"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x1002\n")
        (device / "class").write_text("0x030000\n")
    return root


def test_amd_gpus_get_their_render_node_and_uuid_in_rocm_order(tmp_path: Path) -> None:
    gpus = _linux_gpus(fake_sysfs(tmp_path))
    assert [(g.kind, g.family, g.index, g.render_node, g.uuid) for g in gpus] == [
        (DeviceKind.AMD_GPU, "gfx1100", 0, "/dev/dri/renderD128", "GPU-00000000000000aa"),
        (DeviceKind.AMD_GPU, "gfx1151", 1, "/dev/dri/renderD129", "GPU-1b2c3d4e5f607182"),
        (DeviceKind.AMD_GPU, "gfx1102", 2, "/dev/dri/renderD130", ""),  # no unique_id
    ]
