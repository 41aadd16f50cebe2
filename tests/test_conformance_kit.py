"""The conformance kit fails what users would notice: here, a backend whose answers name
another model than the one served (lemoncore passes answers through unchanged)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lemoncore.conformance import BackendConformance, ConformanceTarget
from lemoncore.testing import running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT


def test_the_kit_fails_a_backend_that_reports_another_model(tmp_path: Path) -> None:
    with running_server(tmp_path, command=(str(SCRIPT),), args=("--engine-name", "-")) as server:
        target = ConformanceTarget(server, model=MODEL, backend="tiny:cpu")
        with pytest.raises(
            AssertionError,
            match=r"the engine reports model '-', not the "
            r"served name 'tiny-chat': make the launch give the engine",
        ):
            BackendConformance().test_answers_name_the_served_model(target)
