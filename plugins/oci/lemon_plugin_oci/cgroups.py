"""What a container's cgroups say: the limits they enforce and the memory it used (v1
controllers or v2's unified hierarchy), read from ``/proc`` and ``/sys/fs/cgroup``.

A container in lemoncore's own cgroups (rootless podman on cgroup v1: "Resource limits
are not supported and ignored on cgroups V1 rootless systems", podman
``pkg/specgen/generate/validate.go``) has none of its own: its peak is unknown (``None``),
not lemoncore's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CGROUP_LIMITS = {
    "memory": ("memory.limit_in_bytes",),
    "cpu": ("cpu.cfs_quota_us",),
    "pids": ("pids.max",),
    "": ("memory.max", "cpu.max", "pids.max"),
}
CGROUP_PEAK = {"memory": ("memory.max_usage_in_bytes",), "": ("memory.peak",)}


def cgroup_limits(pid: int | None, root: Path = Path("/")) -> dict[str, str]:
    """Memory, CPU and process limits of ``pid``'s cgroups (v1 controllers or v2)."""
    return cgroup_files(pid, CGROUP_LIMITS, root)


def cgroup_peak_memory(pid: int | None, root: Path = Path("/")) -> int | None:
    """Peak memory use in bytes of ``pid``'s cgroup (the whole container), if readable
    and its own (not the cgroup this process is in)."""
    if pid and shares_our_cgroups(pid, root):
        return None
    found = cgroup_files(pid, CGROUP_PEAK, root)
    value = next(iter(found.values()), "")
    return int(value) if value.isdigit() else None


def cgroup_files(
    pid: int | None, names: Mapping[str, tuple[str, ...]], root: Path = Path("/")
) -> dict[str, str]:
    """The named files of ``pid``'s cgroups that can be read, by name: ``names`` maps a
    v1 controller (``""`` for v2's unified hierarchy) to file names."""
    found: dict[str, str] = {}
    try:
        lines = (root / f"proc/{pid}/cgroup").read_text().splitlines() if pid else []
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            base = root / "sys/fs/cgroup" / controller / path.lstrip("/")
            for name in names.get(controller, ()):
                try:
                    found[name] = (base / name).read_text().strip()
                except OSError:
                    pass
    return found


def shares_our_cgroups(pid: int, root: Path = Path("/")) -> bool:
    """Whether ``pid`` is in this process's cgroups (every line of ``/proc/PID/cgroup``
    the same); ``False`` when either cannot be read."""
    try:
        theirs = (root / f"proc/{pid}/cgroup").read_text()
        ours = (root / "proc/self/cgroup").read_text()
    except OSError:
        return False
    return theirs == ours
