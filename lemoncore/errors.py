"""One error type. Every failure lemoncore reports to a caller is a :class:`LemonError`:
its message says what was wrong and the fix; ``status``, ``type``, ``code``, ``param``
and ``retry_after`` are how the HTTP API answers it (:func:`error_body`, OpenAI's shape).
Domain errors (a refused launch, a failed install, an unknown option) subclass it with
their defaults; plugins raise the plugin-facing ones (``LaunchRefused``,
``RequestRefused``) and anything else a plugin raises is wrapped as a ``PluginError``.
An API surface a plugin serves answers errors in its own shape: :class:`ErrorShape`
(``register_error_shapes``). No imports beyond the standard library: plugins import this.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict, Unpack


class ErrorExtras(TypedDict, total=False):
    """What an error object may carry beyond OpenAI's fields."""

    details: dict[str, int]  # e.g. the engine's own HTTP status
    status_code: int  # in a stream's error event: the status it stands for


class ErrorObject(ErrorExtras):
    message: str
    type: str
    code: str | None
    param: str | None


class ErrorBody(TypedDict):
    """OpenAI's error answer: ``{"error": {...}}``."""

    error: ErrorObject


class LemonError(Exception):
    """A failure with an answer for the caller. Subclasses set the class defaults; without
    a ``type_``, a status below 500 is a caller's mistake (``invalid_request_error``) and
    from 500 up the class's own type."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None
    #: ``False``: sending the same request again soon cannot succeed (an engine that dies
    #: of SIGILL): answered with ``x-should-retry: false``, the header the openai and
    #: anthropic clients obey before their automatic retries (openai 3.57, anthropic 2.15:
    #: ``_base_client.py`` ``_should_retry``).
    should_retry: bool | None = None

    def __init__(
        self,
        message: str,
        status: int | None = None,
        type_: str | None = None,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        if type_ is None and self.status < 500:
            type_ = "invalid_request_error"
        if type_ is not None:
            self.type = type_
        if code is not None:
            self.code = code
        self.param, self.retry_after = param, retry_after

    @property
    def headers(self) -> dict[str, str] | None:
        headers = (
            {}
            if self.retry_after is None
            else {"Retry-After": str(max(1, math.ceil(self.retry_after)))}
        )
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return headers or None

    def body(self) -> ErrorBody:
        return error_body(str(self), self.type, self.code, self.param)


def error_body(
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    **extra: Unpack[ErrorExtras],
) -> ErrorBody:
    """The OpenAI error object: ``{"error": {message, type, code, param, ...}}``."""
    return {"error": {"message": message, "type": type_, "code": code, "param": param, **extra}}


@dataclass(frozen=True)
class ErrorShape:
    """How errors look on the paths a plugin's API serves (``register_error_shapes``):
    ``render`` turns a :class:`LemonError` (its message, ``status``, ``type``, ``code``,
    ``param``) into the JSON object the answer carries, with the error's status and
    headers. It covers a request path in ``paths`` (exactly) or equal to or under one of
    ``prefixes`` (``/api`` covers ``/api`` and ``/api/tags``); lemoncore's own paths
    (``/v1``, ``/api/v1``, ...) keep lemoncore's shapes whatever a shape covers.

    ``render`` is synchronous and pure: it is called as an answer is written. One that
    raises or returns anything but a JSON object leaves that answer in OpenAI's shape,
    with a warning in the server log."""

    render: Callable[[LemonError], Mapping[str, object]]
    paths: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not callable(self.render) or inspect.iscoroutinefunction(self.render):
            raise TypeError(
                "ErrorShape.render must be a plain function (not async) that "
                "returns the error's JSON object"
            )
        for path in (*self.paths, *self.prefixes):
            if not isinstance(path, str) or not path.startswith("/"):
                raise ValueError(f"ErrorShape paths and prefixes start with '/', not {path!r}")

    def covers(self, path: str) -> bool:
        """Whether a request for ``path`` gets this shape (lemoncore's paths aside)."""
        return path in self.paths or any(
            path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes
        )


class LaunchRefused(LemonError):
    """A plugin refuses to start a server; the message says what was wrong and the fix."""

    status, type, code = 400, "invalid_request_error", "launch_refused"


class RequestRefused(LemonError):
    """A plugin refuses a request its backend cannot serve (answered with a 400)."""

    status, type, code = 400, "invalid_request_error", "unsupported_request"


class PluginError(LemonError):
    """A plugin broke the contract; the message names the plugin and the fix."""

    code = "plugin_error"


class InstallError(LemonError):
    """An install was refused or failed; nothing was changed. The message names the fix."""

    status, type, code = 503, "backend_error", "backend_install_failed"
