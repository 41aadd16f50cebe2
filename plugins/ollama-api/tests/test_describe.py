"""GGUF headers and how models are described to Ollama clients, without processes."""

from __future__ import annotations

import hashlib
import struct
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lemoncore.plugin import GgufArray, ModelInfo, read_gguf_metadata

from lemon_plugin_ollama_api.describe import (
    FileFacts,
    details,
    digest,
    file_facts,
    listing,
    running,
    show,
)

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ollama_api_support import smollm2_gguf


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, version: int = 3) -> bytes:
    """A GGUF header with a value of each kind the reader must walk over."""
    kvs = [
        ("general.architecture", 8, gguf_string("qwen3")),
        ("general.parameter_count", 10, struct.pack("<Q", 751_632_384)),
        ("qwen3.context_length", 4, struct.pack("<I", 40960)),
        ("qwen3.rope.freq_base", 6, struct.pack("<f", 1e6)),
        ("tokenizer.ggml.add_bos_token", 7, struct.pack("<?", False)),
        (
            "tokenizer.ggml.tokens",
            9,
            struct.pack("<IQ", 8, 3) + gguf_string("a") + gguf_string("bb") + gguf_string("ccc"),
        ),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", 1, 2)),
        ("tokenizer.chat_template", 8, gguf_string("{% for m in messages %}{% endfor %}")),
    ]
    data = (
        b"GGUF"
        + struct.pack("<IQQ", version, 0, len(kvs))
        + b"".join(gguf_string(k) + struct.pack("<I", kind) + value for k, kind, value in kvs)
    )
    path.write_bytes(data + b"\0" * 64)  # tensor infos would follow
    return data


def test_reads_each_kind_and_skips_arrays(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    meta = read_gguf_metadata(path)
    assert meta["general.architecture"] == "qwen3"
    assert meta["general.parameter_count"] == 751_632_384
    assert meta["qwen3.context_length"] == 40960
    assert meta["qwen3.rope.freq_base"] == pytest.approx(1e6)
    assert meta["tokenizer.ggml.add_bos_token"] is False
    assert meta["tokenizer.ggml.tokens"] == GgufArray(8, 3)
    assert meta["tokenizer.ggml.scores"] == GgufArray(6, 2)
    assert meta["tokenizer.chat_template"] == "{% for m in messages %}{% endfor %}"


def test_what_is_not_a_whole_gguf_header_has_no_metadata(tmp_path: Path) -> None:
    header = write_gguf(tmp_path / "whole.gguf")
    (tmp_path / "cut.gguf").write_bytes(header[: len(header) // 2])
    (tmp_path / "text.gguf").write_text("not a model")
    write_gguf(tmp_path / "v1.gguf", version=1)
    for name in ("cut.gguf", "text.gguf", "v1.gguf", "missing.gguf"):
        assert read_gguf_metadata(tmp_path / name) == {}


def test_smollm2s_header() -> None:
    meta = read_gguf_metadata(smollm2_gguf())
    assert meta["general.architecture"] == "llama" and meta["general.size_label"] == "135M"
    assert meta["llama.context_length"] == 8192
    tokens = meta["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GgufArray) and tokens.length == meta["llama.vocab_size"]


def model(checkpoint: str, **more: object) -> ModelInfo:
    return ModelInfo.model_validate(
        {"name": "m", "recipe": "llamacpp", "checkpoint": checkpoint, **more}
    )


def test_digest_is_the_pinned_sha256_else_stable() -> None:
    pinned = "ab" * 32
    assert digest(model("owner/repo:m-Q4_0.gguf", sha256={"m-Q4_0.gguf": pinned})) == pinned
    derived = digest(model("owner/repo:m-Q4_0.gguf"))
    assert derived == hashlib.sha256(b"m\nowner/repo:m-Q4_0.gguf").hexdigest()
    assert derived != digest(model("owner/repo:m-Q8_0.gguf"))


@pytest.mark.parametrize(
    ("checkpoint", "quant", "size"),
    [
        ("owner/repo:SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1", "135M"),
        ("unsloth/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q4_0.gguf", "Q4_0", "0.6B"),
        ("owner/repo:sub/llama-3-8b-instruct-q4_k_m.gguf", "Q4_K_M", "8B"),
        ("owner/repo:model-UD-IQ2_XXS.gguf", "IQ2_XXS", ""),
        ("file:/models/gemma-2b-f16.gguf", "F16", "2B"),
        ("pkg:pkg/plain.gguf", "", ""),
    ],
)
def test_details_from_the_file_name(checkpoint: str, quant: str, size: str) -> None:
    found = details(model(checkpoint), {})
    assert (found["quantization_level"], found["parameter_size"]) == (quant, size)
    assert found["format"] == "gguf" and found["family"] == "" and found["families"] == []


def test_details_prefer_the_gguf_header(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf")
    found = details(model("owner/repo:big-70B-Q8_0.gguf"), read_gguf_metadata(tmp_path / "m.gguf"))
    assert found["family"] == "qwen3" and found["families"] == ["qwen3"]
    assert found["parameter_size"] == "752M"  # the count, over the file name's 70B
    assert found["quantization_level"] == "Q8_0"


def test_listing_show_and_running(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf")
    facts = file_facts(tmp_path / "m.gguf")
    m = model("owner/repo:m-Q4_0.gguf")
    listed = listing(m, facts)
    assert listed["name"] == listed["model"] == "m:latest"
    assert listed["size"] == (tmp_path / "m.gguf").stat().st_size
    assert listed["digest"] == digest(m) and listed["details"]["family"] == "qwen3"

    shown = show(m, facts, {"ctx_size": 2048})
    assert shown["template"] == "{% for m in messages %}{% endfor %}"
    assert shown["parameters"] == "num_ctx 2048"
    assert "FROM owner/repo:m-Q4_0.gguf" in shown["modelfile"]
    assert shown["model_info"]["tokenizer.ggml.tokens"] == []
    assert "tokenizer.chat_template" not in shown["model_info"]
    assert show(m, None, {})["model_info"] == {}  # not downloaded: what is registered
    # the context a load gives it, under the recipe's name (Lemonade's key), beside the
    # GGUF's trained one under its architecture's
    assert shown["model_info"]["llamacpp.context_length"] == 2048
    assert shown["model_info"]["qwen3.context_length"] == 40960
    assert show(m, None, {"ctx_size": 0})["model_info"] == {}  # 0: the model's own
    own = show(m, facts, {"ctx_size": 0})  # the model's own: the GGUF's trained context
    assert own["parameters"] == "num_ctx 40960"
    assert own["model_info"]["llamacpp.context_length"] == 40960

    now = datetime(2026, 1, 1, tzinfo=UTC)
    ps = running(m, facts, {"ctx_size": 0}, 123_456, on_gpu=False, expires_at=now)
    assert ps["size"] == 123_456 and ps["size_vram"] == 0
    assert ps["context_length"] == 40960  # 0: the model's own, from the header
    assert datetime.fromisoformat(ps["expires_at"]) == now
    on_gpu = running(m, FileFacts(10, now, {}), {"ctx_size": 512}, None, True, now)
    assert on_gpu["size"] == on_gpu["size_vram"] == 10 and on_gpu["context_length"] == 512
