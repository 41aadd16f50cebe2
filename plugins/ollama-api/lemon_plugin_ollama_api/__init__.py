"""lemon-plugin-ollama-api: Ollama's HTTP API over lemoncore, as a plugin.

It implements two hooks: ``register_routes``, whose handlers reach the core only through
:class:`lemoncore.plugin.Gateway`, and ``register_error_shapes``, so that every
error on its paths, lemoncore's included, is in Ollama's shape
(:mod:`lemon_plugin_ollama_api.shape`): an API surface needs nothing else. See README.md
for what is served, what is refused and why.

Importing the package loads no web stack: the routes (Starlette, the gateway) are
imported when ``register_routes`` is called, at the server's start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lemoncore.plugin import ErrorShape, hookimpl

from lemon_plugin_ollama_api.shape import OLLAMA_ERRORS

if TYPE_CHECKING:
    from starlette.routing import BaseRoute


@hookimpl
def register_routes() -> Sequence[BaseRoute]:
    from lemon_plugin_ollama_api.routes import routes

    return routes()


@hookimpl
def register_error_shapes() -> Sequence[ErrorShape]:
    return [OLLAMA_ERRORS]
