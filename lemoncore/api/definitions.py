"""Registering a model: a definition (``/pull``'s, ``/models/register``'s) checked and
saved as a user model. ``POST /models/register`` registers a model or collection and
downloads nothing, as Lemonade's ``Server::handle_model_register``
(``src/cpp/server/server.cpp``); ``/pull`` registers the same way, then downloads."""

from __future__ import annotations

import functools

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api import bodies, collections, replies
from lemoncore.api.bodies import parse
from lemoncore.api.errors import ApiError, json_object
from lemoncore.api.model_list import model_card
from lemoncore.api.replies import reply
from lemoncore.core import Core
from lemoncore.models.collections import RECIPES
from lemoncore.models.variants import needs_resolving
from lemoncore.options import Layer, check, declared, granted_flags, selector
from lemoncore.recipes import ModelInfo


async def define(core: Core, body: bodies.ModelDefinition, resolve: bool = True) -> ModelInfo:
    """The model ``body`` names: registered (or replaced) first when it has a
    ``checkpoint``; with ``resolve``, a Lemonade ``owner/repo:VARIANT`` checkpoint is made
    its file now (the hub is asked), else when the model is first pulled or loaded."""
    name = body.model_name
    if body.checkpoint is None:
        existing = core.models.get(name)
        if existing is None:
            raise ApiError(
                f"model {name!r} is not registered; give 'checkpoint' and 'recipe' to register it",
                404,
                code="model_not_found",
            )
        return existing
    if (collection := core.models.collection(name)) is not None:
        raise ApiError(
            f"{name!r} is the collection {collection.id}; delete it first, or give the "
            "model another name",
            409,
            code="name_taken",
            param="model_name",
        )
    try:
        model = ModelInfo(
            name=name,
            recipe=body.recipe,
            checkpoint=body.checkpoint,
            labels=tuple(body.labels),
            recipe_options=body.recipe_options,
            files=tuple(body.files),
            sha256=body.sha256,
            sizes=body.sizes,
        )
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else None
        raise ApiError(
            f"invalid model registration: {exc}", param="model_name" if field == "name" else field
        ) from exc
    recipe = core.plugins.registry.recipes.get(model.recipe)
    if recipe is None:
        raise ApiError(
            f"unknown recipe {model.recipe!r}; installed recipes: "
            f"{sorted(core.plugins.registry.recipes)}",
            param="recipe",
        )
    layer = Layer("in recipe_options", model.recipe_options)
    selector([layer])
    check(
        declared(recipe),
        layer,
        admin=False,
        section=f"recipes.{recipe.name}",
        allowed_flags=granted_flags(core.backends.configuration(recipe)),
    )
    if not resolve and needs_resolving(model.checkpoint) and not model.checkpoint.partition(":")[2]:
        raise ApiError(  # which file that is, only the hub can say
            f"checkpoint {model.checkpoint!r} names no file or variant: give one "
            f"({model.checkpoint}:Q4_K_M), or pull it (/pull registers its first GGUF)",
            param="checkpoint",
        )
    model = await core.models.resolve(model) if resolve else core.models.named(model)
    core.models.register(model)
    return model


async def register(request: Request) -> Response:
    """Register (or replace) the model or collection the body defines; nothing is
    downloaded and the hub is not asked."""
    core: Core = request.app.state.core
    body = parse(bodies.ModelDefinition, await json_object(request))
    if body.recipe in RECIPES:  # a collection's
        without_hub = functools.partial(define, resolve=False)
        collection = await collections.register(core, body, without_hub)
        card, canonical = collections.card(core, collection), collection.id
    elif body.checkpoint is None or not body.recipe:
        raise ApiError(
            "give the model's 'checkpoint' and 'recipe' (or a collection's 'recipe' and "
            "'components'); POST /api/v1/pull downloads a registered model",
            param="checkpoint" if body.checkpoint is None else "recipe",
        )
    else:
        model = await define(core, body, resolve=False)
        card, canonical = model_card(core, model), f"user.{model.name}"
    registered = replies.Registered(model_name=card.id, canonical_model_name=canonical, model=card)
    return reply(registered, exclude_none=True)  # the card as /models lists it
