"""The collection registration gate (:func:`lemoncore.models.collections.refusal`):
Lemonade's ``validate_collection_request`` messages, over what is registered."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from lemoncore.models.collections import Collection, Kind, inline_definitions, refusal

REGISTERED: dict[str, Kind] = {"Tiny": "model", "Kit": "collection", "user.Mine": "model"}
GOOD: JsonValue = {"model_name": "New", "recipe": "llamacpp", "checkpoints": {"main": "o/r:Q4"}}


def gate(
    name: str, components: list[JsonValue] | None, models: list[JsonValue] | None = None
) -> str | None:
    return refusal(name, components, models, REGISTERED.get)


def test_a_collection_of_registered_models_passes() -> None:
    assert gate("user.C", ["Tiny", "user.Mine"]) is None


def test_inline_definitions_register_what_is_not_registered() -> None:
    assert gate("user.C", ["Tiny", "New"], [GOOD]) is None
    assert gate("user.C", ["Tiny", "New"], [{**GOOD, "model_name": "user.New"}]) is None


@pytest.mark.parametrize(
    ("name", "components", "models", "words"),
    [
        ("C", ["Tiny"], None, "`user.*` name"),
        ("user.C", [], None, "non-empty 'components'"),
        ("user.C", None, None, "non-empty 'components'"),
        ("user.C", ["Nope"], None, "not registered: 'Nope'"),
        ("user.C", ["user.C"], None, "cannot reference itself"),
        ("user.C", ["C"], [{"model_name": "C", "recipe": "collection.omni"}], "itself"),
        ("user.C", ["Kit"], None, "not collections: 'Kit'"),
        ("user.C", ["N"], [{"model_name": "N", "recipe": "collection.router"}], "not collections"),
        ("user.C", ["New", "Gone"], [GOOD], "no matching definition"),
        ("user.C", ["New"], [{"model_name": "New"}], "incomplete definition"),
        ("user.C", ["New"], [{"model_name": "New", "recipe": "llamacpp"}], "incomplete"),
        ("user.C", [3], None, "must be strings"),
    ],
)
def test_refusals_say_why_in_lemonades_words(
    name: str, components: list[JsonValue] | None, models: list[JsonValue] | None, words: str
) -> None:
    why = gate(name, components, models)
    assert why is not None and words in why, why


def test_inline_definitions_are_found_by_model_name_or_id() -> None:
    defs = inline_definitions([{"id": "user.A"}, {"model_name": "B"}, "junk", {"x": 1}])
    assert set(defs) == {"A", "B"}


def test_a_collection_lists_under_its_user_id() -> None:
    kit = Collection(name="Kit", recipe="collection.omni", components=("Tiny",))
    assert kit.id == "user.Kit"
    with pytest.raises(ValueError):
        Collection(name="Kit", recipe="collection.omni", components=())


@pytest.mark.parametrize(
    ("name", "components", "words"),
    [
        ("user.", ["Tiny"], "`user.*` name"),
        ("user.my kit", ["Tiny"], "`user.*` name"),
        ("user.Tiny", ["user.Mine"], "a model is named 'Tiny'"),
        ("user.C", ["user.Tiny"], "not registered: 'user.Tiny'"),  # user. names user models
    ],
)
def test_names_a_collection_may_not_take(
    name: str, components: list[JsonValue], words: str
) -> None:
    why = gate(name, components)
    assert why is not None and words in why, why
