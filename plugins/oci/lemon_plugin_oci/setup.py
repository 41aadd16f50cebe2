"""The setup assistant: each failed prerequisite becomes a message and the exact fix."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lemon_plugin_oci.engine import Engine, find_engine


@dataclass(frozen=True)
class Facts:
    engine: Engine | None
    engine_works: bool
    rootless: bool
    groups: frozenset[str]
    present_devices: frozenset[str]
    selinux_enforcing: bool
    selinux_devices_allowed: bool
    oci_runtime: str


@dataclass(frozen=True)
class Problem:
    message: str
    action: str


def check(facts: Facts, devices: frozenset[str]) -> Problem | None:
    """The first unmet prerequisite for running a container with ``devices``."""
    if facts.engine is None:
        return Problem("no container tool: podman (preferred) or docker is needed",
                       "sudo apt-get install -y podman   # Fedora: sudo dnf install -y podman")
    if not facts.engine_works:
        return Problem(f"{facts.engine.kind} is installed but does not answer",
                       "systemctl --user enable --now podman.socket" if
                       facts.engine.kind == "podman" else "sudo systemctl enable --now docker")
    missing = sorted(d for d in devices if d not in facts.present_devices)
    if missing:
        return Problem(f"{', '.join(missing)} missing: the AMD GPU kernel driver (amdgpu, "
                       "with KFD for ROCm) is not loaded",
                       "install the amdgpu driver for your kernel, then: sudo modprobe amdgpu")
    if devices and facts.rootless:
        lacking = sorted({"render", "video"} - facts.groups)
        if lacking:
            return Problem(f"you are not in the {' and '.join(lacking)} group(s), so the GPU "
                           "is not yours to use", "sudo usermod -aG render,video $USER  "
                           "# then log out and in again")
        if facts.engine.kind == "podman" and facts.oci_runtime != "crun":
            return Problem(f"--group-add keep-groups needs crun; podman uses "
                           f"{facts.oci_runtime or 'another runtime'}",
                           "sudo apt-get install -y crun && set runtime = \"crun\" under "
                           "[engine] in ~/.config/containers/containers.conf")
    if "/dev/kfd" in devices and facts.selinux_enforcing and not facts.selinux_devices_allowed:
        return Problem("SELinux blocks containers from using devices",
                       "sudo setsebool -P container_use_devices true")
    return None


_CACHE: tuple[float, Facts] | None = None


def gather() -> Facts:
    """Read the facts (cached for 30 s: ``podman info`` is slow)."""
    global _CACHE
    if _CACHE is not None and time.monotonic() - _CACHE[0] < 30:
        return _CACHE[1]
    engine = find_engine()
    works, runtime = False, ""
    if engine is not None:
        fmt = "{{.Host.OCIRuntime.Name}}" if engine.kind == "podman" else "{{.DefaultRuntime}}"
        try:
            out = subprocess.run([engine.exe, "info", "--format", fmt], capture_output=True,
                                 text=True, timeout=20)
            works, runtime = out.returncode == 0, out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    groups = frozenset(grp.getgrgid(g).gr_name for g in os.getgroups())
    devices = frozenset(d for d in ("/dev/kfd", "/dev/dri") if Path(d).exists())
    enforcing = Path("/sys/fs/selinux/enforce").exists() and \
        Path("/sys/fs/selinux/enforce").read_text().strip() == "1"
    allowed = True
    if enforcing and (getsebool := shutil.which("getsebool")):
        out = subprocess.run([getsebool, "container_use_devices"], capture_output=True,
                             text=True, check=False)
        allowed = out.stdout.strip().endswith("on")
    facts = Facts(engine, works, os.geteuid() != 0, groups, devices, enforcing, allowed, runtime)
    _CACHE = (time.monotonic(), facts)
    return facts
