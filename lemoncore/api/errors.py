"""Every failure leaves the API as OpenAI-shaped JSON with a fitting status."""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lemoncore.backends import BackendError
from lemoncore.install import InstallError
from lemoncore.launch import LaunchRefused, RequestRefused
from lemoncore.models import ModelError
from lemoncore.options import OptionError
from lemoncore.plugins import PluginError
from lemoncore.proxy import BackendFailure, error_body
from lemoncore.router import RouterError
from lemoncore.supervisor import StartError

log = structlog.get_logger("lemoncore.api")


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.code, self.param = status, type_, code, param
        self.headers = headers


def error_response(message: str, status: int, type_: str, code: str | None = None,
                   param: str | None = None, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    return JSONResponse(error_body(message, type_, code, param), status_code=status,
                        headers=headers)


def _classify(exc: Exception) -> ApiError:
    match exc:
        case ApiError():
            return exc
        case RouterError():
            return ApiError(str(exc), exc.status, exc.type, exc.code, headers=exc.headers)
        case BackendError():
            type_ = "invalid_request_error" if exc.status < 500 else "backend_error"
            return ApiError(str(exc), exc.status, type_, exc.code)
        case ModelError():
            type_ = "invalid_request_error" if exc.status < 500 else "backend_error"
            return ApiError(str(exc), exc.status, type_)
        case OptionError() if exc.status < 500:
            return ApiError(str(exc), exc.status, "invalid_request_error", "invalid_option",
                            exc.param)
        case OptionError():
            return ApiError(str(exc), exc.status, "server_error", "invalid_configuration",
                            exc.param)
        case LaunchRefused():
            return ApiError(str(exc), 400, "invalid_request_error", "launch_refused")
        case RequestRefused():
            return ApiError(str(exc), 400, "invalid_request_error", "unsupported_request")
        case StartError():
            return ApiError(str(exc), 503, "model_load_error", "backend_start_failed")
        case InstallError():
            return ApiError(str(exc), 503, "backend_error", "backend_install_failed")
        case BackendFailure():
            return ApiError(str(exc), 502, "backend_error", "backend_unreachable")
        case PluginError():
            return ApiError(str(exc), 500, "server_error", "plugin_error")
    log.exception("unhandled error", error=repr(exc))
    return ApiError("internal server error; see the server log", 500, "server_error")


async def handle_exception(request: Request, exc: Exception) -> Response:
    err = _classify(exc)
    return error_response(str(err), err.status, err.type, err.code, err.param, err.headers)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 405:
        message = f"method {request.method} not allowed for {request.url.path}"
    elif exc.status_code == 404:
        message = f"no route {request.url.path}"
    return error_response(message, exc.status_code, "invalid_request_error")


_KNOWN = (ApiError, RouterError, ModelError, BackendError, OptionError, LaunchRefused,
          RequestRefused,
          StartError, InstallError, BackendFailure, PluginError)
# Known errors are answered by Starlette's ExceptionMiddleware; anything else reaches the
# server-error middleware, which answers the same JSON and re-raises for the server log.
EXCEPTION_HANDLERS: dict[Any, Any] = {
    HTTPException: handle_http_exception, Exception: handle_exception,
    **dict.fromkeys(_KNOWN, handle_exception)}


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object")
    return body


def required_str(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ApiError(f"missing or invalid field {field!r}: a non-empty string is required",
                       param=field)
    return value
