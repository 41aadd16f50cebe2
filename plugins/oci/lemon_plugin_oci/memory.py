"""Memory before a start: the host's ``MemAvailable`` and, on an APU such as Strix Halo,
the GPU's GTT and VRAM carve-out from sysfs (amdgpu's ``mem_info_gtt_total`` and
``mem_info_vram_total``). ``problem`` is a pure decision over those numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3


@dataclass(frozen=True)
class Memory:
    available: int  # bytes: MemAvailable
    gtt: int = 0  # bytes the GPU can map from system RAM (0: unknown)
    vram: int = 0  # bytes of dedicated (or carved-out) GPU memory (0: unknown)


def read(render_node: str = "", root: Path = Path("/")) -> Memory:
    available = 0
    for line in (root / "proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    device = root / "sys/class/drm" / Path(render_node).name / "device"

    def number(name: str) -> int:
        try:
            return int((device / name).read_text())
        except (OSError, ValueError):
            return 0

    if not render_node:
        return Memory(available)
    return Memory(available, number("mem_info_gtt_total"), number("mem_info_vram_total"))


def problem(need_gib: float, memory: Memory, hint: str) -> str:
    """Why ``need_gib`` does not fit, or "". The carve-out is not part of
    ``MemAvailable``, so host RAM plus VRAM must hold it; the GPU can reach only its GTT
    plus VRAM."""
    if need_gib <= 0:
        return ""
    need = need_gib * GIB
    usable = memory.available + memory.vram
    reachable = memory.gtt + memory.vram if memory.gtt else 0
    if usable >= need and (not reachable or reachable >= need):
        return ""
    have = f"{memory.available / GIB:.1f} GiB of RAM is available"
    if memory.vram:
        have += f" plus {memory.vram / GIB:.1f} GiB of VRAM"
    if reachable and reachable < need:
        have += (f"; the GPU can map {reachable / GIB:.1f} GiB (GTT {memory.gtt / GIB:.1f} "
                 f"+ VRAM {memory.vram / GIB:.1f}; raise amdgpu.gttsize and ttm.pages_limit "
                 "on the kernel command line)")
    return (f"needs about {need_gib:.0f} GiB and {have}. Close other programs or unload "
            f"models{'; or ' + hint if hint else ''}; an administrator can change the "
            "check with the backend option memory_check_gib (0 turns it off)")
