"""lemon-plugin-vte: VTE (``vte-server``), a native AMD RDNA3 engine for Windows.

The core derives device (GPU) and AMD-ness (true) from the single ``amd_gpu`` support
row, and the recipe's ``exclusive_gpu`` policy keeps VTE alone on the AMD GPU, so this
plugin implements no decision hooks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from lemoncore.plugin import (
    FieldCheck,
    HostInfo,
    InstallPlan,
    LaunchContext,
    LaunchRefused,
    LaunchSpec,
    ModelInfo,
    Pin,
    Recipe,
    hookimpl,
)

from lemon_plugin_vte.devices import assess
from lemon_plugin_vte.gguf_check import check_gguf
from lemon_plugin_vte.launch import build_launch
from lemon_plugin_vte.recipe import MODELS, RECIPE
from lemon_plugin_vte.request import normalize
from lemon_plugin_vte.validate import FIELD_CHECKS


@hookimpl
def register_recipes() -> Sequence[Recipe]:
    return [RECIPE]


@hookimpl
def register_models() -> Sequence[ModelInfo]:
    return MODELS


@hookimpl
def register_lock() -> Mapping[str, Any]:
    lock: Mapping[str, Any] = json.loads(files(__package__).joinpath("lock.json").read_text())
    return lock


@hookimpl
def install(host: HostInfo, config: Mapping[str, Any], pin: Pin | None) -> InstallPlan:
    verdict = assess(host, config.get("device_index"))
    if not verdict.supported:
        return InstallPlan("", message=verdict.message, unsupported=True)
    if pin is None:
        return InstallPlan(
            "",
            message="no vte-server build is pinned for this platform",
            action="use another recipe",
        )
    return InstallPlan(pin.version, pin.artifacts, runtime="rocm", message=verdict.message)


@hookimpl
def preflight(model_path: Path, config: Mapping[str, Any], host: HostInfo) -> None:
    """Refuse, before anything is evicted, a model VTE cannot run or a host it refuses."""
    check_gguf(model_path)
    verdict = assess(host, config.get("device_index"))
    if not verdict.supported:
        raise LaunchRefused(verdict.message)


@hookimpl
def register_field_checks() -> Sequence[FieldCheck]:
    return FIELD_CHECKS


@hookimpl
def launch(context: LaunchContext, host: HostInfo) -> LaunchSpec:
    return build_launch(context, host)


@hookimpl
def normalize_request(endpoint: str, body: dict[str, Any]) -> None:
    """What vte-server reads (``lemon_plugin_vte.request.normalize``)."""
    normalize(endpoint, body)
