"""Which GPU VTE may use, on the hosts users have (pure decisions, no processes)."""

from __future__ import annotations

import pytest

from lemoncore.gpus import amd_family
from lemoncore.hosts import HostDevice, HostInfo, gpus_from_names
from lemoncore.recipes import DeviceKind

from lemon_plugin_vte.devices import select_device

CPU = HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700")


def windows(*names: str) -> HostInfo:
    return HostInfo("windows", (CPU, *gpus_from_names(list(names))))


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("AMD Radeon RX 7600", "gfx1102"), ("AMD Radeon RX 7600 XT", "gfx1102"),
        ("AMD Radeon RX 7700 XT", "gfx1101"), ("AMD Radeon RX 7800 XT", "gfx1101"),
        ("AMD Radeon RX 7900 GRE", "gfx1100"), ("AMD Radeon RX 7900 XTX", "gfx1100"),
        ("AMD Radeon PRO W7900", "gfx1100"), ("AMD Radeon PRO W7800", "gfx1100"),
        ("AMD Radeon PRO W7700", "gfx1101"), ("AMD Radeon PRO W7600", "gfx1102"),
        ("AMD Radeon PRO W7500", "gfx1102"), ("AMD Radeon RX 6800", "gfx1030"),
        ("AMD Radeon 780M Graphics", "gfx1103"), ("Some Future GPU", ""),
    ],
)
def test_names_map_to_families(name: str, family: str) -> None:
    assert amd_family(name) == family


def test_single_rx_7600_is_chosen_and_called_validated() -> None:
    chosen = select_device(windows("AMD Radeon RX 7600"))
    assert chosen.device is not None and chosen.device.index == 0
    assert "validated (RX 7600)" in chosen.note


def test_the_discrete_rdna3_gpu_is_chosen_over_an_igpu() -> None:
    host = windows("AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7900 XTX")
    assert [d.integrated for d in host.devices[1:]] == [True, False]
    chosen = select_device(host)
    assert chosen.device is not None
    assert (chosen.device.name, chosen.device.index) == ("AMD Radeon RX 7900 XTX", 1)
    assert "cross-compiled, untested" in chosen.note


def test_an_igpu_alone_is_never_chosen() -> None:
    refused = select_device(windows("AMD Radeon(TM) 780M Graphics"))
    assert refused.device is None
    assert "no RDNA3 discrete GPU" in refused.refusal
    assert select_device(windows("AMD Radeon(TM) 780M Graphics"), 0).device is None


def test_mixed_rdna2_and_rdna3_needs_an_explicit_choice() -> None:
    host = windows("AMD Radeon RX 6800", "AMD Radeon RX 7900 XT")
    refused = select_device(host)
    assert refused.device is None
    for text in ("0: AMD Radeon RX 6800 (gfx1030)", "1: AMD Radeon RX 7900 XT (gfx1100)",
                 "recipes.vte.device_index"):
        assert text in refused.refusal
    chosen = select_device(host, 1)
    assert chosen.device is not None and chosen.device.index == 1
    assert "not an RDNA3 discrete GPU" in select_device(host, 0).refusal


def test_pro_w7900_is_recognised() -> None:
    chosen = select_device(windows("AMD Radeon PRO W7900"))
    assert chosen.device is not None and chosen.device.family == "gfx1100"


def test_nvidia_gpus_are_not_candidates() -> None:
    host = windows("NVIDIA GeForce RTX 4070", "AMD Radeon RX 7600")
    chosen = select_device(host)
    assert chosen.device is not None and chosen.device.index == 0  # HIP index among AMD GPUs
