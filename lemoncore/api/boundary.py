"""The browser boundary: an ASGI middleware that keeps web pages from driving the server.

Any page the user visits can send requests to a loopback port. Two rules stop it:

- **Host.** A request is served only when its ``Host`` is a loopback name (``localhost``,
  ``*.localhost``), an IP literal, an entry of ``allowed_hosts``, or (when the server is
  bound beyond loopback) this machine's own name. DNS rebinding needs a hostname the
  attacker controls: after the rebind, the attacker's page is same-origin with the server
  and sends no ``Origin`` on a GET, but its requests still carry
  ``Host: attacker.example``.
- **Browser markers.** A request that a browser marks as coming from another site (an
  ``Origin`` other than the server's own and not in ``cors_origins``, including
  ``Origin: null``, or ``Sec-Fetch-Site: cross-site``/``same-site``) is refused on every
  route but ``/live``. Browsers send ``Origin`` on every cross-origin POST, ``no-cors``
  fetches and form posts included, so a CSRF body never reaches a handler, whatever its
  content type. Requests without browser markers (curl, SDKs, agents) pass untouched.

WebSocket handshakes get both rules, stricter: browsers send ``Origin`` on every
handshake and the same-origin policy does not protect a WebSocket's frames (there is no
CORS for them), so a handshake whose ``Origin`` is not the server's own is refused on
every path, ``cors_origins`` notwithstanding; without ``Origin``, ``Sec-Fetch-Site``
decides as for HTTP. ``lifespan`` passes through; any other ASGI scope type raises.

Both refusals are 403 with an error that names the setting to change, in the shape of
the request's API surface (:mod:`lemoncore.api.shapes`: OpenAI's, Anthropic's on
``/v1/messages``, a plugin's on its paths). A WebSocket handshake gets the same, or a
close before accept where the server lacks the denial-response extension
(:func:`lemoncore.api.guard.send_error`).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from lemoncore.api.guard import send_error, served_scope
from lemoncore.api.hostname import loopback_name, split_host

log = structlog.get_logger("lemoncore.boundary")
OPEN_PATHS = frozenset({"/live"})


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether a ``Host`` header names this server rather than an attacker's domain."""
    if "*" in allowed or loopback_name(host) or split_host(host) in allowed:
        return True
    try:
        ipaddress.ip_address(split_host(host))  # an IP literal cannot be rebound
    except ValueError:
        return False
    return True


def origin_allowed(origin: str, host: str, cors_origins: frozenset[str]) -> bool:
    """An ``Origin`` is the server's own (same scheme-less host and port) or configured."""
    if origin in cors_origins or "*" in cors_origins:
        return True
    scheme, sep, rest = origin.partition("://")
    return bool(sep) and scheme in {"http", "https"} and rest.lower() == host.strip().lower()


class BrowserBoundary:
    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str],
        cors_origins: Iterable[str],
        machine_names: bool = False,
    ) -> None:
        """``machine_names``: also serve this machine's own names (when bound beyond
        loopback; on loopback only a rebinding LAN peer would use them)."""
        self.app = app
        machine = socket.gethostname().lower()
        self.allowed_hosts = frozenset(
            {h.lower() for h in allowed_hosts}
            | ({machine, f"{machine}.local"} if machine_names else set())
        )
        self.cors_origins = frozenset(cors_origins)
        self._hosts: dict[str, bool] = {}  # verdicts for Host values seen, bounded

    def _host_ok(self, host: str) -> bool:
        verdict = self._hosts.get(host)
        if verdict is None:
            verdict = host_allowed(host, self.allowed_hosts)
            if len(self._hosts) < 1024:
                self._hosts[host] = verdict
        return verdict

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not served_scope(scope):
            await self.app(scope, receive, send)
            return
        websocket = scope["type"] == "websocket"
        host, origin, fetch_site = "", None, ""
        for key, value in scope["headers"]:  # ASGI header names are lower-case
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"sec-fetch-site":
                fetch_site = value.decode("latin-1")
        if not self._host_ok(host):
            log.warning("refused request for a foreign Host", host=host, path=scope["path"])
            await send_error(
                send,
                403,
                f"Host {host!r} is not this server's name; a page on another "
                "domain may be trying to reach lemoncore (DNS rebinding). To serve this "
                "name, add it to the setting allowed_hosts (LEMON_ALLOWED_HOSTS)",
                "host_not_allowed",
                scope,
            )
            return
        if origin is not None:
            foreign = not origin_allowed(
                origin, host, frozenset() if websocket else self.cors_origins
            )
        else:
            foreign = fetch_site in {"cross-site", "same-site"}
        if foreign and (websocket or scope["path"] not in OPEN_PATHS):
            site = origin or f"Sec-Fetch-Site: {fetch_site}"
            log.warning(
                "refused cross-site browser request",
                origin=site,
                path=scope["path"],
                method=scope.get("method", "WEBSOCKET"),
            )
            fix = (
                "WebSockets answer only pages of this server's own origin"
                if websocket
                else "To let a web app on that origin call the API, add it to the "
                "setting cors_origins (LEMON_CORS_ORIGINS)"
            )
            await send_error(
                send,
                403,
                f"refused a browser request from another site ({site}): web "
                f"pages may not drive lemoncore. {fix}",
                "cross_site_request",
                scope,
            )
            return
        await self.app(scope, receive, send)
