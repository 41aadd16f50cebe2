"""Model files are checked before vte-server starts."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from lemoncore.plugin import LaunchRefused

from lemon_plugin_vte.gguf_check import check_gguf


def write_gguf(path: Path, arch: str) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("arch", ["qwen2", "granite", "qwen35", "llama"])
def test_supported_architectures_pass(tmp_path: Path, arch: str) -> None:
    assert check_gguf(write_gguf(tmp_path / "m.gguf", arch)) == arch


def test_other_architectures_are_refused_with_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(
        LaunchRefused, match="'mamba' model; VTE runs granite, llama, qwen2, qwen35 only"
    ):
        check_gguf(write_gguf(tmp_path / "m.gguf", "mamba"))


def test_non_gguf_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"not a model")
    with pytest.raises(LaunchRefused, match="not a readable GGUF"):
        check_gguf(path)
