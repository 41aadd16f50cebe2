"""The setup assistant: each failed prerequisite becomes a message and the exact fix."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from lemon_plugin_oci.engine import Engine, find_engine

CAP_SYS_RESOURCE = 24


@dataclass(frozen=True)
class Facts:
    engine: Engine | None
    engine_works: bool
    groups: frozenset[str]
    present_devices: frozenset[str]
    selinux_enforcing: bool
    selinux_devices_allowed: bool
    oci_runtime: str
    gpu_group_ids: tuple[int, ...] = ()  # the host's render and video GIDs
    memlock_grantable: bool = False  # a container may get an unlimited memlock limit
    kfd: str = "/dev/kfd"  # ROCm's compute device on the host
    userns_remap: bool = False  # a docker daemon remapping container uids
    kernel: str = ""  # platform.release() ("": unknown, not checked)

    @property
    def memlock_advice(self) -> str:
        return (
            ""
            if self.memlock_grantable
            else (
                "the host's hard memlock limit is not unlimited, so the engine runs with its "
                "weights unlocked; to lock them: echo '* hard memlock unlimited' | sudo tee "
                "/etc/security/limits.d/lemon-memlock.conf, then log in again (services: "
                "LimitMEMLOCK=infinity)"
            )
        )


@dataclass(frozen=True)
class Problem:
    message: str
    action: str


def check(facts: Facts, devices: frozenset[str]) -> Problem | None:
    """The first unmet prerequisite for running a container with ``devices``."""
    if facts.engine is None:
        return Problem(
            "no container tool: podman (preferred) or docker is needed",
            "sudo apt-get install -y podman   # Fedora: sudo dnf install -y podman",
        )
    if not facts.engine_works:
        if facts.engine.kind == "podman":
            return Problem(
                "podman is installed but does not answer",
                "systemctl --user enable --now podman.socket",
            )
        return Problem(
            "docker is installed but its daemon cannot be reached: it is not "
            "running, or you may not use its socket",
            "sudo systemctl enable --now docker; then either rootless docker "
            "(dockerd-rootless-setuptool.sh install; export DOCKER_HOST=unix://"
            "$XDG_RUNTIME_DIR/docker.sock) or sudo usermod -aG docker $USER "
            "(the docker group is equivalent to root)",
        )
    missing = sorted(d for d in devices if d not in facts.present_devices)
    if missing:
        return Problem(
            f"{', '.join(missing)} missing: the AMD GPU kernel driver (amdgpu, "
            "with KFD for ROCm) is not loaded",
            "install the amdgpu driver for your kernel, then: sudo modprobe amdgpu",
        )
    if facts.userns_remap:
        return Problem(
            "the docker daemon remaps user namespaces (userns-remap), so the "
            "engine's uid on the host is not the one lemoncore gives its socket "
            "directory",
            "use podman, or a docker daemon without userns-remap "
            "(rootless docker isolates the same way)",
        )
    if devices and not facts.engine.rootless and not facts.gpu_group_ids:
        return Problem(
            "the host has no render or video group, so a container cannot be "
            "given the GPU without root",
            "install the amdgpu driver's udev rules (they create the render group), then reboot",
        )
    if devices and facts.engine.rootless and facts.engine.kind == "podman":
        lacking = sorted({"render", "video"} - facts.groups)
        if lacking:
            return Problem(
                f"you are not in the {' and '.join(lacking)} group(s), so the GPU "
                "is not yours to use",
                "sudo usermod -aG render,video $USER  # then log out and in again",
            )
        if facts.oci_runtime != "crun":
            return Problem(
                f"--group-add keep-groups needs crun; podman uses "
                f"{facts.oci_runtime or 'another runtime'}",
                'sudo apt-get install -y crun && set runtime = "crun" under '
                "[engine] in ~/.config/containers/containers.conf",
            )
    if "/dev/kfd" in devices and facts.selinux_enforcing and not facts.selinux_devices_allowed:
        return Problem(
            "SELinux blocks containers from using devices",
            "sudo setsebool -P container_use_devices true",
        )
    return None


_CACHE: tuple[float, Facts] | None = None


def gather() -> Facts:
    """Read the facts (cached for 30 s: ``podman info`` is slow)."""
    global _CACHE
    if _CACHE is not None and time.monotonic() - _CACHE[0] < 30:
        return _CACHE[1]
    engine = find_engine()
    works, runtime, remap = False, "", False
    if engine is not None:
        fmt = (
            "{{.Host.OCIRuntime.Name}} {{.Host.Security.Rootless}}"
            if engine.kind == "podman"
            else "{{.DefaultRuntime}} {{.SecurityOptions}}"
        )
        try:
            out = subprocess.run(
                [*engine.command, "info", "--format", fmt],
                capture_output=True,
                text=True,
                timeout=20,
            )
            works, runtime = out.returncode == 0, out.stdout.strip().split(" ")[0]
            if engine.kind == "docker" and "rootless" in out.stdout:
                engine = replace(engine, rootless=True)
            if engine.kind == "podman" and engine.remote:  # the service's, not this uid's
                engine = replace(engine, rootless=out.stdout.strip().endswith(" true"))
            remap = engine.kind == "docker" and "name=userns" in out.stdout
        except (OSError, subprocess.SubprocessError):
            pass
    import grp  # POSIX only: imported here, so the plugin loads (and says unsupported) on Windows

    groups = frozenset(grp.getgrgid(g).gr_name for g in os.getgroups())
    devices = frozenset(d for d in ("/dev/kfd", "/dev/dri") if Path(d).exists())
    enforcing = (
        Path("/sys/fs/selinux/enforce").exists()
        and Path("/sys/fs/selinux/enforce").read_text().strip() == "1"
    )
    allowed = True
    if enforcing and (getsebool := shutil.which("getsebool")):
        out = subprocess.run(
            [getsebool, "container_use_devices"], capture_output=True, text=True, check=False
        )
        allowed = out.stdout.strip().endswith("on")
    facts = Facts(
        engine,
        works,
        groups,
        devices,
        enforcing,
        allowed,
        runtime,
        gpu_group_ids(),
        memlock_grantable(engine),
        userns_remap=remap,
        kernel=platform.release(),
    )
    _CACHE = (time.monotonic(), facts)
    return facts


def gpu_group_ids() -> tuple[int, ...]:
    import grp

    ids = []
    for name in ("render", "video"):
        try:
            ids.append(grp.getgrnam(name).gr_gid)
        except KeyError:
            pass
    return tuple(ids)


def memlock_grantable(engine: Engine | None) -> bool:
    """Whether a container may get ``memlock=-1:-1``. The OCI runtime sets it with the
    tool's privileges: a rootless tool cannot exceed the user's hard limit (rootless podman
    clamps it, silently); a rootful one (podman as root, the docker daemon) can when
    CAP_SYS_RESOURCE is in the bounding set it runs under, which this process shares."""
    import resource  # POSIX only

    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] == resource.RLIM_INFINITY:
        return True
    if engine is None or engine.rootless:
        return False
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False
