"""Memory before a start: the host's ``MemAvailable`` and, on an APU such as Strix Halo,
the GPU's GTT and VRAM carve-out from sysfs (amdgpu's ``mem_info_gtt_total`` and
``mem_info_vram_total``). ``problem`` is a pure decision over those numbers.

``MemAvailable`` overstates what is free while a Halogen engine runs: Halogen's README
("Give it a machine of its own", peonist-ai/halogen-flash-server @01e9cfc) says ``free``
and ``MemAvailable`` count its locked weights as reclaimable page cache, overstating free
memory by the model's size, about 68 GiB, and that no kernel field shows the difference
(``Mlocked``, ``Unevictable`` stay 0): believe the server's own "host memory left" line.
That line exists only in the running engine's log, so the check instead takes those
weights off ``MemAvailable`` for each such engine running (``Memory.held``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3


@dataclass(frozen=True)
class Memory:
    available: int  # bytes: MemAvailable
    gtt: int = 0  # free bytes the GPU can still map from system RAM (0: unknown)
    vram: int = 0  # free bytes of dedicated (or carved-out) GPU memory (0: unknown)
    held: int = 0  # bytes running engines hold that MemAvailable counts as free

    @property
    def free_ram(self) -> int:
        """RAM a new engine can have: ``MemAvailable`` less what it wrongly counts."""
        return max(0, self.available - self.held)


def read(render_node: str = "", root: Path = Path("/")) -> Memory:
    available = 0
    for line in (root / "proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    device = root / "sys/class/drm" / Path(render_node).name / "device"

    def free(kind: str) -> int:
        try:
            return max(
                0,
                int((device / f"mem_info_{kind}_total").read_text())
                - int((device / f"mem_info_{kind}_used").read_text()),
            )
        except (OSError, ValueError):
            return 0

    if not render_node:
        return Memory(available)
    return Memory(available, free("gtt"), free("vram"))


def problem(host_gib: float, device_gib: float, memory: Memory, hint: str) -> str:
    """Why an engine needing ``host_gib`` of RAM for itself and ``device_gib`` on the GPU
    does not fit, or "". The GPU side comes from VRAM, then GTT (system RAM); the
    carve-out is not part of ``MemAvailable``, so RAM must hold the host part plus what
    the VRAM cannot."""
    need = (host_gib + device_gib) * GIB
    if need <= 0:
        return ""
    from_ram = host_gib * GIB + max(0.0, device_gib * GIB - memory.vram)
    device_short = memory.gtt and device_gib * GIB > memory.gtt + memory.vram
    if from_ram <= memory.free_ram and not device_short:
        return ""
    have = f"{memory.free_ram / GIB:.1f} GiB of RAM is available"
    if memory.held:
        have += (
            f" (MemAvailable says {memory.available / GIB:.1f}, but counts as free the "
            f"{memory.held / GIB:.0f} GiB running engines such as Halogen hold locked)"
        )
    if memory.vram:
        have += f" plus {memory.vram / GIB:.1f} GiB of free VRAM"
    if device_short:
        have += (
            f"; the GPU can map {(memory.gtt + memory.vram) / GIB:.1f} GiB more (GTT "
            f"{memory.gtt / GIB:.1f} + VRAM {memory.vram / GIB:.1f} free; raise "
            "amdgpu.gttsize and ttm.pages_limit on the kernel command line)"
        )
    split = (
        f" ({host_gib:.0f} in RAM, {device_gib:.0f} on the GPU)" if host_gib and device_gib else ""
    )
    return (
        f"needs about {host_gib + device_gib:.0f} GiB{split} and {have}. Close other "
        f"programs or unload models{'; or ' + hint if hint else ''}; an administrator "
        "can change the check with the backend option memory_check_gib (0 turns it off)"
    )
