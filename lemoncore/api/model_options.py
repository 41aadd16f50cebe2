"""``GET/POST/DELETE /api/v1/models/{id}/options``: the options saved for a model, those
its next load would use, and those it would use with nothing saved.

As Lemonade Server (``src/cpp/server/server.cpp``, ``respond_with_model_options`` and
``handle_model_options_get/_post/_delete``): ``saved`` is what ``POST`` (or a load with
``save_options``) stored; ``effective`` and ``defaults`` are every request-scope option
resolved through the chain (:mod:`lemoncore.options`: declared defaults < the recipe's
configuration < the model's ``recipe_options`` < saved), each with ``model_name`` so it
replays as a ``POST /api/v1/load`` body. ``POST`` merges its options into the saved ones
(``null``, or ``""`` for a text option, clears one; ``dry_run`` shows the result without
saving); ``DELETE`` clears them all. Saved options apply from the model's next load, and
``GET /v1/models/{id}`` shows them in ``recipe_options``. Admin-only, as every route that
changes state: ``GET`` needs the API key, ``POST`` and ``DELETE`` the admin key
(:func:`lemoncore.api.guard.may_manage`, checked by the handler: the guard's rule is by
path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pydantic import Field, JsonValue
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api.errors import ApiError, json_object
from lemoncore.api.guard import may_manage
from lemoncore.api.replies import Reply, reply
from lemoncore.core import Core
from lemoncore.options import Layer, declared, granted_flags, resolve, saved_changes
from lemoncore.recipes import ModelInfo, OptionSpec

DESCRIPTION = (
    "`saved`: what `POST` (or a load with `save_options`) stored; `effective`: what the "
    "next load uses, `defaults`: what it would use with nothing saved (each a "
    '`POST /api/v1/load` body). `POST` merges (`null`, or `""` for a text option, '
    "clears one; `dry_run` saves nothing); `DELETE` clears all. Admin-only."
)


class ModelOptions(Reply):
    model_name: str
    recipe: str
    saved: dict[str, Any] = Field(description="The options saved for the model")
    effective: dict[str, Any] = Field(
        description="What its next load uses (with `model_name`: a `POST /api/v1/load` body)"
    )
    defaults: dict[str, Any] = Field(description="What a load would use with nothing saved")
    resolved_ctx_size: int | None = Field(
        description="The context size the next load asks for; null: the model's own"
    )


def saved(core: Core, model: ModelInfo) -> dict[str, Any]:
    """The options saved for ``model`` (a cleared one is stored as ``null``: left out)."""
    return {k: v for k, v in core.models.saved_options(model.name).items() if v is not None}


def view(
    model_id: str,
    model: ModelInfo,
    specs: tuple[OptionSpec, ...],
    config: Mapping[str, Any],
    section: str,
    stored: Mapping[str, Any],
    preview: Mapping[str, Any] | None = None,
) -> ModelOptions:
    """The reply for ``model`` with ``stored`` saved (``preview``: what a ``dry_run``
    would save, which ``effective`` then shows): pure."""
    own = Layer(f"in model {model.name!r}'s recipe_options", model.recipe_options)
    kept = Layer(
        f"in the options saved for model {model.name!r}", stored if preview is None else preview
    )
    effective, _ = resolve(specs, config, [own, kept], section)
    defaults, _ = resolve(specs, config, [own], section)
    ctx = effective.get("ctx_size")
    return ModelOptions(
        model_name=model_id,
        recipe=model.recipe,
        saved=dict(stored),
        effective={**effective, "model_name": model_id},
        defaults={**defaults, "model_name": model_id},
        resolved_ctx_size=ctx if isinstance(ctx, int) and ctx > 0 else None,
    )


def _require_admin(request: Request, core: Core) -> None:
    """Refuse a change unless the request may use the management routes, as the guard
    refuses them (:func:`lemoncore.api.guard.may_manage`): a 401 without the admin key
    that is set, a 403 from another machine while none is."""
    settings = core.settings
    key = settings.admin_api_key or settings.api_key
    if may_manage(
        request.scope, key.get_secret_value() if key else None, settings.allow_remote_admin
    ):
        return
    if key:
        raise ApiError(
            "changing a model's saved options needs an admin API key: send "
            "'Authorization: Bearer <key>' or 'x-api-key: <key>'",
            401,
            code="invalid_api_key",
        )
    raise ApiError(
        "changing a model's saved options is a management call, answered only from this "
        "machine while no admin key is set: set admin_api_key (LEMON_ADMIN_API_KEY), or "
        "allow_remote_admin",
        403,
        code="remote_admin_refused",
    )


async def _answer(request: Request, change: str | None) -> Response:
    """``change``: ``None`` (``GET``), ``"merge"`` (``POST``) or ``"clear"`` (``DELETE``)."""
    core: Core = request.app.state.core
    model_id = request.path_params["model_id"]
    model = core.router.model(model_id)  # 404 for a name no model has
    recipe, backend = await core.router.backend_for(model.name)
    specs, config = declared(recipe, backend), core.backends.configuration(recipe)
    section = f"recipes.{recipe.name}"
    if change is not None:
        _require_admin(request, core)
    stored = saved(core, model)
    if change == "clear":
        if stored:
            core.models.save_options(model.name, dict.fromkeys(stored))
        stored = {}
    elif change == "merge":
        body = await json_object(request)
        dry_run = body.pop("dry_run", False)
        if not isinstance(dry_run, bool):
            raise ApiError("'dry_run' must be true or false", param="dry_run")
        body.pop("model_name", None)  # `effective` posted back names its model
        changes = saved_changes(
            specs,
            body,
            f"for model {model.name!r}",
            granted_flags(config),
            section,
        )
        merged = {k: v for k, v in {**stored, **changes}.items() if v is not None}
        if dry_run:
            return reply(view(model_id, model, specs, config, section, stored, merged))
        if changes:
            core.models.save_options(model.name, cast("dict[str, JsonValue]", changes))
        stored = merged
    return reply(view(model_id, model, specs, config, section, stored))


async def get_options(request: Request) -> Response:
    """``GET /api/v1/models/{id}/options``."""
    return await _answer(request, None)


async def post_options(request: Request) -> Response:
    """``POST /api/v1/models/{id}/options``."""
    return await _answer(request, "merge")


async def delete_options(request: Request) -> Response:
    """``DELETE /api/v1/models/{id}/options``."""
    return await _answer(request, "clear")
