"""The host-side checks of the OCI plugin, as pure decisions and on real files and
sockets: memory messages, container drift, adopting the engine's socket (only the
engine's own, never a symlink, file or another user's socket), the setup assistant's fix
for each missing piece, and the curated models' files against their engines' contracts."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lemoncore.plugin import LaunchRefused

from lemon_plugin_oci.contracts import CONTRACTS, HALOGEN
from lemon_plugin_oci.drift import drift
from lemon_plugin_oci.launching import model_files
from lemon_plugin_oci.memory import GIB, Memory, problem
from lemon_plugin_oci.setup import check
from lemon_plugin_oci.sockets import SocketDirs

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from contract_support import DOCKER, FACTS, PODMAN


def test_memory_messages_give_gib_and_the_setting() -> None:
    assert problem(0, 16, Memory(available=64 * GIB), "") == ""
    # Strix Halo, 512 MiB carve-out: Halogen's RAM and GPU parts both come from RAM
    short = problem(
        68, 35, Memory(available=96 * GIB, gtt=90 * GIB, vram=GIB // 2), HALOGEN.memory_hint
    )
    assert "needs about 103 GiB (68 in RAM, 35 on the GPU)" in short
    assert "96.0 GiB of RAM" in short and "kv_pool_positions = 262144" in short
    # a 96 GiB carve-out holds the GPU part; RAM must still hold the pinned weights
    assert problem(68, 35, Memory(available=28 * GIB, vram=96 * GIB), "") != ""
    assert problem(68, 35, Memory(available=70 * GIB, vram=96 * GIB), "") == ""
    # GTT too small for the GPU part: say so, and how to raise it
    gtt = problem(0, 35, Memory(available=120 * GIB, gtt=30 * GIB, vram=GIB // 2), "")
    assert "amdgpu.gttsize" in gtt
    assert problem(0, 0, Memory(available=0), "") == ""


def test_drift_lists_each_difference() -> None:
    before = {"memory": 0, "devices": ["a"], "image": "x", "cgroup limits": {"pids.max": "9"}}
    assert drift(before, dict(before)) == []
    assert drift(before, {**before, "memory": 536870912}) == ["memory: 0 -> 536870912"]
    assert drift(before, {**before, "cgroup limits": {"pids.max": "8"}}) == [
        "cgroup limits: {'pids.max': '9'} -> {'pids.max': '8'}"
    ]
    assert drift(before, {**before, "cgroup limits": {}}) == []  # unreadable: not compared


def test_a_socket_is_adopted_only_if_it_is_the_engine_s_own(tmp_path: Path) -> None:
    dirs = SocketDirs(tmp_path / "run", None)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(dirs.engine / "engine.sock"))
    listener.listen()
    dirs.adopt()
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(dirs.socket))  # the moved socket still reaches the listener
    client.close()
    listener.close()
    dirs.reset()
    other = tmp_path / "other.sock"
    elsewhere = socket.socket(socket.AF_UNIX)
    elsewhere.bind(str(other))
    (dirs.engine / "engine.sock").symlink_to(other)
    with pytest.raises(LaunchRefused, match="a symlink"):
        dirs.adopt()
    (dirs.engine / "engine.sock").write_text("x")
    with pytest.raises(LaunchRefused, match="not a socket"):
        dirs.adopt()
    (dirs.engine / "engine.sock").mkdir()
    with pytest.raises(LaunchRefused, match="a directory"):
        dirs.adopt()
    assert not dirs.socket.exists() and other.exists()
    dirs.owner = os.geteuid() + 1  # a socket, but not the engine's
    stranger = socket.socket(socket.AF_UNIX)
    stranger.bind(str(dirs.engine / "engine.sock"))
    with pytest.raises(LaunchRefused, match=f"a socket of uid {os.geteuid()}"):
        dirs.adopt()
    stranger.close()
    elsewhere.close()
    dirs.remove()


GPU = frozenset({"/dev/dri", "/dev/kfd"})


@pytest.mark.parametrize(
    ("change", "message", "action"),
    [
        ({"engine": None}, "no container tool", "apt-get install -y podman"),
        ({"engine_works": False}, "does not answer", "podman.socket"),
        (
            {"engine": DOCKER, "engine_works": False},
            "daemon cannot be reached",
            "usermod -aG docker",
        ),
        ({"present_devices": frozenset({"/dev/dri"})}, "/dev/kfd missing", "modprobe amdgpu"),
        ({"engine": DOCKER, "userns_remap": True}, "userns-remap", "use podman"),
        ({"gpu_group_ids": ()}, "no render or video group", "udev"),
        (
            {"engine": replace(PODMAN, rootless=True), "groups": frozenset({"video"})},
            "render",
            "usermod -aG render,video",
        ),
        (
            {"engine": replace(PODMAN, rootless=True), "oci_runtime": "runc"},
            "keep-groups needs crun",
            "apt-get install -y crun",
        ),
        (
            {"selinux_enforcing": True, "selinux_devices_allowed": False},
            "SELinux",
            "setsebool -P container_use_devices true",
        ),
    ],
)
def test_setup_assistant_names_the_fix(
    change: dict[str, object], message: str, action: str
) -> None:
    problem_ = check(replace(FACTS, **change), GPU)  # type: ignore[arg-type]
    assert problem_ is not None
    assert message in problem_.message and action in problem_.action
    assert check(FACTS, GPU) is None


def test_each_curated_model_brings_every_file_its_engine_reads(tmp_path: Path) -> None:
    """A curated model is one catalogue entry with all its files: laid out as a pull
    leaves them (one snapshot folder), its contract finds each file it mounts."""
    from lemoncore.plugin import Checkpoint

    from lemon_plugin_oci import _curated_models

    curated = _curated_models()
    assert {m.recipe for m in curated} == {"ds4", "rocmfpx", "halogen"}
    for model in curated:
        snapshot = tmp_path / model.name
        name = Checkpoint.parse(model.checkpoint).filename
        for file in (name, *model.files):
            (snapshot / file).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / file).write_text("x")
        assert set(model.sha256) <= {name, *model.files}
        contract = CONTRACTS[model.recipe, "rocm"]
        found = model_files(
            contract.files, snapshot / name, name, snapshot, (tmp_path.resolve(),), owned=True
        )
        assert len(found.mounts) == 1 + len(model.files), model.name
