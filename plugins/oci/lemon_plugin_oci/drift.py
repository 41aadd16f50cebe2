"""What a running container may do, read from ``container inspect`` and its cgroups, how
that differs from what was launched, and what its engine did that it may not: each is a
drift, which relaunches the container."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio

from lemon_plugin_oci.cgroups import cgroup_limits
from lemon_plugin_oci.sockets import MAX_ENGINE_DIR_BYTES, MAX_ENGINE_DIR_ENTRIES, SocketDirs

# podman adds these to every container's environment
ENGINE_ENV = ("container=", "HOSTNAME=", "TERM=")


def launched_config(state: Mapping[str, Any], pid: int | None) -> dict[str, object]:
    """The parts of ``container inspect`` that say what a container may do, and the
    limits its cgroup enforces (podman 4.3's ``update`` changes the cgroup but neither
    ``inspect`` nor the OCI config; it reports ``IpcMode`` as ``shareable`` whatever
    ``--ipc`` was: the create command covers that)."""
    config, host = state.get("Config") or {}, state.get("HostConfig") or {}
    return {
        "cgroup limits": cgroup_limits(pid),
        "image": state.get("Image"),
        "create command": config.get("CreateCommand"),
        "user": config.get("User"),
        "env": sorted(e for e in config.get("Env") or [] if not e.startswith(ENGINE_ENV)),
        "labels": config.get("Labels") or {},
        "devices": sorted(json.dumps(d, sort_keys=True) for d in host.get("Devices") or []),
        "mounts": sorted(
            f"{m.get('Source')}:{m.get('Destination')}:{m.get('RW')}"
            for m in state.get("Mounts") or []
        ),
        "network": host.get("NetworkMode"),
        "privileged": host.get("Privileged"),
        "capabilities": (sorted(host.get("CapAdd") or []), sorted(host.get("CapDrop") or [])),
        "security options": sorted(host.get("SecurityOpt") or []),
        "ulimits": sorted(json.dumps(u, sort_keys=True) for u in host.get("Ulimits") or []),
        "read-only": host.get("ReadonlyRootfs"),
        "pids limit": host.get("PidsLimit"),
        "memory": host.get("Memory"),
        "cpus": (
            host.get("NanoCpus"),
            host.get("CpuQuota"),
            host.get("CpuPeriod"),
            host.get("CpuShares"),
            host.get("CpusetCpus"),
        ),
        "group add": sorted(host.get("GroupAdd") or []),
    }


def drift(launched: Mapping[str, object], now: Mapping[str, object]) -> list[str]:
    """What changed, one line per field (cgroup limits only where both were readable)."""
    keys = set(launched) | set(now)
    if not launched.get("cgroup limits") or not now.get("cgroup limits"):
        keys.discard("cgroup limits")
    return [
        f"{key}: {launched.get(key)!r} -> {now.get(key)!r}"
        for key in sorted(keys)
        if launched.get(key) != now.get(key)
    ]


async def misbehaviour(sockets: SocketDirs, tcp_port: int | None) -> list[str]:
    """What the engine did that it may not: fill its directory, lose its relay (the one to
    ``tcp_port``, for an engine that listens on TCP)."""
    found = []
    entries, size = await anyio.to_thread.run_sync(sockets.engine_usage)
    if entries > MAX_ENGINE_DIR_ENTRIES or size > MAX_ENGINE_DIR_BYTES:
        found.append(
            f"the engine wrote {entries} files, {size} bytes into its socket "
            f"directory (at most {MAX_ENGINE_DIR_ENTRIES}, {MAX_ENGINE_DIR_BYTES})"
        )
    if tcp_port is not None:
        try:
            with anyio.fail_after(2):
                await (await anyio.connect_unix(sockets.socket)).aclose()
        except (OSError, TimeoutError):
            found.append(f"the relay to the engine's port {tcp_port} is gone")
    return found
