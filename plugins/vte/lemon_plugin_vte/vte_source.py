"""What VTE's own source says, at the version this plugin pins. Update it with each VTE
bump: everything here is copied from the tagged source, not decided by lemoncore.

Source: ``github.com/kyuubyN/VTE`` tag ``0.3.7`` (commit ``274fdb0``).
"""

from __future__ import annotations

VTE_VERSION = "0.3.7"

# ``vte/config.py`` ``GPU_ARCH_MAP`` (L53-65), in dict order. VTE lower-cases the HIP
# device name and takes the first entry that is a substring of it (``hip_runtime.py``
# ``get_gpu_architecture`` L550-555), so "rx 7700s" reads as "rx 7700" and the longer
# entries after a shorter prefix ("rx 7600 xt", "rx 7900 xtx", ...) never match.
GPU_ARCH_MAP: tuple[tuple[str, str], ...] = (
    ("rx 7600", "gfx1102"),
    ("rx 7600 xt", "gfx1101"),
    ("rx 7700", "gfx1101"),
    ("rx 7700 xt", "gfx1101"),
    ("rx 7800 xt", "gfx1101"),
    ("rx 7900", "gfx1100"),
    ("rx 7900 xt", "gfx1100"),
    ("rx 7900 xtx", "gfx1100"),
    ("rx 6600", "gfx1032"),
    ("rx 6600 xt", "gfx1032"),
    ("rx 6650 xt", "gfx1032"),
    ("rx 6700", "gfx1031"),
    ("rx 6700 xt", "gfx1031"),
    ("rx 6750 xt", "gfx1031"),
    ("rx 6800", "gfx1030"),
    ("rx 6800 xt", "gfx1030"),
    ("rx 6900", "gfx1030"),
    ("rx 6900 xt", "gfx1030"),
    ("rx 6950 xt", "gfx1030"),
    ("rx 6500 xt", "gfx1034"),
    ("rx 6400", "gfx1034"),
)
# The family lemoncore passes as VTE_TARGET_ARCH_FAMILY; VTE keeps archs that start with
# it minus its last character (``_select_device_index`` L381, L401).
TARGET_FAMILY = "gfx110X"
FAMILY_PREFIX = TARGET_FAMILY[:-1]
# What VTE's author ran on real hardware (VTE README); the other gfx110X kernels are
# cross-compiled and have never run.
VALIDATED = {"gfx1102": "RX 7600"}


def vte_arch(name: str) -> str | None:
    """The arch VTE reads from a HIP device name, or ``None`` when its table has no entry
    (VTE then skips the device when choosing, and would fall back to gfx1100 kernels)."""
    text = name.lower()
    return next((arch for key, arch in GPU_ARCH_MAP if key in text), None)


SUPPORTED_ARCHS = frozenset(a for _, a in GPU_ARCH_MAP if a.startswith(FAMILY_PREFIX))
