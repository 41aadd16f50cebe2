"""Which AMD GPU vte-server may use: a pure decision over the host's devices."""

from __future__ import annotations

from dataclasses import dataclass

from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.recipes import DeviceKind

from lemon_plugin_vte.recipe import RDNA3, VALIDATED


@dataclass(frozen=True)
class Selection:
    """The chosen device, or why none can be chosen (``refusal``)."""

    device: HostDevice | None = None
    refusal: str = ""

    @property
    def note(self) -> str:
        d = self.device
        if d is None:
            return self.refusal
        verdict = (f"validated ({VALIDATED[d.family]})" if d.family in VALIDATED
                   else "cross-compiled, untested on real hardware")
        return f"uses {d.name} ({d.family}, HIP device {d.index}): {verdict}"


def describe(devices: list[HostDevice]) -> str:
    return ", ".join(f"{d.index}: {d.name} ({d.family or 'unknown family'}"
                     f"{', integrated' if d.integrated else ''})" for d in devices)


def select_device(host: HostInfo, choice: int | None = None) -> Selection:
    """The RDNA3 discrete GPU to use. iGPUs are never chosen; a host with RDNA3 and other
    AMD discrete GPUs needs an explicit ``device_index``."""
    amd = [d for d in host.devices if d.kind is DeviceKind.AMD_GPU]
    discrete = [d for d in amd if not d.integrated]
    rdna3 = [d for d in discrete if d.family in RDNA3]
    how = "set recipes.vte.device_index (the HIP device index) to choose"
    if choice is not None:
        chosen = next((d for d in amd if d.index == choice), None)
        if chosen is None or chosen not in rdna3:
            return Selection(refusal=f"device_index {choice} is not an RDNA3 discrete GPU; "
                                     f"AMD GPUs here: {describe(amd) or 'none'}")
        return Selection(chosen)
    if not rdna3:
        return Selection(refusal="no RDNA3 discrete GPU (gfx1100/gfx1101/gfx1102) found; "
                                 f"AMD GPUs here: {describe(amd) or 'none'}")
    others = [d for d in discrete if d not in rdna3]
    if others:
        return Selection(refusal=f"this host mixes GPU generations ({describe(discrete)}); "
                                 f"lemoncore will not guess which one VTE may use: {how}")
    return Selection(rdna3[0])
