"""The base of every record a plugin contributes: immutable, no unknown fields, and its
validator built on first use rather than at import."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    # defer_build: each model's validator is built on its first use (a plugin's load),
    # not when a plugin merely imports lemoncore.recipes (tests/test_import_budget.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
