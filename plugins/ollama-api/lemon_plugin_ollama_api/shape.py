"""Ollama's error shape, ``{"error": "<message>"}``, for every error on this plugin's
paths: its handlers' own (:mod:`lemon_plugin_ollama_api.responses`) and those lemoncore
gives there before or instead of a handler (a missing API key, a foreign ``Host``, a
body over the limit, a path no route serves), through ``register_error_shapes``.

The ollama client reads an error answer's ``error`` field as the message
(ollama 0.6.3, ``_types.py`` ``ResponseError.__init__``: ``json.loads(error).get('error',
error)``), so anything but a string there reaches its user as a Python ``repr``.
Ollama's paths are ``/`` (the heartbeat) and ``/api/...``; lemoncore's own ``/api/v1/...``
keep lemoncore's shape (lemoncore leaves them out whatever a shape covers).
"""

from __future__ import annotations

from lemoncore.plugin import ErrorShape, LemonError


def ollama_error(error: LemonError) -> dict[str, str]:
    """``error`` as Ollama answers one: its message alone."""
    return {"error": str(error)}


OLLAMA_ERRORS = ErrorShape(render=ollama_error, paths=("/",), prefixes=("/api",))
