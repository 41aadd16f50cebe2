"""What VTE's own source says, at the version this plugin pins. Update it with each VTE
bump: everything here is copied from the tagged source, not decided by lemoncore.

Source: ``github.com/kyuubyN/VTE`` tag ``0.3.7`` (commit ``274fdb0``).
"""

from __future__ import annotations

VTE_VERSION = "0.3.7"

# ``vte/config.py`` ``GPU_ARCH_MAP`` (L53-65), in dict order (``tests/test_devices.py``
# compares it with that file, vendored in ``tests/upstream/``). VTE lower-cases the HIP
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
# The one card VTE's author ran it on: an RX 7600 (gfx1102; VTE ``README.md`` "developed
# and measured on a single consumer card: an RX 7600", ``docs/LIMITATIONS.md``). Other
# gfx1102 cards (RX 7600 XT, 7600S, 7600M XT) load the same kernels but never ran them;
# the gfx1100/gfx1101 kernels are cross-compiled and never ran either.
VALIDATED_CARD, VALIDATED_ARCH = "RX 7600", "gfx1102"


def vte_arch(name: str) -> str | None:
    """The arch VTE reads from a HIP device name, or ``None`` when its table has no entry
    (VTE then skips the device when choosing, and would fall back to gfx1100 kernels)."""
    text = name.lower()
    return next((arch for key, arch in GPU_ARCH_MAP if key in text), None)


SUPPORTED_ARCHS = frozenset(a for _, a in GPU_ARCH_MAP if a.startswith(FAMILY_PREFIX))


def validated(name: str) -> bool:
    """Whether the HIP device ``name`` is the validated card itself ("AMD Radeon RX 7600"),
    not a sibling whose name only starts the same ("RX 7600 XT", "RX 7600S")."""
    return name.lower().rstrip().endswith(VALIDATED_CARD.lower())


def verdict(name: str) -> str:
    """What has run on the card ``name``, in the words users see."""
    if validated(name):
        return f"validated on real hardware ({VALIDATED_CARD})"
    if vte_arch(name) == VALIDATED_ARCH:
        return f"same kernels as the validated {VALIDATED_CARD}, never run"
    return "cross-compiled, never run on real hardware"
