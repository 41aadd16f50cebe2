"""lemon-plugin-ollama-api: Ollama's HTTP API over lemoncore, as a plugin.

It implements two hooks: ``register_routes``, whose handlers reach the core only through
:class:`lemoncore.api.gateway.Gateway`, and ``register_error_shapes``, so that every
error on its paths, lemoncore's included, is in Ollama's shape
(:mod:`lemon_plugin_ollama_api.shape`): an API surface needs nothing else. See README.md
for what is served, what is refused and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute

from lemoncore import hookimpl
from lemoncore.errors import ErrorShape

from lemon_plugin_ollama_api.routes import routes
from lemon_plugin_ollama_api.shape import OLLAMA_ERRORS


@hookimpl
def register_routes() -> Sequence[BaseRoute]:
    return routes()


@hookimpl
def register_error_shapes() -> Sequence[ErrorShape]:
    return [OLLAMA_ERRORS]
