"""Lemonade's ``owner/repo:VARIANT`` checkpoints, ``checkpoints: {"main", "mmproj"}`` and
``user.``/``builtin.`` names: the variant chosen from a repository's file list (pure), and
a pull through a running server against a hub that lists its files."""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.models import ModelError
from lemoncore.models.variants import gguf_variants, needs_resolving, resolve
from lemoncore.testing import ServerProcess, running_server, serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import SCRIPT

# unsloth/Qwen3-30B-A3B-GGUF's layout: root quants, a shard folder, companions
REPO = [
    "README.md",
    "Qwen3-30B-A3B-Q4_0.gguf",
    "Qwen3-30B-A3B-Q4_K_M.gguf",
    "Qwen3-30B-A3B-UD-Q4_K_XL.gguf",
    "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf",
    "BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf",
    "mmproj-F16.gguf",
    "mtp-Qwen3-30B-A3B.gguf",
]


@pytest.mark.parametrize(
    ("variant", "primary", "files"),
    [
        ("Q4_0", "Qwen3-30B-A3B-Q4_0.gguf", 1),
        ("q4_k_m", "Qwen3-30B-A3B-Q4_K_M.gguf", 1),  # case insensitive
        ("UD-Q4_K_XL", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf", 1),
        ("BF16", "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 2),  # a folder: its shards
        ("", "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 1),  # the first, not mmproj
        ("*", "BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 7),
    ],
)
def test_a_variant_is_chosen_as_lemonade_chooses_it(variant: str, primary: str, files: int) -> None:
    chosen = resolve("o/r", variant, REPO)
    assert (chosen.primary, len(chosen.files)) == (primary, files)


def test_companions_are_never_variants_and_an_unknown_variant_names_those_there_are() -> None:
    assert [v.name for v in gguf_variants(REPO)] == ["BF16", "Q4_0", "Q4_K_M", "UD-Q4_K_XL"]
    with pytest.raises(ModelError, match=r"no GGUF variant 'Q9_9' \(its variants: BF16, Q4_0"):
        resolve("o/r", "Q9_9", REPO)


def test_several_matches_are_refused_not_guessed() -> None:
    two = ["a-Q4_0.gguf", "b-Q4_0.gguf"]  # one quant, two series: named by stem
    assert [v.name for v in gguf_variants(two)] == ["a-Q4_0", "b-Q4_0"]
    with pytest.raises(ModelError, match="several GGUF files match variant 'Q4_0'"):
        resolve("o/r", "Q4_0", two)


def test_only_lemonade_variants_are_resolved() -> None:
    assert needs_resolving("o/r:Q4_0") and needs_resolving("o/r")
    assert not any(
        needs_resolving(c) for c in ("o/r:f.gguf", "o/r:m.hgn", "file:/m.gguf", "pkg:p/m.gguf")
    )


def gguf_header(context: int) -> bytes:
    """A GGUF v3 header, no tensors: ``general.architecture`` llama and its context."""

    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value)) + value.encode()

    return (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 2)
        + text("general.architecture")
        + struct.pack("<I", 8)
        + text("llama")
        + text("llama.context_length")
        + struct.pack("<II", 4, context)
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    files = {f"owner/vis-GGUF/{name}": name.encode() for name in REPO}
    files[f"owner/vis-GGUF/{REPO[4]}"] = gguf_header(2048)  # BF16's first shard
    with serve_hub(files) as hub:
        env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
        with running_server(tmp_path / "lemon", env, command=(str(SCRIPT),)) as s:
            yield s


def test_a_lemonade_registration_is_pulled_whole(server: ServerProcess, tmp_path: Path) -> None:
    body = {
        "model_name": "user.vis",
        "checkpoints": {"main": "owner/vis-GGUF:BF16", "mmproj": "mmproj-F16.gguf"},
        "recipe": "tiny",
    }
    pulled = httpx.post(server.url + "/api/v1/pull", json=body, timeout=60)
    assert pulled.status_code == 200, pulled.text
    assert pulled.json()["model_name"] == "vis"
    shown = httpx.get(server.url + "/api/v1/models/user.vis").json()
    assert shown["id"] == "vis"
    assert shown["checkpoint"] == "owner/vis-GGUF:BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf"
    [snapshot] = (tmp_path / "hf/hub/models--owner--vis-GGUF/snapshots").iterdir()
    for name in ("BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf", "mmproj-F16.gguf"):
        assert (snapshot / name).read_bytes() == name.encode()
    assert shown["max_context_window"] == 2048  # read through the cache's symlink
    assert httpx.get(server.url + "/api/v1/models/builtin.vis").status_code == 404

    def refused(**change: object) -> httpx.Response:
        answer = httpx.post(server.url + "/api/v1/pull", json={**body, **change}, timeout=60)
        assert answer.status_code != 200
        return answer

    wrong = refused(model_name="w", checkpoints={"main": "owner/vis-GGUF:Q9_9"})
    assert wrong.status_code == 400 and "its variants: BF16, Q4_0" in wrong.text
    missing = refused(model_name="w", checkpoints={"main": "owner/none-GGUF:Q4_0"})
    assert missing.status_code == 404 and "no repository owner/none-GGUF" in missing.text
    vae = refused(model_name="w", checkpoints={"main": "owner/vis-GGUF", "vae": "x"})
    assert vae.json()["error"]["param"] == "checkpoints"
    for reserved in ("builtin.w", "extra.w", "user.builtin.w"):
        assert (
            "reserved" in refused(model_name=reserved, checkpoints={"main": "owner/vis-GGUF"}).text
        )
    models = httpx.get(server.url + "/api/v1/models", params={"show_all": "true"}).json()
    assert not {"w", "builtin.w"} & {m["id"] for m in models["data"]}


def test_a_registration_asks_the_hub_only_when_the_model_is_pulled_or_loaded(
    server: ServerProcess,
) -> None:
    def register(name: str, checkpoint: str | None, recipe: str = "tiny") -> httpx.Response:
        body = {"model_name": name, "checkpoint": checkpoint, "recipe": recipe, "labels": ["x"]}
        return httpx.post(server.url + "/api/v1/models/register", json=body, timeout=60)

    nowhere = register("user.nowhere", "owner/none-GGUF:Q4_0")  # the hub has no such repo
    assert nowhere.status_code == 200, nowhere.text
    answer = nowhere.json()
    assert (answer["model_name"], answer["canonical_model_name"]) == ("nowhere", "user.nowhere")
    listed = httpx.get(server.url + "/api/v1/models", params={"show_all": "true"}).json()
    [card] = [m for m in listed["data"] if m["id"] == "nowhere"]
    assert card["checkpoint"] == "owner/none-GGUF:Q4_0" and not card["downloaded"]
    assert card["labels"] == ["x"] and answer["model"] == card
    pulled = httpx.post(server.url + "/api/v1/pull", json={"model_name": "nowhere"}, timeout=60)
    assert pulled.status_code == 404 and "no repository owner/none-GGUF" in pulled.text

    assert register("later", "owner/vis-GGUF:Q4_0").status_code == 200
    loaded = httpx.post(server.url + "/api/v1/load", json={"model_name": "later"}, timeout=60)
    resolved = "owner/vis-GGUF:Qwen3-30B-A3B-Q4_0.gguf"
    assert loaded.status_code == 200 and loaded.json()["checkpoint"] == resolved, loaded.text
    shown = httpx.get(server.url + "/api/v1/models/later").json()
    assert shown["checkpoint"] == resolved and shown["downloaded"]
    star = register("star", "owner/vis-GGUF:*").json()["model"]  # not a glob of the cache
    assert not star["downloaded"] and "size_bytes" not in star, star
    assert httpx.post(server.url + "/api/v1/delete", json={"model_name": "star"}).status_code == 200
    assert httpx.get(server.url + "/api/v1/models/later").json()["downloaded"]  # not star's

    kit = {
        "model_name": "user.kit",
        "recipe": "collection.omni",
        "components": ["later", "inline"],
        "models": [
            {"model_name": "inline", "checkpoint": "owner/none-GGUF:Q8_0", "recipe": "tiny"}
        ],
    }
    answer = httpx.post(server.url + "/api/v1/models/register", json=kit, timeout=60).json()
    assert (answer["canonical_model_name"], answer["model"]["components"]) == (
        "user.kit",
        ["later", "inline"],
    ), answer
    inline = httpx.get(server.url + "/api/v1/models/inline").json()
    assert inline["checkpoint"] == "owner/none-GGUF:Q8_0"  # an inline component: not asked either

    for refused, param in (
        (register("none", None), "checkpoint"),
        (register("none", "owner/vis-GGUF"), "checkpoint"),  # which file: the hub knows
        (register("none", "owner/vis-GGUF:Q4_0", recipe=""), "recipe"),
        (register("builtin.none", "owner/vis-GGUF:Q4_0"), "model_name"),
    ):
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param
    deleted = httpx.post(server.url + "/api/v1/delete", json={"model_name": "user.nowhere"})
    assert deleted.status_code == 200, deleted.text
    assert httpx.get(server.url + "/api/v1/models/nowhere").status_code == 404
