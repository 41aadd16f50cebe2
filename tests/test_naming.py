"""Public model names across sources (lemoncore.models.naming), as Lemonade's naming spec
has them (server_endpoints.py test_021e to test_021x)."""

from __future__ import annotations

from lemoncore.models.naming import name_models
from lemoncore.recipes import ModelInfo


def model(name: str, checkpoint: str, aliases: tuple[str, ...] = ()) -> ModelInfo:
    return ModelInfo(name=name, recipe="llamacpp", checkpoint=checkpoint, aliases=aliases)


BUILTIN = model("Tiny", "o/builtin:a.gguf")
USER = model("Tiny", "o/user:a.gguf")
EXTRA = model("Tiny", "/models/Tiny/model.gguf")


def test_a_name_one_source_has_is_listed_bare_and_reachable_with_its_prefix() -> None:
    naming = name_models({"user": {"Tiny": USER}})
    assert list(naming.listed) == ["Tiny"]
    assert naming.find("user.Tiny") == naming.find("Tiny") == USER
    assert naming.find("builtin.Tiny") is None and naming.find("extra.Tiny") is None


def test_user_over_extra_over_builtin_the_others_list_with_their_prefix() -> None:
    naming = name_models(
        {"user": {"Tiny": USER}, "extra": {"Tiny": EXTRA}, "builtin": {"Tiny": BUILTIN}}
    )
    assert set(naming.listed) == {"Tiny", "extra.Tiny", "builtin.Tiny"}
    assert naming.find("Tiny") == naming.find("user.Tiny") == USER
    found = naming.find("builtin.Tiny")
    assert found is not None and found.checkpoint == BUILTIN.checkpoint
    assert found.name == "builtin.Tiny"  # a model is named by its public id
    extra = naming.find("extra.Tiny")
    assert extra is not None and extra.checkpoint == EXTRA.checkpoint


def test_an_extra_model_shadows_a_builtin() -> None:
    naming = name_models({"extra": {"Tiny": EXTRA}, "builtin": {"Tiny": BUILTIN}})
    assert set(naming.listed) == {"Tiny", "builtin.Tiny"}
    assert naming.find("Tiny") == naming.find("extra.Tiny") == EXTRA


def test_an_extra_alias_takes_a_builtins_name_without_a_listed_duplicate() -> None:
    variant = model("Local-Q4_K_M", "/m/Tiny/Local-Q4_K_M.gguf", aliases=("Tiny", "extra.Tiny"))
    naming = name_models({"extra": {"Local-Q4_K_M": variant}, "builtin": {"Tiny": BUILTIN}})
    assert set(naming.listed) == {"Local-Q4_K_M", "builtin.Tiny"}
    assert naming.find("Tiny") == naming.find("extra.Tiny") == variant
    found = naming.find("builtin.Tiny")
    assert found is not None and found.checkpoint == BUILTIN.checkpoint


def test_a_builtin_alias_never_takes_a_name_a_model_has() -> None:
    builtin = model("Big", "o/big:a.gguf", aliases=("Tiny", "big"))
    naming = name_models({"user": {"Tiny": USER}, "builtin": {"Big": builtin}})
    assert naming.find("Tiny") == USER
    assert naming.find("big") == builtin
    assert set(naming.listed) == {"Tiny", "Big"}


def test_listings_keep_the_builtins_order_then_extra_then_user() -> None:
    builtin = {n: model(n, "o/r:a.gguf") for n in ("c", "a", "b")}
    naming = name_models({"user": {"z": USER}, "extra": {"y": EXTRA}, "builtin": builtin})
    assert list(naming.listed) == ["c", "a", "b", "y", "z"]
