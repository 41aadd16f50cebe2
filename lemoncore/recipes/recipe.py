"""Recipes, their backends and the platforms they run on, and the options both declare:
what a plugin registers with ``register_recipes`` and ``register_backends``."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lemoncore.recipes.base import Frozen
from lemoncore.recipes.kinds import Device, DeviceKind, Format, SlotPolicy, Tier


class SupportRow(Frozen):
    """One platform a backend runs on: operating systems and device kinds.

    ``devices`` maps a device kind to the GPU/NPU families supported (empty = all).
    Row order is preference order.
    """

    os: frozenset[str] = Field(min_length=1)
    devices: Mapping[DeviceKind, frozenset[str]] = Field(min_length=1)

    @field_validator("os")
    @classmethod
    def _known_os(cls, value: frozenset[str]) -> frozenset[str]:
        unknown = value - {"linux", "windows", "darwin"}
        if unknown:
            raise ValueError(f"unknown os {sorted(unknown)}; use linux, windows or darwin")
        return value


# What an engine serves unless its backend says otherwise: the OpenAI core.
OPENAI_ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})


class Backend(Frozen):
    """One way to run a recipe (a build flavour, a container, a system binary)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")  # users write it as recipe:name
    support: tuple[SupportRow, ...] = Field(min_length=1)  # where it runs, preferred first
    description: str = ""  # one line, shown by lemon backends
    tier: Tier = Tier.COMMUNITY  # claimed; core only by lemoncore's registry
    format: Format = Format.NATIVE  # a label for users
    slot_policy: SlotPolicy | None = None  # None: the recipe's
    rpc_workers: bool = False  # its engine can place layers on llama.cpp RPC workers
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description="Requests one server handles at once; the core queues the "
        "rest (None: no limit).",
    )
    options: tuple[OptionSpec, ...] = Field(
        (), description="Options of this backend only, beside its recipe's."
    )
    endpoints: frozenset[str] = Field(
        OPENAI_ENDPOINTS, description="The endpoint paths its engine serves itself."
    )

    @field_validator("options")
    @classmethod
    def _no_reserved_names(cls, value: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
        return _unreserved(value)


class OptionScope(StrEnum):
    """Who may set an option."""

    REQUEST = "request"  # a /load body, a model's recipe_options, or the configuration
    ADMIN = "admin"  # the configuration file, environment or admin CLI only


OptionType = Literal["int", "float", "bool", "str", "list", "args"]
FlagValue = Literal["switch", "int", "float", "floats", "names", "choice"]


class ArgFlag(Frozen):
    """An engine flag an ``args`` option accepts, with every spelling of it.

    ``takes``: ``switch`` (no value), ``int``/``float`` (a number, or one of
    ``choices``), ``floats`` (comma-separated numbers), ``names`` (comma-separated
    device names), ``choice`` (one of ``choices``). Nothing that takes a path or URL.
    """

    names: tuple[str, ...] = Field(min_length=1)
    takes: FlagValue = "switch"
    choices: tuple[str, ...] = ()

    @field_validator("names")
    @classmethod
    def _dashed(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not n.startswith("-") or "=" in n for n in value):
            raise ValueError(f"flag names start with '-' and have no '=': {value}")
        return value


class OptionSpec(Frozen):
    """An option of a recipe or backend: its type, bounds and who may set it.

    ``type`` defaults to the type of ``default`` (``str`` without one). ``minimum`` and
    ``maximum`` bound numbers; ``choices`` lists the allowed values. An ``args`` option
    is an engine command line that may hold only ``flags``; lemoncore adds an admin option
    ``<name>_allow`` (a list of extra flags) to widen it.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")  # a launch reads context.options[name]
    default: Any = None
    help: str = ""  # one line, shown to users
    type: OptionType = "str"
    scope: OptionScope = OptionScope.REQUEST  # admin: paths, binaries, trust settings
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    flags: tuple[ArgFlag, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _infer_type(cls, data: Any) -> Any:
        if isinstance(data, dict) and "type" not in data:
            default = data.get("default")
            inferred = next(
                (name for kind, name in _DEFAULT_TYPES if isinstance(default, kind)), "str"
            )
            data = {**data, "type": inferred}
        return data


_DEFAULT_TYPES: tuple[tuple[type, OptionType], ...] = (
    (bool, "bool"),
    (int, "int"),
    (float, "float"),
    (list, "list"),
    (tuple, "list"),
)
# Names that select or steer a load rather than configure the engine.
RESERVED_OPTION_NAMES = frozenset(
    {"backend", "model", "model_name", "pinned", "dry_run", "save_options", "stream", "keep_alive"}
)


def _unreserved(options: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
    taken = sorted({o.name for o in options} & RESERVED_OPTION_NAMES)
    if taken:
        raise ValueError(
            f"option names {taken} are reserved by lemoncore ('backend' is a "
            "selector every recipe has)"
        )
    return options


class Recipe(Frozen):
    """A family of backends that run the same kind of model files. Its name is what
    models name in ``recipe``; its options apply to every backend."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    display_name: str  # for people: lemon backends, the web UI
    backends: tuple[Backend, ...] = ()  # others may be added by other plugins
    default_device: Device = Device.GPU  # the device shown before a backend is chosen
    slot_policy: SlotPolicy = SlotPolicy.STANDARD  # how its servers count against slots
    options: tuple[OptionSpec, ...] = ()  # the engine settings a load may choose

    @field_validator("options")
    @classmethod
    def _no_reserved_names(cls, value: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
        return _unreserved(value)

    def backend(self, name: str) -> Backend | None:
        """The backend called ``name``, or ``None``."""
        return next((b for b in self.backends if b.name == name), None)


class BackendContribution(Frozen):
    """A backend a plugin adds to a recipe, possibly one another plugin owns."""

    recipe: str
    backend: Backend
