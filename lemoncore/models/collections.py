"""Collections: several registered models served under one name, Lemonade's
``collection.omni`` (a bundle loaded together; requests go to its first chat model) and
``collection.router`` (each request goes to the component its routing policy picks).

:class:`Collection` is the record; :func:`refusal` is Lemonade's registration gate
(``ModelManager::validate_collection_request``, ``src/cpp/server/model_manager.cpp``),
a pure function over the request and what is registered. A collection is always a user
model: its public id is ``user.<name>`` (the bare name resolves too), and its components
are leaf models, never collections.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import Field, JsonValue

from lemoncore.recipes.base import Frozen

OMNI, ROUTER = "collection.omni", "collection.router"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")  # a collection's bare name
RECIPES = (OMNI, ROUTER)
MAX_COMPONENTS = 64


class Collection(Frozen):
    """A collection as registered: ``components`` are the registered names of its
    models, in order; ``version`` and ``routing`` are a router's policy document (checked
    by the routing policy's parser when it registers), ``system_prompt`` an omni's own
    prompt template, each kept verbatim."""

    name: str = Field(pattern=f"^{NAME.pattern}$")  # bare, no user.
    recipe: Literal["collection.omni", "collection.router"]
    components: tuple[str, ...] = Field(min_length=1, max_length=MAX_COMPONENTS)
    system_prompt: str | None = None
    version: str | None = None
    routing: Mapping[str, JsonValue] | None = None

    @property
    def id(self) -> str:
        """Its public id: collections list under ``user.<name>`` (Lemonade #2788)."""
        return f"user.{self.name}"


def bare(name: str) -> str:
    """A name without Lemonade's ``user.`` prefix (``bare_component_name``)."""
    return name.removeprefix("user.")


Kind = Literal["model", "collection"]


def refusal(
    name: str,
    components: Sequence[JsonValue] | None,
    models: Sequence[JsonValue] | None,
    registered: Callable[[str], Kind | None],
) -> str | None:
    """Why a collection named ``name`` with these ``components`` (and inline ``models``
    definitions) cannot register, in Lemonade's words, or ``None``. ``registered`` says
    what a name is now: a model, a collection, or nothing."""
    if not name.startswith("user.") or not NAME.fullmatch(bare(name)):
        return (  # Server::validate_model_registration_name
            "Registered model definitions must use a non-empty `user.*` name, for "
            f"example `user.Phi-4-Mini-GGUF`. Received: {name}"
        )
    if registered(bare(name)) == "model":
        return (
            f"Cannot register collection '{name}': a model is named '{bare(name)}'; "
            "give the collection another name"
        )
    if not components:
        return "Collection recipe requires a non-empty 'components' array"
    if len(components) > MAX_COMPONENTS:
        return f"components: at most {MAX_COMPONENTS} models"
    defs = inline_definitions(models)
    for component in components:
        if not isinstance(component, str):
            return "components entries must be strings"
        short = bare(component)
        if short == bare(name):
            return f"Collection cannot reference itself: {component}"
        found = defs.get(short)
        kind = registered(component)  # as given: user.X names a user model only
        nested = "collection" in (kind, registered(short))
        if nested or (found is not None and found.get("recipe") in RECIPES):
            return f"Collection components must be regular models, not collections: '{component}'"
        if models is not None and kind is None:
            if found is None:
                return (
                    f"Inline collection component '{component}' has no matching "
                    "definition in 'models' and is not a registered model. Every "
                    "component must be defined inline (matching 'model_name') or "
                    "reference an already-registered model."
                )
            if not complete(found):
                return (
                    f"Inline collection component '{component}' has an incomplete "
                    "definition in 'models' (a recipe and at least one checkpoint are "
                    "required)."
                )
        elif kind is None:
            return (
                f"Collection component not registered: '{component}'. Pull or "
                "register it before referencing it in a collection."
            )
    return None


def inline_definitions(models: Sequence[JsonValue] | None) -> dict[str, Mapping[str, JsonValue]]:
    """The ``models`` array by bare name (its ``model_name``, else ``id``); entries that
    are not objects or have neither are left out, as Lemonade's ``inline_def_name``."""
    found: dict[str, Mapping[str, JsonValue]] = {}
    for entry in models or ():
        if not isinstance(entry, dict):
            continue
        key = next((entry[k] for k in ("model_name", "id") if isinstance(entry.get(k), str)), None)
        if isinstance(key, str):
            found.setdefault(bare(key), entry)
    return found


def complete(definition: Mapping[str, JsonValue]) -> bool:
    """A usable inline definition: a recipe and at least one checkpoint
    (``collection_component_def_is_valid``)."""
    checkpoints = definition.get("checkpoints")
    main = definition.get("checkpoint") or (
        checkpoints.get("main") if isinstance(checkpoints, dict) else None
    )
    return bool(definition.get("recipe")) and isinstance(main, str) and bool(main)
