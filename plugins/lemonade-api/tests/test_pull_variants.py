"""Lemonade's GET /api/v1/pull/variants (lemon_plugin_lemonade_api.pull_variants): its
refusals as Lemonade words them (server_endpoints.py test_030, test_031, test_054), and a
repository's variants from a Hugging Face-shaped hub, through a real lemon serve."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server, serve_hub

from lemon_plugin_lemonade_api.pull_variants import Refused, target

REPO = [
    "README.md",
    "Qwen3-Q4_0.gguf",
    "Qwen3-Q8_0.gguf",
    "BF16/Qwen3-BF16-00001-of-00002.gguf",
    "BF16/Qwen3-BF16-00002-of-00002.gguf",
    "mmproj-F16.gguf",
    "mtp-Qwen3.gguf",
]


@pytest.mark.parametrize(
    ("checkpoint", "source", "repo"),
    [
        ("owner/repo", None, "owner/repo"),
        ("owner/repo", "HF", "owner/repo"),
        ("https://huggingface.co/owner/repo/tree/main?x=1", None, "owner/repo"),
        ("https://huggingface.co/owner/repo", "huggingface", "owner/repo"),
    ],
)
def test_a_checkpoint_names_a_hugging_face_repository(
    checkpoint: str, source: str | None, repo: str
) -> None:
    assert target(checkpoint, source) == repo


@pytest.mark.parametrize(
    ("checkpoint", "source", "words"),
    [
        ("", None, "Missing required query parameter 'checkpoint'"),
        ("noslashrepo", None, "owner/name"),
        (
            "https://huggingface.co/o/r",
            "modelscope",
            "checkpoint URL uses huggingface but source was set to 'modelscope'",
        ),
        ("https://modelscope.cn/models/o/r", "huggingface", "checkpoint URL uses modelscope"),
        ("https://huggingface.co/o/r", "nexus", "Unsupported model source 'nexus'"),
        ("o/r", "nexus", "Unsupported model source"),
        ("o/r", "modelscope", "Hugging Face only"),
        ("o/" + "r" * 600, None, "longer than"),
    ],
)
def test_a_bad_request_is_refused_in_lemonades_words(
    checkpoint: str, source: str | None, words: str
) -> None:
    with pytest.raises(Refused) as refused:
        target(checkpoint, source)
    assert words in str(refused.value) and refused.value.status == 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("pull-variants")
    files = {f"owner/q-GGUF/{name}": name.encode() for name in REPO}
    with serve_hub(files) as hub:
        env = {
            "HF_ENDPOINT": hub,
            "HF_HOME": str(tmp / "hf"),
            "LEMON_PLUGINS_ALLOW": "lemonade-api",
        }
        with running_server(tmp / "lemon", env) as s:
            yield s


def test_the_variants_of_a_repository_are_listed(server: ServerProcess) -> None:
    for prefix in ("/api/v1", "/api/v0"):
        answer = httpx.get(
            server.url + prefix + "/pull/variants", params={"checkpoint": "owner/q-GGUF"}
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["checkpoint"], body["recipe"], body["suggested_name"]) == (
            "owner/q-GGUF",
            "llamacpp",
            "q-GGUF",
        )
        assert body["mmproj_files"] == ["mmproj-F16.gguf"] and body["draft_files"] == [
            "mtp-Qwen3.gguf"
        ]
        assert body["suggested_labels"] == ["vision"]
        variants = {v["name"]: v for v in body["variants"]}
        assert set(variants) == {"BF16", "Q4_0", "Q8_0"}
        assert variants["BF16"]["sharded"] and len(variants["BF16"]["files"]) == 2
        assert variants["Q4_0"]["primary_file"] == "Qwen3-Q4_0.gguf"


def test_a_repository_the_hub_does_not_have_is_a_404(server: ServerProcess) -> None:
    answer = httpx.get(server.url + "/api/v1/pull/variants", params={"checkpoint": "owner/none"})
    assert answer.status_code == 404
    assert answer.json() == {"error": "Checkpoint 'owner/none' not found on Hugging Face"}
    missing = httpx.get(server.url + "/api/v1/pull/variants")
    assert missing.status_code == 400 and "Missing required" in missing.json()["error"]
