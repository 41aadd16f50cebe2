"""``GET /api/v1/system-info``: the host, its devices, each recipe with its backends'
states, and the plugins; Lemonade's keys first (``SystemInfo::get_system_info_dict``,
``src/cpp/server/system_info.cpp``)."""

from __future__ import annotations

import os
import platform
from typing import Literal

import anyio
from pydantic import ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from lemoncore import __version__
from lemoncore.api.replies import Reply, reply
from lemoncore.core import Core
from lemoncore.installs.backends import BackendState
from lemoncore.recipes import Device, DeviceKind, Format, OptionSpec, SlotPolicy, Tier


class HostDeviceInfo(Reply):
    name: str
    family: str
    index: int


class SupportInfo(Reply):
    os: list[str]
    devices: dict[DeviceKind, list[str]]


class BackendInfo(Reply):
    state: BackendState
    message: str
    action: str = Field(description="The fix, when the backend needs one")
    version: str
    tier: Tier
    format: Format
    description: str
    devices: list[DeviceKind]
    support: list[SupportInfo]


class RecipeInfo(Reply):
    display_name: str
    plugin: str | None
    default_backend: str | None
    default_device: Device
    slot_policy: SlotPolicy
    options: list[OptionSpec] = Field(description="Options loads and models may set")
    backends: dict[str, BackendInfo]


class PluginInfo(Reply):
    name: str
    status: Literal["loaded", "failed", "disabled"]
    version: str
    distribution: str
    error: str
    warnings: list[str]
    recipes: list[str]
    hooks: list[str]
    tiers: dict[str, Tier] = Field(description="`recipe:backend` to the tier granted")


class SystemInfo(Reply):
    """Lemonade's keys (``SystemInfo::get_system_info_dict``), then lemoncore's."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True)
    os_version: str = Field(alias="OS Version")
    processor: str = Field(alias="Processor")
    physical_memory: str = Field(alias="Physical Memory", description="As `31.25 GB`")
    version: str
    os: str
    devices: dict[DeviceKind, list[HostDeviceInfo]]
    recipes: dict[str, RecipeInfo]
    plugins: list[PluginInfo]


def system_info_data(core: Core) -> SystemInfo:
    # every kind, as Lemonade lists amd_gpu and amd_npu even when there are none
    devices: dict[DeviceKind, list[HostDeviceInfo]] = {k: [] for k in DeviceKind}
    for d in core.host.devices:
        devices.setdefault(d.kind, []).append(
            HostDeviceInfo(name=d.name, family=d.family, index=d.index)
        )
    recipes: dict[str, RecipeInfo] = {}
    for recipe in core.plugins.registry.recipes.values():
        statuses = core.backends.statuses(recipe)
        supported = [st for st in statuses if st.state is not BackendState.UNSUPPORTED]
        default = next(
            (st for st in supported if st.state is BackendState.INSTALLED),
            supported[0] if supported else None,
        )
        recipes[recipe.name] = RecipeInfo(
            display_name=recipe.display_name,
            plugin=core.plugins.registry.owners.get(recipe.name),
            default_backend=default.backend.name if default else None,
            default_device=recipe.default_device,
            slot_policy=recipe.slot_policy,
            options=list(recipe.options),
            backends={st.backend.name: BackendInfo.model_validate(st.as_dict()) for st in statuses},
        )
    cpu = next((d.name for d in core.host.devices if d.kind is DeviceKind.CPU), "")
    return SystemInfo.model_validate(
        {
            "OS Version": platform.platform(),
            "Processor": cpu or platform.processor() or "unknown",
            "Physical Memory": physical_memory(),
            "version": __version__,
            "os": core.host.os,
            "devices": devices,
            "recipes": recipes,
            "plugins": [PluginInfo.model_validate(r.as_dict()) for r in core.plugins.records],
        }
    )


def physical_memory() -> str:
    """This machine's memory as Lemonade writes it (``get_physical_memory``: ``31.25
    GB``), "unknown" where the system does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return "unknown"
    return f"{total / 1024**3:.2f} GB"


async def system_info(request: Request) -> Response:
    core: Core = request.app.state.core
    return reply(await anyio.to_thread.run_sync(system_info_data, core))
