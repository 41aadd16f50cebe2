"""Models found in extra_models_dir (lemoncore.models.extra), as Lemonade's spec
(src/cpp/Extra-Models-Dir-Spec.md) and its tests (server_endpoints.py test_021g to test_021ya)
have them; and the store and run-time setting over them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from lemoncore.models import ModelStore
from lemoncore.models.checkpoints import ModelError
from lemoncore.models.extra import Found, discover, group
from lemoncore.recipes import ModelInfo


def names(paths: list[str]) -> dict[str, Found]:
    return {f.name: f for f in group(paths)}


def test_a_root_file_is_named_by_its_stem_and_a_root_projector_is_no_model() -> None:
    found = names(["Qwen3.5-4B-UD-Q4_K_XL.gguf", "mmproj-x.gguf"])
    assert found == {
        "Qwen3.5-4B-UD-Q4_K_XL": Found("Qwen3.5-4B-UD-Q4_K_XL", "Qwen3.5-4B-UD-Q4_K_XL.gguf")
    }


def test_a_folder_of_quantizations_lists_each_with_the_folder_as_an_alias() -> None:
    d = "Qwen3.6-35B-A3B-GGUF"
    found = names(
        [
            f"{d}/Qwen3.6-35B-A3B-Q8_0.gguf",
            f"{d}/Qwen3.6-35B-A3B-Q4_K_M.gguf",
            f"{d}/mmproj-Qwen3.6-35B-A3B-BF16.gguf",
        ]
    )
    assert set(found) == {"Qwen3.6-35B-A3B-Q4_K_M", "Qwen3.6-35B-A3B-Q8_0"}
    q4, q8 = found["Qwen3.6-35B-A3B-Q4_K_M"], found["Qwen3.6-35B-A3B-Q8_0"]
    assert q4.aliases == (d, f"extra.{d}") and q8.aliases == ()  # the first by name
    assert q4.mmproj == q8.mmproj == f"{d}/mmproj-Qwen3.6-35B-A3B-BF16.gguf"


def test_one_shard_series_stays_the_folder_model() -> None:
    d = "Llama-3-70B-Instruct-GGUF"
    found = names(
        [
            f"{d}/Llama-3-70B-Instruct-00002-of-00002.gguf",
            f"{d}/Llama-3-70B-Instruct-00001-of-00002.gguf",
        ]
    )
    assert found == {
        d: Found(
            d,
            f"{d}/Llama-3-70B-Instruct-00001-of-00002.gguf",
            (f"{d}/Llama-3-70B-Instruct-00002-of-00002.gguf",),
        )
    }


def test_sharded_quantizations_split_named_without_the_shard_suffix() -> None:
    d = "Mixtral-GGUF"
    files = [f"{d}/Mixtral-{q}-0000{i}-of-00002.gguf" for q in ("Q4_K_M", "Q8_0") for i in (1, 2)]
    found = names(files)
    assert set(found) == {"Mixtral-Q4_K_M", "Mixtral-Q8_0"}
    assert found["Mixtral-Q8_0"].primary == f"{d}/Mixtral-Q8_0-00001-of-00002.gguf"
    assert found["Mixtral-Q8_0"].files == (f"{d}/Mixtral-Q8_0-00002-of-00002.gguf",)


def test_a_shared_quant_token_is_no_shard_series() -> None:
    found = names(["L/Model-Q4_K_M.gguf", "L/Model-Q4_K_M-imatrix.gguf"])
    assert set(found) == {"Model-Q4_K_M", "Model-Q4_K_M-imatrix"}


def test_a_taken_name_is_qualified_with_its_folder() -> None:
    files = [
        f"{d}/model-{q}.gguf"
        for d in ("Llama-Local-GGUF", "Mistral-Local-GGUF")
        for q in ("Q4_K_M", "Q8_0")
    ]
    found = names(files)
    assert set(found) == {
        "model-Q4_K_M",
        "model-Q8_0",
        "Mistral-Local-GGUF-model-Q4_K_M",
        "Mistral-Local-GGUF-model-Q8_0",
    }
    assert found["model-Q4_K_M"].primary.startswith("Llama-Local-GGUF/")


def test_the_first_projector_by_name_goes_with_the_model() -> None:
    d = "Vision-Model-GGUF"
    found = names([f"{d}/Vision-Model-Q4_K_M.gguf", f"{d}/mmproj-z.gguf", f"{d}/mmproj-a.gguf"])
    assert list(found) == [d] and found[d].mmproj == f"{d}/mmproj-a.gguf"


def gguf(path: Path, size: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(size))
    return path


def test_discover_makes_llamacpp_models_of_the_files(tmp_path: Path) -> None:
    main = gguf(tmp_path / "V-GGUF" / "V-Q4_K_M.gguf")
    gguf(tmp_path / "V-GGUF" / "V-Q8_0.gguf")
    gguf(tmp_path / "V-GGUF" / "mmproj-V.gguf")
    gguf(tmp_path / "has space.gguf")  # not a model name: left out, logged
    models = discover(tmp_path)
    assert set(models) == {"V-Q4_K_M", "V-Q8_0"}
    q4 = models["V-Q4_K_M"]
    assert (q4.recipe, q4.checkpoint, q4.files) == ("llamacpp", str(main), ("mmproj-V.gguf",))
    assert q4.labels == ("custom", "vision") and q4.suggested
    assert discover(tmp_path / "missing") == {}


def test_the_store_lists_extra_models_and_reaches_them_by_every_name(tmp_path: Path) -> None:
    builtin = ModelInfo(name="Tiny", recipe="llamacpp", checkpoint="o/r:tiny.gguf")
    folder = tmp_path / "extra"
    shard = gguf(folder / "Tiny" / "Tiny-00001-of-00002.gguf")
    gguf(folder / "Tiny" / "Tiny-00002-of-00002.gguf", size=1000)
    store = ModelStore({"Tiny": builtin}, tmp_path / "cache")
    assert set(store.all()) == {"Tiny"}
    store.set_extra_models_dir(folder)
    assert set(store.all()) == {"Tiny", "builtin.Tiny"}
    found = store.get("extra.Tiny")
    assert found is not None and found == store.get("Tiny") and found.checkpoint == str(shard)
    assert store.local_path(found) == shard.resolve()  # its folder is a model root
    assert store.size_on_disk(found) == 2 * 24 + 1000  # both shards
    with pytest.raises(ModelError, match="delete it yourself") as refused:
        store.delete(found)
    assert refused.value.status == 422 and shard.exists()
    builtin_found = store.get("builtin.Tiny")
    assert builtin_found is not None and builtin_found.checkpoint == builtin.checkpoint


def test_a_user_model_shadows_a_catalogue_one(tmp_path: Path) -> None:
    builtin = ModelInfo(name="Tiny", recipe="llamacpp", checkpoint="o/r:tiny.gguf")
    store = ModelStore({"Tiny": builtin}, tmp_path)
    store.register(builtin.model_copy(update={"checkpoint": "o/mine:tiny.gguf"}))
    assert set(store.all()) == {"Tiny", "builtin.Tiny"}
    mine = store.get("user.Tiny")
    assert mine is not None and mine.checkpoint == "o/mine:tiny.gguf" and mine == store.get("Tiny")
    store.unregister("Tiny")
    assert store.all() == {"Tiny": builtin}


def test_an_extra_models_dir_that_cannot_be_listed_is_refused(tmp_path: Path) -> None:
    store = ModelStore({}, tmp_path)
    store.set_extra_models_dir(tmp_path / "not-yet")  # may appear later
    with pytest.raises(ModelError, match="extra_models_dir") as refused:
        store.set_extra_models_dir(gguf(tmp_path / "a.gguf"))
    assert refused.value.status == 400 and store.extra_models_dir == tmp_path / "not-yet"
    (tmp_path / "not-yet").mkdir()
    gguf(tmp_path / "not-yet" / "late.gguf")
    store.set_extra_models_dir(tmp_path / "not-yet")
    assert "late" in store.all()


def test_a_new_extra_file_shadows_the_catalogue_at_the_next_lookup(tmp_path: Path) -> None:
    builtin = ModelInfo(name="Tiny", recipe="llamacpp", checkpoint="o/r:tiny.gguf")
    store = ModelStore({"Tiny": builtin}, tmp_path / "cache")
    assert store.get("Tiny") == builtin  # the lookup that fills the cache of names
    stub = gguf(tmp_path / "extra" / "Tiny.gguf")
    store.set_extra_models_dir(tmp_path / "extra")
    found = store.get("Tiny")  # no listing in between (Lemonade's test_021r)
    assert found is not None and found.checkpoint == str(stub)
