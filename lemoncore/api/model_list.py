"""``GET /v1/models`` and ``GET /v1/models/{model_id}``: model cards built from the
catalogue, the model store and the recipes. The list holds downloaded models (every model
with ``show_all``), never one whose recipe only runs on an experimental backend that is
not installed. :data:`FLAG` maps a query flag's spellings to its value. An Anthropic
client (it sends ``anthropic-version``) gets both answers in Anthropic's shape
(:mod:`lemoncore.api.anthropic_models`), any other caller OpenAI's; errors take the
caller's shape as on every ``/v1`` route (:mod:`lemoncore.api.shapes`)."""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api import anthropic_models, collections, model_options, replies
from lemoncore.api.anthropic_models import AnthropicModel, PageQuery, asks_anthropic
from lemoncore.api.errors import ApiError
from lemoncore.api.replies import reply
from lemoncore.core import Core
from lemoncore.installs.backends import BackendState
from lemoncore.models.checkpoints import ModelError
from lemoncore.models.gguf import read_gguf_metadata, trained_context
from lemoncore.recipes import ModelInfo, Tier


def model_card(core: Core, model: ModelInfo) -> replies.ModelCard:
    recipe = core.plugins.registry.recipes.get(model.recipe)
    backends = [
        replies.BackendRef(name=b.name, tier=b.tier, format=b.format)
        for b in (recipe.backends if recipe else ())
    ]
    on_disk = core.models.size_on_disk(model)
    own = {**model.recipe_options, **model_options.saved(core, model)}
    size = sum(model.sizes.values()) if model.sizes else on_disk
    mmproj = model.mmproj
    return replies.ModelCard(
        id=model.name,
        checkpoint=model.checkpoint,
        checkpoints={"main": model.checkpoint, **({"mmproj": mmproj} if mmproj else {})},
        recipe=model.recipe,
        model_type=model.model_type,
        backends=backends,
        downloaded=on_disk is not None,
        deletable=core.models.deletable(model),
        suggested=model.suggested,
        labels=list(model.labels),
        aliases=list(model.aliases),
        recipe_options=own,
        context_length=context_length(core, model, own),
        max_context_window=max_context_window(core, model) if on_disk is not None else None,
        size_bytes=size,
        size=None if size is None else size / 1024**3,
    )


def max_context_window(core: Core, model: ModelInfo) -> int | None:
    """A downloaded GGUF's trained context (Lemonade's ``max_context_window``)."""
    try:
        path = core.models.local_path(model)
    except ModelError:
        return None
    # the file itself, not its name: a Hugging Face cache entry resolves to a blob
    return None if path is None else trained_context(read_gguf_metadata(path))


def context_length(core: Core, model: ModelInfo, own: dict[str, Any]) -> int | None:
    """The ``ctx_size`` the model runs with, else the one its next load would ask for
    (its own and saved options, the recipe's configuration, the declared default);
    ``None`` when that is 0 (the model's own) or the recipe has none. As Lemonade's
    ``Server::resolve_context_length`` (``src/cpp/server/server.cpp``)."""
    server = core.router.loaded(model.name)
    recipe = core.plugins.registry.recipes.get(model.recipe)
    if server is not None:
        found: Any = server.options.get("ctx_size")
    elif "ctx_size" in own:
        found = own["ctx_size"]
    elif recipe is None:
        found = None
    else:
        config = core.backends.configuration(recipe)
        spec = next((s for s in recipe.options if s.name == "ctx_size"), None)
        found = config.get("ctx_size", spec.default if spec else None)
    ok = isinstance(found, int) and not isinstance(found, bool) and found > 0
    return found if ok else None


async def list_models(request: Request) -> Response:
    """Downloaded models (with ``show_all``, every model), except models that only run on
    an experimental backend that is not installed yet; for an Anthropic client, the page
    its query asks for."""
    core: Core = request.app.state.core
    show_all = _flag(request, "show_all")
    query = PageQuery.of(request.query_params)  # checked whoever asks: it is documented
    models = list(core.models.all().values())
    # a card looks for the model's files: thousands of them are seconds of file system
    # calls, which must not stall the event loop's streams
    cards = await anyio.to_thread.run_sync(_cards, core, models)
    cards += [collections.card(core, c) for c in core.models.collections()]
    listed = [c for c in cards if show_all or c.downloaded]
    listed += _alias_rows(core, {c.id: c for c in listed})
    if asks_anthropic(request.headers):
        return reply(anthropic_models.page(listed, query))
    # size_bytes is absent, not null, when unknown (nothing else in a card is None)
    return reply(replies.ModelList(data=listed), exclude_none=True)


def _alias_rows(core: Core, listed: dict[str, replies.ModelCard]) -> list[replies.ModelCard]:
    """A row per run-time alias whose target is listed, as its target's card under the
    alias's name (Lemonade's ``handle_models``); an alias that is a listed id adds none."""
    rows = []
    for alias in core.models.aliases.all():
        target = core.models.get(alias)
        if alias not in listed and target is not None and target.name in listed:
            rows.append(listed[target.name].model_copy(update={"id": alias}))
    return rows


def _cards(core: Core, models: list[ModelInfo]) -> list[replies.ModelCard]:
    hidden = _experimental_only_recipes(core)
    return [
        model_card(core, m)
        for m in models
        if m.recipe in core.plugins.registry.recipes and m.recipe not in hidden
    ]


FLAG = {
    "": False,
    "0": False,
    "false": False,
    "no": False,  # a query flag's spellings
    "1": True,
    "true": True,
    "yes": True,
}


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "").lower()
    if value not in FLAG:
        raise ApiError(f"invalid query parameter {name!r}: true or false", param=name)
    return FLAG[value]


def _experimental_only_recipes(core: Core) -> set[str]:
    """Recipes whose only usable backends are experimental and none is installed."""
    hidden = set()
    for recipe in core.plugins.registry.recipes.values():
        statuses = [
            s for s in core.backends.statuses(recipe) if s.state is not BackendState.UNSUPPORTED
        ]
        if all(s.backend.tier is Tier.EXPERIMENTAL for s in statuses) and not any(
            s.state is BackendState.INSTALLED for s in statuses
        ):
            hidden.add(recipe.name)
    return hidden


async def get_model(request: Request) -> Response:
    """The model named (or an alias of it): its card, or Anthropic's model object."""
    core: Core = request.app.state.core
    name = request.path_params["model_id"]
    collection = core.models.collection(name)
    card = (
        collections.card(core, collection)
        if collection
        else model_card(core, core.router.model(name))
    )
    if core.models.aliases.resolve(name) is not None:  # a run-time alias answers as itself
        card = card.model_copy(update={"id": name.removesuffix(":latest")})
    if asks_anthropic(request.headers):
        return reply(AnthropicModel.of(card))
    return reply(card, exclude_none=True)
