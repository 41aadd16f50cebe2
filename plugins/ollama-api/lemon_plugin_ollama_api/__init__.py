"""lemon-plugin-ollama-api: Ollama's HTTP API over lemoncore, as a plugin.

It implements one hook, ``register_routes``, and its handlers reach the core only through
:class:`lemoncore.api.gateway.Gateway`: an API surface needs nothing else. See README.md
for what is served, what is refused and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute

from lemoncore import hookimpl

from lemon_plugin_ollama_api.routes import routes


@hookimpl
def register_routes() -> Sequence[BaseRoute]:
    return routes()
