"""lemon-plugin-lemonade-api: Lemonade Server's control surface over lemoncore.

It implements ``register_routes``: Lemonade's ``/internal/*`` control endpoints
(:mod:`lemon_plugin_lemonade_api.internal`), which change lemoncore's run-time settings
through :class:`lemoncore.plugin.RuntimeControl` (admin-only: the key guard treats every
``/internal/`` path as a management route, and the control refuses a request without
those rights on any path), and Lemonade's ``/api/v0/*`` and ``/v0/*`` prefixes for the
``/api/v1`` and ``/v1`` routes (:mod:`lemon_plugin_lemonade_api.aliases`), and
``GET /api/v1/pull/variants`` (:mod:`lemon_plugin_lemonade_api.pull_variants`).
``POST /api/v1/routing/validate`` runs an ad-hoc ``collection.router`` routing document
through Lemonade's deterministic routing policy over one prompt
(:mod:`lemon_plugin_lemonade_api.routing_routes`). See README.md.

Importing the package loads no web stack: the routes are imported when
``register_routes`` is called, at the server's start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lemoncore.plugin import hookimpl

if TYPE_CHECKING:
    from starlette.routing import BaseRoute


@hookimpl
def register_routes() -> Sequence[BaseRoute]:
    from lemon_plugin_lemonade_api.aliases import routes as aliases
    from lemon_plugin_lemonade_api.internal import routes as internal
    from lemon_plugin_lemonade_api.pull_variants import routes as pull_variants
    from lemon_plugin_lemonade_api.routing_routes import routes as routing_routes

    return [*internal(), *pull_variants(), *routing_routes(), *aliases()]
