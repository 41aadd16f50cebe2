"""lemoncore's pytest fixtures (``lemon_settings``, ``lemon_plugins``, ``lemon_app``,
``lemon_client``); declared here, in the root conftest, where pytest can rewrite them."""

from __future__ import annotations

pytest_plugins = ["lemoncore.testing"]
