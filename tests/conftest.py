"""Fixtures shared by test modules here: the one headless Chromium the web UI tests
drive (``test_ui*.py``), started once for the session when first asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lemoncore.testing import chromium  # only when a UI test runs

    with chromium(tmp_path_factory.mktemp("profile")) as driver:
        driver.set_window_size(1280, 860)
        yield driver
