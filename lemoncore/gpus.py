"""What a GPU is, from its marketing name: vendor, AMD gfx family, integrated or not.

Used where the OS gives names but no gfx target (Windows), and to tell iGPUs apart.
The longest matching name wins, so "rx 7600 xt" is not read as "rx 7600".
"""

from __future__ import annotations

from lemoncore.recipes import DeviceKind

AMD_FAMILIES: dict[str, str] = {
    # RDNA3 discrete
    "rx 7900 xtx": "gfx1100",
    "rx 7900 xt": "gfx1100",
    "rx 7900 gre": "gfx1100",
    "rx 7900": "gfx1100",
    "pro w7900": "gfx1100",
    "pro w7800": "gfx1100",
    "rx 7800 xt": "gfx1101",
    "rx 7700 xt": "gfx1101",
    "rx 7700": "gfx1101",
    "pro w7700": "gfx1101",
    "rx 7650 gre": "gfx1102",
    "rx 7600 xt": "gfx1102",
    "rx 7600": "gfx1102",
    "pro w7600": "gfx1102",
    "pro w7500": "gfx1102",
    # RDNA3 laptop chips: the S and M names are other dies than the desktop cards'
    "rx 7900m": "gfx1100",
    "rx 7800m": "gfx1101",
    "rx 7700s": "gfx1102",
    "rx 7600s": "gfx1102",
    "rx 7600m xt": "gfx1102",
    "rx 7600m": "gfx1102",
    # RDNA2 discrete
    "rx 6950 xt": "gfx1030",
    "rx 6900 xt": "gfx1030",
    "rx 6800 xt": "gfx1030",
    "rx 6800": "gfx1030",
    "pro w6800": "gfx1030",
    "rx 6750 xt": "gfx1031",
    "rx 6700 xt": "gfx1031",
    "rx 6700": "gfx1031",
    "rx 6650 xt": "gfx1032",
    "rx 6600 xt": "gfx1032",
    "rx 6600": "gfx1032",
    "pro w6600": "gfx1032",
    "rx 6500 xt": "gfx1034",
    "rx 6400": "gfx1034",
    # integrated
    "radeon 780m": "gfx1103",
    "radeon 760m": "gfx1103",
    "radeon 740m": "gfx1103",
    "radeon 890m": "gfx1150",
    "radeon 880m": "gfx1150",
    "radeon 8060s": "gfx1151",
    "radeon 8050s": "gfx1151",
}
INTEGRATED_MARKERS = (
    "radeon graphics",
    "radeon(tm) graphics",
    "radeon vega",
    "780m",
    "760m",
    "740m",
    "890m",
    "880m",
    "8060s",
    "8050s",
    "610m",
)


def vendor(name: str) -> DeviceKind | None:
    text = name.lower()
    if "nvidia" in text or "geforce" in text or "quadro" in text:
        return DeviceKind.NVIDIA_GPU
    if "amd" in text or "radeon" in text:
        return DeviceKind.AMD_GPU
    if "intel" in text:
        return DeviceKind.INTEL_GPU
    return None


def amd_family(name: str) -> str:
    """The gfx target for an AMD GPU name, or "" when unknown. Trademark marks are
    ignored: Windows says "AMD Radeon(TM) 780M Graphics"."""
    text = name.lower().replace("(tm)", "").replace("(r)", "")
    matches = [key for key in AMD_FAMILIES if key in text]
    return AMD_FAMILIES[max(matches, key=len)] if matches else ""


def is_integrated(name: str) -> bool:
    text = name.lower()
    return any(marker in text for marker in INTEGRATED_MARKERS)
