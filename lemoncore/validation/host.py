"""Facts about this machine for the report: OS and kernel, GPU drivers, the devices
lemoncore detects (AMD GPUs with their gfx family), and whether a server describes this
machine or another one (a simulated host is a stand-in)."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lemoncore.gpus import amd_family
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.validation.facts import DeviceFacts, HostFacts


def describe(host: HostInfo, sysfs: Path = Path("/sys"), proc: Path = Path("/proc")) -> HostFacts:
    """OS, kernel, drivers and devices of ``host`` (this machine, detected)."""
    return {
        "os": host.os,
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "drivers": drivers(sysfs, proc),
        "devices": [device(d) for d in host.devices],
    }


def device(d: HostDevice) -> DeviceFacts:
    found: DeviceFacts = {"kind": d.kind.value, "name": d.name, "index": d.index}
    family = d.family or amd_family(d.name)
    if family:
        found["family"] = family
    if d.integrated:
        found["integrated"] = True
    return found


def drivers(sysfs: Path = Path("/sys"), proc: Path = Path("/proc")) -> dict[str, str]:
    """GPU driver versions that can be read without privileges: amdgpu's module version,
    NVIDIA's from ``/proc`` or ``nvidia-smi``; empty where none is found."""
    found: dict[str, str] = {}
    amdgpu = sysfs / "module/amdgpu/version"
    if amdgpu.is_file():
        found["amdgpu"] = amdgpu.read_text().strip()
    elif (sysfs / "module/amdgpu").is_dir():
        found["amdgpu"] = f"in-kernel ({platform.release()})"
    nvidia = proc / "driver/nvidia/version"
    if nvidia.is_file():
        found["nvidia"] = nvidia.read_text().splitlines()[0].strip()
    elif smi := _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]):
        found["nvidia"] = smi.splitlines()[0]
    return found


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def simulated(here: HostInfo, served: Mapping[str, Any]) -> str:
    """Why the server's host (``/api/v1/system-info``'s ``os`` and ``devices``) is not
    this machine, or "" when it is: a server given another host is a stand-in."""
    gpus = sorted(d.name for d in here.devices if d.kind.value != "cpu")
    theirs = sorted(
        str(d.get("name"))
        for kind, devices in (served.get("devices") or {}).items()
        if kind != "cpu"
        for d in devices
    )
    if served.get("os") == here.os and theirs == gpus:
        return ""
    return (
        f"the server describes another machine ({served.get('os')}: "
        f"{', '.join(theirs) or 'no GPU'}) than this one ({here.os}: "
        f"{', '.join(gpus) or 'no GPU'})"
    )
