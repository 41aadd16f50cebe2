"""Facts about the machine lemoncore runs on, as plain data, and their detection."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lemoncore.gpus import amd_family, is_integrated, vendor
from lemoncore.recipes import DeviceKind, SupportRow

_PCI_VENDORS = {"0x1002": DeviceKind.AMD_GPU, "0x10de": DeviceKind.NVIDIA_GPU,
                "0x8086": DeviceKind.INTEL_GPU}


@dataclass(frozen=True)
class HostDevice:
    """A device; ``index`` counts devices of the same kind in the runtime's order (for AMD
    GPUs: the HIP device index)."""

    kind: DeviceKind
    name: str
    family: str = ""
    index: int = 0
    integrated: bool = False


@dataclass(frozen=True)
class HostInfo:
    """The operating system (``linux``/``windows``/``darwin``) and the devices present."""

    os: str
    devices: tuple[HostDevice, ...] = field(default_factory=tuple)

    def has(self, kind: DeviceKind, families: frozenset[str] = frozenset()) -> bool:
        return any(
            d.kind is kind and (not families or d.family in families) for d in self.devices
        )

    def supports(self, row: SupportRow) -> bool:
        return self.os in row.os and any(self.has(k, f) for k, f in row.devices.items())


def current_os() -> str:
    return {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")


def detect_host(sysfs: Path = Path("/sys")) -> HostInfo:
    """Detect the CPU and GPUs: PCI devices and KFD gfx targets on Linux, the video
    controllers' names on Windows."""
    devices = [HostDevice(DeviceKind.CPU, _cpu_name())]
    if current_os() == "linux":
        devices += _linux_gpus(sysfs)
    elif current_os() == "windows":
        devices += gpus_from_names(_windows_gpu_names())
    return HostInfo(os=current_os(), devices=tuple(devices))


def gpus_from_names(names: list[str]) -> list[HostDevice]:
    """GPUs from adapter names in the OS's order: vendor, AMD family, iGPU or not."""
    gpus: list[HostDevice] = []
    for name in names:
        kind = vendor(name)
        if kind is None:
            continue
        index = sum(1 for g in gpus if g.kind is kind)
        family = amd_family(name) if kind is DeviceKind.AMD_GPU else ""
        gpus.append(HostDevice(kind, name, family, index, is_integrated(name)))
    return gpus


def _windows_gpu_names() -> list[str]:
    try:
        powershell = Path(os.environ.get("SystemRoot", "C:/Windows"),
                          "System32/WindowsPowerShell/v1.0/powershell.exe")
        out = subprocess.run(
            [str(powershell), "-NoProfile", "-Command",
             "(Get-CimInstance Win32_VideoController).Name"],
            capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _linux_gpus(sysfs: Path) -> list[HostDevice]:
    families = _kfd_families(sysfs)
    gpus: list[HostDevice] = []
    for card in sorted((sysfs / "class/drm").glob("card[0-9]*")):
        if "-" in card.name:  # connectors such as card0-HDMI-A-1
            continue
        try:
            vendor = (card / "device/vendor").read_text().strip()
            pci_class = (card / "device/class").read_text().strip()
        except OSError:
            continue
        kind = _PCI_VENDORS.get(vendor)
        if kind is None or not pci_class.startswith("0x03"):
            continue
        same_kind = sum(1 for g in gpus if g.kind is kind)
        family = families[same_kind] if kind is DeviceKind.AMD_GPU and same_kind < len(
            families) else ""
        gpus.append(HostDevice(kind, f"{kind.value} {card.name}", family, same_kind))
    return gpus


def _kfd_families(sysfs: Path) -> list[str]:
    """AMD GPU gfx targets in KFD node order, e.g. ``gfx1102`` for 110002."""
    result = []
    for node in sorted((sysfs / "class/kfd/kfd/topology/nodes").glob("*")):
        try:
            props = dict(
                line.split() for line in (node / "properties").read_text().splitlines()
                if len(line.split()) == 2
            )
        except OSError:
            continue
        version = int(props.get("gfx_target_version", "0"))
        if version:
            major, minor, step = version // 10000, version // 100 % 100, version % 100
            result.append(f"gfx{major}{minor:x}{step:x}")
    return result
