"""Collections over HTTP: registering one through ``/pull``, its card in ``/models``,
``/load`` and ``/delete`` of one. What a collection is, and the registration gate, are
:mod:`lemoncore.models.collections`; which component a request goes to is
:mod:`lemoncore.api.collection_dispatch`.

As Lemonade's ``Server::register_model_definition_internal`` and
``ModelManager::register_components`` (``src/cpp/server/server.cpp``,
``model_manager.cpp``): inline ``models`` definitions of components that are not
registered are registered first, as user models; the collection keeps each component's
name as given (its policy names them so) and lists each by its public name; a collection is
``downloaded`` when every component is. ``/load`` of an omni collection loads its
components; of a router collection, nothing (it is virtual: each request loads the
component it is routed to). ``/delete`` forgets the collection, never its components.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lemoncore.api import replies
from lemoncore.api.bodies import ModelDefinition, parse
from lemoncore.api.errors import ApiError
from lemoncore.core import Core
from lemoncore.launch import ProgressCallback
from lemoncore.models.collections import (
    RECIPES,
    ROUTER,
    Collection,
    Kind,
    bare,
    inline_definitions,
    refusal,
)
from lemoncore.models.routing import policy_refusal
from lemoncore.recipes import ModelInfo, ModelType

Register = Callable[[Core, ModelDefinition], Awaitable[ModelInfo]]


def asks_collection(core: Core, body: ModelDefinition) -> bool:
    """Whether a ``/pull`` registers a collection, or pulls a registered one by name."""
    if body.recipe in RECIPES:
        return True
    by_name = body.checkpoint is None and not body.recipe
    return by_name and core.models.collection(body.model_name) is not None


def kind(core: Core, name: str) -> Kind | None:
    if core.models.collection(name) is not None:
        return "collection"
    return "model" if core.models.get(name) is not None else None


async def register(core: Core, body: ModelDefinition, register_model: Register) -> Collection:
    """The collection a ``/pull`` (or ``/models/register``) names, registered (or replaced)
    first when the body defines one; a 400 in Lemonade's words for what the gate refuses."""
    name = body.model_name
    if body.recipe not in RECIPES:
        found = core.models.collection(name)
        assert found is not None  # asks_collection
        return found
    why = refusal(name, body.components, body.models, lambda n: kind(core, n))
    if why:
        raise ApiError(why, param="components")
    assert body.components is not None
    candidate = Collection(
        name=bare(name),
        recipe=body.recipe,  # one of RECIPES, checked above
        components=tuple(body.components),
        system_prompt=body.system_prompt,
        version=body.version,
        routing=body.routing,
    )
    if candidate.recipe == ROUTER and (why := policy_refusal(candidate)):
        raise ApiError(why, param="routing")
    defs = inline_definitions(body.models)
    added: list[str] = []
    try:
        for component in candidate.components:
            if core.models.get(component) is None:  # defined inline (the gate checked it)
                definition = {**defs[bare(component)], "model_name": f"user.{bare(component)}"}
                added.append((await register_model(core, parse(ModelDefinition, definition))).name)
        core.models.register_collection(candidate)
    except BaseException:  # refused whole: no component of it stays registered
        for name in added:
            core.models.unregister(name)
        raise
    return candidate


def members(core: Core, collection: Collection) -> list[ModelInfo]:
    """The collection's components that are registered now, in order."""
    return [m for name in collection.components if (m := core.models.get(name)) is not None]


async def fetch(
    core: Core, collection: Collection, progress: ProgressCallback | None
) -> replies.PullResult:
    """Download every component that is not downloaded yet."""
    for model in members(core, collection):
        await core.models.pull(model, progress)
    return replies.PullResult(model_name=collection.id, path="")


def card(core: Core, collection: Collection) -> replies.ModelCard:
    """A collection's model card: no checkpoint or backends of its own; downloaded when
    every component is."""
    models = members(core, collection)
    downloaded = len(models) == len(collection.components) and all(
        core.models.local_path(m) is not None for m in models
    )
    return replies.ModelCard(
        id=collection.id,
        checkpoint="",
        checkpoints={"main": ""},
        recipe=collection.recipe,
        model_type=models[0].model_type if models else ModelType.LLM,  # its first's
        backends=[],
        downloaded=downloaded,
        deletable=True,
        suggested=False,
        labels=[],
        aliases=[collection.name],
        recipe_options={},
        components=[m.name for m in models],
        system_prompt=collection.system_prompt,
        version=collection.version,
        routing=dict(collection.routing) if collection.routing is not None else None,
    )


async def load(core: Core, collection: Collection) -> replies.CollectionLoaded:
    """Load an omni collection's components; a router collection loads nothing."""
    if collection.recipe != ROUTER:
        for model in members(core, collection):
            await core.router.load(model.name, {})
    return replies.CollectionLoaded(model_name=collection.id, recipe=collection.recipe)


def delete(core: Core, collection: Collection) -> replies.Done:
    core.models.unregister_collection(collection.name)
    return replies.Done(message=f"deleted {collection.id}")
