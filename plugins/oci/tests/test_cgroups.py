"""A container's peak memory from its own cgroup; none when it is in lemoncore's (rootless
podman on cgroup v1 puts it there): a fake /proc and /sys/fs/cgroup."""

from __future__ import annotations

from pathlib import Path

from lemon_plugin_oci.cgroups import cgroup_peak_memory


def _tree(root: Path, engine_cgroup: str) -> None:
    for pid, path in (("self", "/user.slice/lemon"), ("42", engine_cgroup)):
        (root / "proc" / pid).mkdir(parents=True)
        (root / "proc" / pid / "cgroup").write_text(f"4:memory:{path}\n0::{path}\n")
    for path, peak in (("/user.slice/lemon", "1648222208"), ("/libpod-abc", "187928576")):
        group = root / "sys/fs/cgroup/memory" / path.lstrip("/")
        group.mkdir(parents=True)
        (group / "memory.max_usage_in_bytes").write_text(peak + "\n")


def test_a_container_s_own_cgroup_gives_its_peak(tmp_path: Path) -> None:
    _tree(tmp_path, "/libpod-abc")
    assert cgroup_peak_memory(42, tmp_path) == 187928576


def test_a_container_in_lemoncores_cgroup_has_no_peak_of_its_own(tmp_path: Path) -> None:
    _tree(tmp_path, "/user.slice/lemon")  # rootless podman on cgroup v1
    assert cgroup_peak_memory(42, tmp_path) is None  # not lemoncore's 1.6 GB
