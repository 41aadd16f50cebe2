"""The CPU's instruction sets as programs see them (lemoncore.cpus)."""

from __future__ import annotations

import platform

import pytest

from lemoncore.cpus import cpu_features, missing
from lemoncore.hosts import detect_host


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64's baseline")
def test_this_cpu_has_x86_64s_baseline_and_detect_host_reports_it() -> None:
    found = cpu_features()
    assert found is not None and {"SSE", "SSE2"} <= found  # every x86-64 CPU has them
    assert detect_host().cpu_features == found


def test_missing_names_what_the_cpu_lacks_and_nothing_when_unknown() -> None:
    needed = frozenset({"AVX2", "FMA3", "F16C"})
    assert missing(needed, frozenset({"SSE42", "AVX", "F16C"})) == ["AVX2", "FMA3"]
    assert missing(needed, needed | {"AVX512F"}) == []
    assert missing(needed, None) == []  # unknown rules nothing out
