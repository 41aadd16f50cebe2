"""Built-in answers to the decision hooks, registered like any plugin (``trylast``).

Device and AMD-ness come from the backend's support rows: the device kinds the rows
name for this OS, narrowed to those present on the host. When exactly one device class
(or one kind) remains, that is the answer; otherwise the recipe's default device stands.
A plugin overrides by implementing the hook and returning a non-``None`` answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lemoncore.hookspecs import hookimpl
from lemoncore.hosts import HostInfo
from lemoncore.recipes import Backend, Device, DeviceKind, Recipe, SlotPolicy


def backend_device_kinds(backend: Backend, host: HostInfo) -> frozenset[DeviceKind]:
    """Device kinds the backend's rows name for this OS, narrowed to the host's if any."""
    rows = [r for r in backend.support if host.os in r.os] or list(backend.support)
    named = frozenset(k for r in rows for k in r.devices)
    present = frozenset(k for k in named if host.has(k))
    return present or named


@hookimpl(trylast=True)
def effective_device(recipe: Recipe, backend: Backend, host: HostInfo) -> Device:
    classes = {k.device for k in backend_device_kinds(backend, host)}
    return classes.pop() if len(classes) == 1 else recipe.default_device


@hookimpl(trylast=True)
def effective_is_amd_gpu(recipe: Recipe, backend: Backend, host: HostInfo) -> bool:
    kinds = backend_device_kinds(backend, host)
    if len(kinds) == 1:
        return next(iter(kinds)) is DeviceKind.AMD_GPU
    return False


@hookimpl(trylast=True)
def slot_policy(recipe: Recipe, backend: Backend, options: Mapping[str, Any]) -> SlotPolicy:
    return backend.slot_policy or recipe.slot_policy
