"""Whether vte-server can run on this host's GPUs, and which one it will take: a pure
decision that mirrors VTE's own choice so lemoncore can explain it before launch.

VTE chooses the device itself (``hip_runtime.py`` ``_select_device_index``): with
``VTE_TARGET_ARCH_FAMILY`` set it keeps the HIP devices whose name is in its table and
whose arch is in the family, takes the first in HIP order, and fails loudly when none is
left. lemoncore sets the family and never a device index of its own: the OS's adapter
order is not the HIP order. ``VTE_DEVICE_INDEX`` is passed only when an administrator
configures ``recipes.vte.device_index``, and then VTE skips every check.
"""

from __future__ import annotations

from dataclasses import dataclass

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo

from lemon_plugin_vte.vte_source import (
    SUPPORTED_ARCHS,
    TARGET_FAMILY,
    VTE_VERSION,
    verdict,
    vte_arch,
)

ELSEWHERE = "serve the model with the llamacpp recipe (its rocm or vulkan backend) instead"
CHOOSE = (
    "set recipes.vte.device_index in the configuration file to its HIP device index "
    "(vte-server logs the GPU it initialised: 'HIP Inicializado. GPU: …')"
)


@dataclass(frozen=True)
class Assessment:
    """``supported`` with a ``message`` saying what VTE will use, or why it cannot run;
    ``arch``: the architecture VTE will read for the GPU it takes ("" when lemoncore
    cannot know it: an administrator's HIP index, or cards of several architectures, of
    which HIP's order, unknown here, decides)."""

    supported: bool
    message: str
    arch: str = ""


def _listed(devices: list[HostDevice]) -> str:
    return (
        ", ".join(
            f"{d.name} ({d.family or 'unknown'}{', integrated' if d.integrated else ''})"
            for d in devices
        )
        or "none"
    )


def assess(host: HostInfo, device_index: int | None = None) -> Assessment:
    amd = [d for d in host.devices if d.kind is DeviceKind.AMD_GPU]
    if device_index is not None:
        if device_index >= len(amd):
            return Assessment(
                False,
                f"recipes.vte.device_index is {device_index}, but this "
                f"host has {len(amd)} AMD GPU(s): {_listed(amd)}",
            )
        return Assessment(
            True,
            f"VTE uses HIP device {device_index} as configured "
            "(recipes.vte.device_index), without its own family check",
        )
    runnable = [d for d in amd if vte_arch(d.name) in SUPPORTED_ARCHS]
    misread = [d for d in runnable if d.family and d.family != vte_arch(d.name)]
    if misread:
        d = misread[0]
        others = [o for o in runnable if o not in misread]
        fix = (
            f"to use {others[0].name} instead, {CHOOSE}"
            if others
            else f"until VTE's table knows it, {ELSEWHERE}"
        )
        return Assessment(
            False,
            f"VTE {VTE_VERSION} reads {d.name} as {vte_arch(d.name)} "
            f"(its table matches it as a desktop card), but it is a "
            f"{d.family} GPU: VTE would run the wrong kernels on it. {fix}",
        )
    if not runnable:
        unlisted = [d for d in amd if d.family.startswith("gfx110") and not d.integrated]
        why = (
            f"; {_listed(unlisted)} is RDNA3 but not in VTE {VTE_VERSION}'s GPU table, "
            "so VTE refuses it"
            if unlisted
            else ""
        )
        return Assessment(
            False,
            f"no GPU that VTE {VTE_VERSION} runs (an RX 7600, 7700, "
            f"7800 XT or 7900 series card); AMD GPUs here: "
            f"{_listed(amd)}{why}; {ELSEWHERE}",
        )
    chosen = runnable[0]
    archs = {vte_arch(d.name) or "" for d in runnable}
    arch = archs.pop() if len(archs) == 1 else ""  # HIP order decides between several
    message = f"VTE will use {chosen.name} ({arch}, {verdict(chosen.name)})"
    if len(runnable) > 1:
        message = (
            f"VTE will use the first of {', '.join(d.name for d in runnable)} in HIP "
            f"order, which may differ from Windows' order; to choose, {CHOOSE}"
        )
    skipped = [d for d in amd if d not in runnable]
    if skipped:
        message += f"; it leaves {_listed(skipped)} alone (VTE_TARGET_ARCH_FAMILY={TARGET_FAMILY})"
    return Assessment(True, message, arch)
