"""The running server as the commands that talk to it reach it.

The URL is ``--server``, else ``http://<host>:<port>`` from lemoncore's settings
(``LEMON_HOST``, ``LEMON_PORT``, the config file); keys are ``LEMON_API_KEY`` and
``LEMON_ADMIN_API_KEY`` (management calls send the admin key when one is set). Failures
become :class:`RemoteError` with a message a person can act on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx

from lemoncore.errors import LemonError
from lemoncore.settings import Settings

# A stream may wait long for a load, then for each token; only connecting is bounded.
STREAM_TIMEOUT = httpx.Timeout(None, connect=10)


class RemoteError(LemonError):
    """The server is not there, or refused; the message says what to do."""


class Remote:
    def __init__(self, url: str, api_key: str | None = None,
                 admin_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.api_key, self.admin_key = api_key, admin_key or api_key

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Remote:
        settings = Settings()
        host = "127.0.0.1" if settings.host in {"0.0.0.0", "::", ""} else settings.host
        host = f"[{host}]" if ":" in host else host
        key = settings.api_key.get_secret_value() if settings.api_key else None
        admin = settings.admin_api_key.get_secret_value() if settings.admin_api_key else None
        return cls(getattr(args, "server", None) or f"http://{host}:{settings.port}", key,
                   admin)

    def _headers(self, admin: bool) -> dict[str, str]:
        key = self.admin_key if admin else self.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _check(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message = error["message"] if isinstance(error, dict) else str(error)
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise RemoteError(f"{response.status_code}: {message}")
        return response.json()

    def _unreachable(self, exc: httpx.TransportError) -> RemoteError:
        return RemoteError(f"no lemoncore server at {self.url} ({exc.__class__.__name__}); "
                           "start one with 'lemon serve' (or pass --server URL)")

    def get(self, path: str, admin: bool = False) -> Any:
        try:
            return self._check(httpx.get(self.url + path, headers=self._headers(admin),
                                         timeout=30))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def post(self, path: str, body: dict[str, Any], admin: bool = False,
             timeout: float = 600) -> Any:
        try:
            return self._check(httpx.post(self.url + path, json=body, timeout=timeout,
                                          headers=self._headers(admin)))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def events(self, path: str, body: dict[str, Any], admin: bool = False
               ) -> AbstractContextManager[Iterator[tuple[str, Any]]]:
        """POST ``body`` and iterate its SSE events as ``(event, data)``: ``data`` parsed
        as JSON, ``[DONE]`` as ``None``; an unnamed event is ``message``."""
        return self._stream("POST", path, body, admin)

    def stream_get(self, path: str, admin: bool = False
                   ) -> AbstractContextManager[Iterator[tuple[str, Any]]]:
        """GET ``path`` and iterate its SSE events, as :meth:`events` does."""
        return self._stream("GET", path, None, admin)

    @contextmanager
    def _stream(self, method: str, path: str, body: dict[str, Any] | None, admin: bool
                ) -> Iterator[Iterator[tuple[str, Any]]]:
        try:
            with httpx.stream(method, self.url + path, json=body, timeout=STREAM_TIMEOUT,
                              headers=self._headers(admin)) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response)
                yield _parse_events(response.iter_lines())
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc


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
