"""The web UI: static pages served at ``/ui/`` (``GET /`` redirects there)."""

from __future__ import annotations

from starlette.routing import BaseRoute


def routes() -> list[BaseRoute]:
    """The UI's routes, served after lemoncore's and the plugins' own."""
    return []
