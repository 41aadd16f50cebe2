"""The instruction-set extensions this CPU and its OS let programs use.

Read through NumPy's runtime dispatcher (``numpy/_core/src/common/npy_cpu_features.c``),
which asks the CPU itself (CPUID, and XGETBV for the register state the OS saves, so
AVX-512 disabled by the OS counts as absent) on Linux, Windows and macOS alike. Not
``/proc/cpuinfo`` alone: Windows has none, and under an emulator (``qemu-x86_64 -cpu
Nehalem``) it shows the host's flags, not the CPU programs actually run on. But NumPy's
x86-64 wheels (2.4 on) are built for x86-64-v2 and die of SIGILL on import on an older CPU
(Core 2): on x86-64 Linux the kernel's flags are read first, and without SSE4.2 and POPCNT
they are the answer.

Names are NumPy's: ``SSE42``, ``AVX``, ``AVX2``, ``FMA3``, ``F16C``, ``BMI2``, ``AVX512F``,
``AVX512_SPR``, ``NEON``, ``ASIMD``...
"""

from __future__ import annotations

import functools
import importlib
import platform
import sys
from pathlib import Path

# /proc/cpuinfo's names (the kernel's arch/x86/include/asm/cpufeatures.h) -> NumPy's.
_KERNEL_NAMES = {
    "sse": "SSE",
    "sse2": "SSE2",
    "pni": "SSE3",
    "ssse3": "SSSE3",
    "sse4_1": "SSE41",
    "sse4_2": "SSE42",
    "popcnt": "POPCNT",
    "avx": "AVX",
    "avx2": "AVX2",
    "fma": "FMA3",
    "f16c": "F16C",
    "bmi2": "BMI2",
}
_X86_64_V2 = frozenset({"SSE42", "POPCNT"})  # what NumPy's wheels need to import


@functools.cache
def cpu_features() -> frozenset[str] | None:
    """What the CPU supports; ``None`` where it cannot be told (NumPy missing or broken)."""
    kernel = _kernel_flags()
    if kernel is not None and not _X86_64_V2 <= kernel:
        return kernel  # importing NumPy here would die of SIGILL
    try:
        dispatch = importlib.import_module("numpy._core._multiarray_umath")
        found: dict[str, bool] = dispatch.__cpu_features__
    except Exception:  # noqa: BLE001 - no NumPy, or one without its dispatcher: unknown
        return kernel
    return frozenset(name for name, present in found.items() if present)


def _kernel_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The kernel's x86-64 CPU flags in NumPy's names (Linux only; ``None`` elsewhere)."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return None
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    return frozenset(_KERNEL_NAMES[f] for f in flags if f in _KERNEL_NAMES)


def missing_cpu_features(needed: frozenset[str], present: frozenset[str] | None) -> list[str]:
    """Which of ``needed`` the CPU lacks, sorted; none when what it has is unknown."""
    return [] if present is None else sorted(needed - present)
