"""What loading plugins produces, and the rules that merge it: each plugin's load record,
what one plugin contributes, and the registry those merge into (recipes with their
backends' owners and vetted tiers, catalogue models, locks, endpoints, routes, error
shapes, field checks), where a contribution that clashes or names a missing recipe is skipped with a
warning on its plugin's record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from starlette.routing import BaseRoute

from lemoncore import routevet
from lemoncore.errors import ErrorShape, PluginError
from lemoncore.fieldchecks import FieldCheck
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Endpoint,
    ModelInfo,
    Recipe,
    Tier,
    core_endpoints,
)
from lemoncore.tiers import core_granted


class PluginRecordJson(TypedDict):
    """A :class:`PluginRecord` as ``lemon plugins --json`` and ``/api/v1/system-info``
    show it."""

    name: str
    status: str
    version: str
    distribution: str
    error: str
    warnings: list[str]
    recipes: list[str]
    hooks: list[str]
    tiers: dict[str, str]


@dataclass
class PluginRecord:
    name: str
    status: str  # loaded | failed | disabled
    version: str = ""
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    recipes: list[str] = field(default_factory=list)
    distribution: str = ""
    hooks: list[str] = field(default_factory=list)
    tiers: dict[str, str] = field(default_factory=dict)  # recipe:backend -> tier

    def as_dict(self) -> PluginRecordJson:
        return {
            "name": self.name,
            "status": self.status,
            "version": self.version,
            "distribution": self.distribution,
            "error": self.error,
            "warnings": self.warnings,
            "recipes": self.recipes,
            "hooks": self.hooks,
            "tiers": self.tiers,
        }


@dataclass
class Registry:
    """Recipes (with backends from every plugin) and catalogue models, merged."""

    recipes: dict[str, Recipe] = field(default_factory=dict)
    models: dict[str, ModelInfo] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # recipe -> plugin
    backend_owners: dict[tuple[str, str], str] = field(default_factory=dict)
    locks: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    endpoints: dict[str, Endpoint] = field(
        default_factory=lambda: {e.path: e for e in core_endpoints()}
    )
    routes: list[BaseRoute] = field(default_factory=list)  # plugins' own API surfaces
    # (plugin, check) for lemon validate; a plugin's checks run only for its backends
    field_checks: list[tuple[str, FieldCheck]] = field(default_factory=list)
    # (plugin, shape) in load order: the first that covers a path answers its errors
    error_shapes: list[tuple[str, ErrorShape]] = field(default_factory=list)

    def endpoints_tuple(self) -> tuple[Endpoint, ...]:
        return tuple(self.endpoints.values())


@dataclass
class Contributions:
    """What one plugin's registration hooks returned, each item checked for its type."""

    recipes: list[Recipe]
    backends: list[BackendContribution]
    models: list[ModelInfo]
    locks: list[Mapping[str, Any]]
    endpoints: list[Endpoint]
    routes: list[BaseRoute]
    field_checks: list[FieldCheck]
    error_shapes: list[ErrorShape] = field(default_factory=list)


def merge_recipes(reg: Registry, record: PluginRecord, recipes: Iterable[Recipe]) -> None:
    """Add a plugin's own recipes as its plugin loads; a name another plugin registered is
    a :class:`PluginError` (the plugin fails) and adds none of them."""
    for recipe in recipes:
        if recipe.name in reg.recipes:
            raise PluginError(
                f"recipe {recipe.name!r} is already registered by plugin "
                f"{reg.owners[recipe.name]!r}"
            )
    for recipe in recipes:
        vetted = recipe.model_copy(
            update={"backends": tuple(vet_tier(record, recipe.name, b) for b in recipe.backends)}
        )
        reg.recipes[recipe.name] = vetted
        reg.owners[recipe.name] = record.name
        for backend in recipe.backends:
            reg.backend_owners[recipe.name, backend.name] = record.name


def merge_contributions(reg: Registry, record: PluginRecord, contrib: Contributions) -> None:
    """Add the rest of a loaded plugin's contributions once every plugin's recipes are in:
    locks, backends for any plugin's recipe, models, endpoints, field checks, routes and
    error shapes. What clashes or has no recipe is skipped, with a warning on
    ``record``; so is an error shape's path or prefix that lemoncore owns."""
    reg.locks += [(record.name, data) for data in contrib.locks]
    for c in contrib.backends:
        recipe = reg.recipes.get(c.recipe)
        if recipe is None:
            record.warnings.append(
                f"backend {c.backend.name!r} skipped: recipe {c.recipe!r} is not installed"
            )
        elif recipe.backend(c.backend.name) is not None:
            record.warnings.append(f"backend {c.recipe}:{c.backend.name} skipped: already defined")
        else:
            reg.recipes[c.recipe] = recipe.model_copy(
                update={"backends": (*recipe.backends, vet_tier(record, c.recipe, c.backend))}
            )
            reg.backend_owners[c.recipe, c.backend.name] = record.name
    for model in contrib.models:
        if model.recipe not in reg.recipes:
            record.warnings.append(
                f"model {model.name!r} skipped: recipe {model.recipe!r} is not installed"
            )
        else:
            reg.models[model.name] = model
    for endpoint in contrib.endpoints:
        if endpoint.path in reg.endpoints or endpoint.path.startswith("/api/v1/"):
            record.warnings.append(f"endpoint {endpoint.path} skipped: already routed")
        else:
            reg.endpoints[endpoint.path] = endpoint
    reg.field_checks += [(record.name, check) for check in contrib.field_checks]
    taken = {*reg.endpoints, *core_routes()}
    for route in contrib.routes:
        why = routevet.refusal(route, taken)
        if why:
            record.warnings.append(f"route {routevet.describe(route)} skipped: {why}")
        else:
            reg.routes.append(route)
    for shape in contrib.error_shapes:
        owned = [p for p in (*shape.paths, *shape.prefixes) if routevet.reserved(p, reg.endpoints)]
        if owned:
            record.warnings.append(
                f"error shape for {', '.join(owned)} skipped there: "
                "lemoncore's own paths answer in lemoncore's shapes"
            )
        reg.error_shapes.append((record.name, shape))


def core_routes() -> tuple[str, ...]:
    """The paths of lemoncore's own operations (not the routed endpoints), as routed."""
    from lemoncore.api.openapi import OPERATIONS  # the route table, with every handler

    return tuple(path for op in OPERATIONS for path in op.routes)


def vet_tier(record: PluginRecord, recipe: str, backend: Backend) -> Backend:
    """Plugins declare their tier, but ``core`` only where lemoncore's registry grants it."""
    name = f"{recipe}:{backend.name}"
    if backend.tier is Tier.CORE and not core_granted(record.distribution, name):
        record.warnings.append(
            f"{name} claims tier core, which only lemoncore's registry "
            "grants; it is listed as community"
        )
        backend = backend.model_copy(update={"tier": Tier.COMMUNITY})
    record.tiers[name] = backend.tier.value
    return backend
