"""Which paths a plugin's own routes (``register_routes``) may answer: none of lemoncore's.

lemoncore owns ``/v1/…``, ``/api/v1/…``, ``/ui`` and ``/ui/…``, ``/live``, ``/metrics``,
``/openapi.json`` and every routed endpoint's path. Two layers keep plugin routes off them:

- **At load** (:func:`refusal`), a route is skipped, with a warning on its plugin, when it
  routes by ``Host``; when it mounts at the root (``Mount("")``, ``Mount("/")``, or a
  pattern whose literal start is ``/``, such as ``/{rest:path}``); when its path is, or is
  under, one of lemoncore's; or when it is a prefix (a ``Mount``, or a path with a
  ``{parameter}``) that could reach one (``Mount("/api")`` contains ``/api/v1/``). Paths
  are compared after collapsing repeated slashes and a trailing one. Case is not folded:
  Starlette matches paths case-sensitively, so ``/V1/models`` is simply another path;
  ``%2F`` is decoded before routing (``scope["path"]`` is unquoted by the server) and
  cannot hide a segment either.
- **At request time** (:class:`Fenced`), every plugin route that was kept is wrapped: it
  matches nothing whose path is lemoncore's, whatever its own ``matches`` says, so a
  custom ``BaseRoute`` or an endpoint registered by a later plugin is covered too. Core
  routes also come first, so a method the core route does not serve gets the core's 405.

A plugin may **claim** an exact HTTP path under ``/v1/`` or ``/api/v1/`` that lemoncore
does not route (:func:`claim`): a plain ``Route`` with no ``{parameter}``, such as
Lemonade's ``/api/v1/pull/variants``. It answers that path only; a claim that a core route
or routed endpoint matches (``/api/v1/pull``, ``/api/v1/models/x`` under
``/api/v1/models/{model_id}``) is refused at load when the route table knows it
(``taken``) and never matches at request time whatever the load knew, so the core's own
answer, 405 included, stands. Mounts, patterns and WebSocket routes under those prefixes
stay refused. The guard's key rules are path-based and cover a claim like any other route.

An exact ``Route("/")`` stays allowed: it answers ``/`` only (the Ollama API's heartbeat).
``/`` is one of the paths the key guard leaves open (for the web UI's redirect); the
guard marks such a request (:data:`lemoncore.api.guard.KEYLESS`) and a plugin route
refuses it with a 401, so with ``api_key`` set a plugin's ``/`` needs the key like its
other routes.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Host, Match, Mount, Route, compile_path
from starlette.types import Receive, Scope, Send

from lemoncore.api.guard import KEYLESS, send_error

CORE_PREFIXES = ("/v1/", "/api/v1/", "/ui/")
CLAIMABLE_PREFIXES = ("/v1/", "/api/v1/")
CORE_PATHS = frozenset({"/live", "/metrics", "/openapi.json"})
_SLASHES = re.compile("/{2,}")


def normal(path: str) -> str:
    """``path`` with repeated slashes collapsed and no trailing slash (``/`` stays)."""
    return "/" + _SLASHES.sub("/", path).strip("/")


def reserved(path: str, taken: Collection[str] = ()) -> bool:
    """Whether a request path is lemoncore's: under a core prefix or the prefix itself
    (``/v1``), or a core path or one of ``taken`` (routed endpoint paths) or under one."""
    path = normal(path) + "/"
    owned = (*CORE_PREFIXES, *CORE_PATHS, *taken)
    return any(path.startswith(p if p.endswith("/") else p + "/") for p in owned)


def claim(route: BaseRoute) -> str | None:
    """The exact path a plain ``Route`` claims under ``/v1/`` or ``/api/v1/``, else ``None``."""
    path = getattr(route, "path", None)
    if type(route) is not Route or not isinstance(path, str) or "{" in path:
        return None
    path = normal(path)
    return path if path.startswith(CLAIMABLE_PREFIXES) else None


def routed(path: str, taken: Collection[str]) -> bool:
    """Whether one of ``taken`` (route paths, ``{parameter}`` patterns included) matches
    ``path`` as Starlette would route it."""
    return any(compile_path(t)[0].match(path) for t in taken)


def refusal(route: BaseRoute, taken: Collection[str] = ()) -> str | None:
    """Why lemoncore will not serve this plugin route, or ``None`` to serve it.

    ``taken``: routed endpoint paths. A route with no string ``path`` (a custom
    ``BaseRoute``) is not refused here; :class:`Fenced` still keeps it off core paths.
    """
    if isinstance(route, Host):
        return "it routes by Host; a plugin route may not"
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return None
    claimed = claim(route)
    if claimed:
        return "lemoncore routes it" if routed(claimed, taken) else None
    literal, params = path.partition("{")[0], "{" in path
    if not (isinstance(route, Mount) or params):
        return "lemoncore routes it" if reserved(path, taken) else None
    start = _SLASHES.sub("/", literal if params else literal.rstrip("/") + "/")
    if start in {"", "/"}:
        return (
            "its pattern starts at the root and could answer lemoncore's paths"
            if params
            else "it mounts at the root, over every route"
        )
    owned = [*CORE_PREFIXES, *CORE_PATHS, *taken, "/ui"]
    if reserved(start, taken) or any(p.startswith(start) for p in owned):
        return "lemoncore routes it or paths under it"
    return None


def describe(route: BaseRoute) -> str:
    """How a warning names a route: its path, or ``Mount('')``, ``Host('…')``."""
    if isinstance(route, Host):
        return f"Host({route.host!r})"
    path = getattr(route, "path", None)
    if isinstance(route, Mount) and not path:
        return "Mount('')"
    return path if isinstance(path, str) else type(route).__name__


class Fenced(BaseRoute):
    """A plugin route that matches no path :func:`reserved` holds for ``taken``, but the
    path it :func:`claim` s while no route of ``taken`` matches that."""

    def __init__(self, route: BaseRoute, taken: Collection[str]) -> None:
        self.route, self.taken = route, frozenset(taken)
        claimed = claim(route)
        self.claimed = claimed if claimed and not routed(claimed, self.taken) else None

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] in {"http", "websocket"}:
            path = _route_path(scope)
            mine = self.claimed is not None and normal(path) == self.claimed
            if reserved(path, self.taken) and not mine:
                return Match.NONE, {}
        return self.route.matches(scope)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        return self.route.url_path_for(name, **path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get(KEYLESS) and scope["type"] == "http":  # the guard let it pass open
            await send_error(
                send,
                401,
                "this route needs an API key: send 'Authorization: "
                "Bearer <key>' or 'x-api-key: <key>'",
                "invalid_api_key",
                scope,
            )
            return
        await self.route.handle(scope, receive, send)


def fenced(routes: Iterable[BaseRoute], taken: Collection[str]) -> list[BaseRoute]:
    """Each of ``routes`` behind a :class:`Fenced`."""
    return [Fenced(route, taken) for route in routes]


def _route_path(scope: Scope) -> str:
    """The path below the app's ``root_path``, as ``starlette._utils.get_route_path``
    computes it for routing (mounted inside another app, ``root_path`` is the mount)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path
