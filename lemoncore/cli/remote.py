"""The running server, as every command that talks to it reaches it: one client.

The URL is ``--server``, else ``http://<host>:<port>`` from lemoncore's settings
(``LEMON_HOST``, ``LEMON_PORT``, the config file; a wildcard bind is reached on
127.0.0.1). The key a request carries is the one its route needs, decided by the
server's own rule (:func:`lemoncore.api.guard.required_key`), so the CLI and the server
cannot disagree: a management route (load, unload, pull, delete, logs, ...) gets
``LEMON_ADMIN_API_KEY`` (else ``LEMON_API_KEY``, which the server's admin key defaults
to), any other API route ``LEMON_API_KEY``, an open route (``/live``) none. Failures
become :class:`RemoteError` with a message a person can act on: where the server's names
a route (``list models with GET /v1/models``), the ``lemon`` command that does the same
(:func:`in_commands`).

httpx and the settings are imported when a command first talks to a server, not with
the command line (``lemon --help`` stays fast).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from lemoncore.errors import LemonError

if TYPE_CHECKING:
    import httpx

    from lemoncore.settings import Settings

STREAM_CONNECT_TIMEOUT_S = 10.0  # a stream may wait long for a load, then for each token
ROUTE_COMMANDS = {  # a route a server's message names (either prefix) -> its command here
    "/v1/models": "lemon models --all",
    "/v1/health": "lemon ps",
    "/v1/load": "lemon load MODEL",
    "/v1/unload": "lemon unload MODEL",
    "/v1/pull": "lemon pull MODEL",
    "/v1/delete": "lemon rm MODEL",
    "/v1/logs": "lemon logs",
    "/v1/shutdown": "lemon stop",
}
_ROUTE = re.compile(r"(?P<joint>,? or )?\b(?:GET|POST) (?P<route>/[\w/.-]*\w)")


def in_commands(message: str) -> str:
    """``message`` (a server's) with each route it names as a ``lemon`` command: ``GET
    /v1/models`` as ``'lemon models --all'``; an alternative to a command it already
    names (``lemon load M, or POST /api/v1/load``) is dropped."""

    def command(found: re.Match[str]) -> str:
        named = ROUTE_COMMANDS.get(found["route"].removeprefix("/api"))
        if named is None:
            return found[0]
        if found["joint"] and named.removesuffix(" MODEL") in message:
            return ""
        return f"{found['joint'] or ''}'{named}'"

    return _ROUTE.sub(command, message)


class RemoteError(LemonError):
    """The server is not there, or refused; the message says what to do."""


class Remote:
    """A running server at ``url``; ``api_key`` and ``admin_key`` as the settings name
    them (``admin_key`` defaults to ``api_key``, as the server's does)."""

    def __init__(self, url: str, api_key: str | None = None, admin_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.api_key, self.admin_key = api_key, admin_key or api_key

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Remote:
        """The server ``args.server`` names, else the one the settings describe."""
        from lemoncore.settings import Settings

        return cls.for_settings(Settings(), getattr(args, "server", None))

    @classmethod
    def for_settings(cls, settings: Settings, server: str | None = None) -> Remote:
        """The server ``settings`` describe (or at ``server``), with their keys."""
        host = "127.0.0.1" if settings.host in {"0.0.0.0", "::", ""} else settings.host
        host = f"[{host}]" if ":" in host else host
        key = settings.api_key.get_secret_value() if settings.api_key else None
        admin = settings.admin_api_key.get_secret_value() if settings.admin_api_key else None
        return cls(server or f"http://{host}:{settings.port}", key, admin)

    def key(self, path: str) -> str | None:
        """The key a request to ``path`` (a query string may follow) carries, or ``None``."""
        needed = _needed(path)
        return None if needed is None else self.admin_key if needed == "admin" else self.api_key

    def _headers(self, path: str) -> dict[str, str]:
        key = self.key(path)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _check(self, response: httpx.Response, path: str) -> Any:
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message = error["message"] if isinstance(error, dict) else str(error)
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            hint = ""
            if response.status_code == 401:
                hint = (
                    "; management routes need the server's admin key: set "
                    "LEMON_ADMIN_API_KEY (or LEMON_API_KEY, which it defaults to)"
                    if _needed(path) == "admin"
                    else "; set LEMON_API_KEY to the server's key"
                )
            raise RemoteError(f"{response.status_code}: {in_commands(message)}{hint}")
        return response.json()

    def _unreachable(self, exc: Exception) -> RemoteError:
        return RemoteError(
            f"no lemoncore server at {self.url} ({exc.__class__.__name__}); "
            "start one with 'lemon serve' (or pass --server URL)"
        )

    def live(self, timeout: float = 2) -> bool:
        """Whether the server answers ``/live`` within ``timeout`` seconds."""
        import httpx

        try:
            return httpx.get(self.url + "/live", timeout=timeout).status_code == 200
        except httpx.TransportError:
            return False

    def get(self, path: str, timeout: float = 30) -> Any:
        import httpx

        try:
            return self._check(
                httpx.get(self.url + path, headers=self._headers(path), timeout=timeout), path
            )
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def post(self, path: str, body: Mapping[str, object], timeout: float = 600) -> Any:
        import httpx

        try:
            return self._check(
                httpx.post(
                    self.url + path, json=body, timeout=timeout, headers=self._headers(path)
                ),
                path,
            )
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def events(
        self, path: str, body: Mapping[str, object]
    ) -> AbstractContextManager[Iterator[tuple[str, Any]]]:
        """POST ``body`` (JSON, sent as given) and iterate its SSE events as ``(event,
        data)``: ``data`` parsed as JSON, ``[DONE]`` as ``None``; an unnamed event is
        ``message``."""
        return self._stream("POST", path, body)

    def stream_get(self, path: str) -> AbstractContextManager[Iterator[tuple[str, Any]]]:
        """GET ``path`` and iterate its SSE events, as :meth:`events` does."""
        return self._stream("GET", path, None)

    @contextmanager
    def _stream(
        self, method: str, path: str, body: Mapping[str, object] | None
    ) -> Iterator[Iterator[tuple[str, Any]]]:
        import httpx

        timeout = httpx.Timeout(None, connect=STREAM_CONNECT_TIMEOUT_S)
        try:
            with httpx.stream(
                method, self.url + path, json=body, timeout=timeout, headers=self._headers(path)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response, path)
                yield _parse_events(response.iter_lines())
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc


def _needed(path: str) -> str | None:
    """``admin``, ``api`` or ``None``: the server's rule for the route."""
    from lemoncore.api.guard import required_key

    return required_key(path.partition("?")[0])


def _parse_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    event = "message"
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            yield event, None if data == "[DONE]" else json.loads(data)
        elif not line:
            event = "message"
