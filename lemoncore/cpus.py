"""The instruction-set extensions this CPU and its OS let programs use.

Read through NumPy's runtime dispatcher (``numpy/_core/src/common/npy_cpu_features.c``),
which asks the CPU itself (CPUID, and XGETBV for the register state the OS saves, so
AVX-512 disabled by the OS counts as absent) on Linux, Windows and macOS alike. Not
``/proc/cpuinfo``: Windows has none, and under an emulator (``qemu-x86_64 -cpu Nehalem``)
it shows the host's flags, not the CPU programs actually run on.

Names are NumPy's: ``SSE42``, ``AVX``, ``AVX2``, ``FMA3``, ``F16C``, ``BMI2``, ``AVX512F``,
``AVX512_SPR``, ``NEON``, ``ASIMD``...
"""

from __future__ import annotations

import functools
import importlib


@functools.cache
def cpu_features() -> frozenset[str] | None:
    """What the CPU supports; ``None`` where it cannot be told (NumPy missing or broken)."""
    try:
        dispatch = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:
        return None
    found: dict[str, bool] = dispatch.__cpu_features__
    return frozenset(name for name, present in found.items() if present)


def missing(needed: frozenset[str], present: frozenset[str] | None) -> list[str]:
    """Which of ``needed`` the CPU lacks, sorted; none when what it has is unknown."""
    return [] if present is None else sorted(needed - present)
