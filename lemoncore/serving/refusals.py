"""Why the router will not load or unload a model: its errors (:class:`RouterError`,
:class:`PinnedModel`) and the rules that raise them, over a plan and the pins. Each check
raises or returns (``None``, or what it checked); none does I/O or changes state."""

from __future__ import annotations

from collections.abc import Container, Mapping, Set
from typing import Any

from lemoncore.errors import LaunchRefused, LemonError
from lemoncore.recipes import ModelInfo
from lemoncore.serving.planner import LoadPlan


class RouterError(LemonError):
    """A model cannot be found, loaded or unloaded."""


class PinnedModel(RouterError):
    """A caller without management rights asked to change a pinned model."""

    status, code = 403, "model_pinned"

    def __init__(self, name: str, change: str) -> None:
        super().__init__(f"{name} is pinned: only a request that may use management routes "
                         "(with the admin key, or from this machine while no admin key is "
                         f"set) may {change} it")


def check_load_pin(pins: Set[str], found: LoadPlan, running: bool, pinned: bool | None,
                   request: Mapping[str, Any] | None, manage: bool) -> None:
    """Without ``manage``, a model in ``pins`` is neither reloaded with other options,
    unpinned (``pinned`` False), nor started (not ``running``: after a crash) with the
    request's options: :class:`PinnedModel`."""
    if not manage and found.model.name in pins and (
            found.reload or pinned is False or (not running and request)):
        raise PinnedModel(found.model.name, "reload with other options or unpin")


def check_unload_pin(pins: Set[str], name: str, manage: bool) -> None:
    """Without ``manage``, a model in ``pins`` is not unloaded: :class:`PinnedModel`."""
    if not manage and name in pins:
        raise PinnedModel(name, "unload")


def check_plan(found: LoadPlan) -> None:
    """Refuse a plan that cannot start: its owner's preflight or workers it cannot use
    (:class:`~lemoncore.errors.LaunchRefused`, 400), or room only a pinned model's
    eviction would make (409 ``slots_pinned``)."""
    if found.refusal:
        raise LaunchRefused(found.refusal)
    if found.decision.refused:
        raise RouterError(f"cannot load {found.model.name!r}: {found.decision.refused}", 409,
                          "slots_pinned_error", "slots_pinned")


def check_model(name: str, model: ModelInfo | None, recipes: Container[str]) -> ModelInfo:
    """``model`` (the catalogue's entry for ``name``) when it exists and an installed
    plugin has its recipe (``recipes``); else 404 ``model_not_found`` or 400
    ``recipe_not_installed``."""
    if model is None:
        raise RouterError(f"model {name!r} not found; list models with GET /v1/models", 404,
                          code="model_not_found")
    if model.recipe not in recipes:
        raise RouterError(f"model {name!r} needs recipe {model.recipe!r}; install its "
                          "plugin", 400, code="recipe_not_installed")
    return model


def not_loaded(name: str) -> RouterError:
    """The error for an unload of ``name`` while it is not loaded (404)."""
    return RouterError(f"model not loaded: {name}", 404, code="model_not_loaded")
