"""The VTE tests' fixture: a fresh ``World`` for each test, its release files served
from a local HTTP server and the stand-in's report file in the test's directory."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemoncore.plugin import serve_directory

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import World


@pytest.fixture
def world(tmp_path: Path, anyio_backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    (tmp_path / "www").mkdir()
    monkeypatch.setenv("VTE_STANDIN_REPORT", str(tmp_path / "report.jsonl"))
    monkeypatch.delenv("HIP_PATH", raising=False)
    monkeypatch.delenv("ROCM_PATH", raising=False)
    with serve_directory(tmp_path / "www") as url:
        yield World(tmp_path, url, monkeypatch)
