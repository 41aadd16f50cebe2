"""Why the router will not load or unload a model: its errors (:class:`RouterError`,
:class:`PinnedModel`, which :mod:`~lemoncore.serving.pins` raises) and the rules that
raise them over a plan or the catalogue. Each check raises or returns (``None``, or what
it checked); none does I/O or changes state."""

from __future__ import annotations

from collections.abc import Container

from lemoncore.errors import LaunchRefused, LemonError
from lemoncore.recipes import ModelInfo
from lemoncore.serving.planner import LoadPlan


class RouterError(LemonError):
    """A model cannot be found, loaded or unloaded."""


class PinnedModel(RouterError):
    """A caller without management rights asked to change a pinned model."""

    status, code = 403, "model_pinned"

    def __init__(self, name: str, change: str) -> None:
        super().__init__(
            f"{name} is pinned: only a request that may use management routes "
            "(with the admin key, or from this machine while no admin key is "
            f"set) may {change} it"
        )


def check_plan(found: LoadPlan) -> None:
    """Refuse a plan that cannot start: its owner's preflight or workers it cannot use
    (:class:`~lemoncore.errors.LaunchRefused`, 400), or room only a pinned model's
    eviction would make (409 ``slots_pinned_error``, type and code, as Lemonade's
    ``error_types.h`` ``SLOTS_PINNED``)."""
    if found.refusal:
        raise LaunchRefused(found.refusal)
    if found.decision.refused:
        raise RouterError(
            f"cannot load {found.model.name!r}: {found.decision.refused}",
            409,
            "slots_pinned_error",
            "slots_pinned_error",
        )


def check_model(name: str, model: ModelInfo | None, recipes: Container[str]) -> ModelInfo:
    """``model`` (the catalogue's entry for ``name``) when it exists and an installed
    plugin has its recipe (``recipes``); else 404 ``model_not_found`` or 400
    ``recipe_not_installed``."""
    if model is None:
        raise RouterError(
            f"model {name!r} not found; list models with GET /v1/models",
            404,
            code="model_not_found",
        )
    if model.recipe not in recipes:
        raise RouterError(
            f"model {name!r} needs recipe {model.recipe!r}; install its plugin",
            400,
            code="recipe_not_installed",
        )
    return model


def not_loaded(name: str) -> RouterError:
    """The error for an unload of ``name`` while it is not loaded (404)."""
    return RouterError(f"model not loaded: {name}", 404, code="model_not_loaded")
