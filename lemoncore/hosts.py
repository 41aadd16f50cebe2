"""Facts about the machine lemoncore runs on, as plain data, and their detection."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from lemoncore.cpus import cpu_features
from lemoncore.gpus import amd_family, is_integrated, vendor
from lemoncore.recipes import DeviceKind, SupportRow

_PCI_VENDORS = {
    "0x1002": DeviceKind.AMD_GPU,
    "0x10de": DeviceKind.NVIDIA_GPU,
    "0x8086": DeviceKind.INTEL_GPU,
}


@dataclass(frozen=True)
class HostDevice:
    """A device; ``index`` counts devices of the same kind in the runtime's order (for AMD
    GPUs: the HIP device index). On Linux an AMD GPU also has its DRM ``render_node``
    (``/dev/dri/renderD128``) and ``uuid`` (ROCm's ``GPU-<16 hex>`` form of the KFD
    ``unique_id``, "" when the driver reports none), which name it across processes and
    containers where an index would not."""

    kind: DeviceKind
    name: str
    family: str = ""
    index: int = 0
    integrated: bool = False
    render_node: str = ""
    uuid: str = ""


@dataclass(frozen=True)
class HostInfo:
    """The operating system (``linux``/``windows``/``darwin``), the devices present and
    the CPU's instruction-set extensions (:func:`lemoncore.cpus.cpu_features`; ``None``:
    unknown, so nothing is ruled out on their account)."""

    os: str
    devices: tuple[HostDevice, ...] = field(default_factory=tuple)
    cpu_features: frozenset[str] | None = None

    def has(self, kind: DeviceKind, families: frozenset[str] = frozenset()) -> bool:
        return any(d.kind is kind and (not families or d.family in families) for d in self.devices)

    def supports(self, row: SupportRow) -> bool:
        return self.os in row.os and any(self.has(k, f) for k, f in row.devices.items())


def current_os() -> str:
    """This machine's OS as support rows name it: ``linux``, ``darwin`` or ``windows``."""
    return {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")


def detect_host(sysfs: Path = Path("/sys")) -> HostInfo:
    """Detect the CPU (its name and instruction-set extensions) and GPUs: PCI devices and
    KFD gfx targets on Linux, the video controllers' names on Windows."""
    devices = [HostDevice(DeviceKind.CPU, _cpu_name())]
    if current_os() == "linux":
        devices += _linux_gpus(sysfs)
    elif current_os() == "windows":
        devices += gpus_from_names(_windows_gpu_names())
    return HostInfo(os=current_os(), devices=tuple(devices), cpu_features=cpu_features())


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
    import subprocess  # here: plugins import this module, only Windows runs this

    try:
        powershell = Path(
            os.environ.get("SystemRoot", "C:/Windows"),
            "System32/WindowsPowerShell/v1.0/powershell.exe",
        )
        out = subprocess.run(
            [
                str(powershell),
                "-NoProfile",
                "-Command",
                "(Get-CimInstance Win32_VideoController).Name",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
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
    kfd = _kfd_gpus(sysfs)
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
        device = HostDevice(kind, f"{kind.value} {card.name}", index=same_kind)
        if kind is DeviceKind.AMD_GPU and same_kind < len(kfd):
            device = replace(kfd[same_kind], name=device.name)
        gpus.append(device)
    return gpus


def _kfd_gpus(sysfs: Path) -> list[HostDevice]:
    """AMD GPUs in KFD node order (ROCm's order): gfx target (``gfx1102`` for
    ``gfx_target_version 110002``), render node from ``drm_render_minor``, and UUID from
    ``unique_id`` (kernel: amdkfd/kfd_topology.c ``node_show``). CPU nodes have version 0."""
    nodes = (sysfs / "class/kfd/kfd/topology/nodes").glob("*")
    result: list[HostDevice] = []
    for node in sorted((n for n in nodes if n.name.isdigit()), key=lambda n: int(n.name)):
        try:
            props = dict(
                line.split()
                for line in (node / "properties").read_text().splitlines()
                if len(line.split()) == 2
            )
        except OSError:
            continue
        version = int(props.get("gfx_target_version", "0"))
        if not version:
            continue
        major, minor, step = version // 10000, version // 100 % 100, version % 100
        minor_node = props.get("drm_render_minor", "")
        unique = int(props.get("unique_id", "0"))
        result.append(
            HostDevice(
                DeviceKind.AMD_GPU,
                "",
                f"gfx{major}{minor:x}{step:x}",
                len(result),
                render_node=f"/dev/dri/renderD{minor_node}" if minor_node.isdigit() else "",
                uuid=f"GPU-{unique:016x}" if unique else "",
            )
        )
    return result
