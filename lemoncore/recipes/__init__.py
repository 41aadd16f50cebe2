"""Plain data that plugins contribute, immutable and validated by pydantic, so a plugin
that contributes malformed data is rejected at load with a readable error instead of
failing later. Every name is importable from here (the plugin API); by part:
:mod:`~lemoncore.recipes.kinds` (device kinds, slot policies, tiers, formats, model types),
:mod:`~lemoncore.recipes.recipe` (recipes, backends, support rows, options),
:mod:`~lemoncore.recipes.endpoints` (routed endpoints) and
:mod:`~lemoncore.recipes.modelinfo` (models).
"""

from __future__ import annotations

from lemoncore.recipes.endpoints import Endpoint, core_endpoints
from lemoncore.recipes.kinds import Device, DeviceKind, Format, ModelType, SlotPolicy, Tier
from lemoncore.recipes.modelinfo import (
    MAX_CHECKPOINT_LENGTH,
    MAX_NAME_LENGTH,
    ModelInfo,
    control_character,
    plain_text,
)
from lemoncore.recipes.recipe import (
    OPENAI_ENDPOINTS,
    RESERVED_OPTION_NAMES,
    ArgFlag,
    Backend,
    BackendContribution,
    FlagValue,
    OptionScope,
    OptionSpec,
    OptionType,
    Recipe,
    SupportRow,
)

__all__ = [
    "MAX_CHECKPOINT_LENGTH",
    "MAX_NAME_LENGTH",
    "OPENAI_ENDPOINTS",
    "RESERVED_OPTION_NAMES",
    "ArgFlag",
    "Backend",
    "BackendContribution",
    "Device",
    "DeviceKind",
    "Endpoint",
    "FlagValue",
    "Format",
    "ModelInfo",
    "ModelType",
    "OptionScope",
    "OptionSpec",
    "OptionType",
    "Recipe",
    "SlotPolicy",
    "SupportRow",
    "Tier",
    "control_character",
    "core_endpoints",
    "plain_text",
]
