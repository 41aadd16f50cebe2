"""The CPU's instruction sets as programs see them (lemoncore.cpus)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from lemoncore.cpus import _kernel_flags, cpu_features, missing_cpu_features
from lemoncore.hosts import detect_host


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64's baseline")
def test_this_cpu_has_x86_64s_baseline_and_detect_host_reports_it() -> None:
    found = cpu_features()
    assert found is not None and {"SSE", "SSE2"} <= found  # every x86-64 CPU has them
    assert detect_host().cpu_features == found


def test_missing_names_what_the_cpu_lacks_and_nothing_when_unknown() -> None:
    needed = frozenset({"AVX2", "FMA3", "F16C"})
    assert missing_cpu_features(needed, frozenset({"SSE42", "AVX", "F16C"})) == ["AVX2", "FMA3"]
    assert missing_cpu_features(needed, needed | {"AVX512F"}) == []
    assert missing_cpu_features(needed, None) == []  # unknown rules nothing out


@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64", reason="the kernel's x86-64 flags"
)
def test_a_cpu_older_than_x86_64_v2_is_read_from_the_kernels_flags(tmp_path: Path) -> None:
    """A Core 2 has no SSE4.2 or POPCNT: NumPy's wheels would die of SIGILL on import, so
    the kernel's flags are the answer there."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 pni ssse3 sse4_1 lm\n")
    assert _kernel_flags(cpuinfo) == {"SSE", "SSE2", "SSE3", "SSSE3", "SSE41"}
    assert missing_cpu_features(frozenset({"AVX2"}), _kernel_flags(cpuinfo)) == ["AVX2"]
