"""lemoncore: local LLMs behind one OpenAI-compatible API, backends as plugins."""

from __future__ import annotations

__version__ = "0.2.0"

from lemoncore.app import create_app, lifespan
from lemoncore.hookspecs import hookimpl
from lemoncore.settings import Settings

__all__ = ["Settings", "__version__", "create_app", "hookimpl", "lifespan"]
