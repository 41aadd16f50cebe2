"""lemon-plugin-llamacpp: llama.cpp's ``llama-server`` as the ``llamacpp`` recipe.

Device, AMD-ness and slot policy come from the support rows through lemoncore's central
derivation (cpu backends -> cpu; vulkan/cuda -> gpu; rocm -> AMD GPU), so this plugin
implements no decision hooks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any

from lemoncore.plugin import (
    Backend,
    FieldCheck,
    HostInfo,
    InstallPlan,
    LaunchContext,
    LaunchSpec,
    ModelInfo,
    Pin,
    Recipe,
    Runner,
    hookimpl,
)

from lemon_plugin_llamacpp.install import prebuilt_plan, pypi_plan, release_plan, system_plan
from lemon_plugin_llamacpp.launch import (
    build_launch,
    on_unix_socket,
    prebuilt_launch,
    refuse_unapplicable,
    user_args,
)
from lemon_plugin_llamacpp.recipe import RECIPE
from lemon_plugin_llamacpp.stopword import ask_for_stop_word
from lemon_plugin_llamacpp.validate import FIELD_CHECKS


@hookimpl
def register_recipes() -> Sequence[Recipe]:
    return [RECIPE]


@hookimpl
def register_models() -> Sequence[ModelInfo]:
    raw = json.loads(files(__package__).joinpath("catalogue.json").read_text())
    return [ModelInfo.model_validate(m) for m in raw]


@hookimpl
def register_field_checks() -> Sequence[FieldCheck]:
    return FIELD_CHECKS


@hookimpl
def register_lock() -> Mapping[str, Any]:
    lock: Mapping[str, Any] = json.loads(files(__package__).joinpath("lock.json").read_text())
    return lock


@hookimpl
def install(
    backend: Backend, host: HostInfo, config: Mapping[str, Any], pin: Pin | None
) -> InstallPlan:
    if backend.name == "pypi":
        return pypi_plan()
    if backend.name == "prebuilt":
        return prebuilt_plan(host)
    if backend.name == "system":
        return system_plan(config)
    return release_plan(backend.name, host, pin)


@hookimpl
def preflight(backend: Backend, options: Mapping[str, Any]) -> None:
    """Refuse ``llamacpp_args`` the launch would refuse, before a server it would replace
    is stopped."""
    refuse_unapplicable(backend.name, user_args(str(options.get("llamacpp_args") or "")))


@hookimpl
def launch(backend: Backend, model: ModelInfo, context: LaunchContext) -> LaunchSpec | Runner:
    if backend.name == "prebuilt":
        return prebuilt_launch(model, context)
    spec = build_launch(model, context)
    return on_unix_socket(model, spec, context) or spec


@hookimpl
def normalize_request(endpoint: str, body: dict[str, Any], surface: str) -> None:
    ask_for_stop_word(endpoint, body, surface)
