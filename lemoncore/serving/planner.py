"""What a load would do, decided from facts gathered beforehand.

:func:`plan` is pure: it reads no file and runs no subprocess. The router gathers the
:class:`Facts` first (backend statuses from the cache, whether the model's files are
present, the loaded servers), off the event loop where that needs I/O, and runs the
plugin's preflight only after planning. ``/api/v1/load`` with ``dry_run`` and ``lemon
explain`` show the same plan a load executes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lemoncore.hosts import HostInfo
from lemoncore.installs.backends import BackendStatus, choose
from lemoncore.options import Layer, declared, resolve, selector
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.serving import residency
from lemoncore.serving.eviction import Decision, Incoming, Residency, Resident, decide
from lemoncore.settings import EvictionSettings


class DecisionHooks(Protocol):
    """The plugins' fast, pure answers about a backend with options (``PluginHost``)."""

    def effective_device(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> Device: ...

    def effective_is_amd_gpu(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> bool: ...

    def slot_policy(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> SlotPolicy: ...


@dataclass(frozen=True)
class CurrentLoad:
    """How the model's current server (if any) runs: to tell a reload from a no-op."""

    backend: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Facts:
    """Everything a plan needs, gathered beforehand."""

    model: ModelInfo
    recipe: Recipe
    config: Mapping[str, Any]  # the recipe's configuration section, checked
    saved: Mapping[str, Any]  # options saved for the model
    saved_source: str  # where they are saved, for error messages
    statuses: Sequence[BackendStatus]  # the recipe's backends, as last computed
    residents: Sequence[Resident]
    loaded: CurrentLoad | None
    model_path: Path | None  # the model's file, when every file it needs is present
    max_loaded: int
    workers: tuple[str, ...] = ()  # the RPC workers configured for it (host:port)
    eviction: EvictionSettings = field(default_factory=EvictionSettings)  # auto-eviction


@dataclass(frozen=True)
class LoadPlan:
    """A load decided but not executed: resolved options, backend, hook answers, evictions."""

    model: ModelInfo
    recipe: Recipe
    backend: BackendStatus
    options: dict[str, Any]  # request scope
    config: dict[str, Any]  # admin scope
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    decision: Decision
    model_path: Path | None = None
    already_loaded: bool = False  # the model runs on this backend with these options
    reload: bool = False  # it runs otherwise, and this explicit load replaces it
    refusal: str = ""  # why it cannot load (its owner's preflight, or workers it cannot use)
    workers: tuple[str, ...] = ()  # RPC workers it places layers on
    residency: Residency = field(default_factory=Residency)  # auto-eviction options

    def incoming(self) -> Incoming:
        """The load as the eviction policy sees it."""
        return Incoming(
            self.model.name,
            self.model.model_type,
            self.device,
            self.is_amd_gpu,
            self.policy,
            self.reload,
            self.workers,
        )


def plan(
    facts: Facts,
    request: Mapping[str, Any] | None,
    hooks: DecisionHooks,
    host: HostInfo,
    explicit: bool = True,
) -> LoadPlan:
    """The load of ``facts.model`` with ``request``'s options: its options (model
    defaults < saved < request, checked; the auto-eviction ones apart,
    :mod:`~lemoncore.serving.residency`), backend, the plugins' device, AMD-ness and slot
    policy answers, and the evictions :func:`lemoncore.serving.eviction.decide` asks for. An
    ``explicit`` load (``/load``) of a model running otherwise reloads it; an implicit one
    (a request) uses it as it is."""
    model, recipe = facts.model, facts.recipe
    layers: tuple[Layer, ...] = (
        Layer(f"in model {model.name}'s recipe_options", model.recipe_options),
        Layer(
            f"in the options saved for {model.name} (remove them from "
            f"{facts.saved_source} to reset)",
            facts.saved,
        ),
        Layer("in the request", request or {}),
    )
    layers, own = residency.split(layers)
    resident_options = residency.resolve(facts.eviction, own)
    status = choose(recipe, facts.statuses, selector((Layer("", facts.config), *layers)))
    backend = status.backend
    options, admin = resolve(
        declared(recipe, backend), facts.config, layers, f"recipes.{recipe.name}"
    )
    device = hooks.effective_device(recipe, backend, options, host)
    is_amd = hooks.effective_is_amd_gpu(recipe, backend, options, host)
    policy = hooks.slot_policy(recipe, backend, options, host)
    loaded = facts.loaded
    already = (
        loaded is not None and loaded.backend == backend.name and dict(loaded.options) == options
    )
    reload = explicit and loaded is not None and not already
    incoming = Incoming(model.name, model.model_type, device, is_amd, policy, reload, facts.workers)
    refusal = (
        ""
        if backend.rpc_workers or not facts.workers
        else (
            f"{recipe.name}:{backend.name} cannot use RPC workers, and rpc_workers names "
            f"{', '.join(facts.workers)} for {model.name}: remove that entry, or load it on a "
            "llama.cpp backend"
        )
    )
    return LoadPlan(
        model,
        recipe,
        status,
        options,
        admin,
        device,
        is_amd,
        policy,
        decide(facts.residents, incoming, facts.max_loaded),
        facts.model_path,
        already,
        reload,
        refusal,
        facts.workers,
        resident_options,
    )
