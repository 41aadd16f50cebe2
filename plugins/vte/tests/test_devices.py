"""Which GPUs VTE runs, and what lemoncore says about each host (pure decisions)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, amd_family, gpus_from_names

from lemon_plugin_vte.devices import assess
from lemon_plugin_vte.recipe import RECIPE
from lemon_plugin_vte.vte_source import GPU_ARCH_MAP, SUPPORTED_ARCHS, vte_arch

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_standin_hip import UPSTREAM, gpu_arch_map

CPU = HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700")
UPSTREAM_BLOB = "38231153a863f280178c58fb41c577cd17f0f546"  # git rev-parse 0.3.7:vte/config.py


def windows(*names: str) -> HostInfo:
    return HostInfo("windows", (CPU, *gpus_from_names(list(names))))


def test_the_table_is_vtes_own() -> None:
    """The plugin's table is the one in VTE's ``vte/config.py`` (vendored byte for byte:
    its git blob is the tag's), entry for entry and in VTE's order."""
    data = UPSTREAM.read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == UPSTREAM_BLOB
    assert list(gpu_arch_map(UPSTREAM).items()) == list(GPU_ARCH_MAP)
    assert SUPPORTED_ARCHS == {"gfx1100", "gfx1101", "gfx1102"}
    assert RECIPE.backends[0].support[0].devices[DeviceKind.AMD_GPU] == SUPPORTED_ARCHS


@pytest.mark.parametrize(
    ("name", "family", "vte"),
    [
        ("AMD Radeon RX 7600", "gfx1102", "gfx1102"),
        ("AMD Radeon RX 7600 XT", "gfx1102", "gfx1102"),  # VTE's "rx 7600" entry comes first
        ("AMD Radeon RX 7700 XT", "gfx1101", "gfx1101"),
        ("AMD Radeon RX 7900 XTX", "gfx1100", "gfx1100"),
        ("AMD Radeon RX 7900 GRE", "gfx1100", "gfx1100"),
        ("AMD Radeon RX 7600S", "gfx1102", "gfx1102"),
        ("AMD Radeon RX 7600M XT", "gfx1102", "gfx1102"),
        ("AMD Radeon RX 7700S", "gfx1102", "gfx1101"),  # a laptop die VTE reads as desktop
        ("AMD Radeon PRO W7600", "gfx1102", None),
        ("AMD Radeon PRO W7500", "gfx1102", None),
        ("AMD Radeon PRO W7700", "gfx1101", None),
        ("AMD Radeon RX 7650 GRE", "gfx1102", None),
        ("AMD Radeon PRO W7900", "gfx1100", None),
        ("AMD Radeon RX 6800", "gfx1030", "gfx1030"),
        ("AMD Radeon(TM) 780M Graphics", "gfx1103", None),
    ],
)
def test_lemoncore_knows_the_chip_and_vte_its_own_table(
    name: str, family: str, vte: str | None
) -> None:
    assert amd_family(name) == family
    assert vte_arch(name) == vte


@pytest.mark.parametrize(
    ("card", "says"),
    [
        ("AMD Radeon RX 7600", "validated on real hardware (RX 7600)"),
        ("AMD Radeon RX 7600 XT", "same kernels as the validated RX 7600, never run"),
        ("AMD Radeon RX 7600S", "same kernels as the validated RX 7600, never run"),
        ("AMD Radeon RX 7600M XT", "same kernels as the validated RX 7600, never run"),
        ("AMD Radeon RX 7700 XT", "cross-compiled, never run on real hardware"),
    ],
)
def test_only_the_rx_7600_itself_is_validated(card: str, says: str) -> None:
    verdict = assess(windows(card))
    assert verdict.supported
    assert f"VTE will use {card} ({vte_arch(card)}, {says})" in verdict.message


def test_an_igpu_is_left_to_vtes_table() -> None:
    verdict = assess(windows("AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7900 XTX"))
    assert verdict.supported
    assert "VTE will use AMD Radeon RX 7900 XTX (gfx1100, cross-compiled" in verdict.message
    assert "leaves AMD Radeon(TM) 780M Graphics (gfx1103, integrated) alone" in verdict.message
    igpu_only = assess(windows("AMD Radeon(TM) 780M Graphics"))
    assert not igpu_only.supported and "no GPU that VTE 0.3.7 runs" in igpu_only.message


def test_two_rdna3_cards_are_supported_and_the_choice_explained() -> None:
    verdict = assess(windows("AMD Radeon RX 7900 XTX", "AMD Radeon RX 7600"))
    assert verdict.supported
    assert "first of AMD Radeon RX 7900 XTX, AMD Radeon RX 7600 in HIP order" in verdict.message
    assert "recipes.vte.device_index" in verdict.message


def test_rdna2_beside_rdna3_is_left_alone_by_the_family() -> None:
    verdict = assess(windows("AMD Radeon RX 6800", "AMD Radeon RX 7900 XT"))
    assert verdict.supported
    assert "VTE will use AMD Radeon RX 7900 XT" in verdict.message
    assert (
        "leaves AMD Radeon RX 6800 (gfx1030) alone (VTE_TARGET_ARCH_FAMILY=gfx110X)"
        in verdict.message
    )


@pytest.mark.parametrize(
    "card", ["AMD Radeon PRO W7600", "AMD Radeon PRO W7500", "AMD Radeon RX 7650 GRE"]
)
def test_rdna3_cards_outside_vtes_table_are_not_offered(card: str) -> None:
    verdict = assess(windows(card))
    assert not verdict.supported
    assert f"{card} (gfx1102) is RDNA3 but not in VTE 0.3.7's GPU table" in verdict.message


def test_laptop_chips() -> None:
    assert assess(windows("AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7600S")).supported
    misread = assess(windows("AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7700S"))
    assert not misread.supported
    assert "reads AMD Radeon RX 7700S as gfx1101" in misread.message
    assert "it is a gfx1102 GPU" in misread.message


def test_a_configured_index_is_passed_through_and_bounded() -> None:
    host = windows("AMD Radeon RX 7900 XTX", "AMD Radeon RX 7600")
    assert "HIP device 1 as configured" in assess(host, 1).message
    out_of_range = assess(host, 2)
    assert not out_of_range.supported and "has 2 AMD GPU(s)" in out_of_range.message


def test_nvidia_gpus_do_not_count() -> None:
    verdict = assess(windows("NVIDIA GeForce RTX 4070", "AMD Radeon RX 7600"))
    assert verdict.supported and "VTE will use AMD Radeon RX 7600" in verdict.message
