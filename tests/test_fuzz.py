"""Schemathesis fuzzes the published OpenAPI document: no input may cause a 5xx that is
not a documented backend answer, or a response outside the document."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402

from lemoncore import Settings, create_app  # noqa: E402

# /install's "trust_download" is described, not a schema property: generated requests
# would otherwise download release assets, and these machines have no internet.
CASES_PER_OPERATION = 100  # 11 operations with inputs: over 1,000 cases in all
os.environ.setdefault("LEMON_CONFIG_FILE", "/nonexistent/lemon-fuzz.toml")
APP = create_app(Settings(cache_dir=Path(tempfile.mkdtemp(prefix="lemon-fuzz-")),
                          plugins_allow="llamacpp",
                          allowed_hosts=["testserver"]))  # the Host schemathesis sends
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=CASES_PER_OPERATION, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_survives_generated_input(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, f"{case.method} {case.path}: {response.text[:300]}"
    if response.status_code >= 400:
        assert "error" in response.json()
