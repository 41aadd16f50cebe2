"""The shape of an engine's launch contract (:class:`LaunchContract`, its model files and
settable environment) and the option specs contracts share; the contracts themselves are
in :mod:`lemon_plugin_oci.contracts`. Command templates take ``{model}`` (the model's path
inside the container), ``{served}``, ``{socket}``, ``{port}`` and any option name; a tuple
inside ``command`` is a group of arguments dropped when one of its values is empty."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lemoncore.plugin import OptionScope, OptionSpec

SOCKET_DIR = "/run/lemon"
SOCKET = f"{SOCKET_DIR}/engine.sock"
MODELS_DIR = "/models"

ROCM = frozenset({"/dev/kfd", "/dev/dri"})
VULKAN = frozenset({"/dev/dri"})
Argument = str | tuple[str, ...]


@dataclass(frozen=True)
class ModelFile:
    """A file (or flat directory) the engine reads, named relative to the checkpoint's
    directory: ``{file}`` is the checkpoint itself, ``{stem}`` its name without the
    suffix. ``env`` receives its path inside the container ("" : the command's
    ``{model}``)."""

    name: str
    env: str = ""
    directory: bool = False


@dataclass(frozen=True)
class EnvSetting:
    """An environment variable an administrator may set, through a typed option."""

    key: str
    option: OptionSpec


@dataclass(frozen=True)
class LaunchContract:
    """What an engine's container needs.

    ``transport`` is ``unix`` (the engine listens on ``{socket}``) or ``tcp:<port>`` (it
    listens on that port inside its network namespace, which has only ``lo``; a relay
    inside the container bridges ``{socket}`` to it). ``devices`` are classes: ``/dev/dri``
    is the chosen GPU's render node only, ``/dev/kfd`` (ROCm) adds the compute device.
    ``min_host_gib`` (RAM the engine holds itself) and ``min_device_gib`` (GPU memory)
    are checked before start; ``memory_hint`` says which setting lowers them;
    ``pins_page_cache``: while it runs, ``MemAvailable`` still counts its host part as
    free. ``relay`` is the image's program that runs lemoncore's relay script.
    ``start_timeout`` is the floor of its start budget (seconds), ``min_kernel`` the
    oldest Linux it runs on, and a ``ctx_size`` past ``native_ctx`` needs the setting of
    ``rope_env`` (:mod:`lemon_plugin_oci.requirements`).
    """

    command: tuple[Argument, ...]
    transport: str = "unix"
    health_path: str = "/health"
    devices: frozenset[str] = frozenset()
    ipc_host: bool = False
    memlock_unlimited: bool = False
    cap_add: frozenset[str] = frozenset()
    env: Mapping[str, str] = field(default_factory=dict)
    settings: tuple[EnvSetting, ...] = ()
    files: tuple[ModelFile, ...] = (ModelFile("{file}"),)
    min_host_gib: float = 0.0
    min_device_gib: float = 0.0
    memory_hint: str = ""
    pins_page_cache: bool = False
    relay: tuple[str, ...] = ("python3", "-I", "-u", "-c")
    start_timeout: float | None = None
    min_kernel: tuple[int, int] | None = None
    native_ctx: int = 0
    rope_env: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def tcp_port(self) -> int | None:
        kind, _, port = self.transport.partition(":")
        return int(port) if kind == "tcp" else None

    @property
    def env_keys(self) -> frozenset[str]:
        """Every key this contract sets: fixed, settable and model-file keys."""
        return frozenset(
            {*self.env, *(s.key for s in self.settings), *(f.env for f in self.files if f.env)}
        )


def ctx_size(default: int, maximum: int = 2**20) -> OptionSpec:
    return OptionSpec(
        name="ctx_size",
        default=default,
        minimum=256,
        maximum=maximum,
        help="Context size in tokens",
    )


def admin_int(name: str, default: int | None, minimum: int, maximum: int, help: str) -> OptionSpec:
    return OptionSpec(
        name=name,
        type="int",
        default=default,
        minimum=minimum,
        maximum=maximum,
        scope=OptionScope.ADMIN,
        help=help,
    )
