"""The plugin API: everything a backend plugin, its tests and its field checks import.

::

    from lemoncore.plugin import Backend, InstallPlan, LaunchSpec, Recipe, hookimpl

This module is the stable surface (``docs/compatibility.md``): its names change only as
the compatibility policy allows. The modules they are defined in (``lemoncore.recipes``,
``lemoncore.launch``, ...) are lemoncore's internals, whose layout may change in any minor
release. Names are looked up on first use (PEP 562), so importing this module costs
nothing and a plugin pays only for what it touches: the recipe types load pydantic, the
test kit loads httpx and pytest, :class:`Gateway` the web stack. The reference,
``docs/reference.md``, is generated from :data:`__all__`.

``standin`` is a module: the toolkit stand-in engines are built from
(:mod:`lemoncore.standin`: OpenAI's answer shapes, a JSON handler, ``serve``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# name -> the module that defines it, one a line; a name that is its module's last part
# is that module itself.
_EXPORTS: dict[str, str] = {
    # hooks
    "hookimpl": "lemoncore.hookspecs.markers",
    # recipes, backends, models: data a plugin registers
    "ArgFlag": "lemoncore.recipes.recipe",
    "Backend": "lemoncore.recipes.recipe",
    "BackendContribution": "lemoncore.recipes.recipe",
    "Device": "lemoncore.recipes.kinds",
    "DeviceKind": "lemoncore.recipes.kinds",
    "Endpoint": "lemoncore.recipes.endpoints",
    "Format": "lemoncore.recipes.kinds",
    "ModelInfo": "lemoncore.recipes.modelinfo",
    "ModelType": "lemoncore.recipes.kinds",
    "OPENAI_ENDPOINTS": "lemoncore.recipes.recipe",
    "OptionScope": "lemoncore.recipes.recipe",
    "OptionSpec": "lemoncore.recipes.recipe",
    "Recipe": "lemoncore.recipes.recipe",
    "SlotPolicy": "lemoncore.recipes.kinds",
    "SupportRow": "lemoncore.recipes.recipe",
    "Tier": "lemoncore.recipes.kinds",
    "Checkpoint": "lemoncore.models.checkpoints",
    # installing and launching
    "Artifact": "lemoncore.launch",
    "Downsize": "lemoncore.launch",
    "InstallPlan": "lemoncore.launch",
    "Installed": "lemoncore.launch",
    "Installer": "lemoncore.launch",
    "LaunchContext": "lemoncore.launch",
    "LaunchSpec": "lemoncore.launch",
    "Lifecycle": "lemoncore.launch",
    "Migration": "lemoncore.launch",
    "PinRefresher": "lemoncore.launch",
    "ProgressCallback": "lemoncore.launch",
    "Runner": "lemoncore.launch",
    "ServerState": "lemoncore.launch",
    "StartupTask": "lemoncore.launch",
    "Pin": "lemoncore.lock",
    "platform_key": "lemoncore.lock",
    # running an engine process of your own (a Runner)
    "BackendProcess": "lemoncore.supervisor",
    "EngineExit": "lemoncore.exits",
    "EngineOutput": "lemoncore.outputlines",
    "StartError": "lemoncore.supervisor",
    "free_port": "lemoncore.supervisor",
    "pump_engine_output": "lemoncore.outputlines",
    "wait_healthy": "lemoncore.supervisor",
    # errors
    "ErrorShape": "lemoncore.errors",
    "InstallError": "lemoncore.errors",
    "LaunchRefused": "lemoncore.errors",
    "LemonError": "lemoncore.errors",
    "RequestRefused": "lemoncore.errors",
    # the host
    "HostDevice": "lemoncore.hosts",
    "HostInfo": "lemoncore.hosts",
    "amd_family": "lemoncore.gpus",
    "cpu_features": "lemoncore.cpus",
    "current_os": "lemoncore.hosts",
    "detect_host": "lemoncore.hosts",
    "gpus_from_names": "lemoncore.hosts",
    "missing_cpu_features": "lemoncore.cpus",
    # field checks (lemon validate)
    "CheckSkipped": "lemoncore.fieldchecks",
    "FieldCheck": "lemoncore.fieldchecks",
    "FieldContext": "lemoncore.fieldchecks",
    "FieldResult": "lemoncore.fieldchecks",
    # routes of another API surface (register_routes)
    "Gateway": "lemoncore.api.gateway",
    "LoadedModel": "lemoncore.api.replies",
    "keep_alive_seconds": "lemoncore.durations",
    "GgufArray": "lemoncore.models.gguf",
    "GgufValue": "lemoncore.models.gguf",
    "read_gguf_metadata": "lemoncore.models.gguf",
    "GgufVariant": "lemoncore.models.variants",
    "PolicyError": "lemoncore.routing.conditions",
    "RouteFeatures": "lemoncore.routing.decision",
    "decide_route": "lemoncore.routing.decision",
    "parse_route_policy": "lemoncore.routing.policy",
    "gguf_variants": "lemoncore.models.variants",
    "trained_context": "lemoncore.models.gguf",
    "RuntimeControl": "lemoncore.serving.control",
    # the test kit
    "BackendConformance": "lemoncore.validation.suite",
    "ChatConformance": "lemoncore.validation.chatsuite",
    "ConformanceTarget": "lemoncore.validation.target",
    "PluginHost": "lemoncore.plugins.host",
    "SAMPLES": "lemoncore.validation.target",
    "Sample": "lemoncore.validation.target",
    "Served": "lemoncore.validation.target",
    "ServerProcess": "lemoncore.validation.server",
    "Settings": "lemoncore.settings",
    "create_app": "lemoncore.app",
    "field_checks": "lemoncore.validation.suite",
    "running_server": "lemoncore.testing",
    "serve_app": "lemoncore.cli.serving",
    "serve_directory": "lemoncore.testing",
    "serve_hub": "lemoncore.testing",
    "standin": "lemoncore.standin",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from lemoncore import standin as standin
    from lemoncore.api.gateway import Gateway as Gateway
    from lemoncore.api.replies import LoadedModel as LoadedModel
    from lemoncore.app import create_app as create_app
    from lemoncore.cli.serving import serve_app as serve_app
    from lemoncore.cpus import cpu_features as cpu_features
    from lemoncore.cpus import missing_cpu_features as missing_cpu_features
    from lemoncore.durations import keep_alive_seconds as keep_alive_seconds
    from lemoncore.errors import ErrorShape as ErrorShape
    from lemoncore.errors import InstallError as InstallError
    from lemoncore.errors import LaunchRefused as LaunchRefused
    from lemoncore.errors import LemonError as LemonError
    from lemoncore.errors import RequestRefused as RequestRefused
    from lemoncore.exits import EngineExit as EngineExit
    from lemoncore.fieldchecks import CheckSkipped as CheckSkipped
    from lemoncore.fieldchecks import FieldCheck as FieldCheck
    from lemoncore.fieldchecks import FieldContext as FieldContext
    from lemoncore.fieldchecks import FieldResult as FieldResult
    from lemoncore.gpus import amd_family as amd_family
    from lemoncore.hookspecs.markers import hookimpl as hookimpl
    from lemoncore.hosts import HostDevice as HostDevice
    from lemoncore.hosts import HostInfo as HostInfo
    from lemoncore.hosts import current_os as current_os
    from lemoncore.hosts import detect_host as detect_host
    from lemoncore.hosts import gpus_from_names as gpus_from_names
    from lemoncore.launch import Artifact as Artifact
    from lemoncore.launch import Downsize as Downsize
    from lemoncore.launch import Installed as Installed
    from lemoncore.launch import Installer as Installer
    from lemoncore.launch import InstallPlan as InstallPlan
    from lemoncore.launch import LaunchContext as LaunchContext
    from lemoncore.launch import LaunchSpec as LaunchSpec
    from lemoncore.launch import Lifecycle as Lifecycle
    from lemoncore.launch import Migration as Migration
    from lemoncore.launch import PinRefresher as PinRefresher
    from lemoncore.launch import ProgressCallback as ProgressCallback
    from lemoncore.launch import Runner as Runner
    from lemoncore.launch import ServerState as ServerState
    from lemoncore.launch import StartupTask as StartupTask
    from lemoncore.lock import Pin as Pin
    from lemoncore.lock import platform_key as platform_key
    from lemoncore.models.checkpoints import Checkpoint as Checkpoint
    from lemoncore.models.gguf import GgufArray as GgufArray
    from lemoncore.models.gguf import GgufValue as GgufValue
    from lemoncore.models.gguf import read_gguf_metadata as read_gguf_metadata
    from lemoncore.models.gguf import trained_context as trained_context
    from lemoncore.models.variants import GgufVariant as GgufVariant
    from lemoncore.models.variants import gguf_variants as gguf_variants
    from lemoncore.outputlines import EngineOutput as EngineOutput
    from lemoncore.outputlines import pump_engine_output as pump_engine_output
    from lemoncore.plugins.host import PluginHost as PluginHost
    from lemoncore.recipes.endpoints import Endpoint as Endpoint
    from lemoncore.recipes.kinds import Device as Device
    from lemoncore.recipes.kinds import DeviceKind as DeviceKind
    from lemoncore.recipes.kinds import Format as Format
    from lemoncore.recipes.kinds import ModelType as ModelType
    from lemoncore.recipes.kinds import SlotPolicy as SlotPolicy
    from lemoncore.recipes.kinds import Tier as Tier
    from lemoncore.recipes.modelinfo import ModelInfo as ModelInfo
    from lemoncore.recipes.recipe import OPENAI_ENDPOINTS as OPENAI_ENDPOINTS
    from lemoncore.recipes.recipe import ArgFlag as ArgFlag
    from lemoncore.recipes.recipe import Backend as Backend
    from lemoncore.recipes.recipe import BackendContribution as BackendContribution
    from lemoncore.recipes.recipe import OptionScope as OptionScope
    from lemoncore.recipes.recipe import OptionSpec as OptionSpec
    from lemoncore.recipes.recipe import Recipe as Recipe
    from lemoncore.recipes.recipe import SupportRow as SupportRow
    from lemoncore.routing.conditions import PolicyError as PolicyError
    from lemoncore.routing.decision import RouteFeatures as RouteFeatures
    from lemoncore.routing.decision import decide_route as decide_route
    from lemoncore.routing.policy import parse_route_policy as parse_route_policy
    from lemoncore.serving.control import RuntimeControl as RuntimeControl
    from lemoncore.settings import Settings as Settings
    from lemoncore.supervisor import BackendProcess as BackendProcess
    from lemoncore.supervisor import StartError as StartError
    from lemoncore.supervisor import free_port as free_port
    from lemoncore.supervisor import wait_healthy as wait_healthy
    from lemoncore.testing import running_server as running_server
    from lemoncore.testing import serve_directory as serve_directory
    from lemoncore.testing import serve_hub as serve_hub
    from lemoncore.validation.chatsuite import ChatConformance as ChatConformance
    from lemoncore.validation.server import ServerProcess as ServerProcess
    from lemoncore.validation.suite import BackendConformance as BackendConformance
    from lemoncore.validation.suite import field_checks as field_checks
    from lemoncore.validation.target import SAMPLES as SAMPLES
    from lemoncore.validation.target import ConformanceTarget as ConformanceTarget
    from lemoncore.validation.target import Sample as Sample
    from lemoncore.validation.target import Served as Served


def __getattr__(name: str) -> Any:
    """``name`` imported from its module on first use, then kept here."""
    try:
        source = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = import_module(source)
    value = module if source.rpartition(".")[2] == name else getattr(module, name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
