from __future__ import annotations

import pytest

from lemoncore.defaults import effective_device, effective_is_amd_gpu
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.recipes import Backend, Device, DeviceKind, Recipe, SupportRow

CPU = HostDevice(DeviceKind.CPU, "cpu")
AMD = HostDevice(DeviceKind.AMD_GPU, "rx 7600", "gfx1102")
NVIDIA = HostDevice(DeviceKind.NVIDIA_GPU, "rtx")


def backend(*kinds: DeviceKind) -> Backend:
    return Backend(
        name="b",
        support=(SupportRow(os=frozenset({"linux"}), devices={k: frozenset() for k in kinds}),),
    )


RECIPE = Recipe(name="r", display_name="R", default_device=Device.NPU)
VULKAN = (DeviceKind.AMD_GPU, DeviceKind.NVIDIA_GPU, DeviceKind.INTEL_GPU)


@pytest.mark.parametrize(
    ("kinds", "devices", "device", "is_amd"),
    [
        ((DeviceKind.CPU,), (CPU,), Device.CPU, False),
        ((DeviceKind.AMD_GPU,), (CPU,), Device.GPU, True),  # rocm: one family
        ((DeviceKind.NVIDIA_GPU,), (CPU, AMD), Device.GPU, False),
        (VULKAN, (CPU, AMD), Device.GPU, True),  # only the AMD GPU is present
        (VULKAN, (CPU, AMD, NVIDIA), Device.GPU, False),  # spans vendors: unknown vendor
        (VULKAN, (CPU,), Device.GPU, False),
        ((DeviceKind.CPU, DeviceKind.AMD_GPU), (CPU, AMD), Device.NPU, False),  # recipe default
    ],
)
def test_device_and_amdness_derive_from_support_rows(
    kinds: tuple[DeviceKind, ...],
    devices: tuple[HostDevice, ...],
    device: Device,
    is_amd: bool,
) -> None:
    host = HostInfo("linux", devices)
    assert effective_device(RECIPE, backend(*kinds), host) is device
    assert effective_is_amd_gpu(RECIPE, backend(*kinds), host) is is_amd
