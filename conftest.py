from __future__ import annotations

import os
from pathlib import Path

import pytest

# lemoncore's fixtures, registered here so the example plugin's root conftest (which
# declares the same, as a plugin project's must) is seen as top level when collected with
# the rest (testpaths: "examples/*")
pytest_plugins = ["lemoncore.testing"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def isolated_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Keep the user's LEMON_* environment and config file out of every test."""
    for name in [n for n in os.environ if n.startswith("LEMON_")]:
        monkeypatch.delenv(name)
    config = Path(tmp_path_factory.getbasetemp()) / "no-config.toml"
    monkeypatch.setenv("LEMON_CONFIG_FILE", str(config))
