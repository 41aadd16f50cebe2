"""Decision hooks: pure and fast, asked once per load with the selected backend and the
resolved options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lemoncore.hookspecs.markers import hookspec
from lemoncore.hosts import HostInfo
from lemoncore.recipes import (
    Backend,
    Device,
    Recipe,
    SlotPolicy,
)


@hookspec(firstresult=True)
def effective_device(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> Device | None:
    """Return the device a server of ``recipe`` on ``backend`` with ``options`` occupies.

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default, which derives the device from the backend's support
    rows: the device kinds the rows name for this OS, narrowed to those present on the
    host; when one device class remains, that is the device, otherwise the recipe's
    ``default_device``. Answer only when that is not enough (the options choose the
    device).

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices.
    :returns: the ``Device`` (``cpu``, ``gpu``, ``npu``), or ``None`` to defer.

    Example::

        @hookimpl
        def effective_device(backend: Backend, options: Mapping) -> Device | None:
            if backend.name == "mine" and options.get("cpu_only"):
                return Device.CPU
            return None

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def effective_is_amd_gpu(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> bool | None:
    """Return whether such a server occupies an AMD GPU (used for GPU exclusivity,
    ``exclusive_gpu``).

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default: the device kinds the backend's rows name for this OS,
    narrowed to those present on the host, are exactly ``amd_gpu``. So a ``rocm`` backend
    whose only row is ``amd_gpu`` is on an AMD GPU and a ``cpu`` backend is not, whatever
    the recipe's ``default_device`` says. A backend whose rows span vendors needs an
    answer when the options decide the device: a Vulkan backend on a host with both AMD
    and NVIDIA GPUs, where the chosen device index decides.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices (``host.devices``).
    :returns: ``True`` or ``False``, or ``None`` to defer.

    Example::

        @hookimpl
        def effective_is_amd_gpu(recipe: Recipe, backend: Backend, options, host: HostInfo):
            mine = (recipe.name, backend.name) == ("llamacpp", "vulkan")
            if not mine or "vulkan_device" not in options:
                return None  # defer: the next plugin, then lemoncore's derivation, answers
            gpus = [d for d in host.devices if d.kind is not DeviceKind.CPU]
            return gpus[int(options["vulkan_device"])].kind is DeviceKind.AMD_GPU

    .. versionadded:: 0.1
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def slot_policy(
    recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
) -> SlotPolicy | None:
    """Return how such a server counts against the router's slots.

    Decision hook, asked once per load; not an owner hook. First result: the first
    answer that is not ``None`` wins; return ``None`` to defer to the next plugin and
    finally to lemoncore's default, ``backend.slot_policy`` or else
    ``recipe.slot_policy`` (the static policy). Implement it only when options change the
    policy.

    :param recipe: the recipe of the model being loaded.
    :param backend: the selected backend.
    :param options: the load's resolved request-scope options.
    :param host: this machine: its OS and devices.
    :returns: the ``SlotPolicy``, or ``None`` to defer.

    Example::

        @hookimpl
        def slot_policy(recipe: Recipe, options: Mapping) -> SlotPolicy | None:
            if recipe.name == "mine" and options.get("remote"):
                return SlotPolicy.UNMETERED
            return None

    .. versionadded:: 0.1
    """
    raise NotImplementedError
