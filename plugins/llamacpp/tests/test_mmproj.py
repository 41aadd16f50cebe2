"""A model's multimodal projector (an ``mmproj`` file among its ``files``) is passed to
llama-server as ``--mmproj``, from beside the checkpoint, as Lemonade does."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.plugin import LaunchContext, LaunchRefused, ModelInfo

from lemon_plugin_llamacpp.launch import server_args
from lemon_plugin_llamacpp.xparams import unsupported_flags


def context(snapshot: Path, roots: tuple[Path, ...] | None = None) -> LaunchContext:
    return LaunchContext(
        snapshot / "Q4_0" / "m.gguf",
        {"ctx_size": 4096},
        snapshot,
        "127.0.0.1",
        43210,
        1,
        model_dir=snapshot,
        model_roots=(snapshot.resolve(),) if roots is None else roots,
    )


def model(*files: str) -> ModelInfo:
    return ModelInfo(name="v", recipe="llamacpp", checkpoint="o/r:Q4_0/m.gguf", files=files)


def test_the_mmproj_beside_the_checkpoint_is_passed(tmp_path: Path) -> None:
    (tmp_path / "Q4_0").mkdir()
    (tmp_path / "mmproj-F16.gguf").write_bytes(b"GGUF")
    args = server_args(model("Q4_0/m-2.gguf", "mmproj-F16.gguf"), context(tmp_path))
    assert args[args.index("--mmproj") + 1] == str((tmp_path / "mmproj-F16.gguf").resolve())
    assert not unsupported_flags(args)  # llamacpp:prebuilt sets mmproj.path too


def test_no_mmproj_no_flag(tmp_path: Path) -> None:
    assert "--mmproj" not in server_args(model("Q4_0/m-2.gguf"), context(tmp_path))


def test_a_missing_or_escaping_mmproj_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused, match=r"mmproj\.gguf is not downloaded; pull the model"):
        server_args(model("mmproj.gguf"), context(tmp_path))
    (tmp_path / "mmproj.gguf").write_bytes(b"GGUF")
    with pytest.raises(LaunchRefused, match="outside the model directories"):
        server_args(model("mmproj.gguf"), context(tmp_path, roots=(tmp_path / "elsewhere",)))
