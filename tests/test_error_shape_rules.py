"""The rules that choose an error answer's shape, as data: the surface of a request
(path, ``anthropic-version``, a plugin's shape), Anthropic's error types by status, an
engine's error in the request's shape, a plugin render that fails (OpenAI's shape and a
warning, never a broken answer), a shape claiming lemoncore's paths, a refused WebSocket
handshake and a head over the limit. Every surface end to end, with the SDKs:
``test_error_shapes.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import structlog.testing

from lemoncore import hookimpl
from lemoncore.api.guard import send_error
from lemoncore.api.images import first_image
from lemoncore.api.intake import Intake
from lemoncore.api.shapes import ErrorShapes, anthropic_type
from lemoncore.api.upstream import backend_response
from lemoncore.errors import ErrorShape, LemonError
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.recipes import core_endpoints


def scope(path: str, *headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "path": path, "headers": list(headers)}


VERSION = (b"anthropic-version", b"2023-06-01")


class Plugins:
    """A plugin host whose one plugin's shape covers ``/api`` and ``/``."""

    def __init__(self, render: Callable[[LemonError], Any]) -> None:
        self.host = PluginHost()
        self.host.registry.error_shapes.append(
            ("shaped", ErrorShape(render=render, paths=("/",), prefixes=("/api",)))
        )


@pytest.mark.parametrize(
    ("path", "headers", "surface"),
    [
        ("/v1/messages", (), "anthropic"),
        ("/api/v1/messages/count_tokens", (), "anthropic"),
        ("/v1/messages/nothing", (), "anthropic"),  # under Anthropic's path: a 404 there
        ("/v1/messagesx", (), "openai"),
        ("/v1/chat/completions", (), "openai"),
        ("/v1/models", (VERSION,), "anthropic"),  # the anthropic client asks
        ("/v1/nothing-here", (VERSION,), "anthropic"),
        ("/api/v1/health", (), "openai"),
        ("/api/chat", (), "plugin"),
        ("/api", (), "plugin"),
        ("/", (), "plugin"),
        ("/api/v1/load", (), "openai"),  # lemoncore's own, whatever a plugin's shape covers
        ("/api/v1", (), "openai"),
        ("/apiary", (), "openai"),  # not under /api
        ("/tokenize", (), "openai"),  # a routed endpoint
        ("/api/chat", (VERSION,), "plugin"),  # the header counts on lemoncore's API only
        ("/metrics", (VERSION,), "openai"),
    ],
)
def test_the_surface_of_a_request(
    path: str, headers: tuple[tuple[bytes, bytes], ...], surface: str
) -> None:
    shapes = ErrorShapes(core_endpoints(), Plugins(lambda e: {"error": str(e)}).host)
    assert shapes.surface(scope(path, *headers)) == surface


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (408, "invalid_request_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (431, "invalid_request_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_error_types_by_status(status: int, kind: str) -> None:
    assert anthropic_type(status) == kind


async def _coroutine(error: LemonError) -> dict[str, str]:
    return {"error": str(error)}


@pytest.mark.parametrize(
    "render",
    [
        lambda e: 1 / 0,
        lambda e: ["not", "an", "object"],
        lambda e: {"error": float("nan")},  # not JSON
        lambda e: {"error": object()},
        lambda e: {1: "a key that is not a string"},
        lambda e: _coroutine(e),  # async behind a plain function
    ],
    ids=["raises", "a list", "NaN", "an object", "an int key", "a coroutine"],
)
def test_a_plugin_render_that_fails_answers_in_openai_shape(
    render: Callable[[LemonError], Any],
) -> None:
    plugins = Plugins(render)
    error = LemonError("no such thing", 404, code="nope")
    with structlog.testing.capture_logs() as logs:
        body = ErrorShapes(core_endpoints(), plugins.host).body(scope("/api/chat"), error)
    assert json.loads(body) == error.body()  # OpenAI's
    assert [(e["log_level"], e["plugin"]) for e in logs] == [("warning", "shaped")]


def test_a_plugin_shape_renders_the_error_it_is_given() -> None:
    plugins = Plugins(lambda e: {"error": str(e), "status": e.status, "code": e.code})
    body = ErrorShapes(core_endpoints(), plugins.host).body(
        scope("/api/tags"), LemonError("gone", 410, code="gone")
    )
    assert json.loads(body) == {"error": "gone", "status": 410, "code": "gone"}


def test_an_async_render_is_refused_when_the_shape_is_made() -> None:
    with pytest.raises(TypeError, match="not async"):
        ErrorShape(render=_coroutine, prefixes=("/api",))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [{"paths": ("api",)}, {"prefixes": ("",)}])
def test_an_error_shape_with_a_path_not_from_the_root_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="start with '/'"):
        ErrorShape(render=lambda e: {}, **bad)


@pytest.mark.anyio
async def test_a_refused_websocket_handshake_gets_its_surface_shape(anyio_backend: str) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    handshake = {
        **scope("/v1/messages"),
        "type": "websocket",
        "extensions": {"websocket.http.response": {}},
    }
    await send_error(send, 401, "needs a key", "invalid_api_key", handshake)
    assert [m["type"] for m in sent] == [
        "websocket.http.response.start",
        "websocket.http.response.body",
    ]
    assert sent[0]["status"] == 401
    assert json.loads(sent[1]["body"]) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "needs a key"},
    }


# llama-server's answer to `"temperature": "hot"` (server-schema.cpp handle_with_catch's
# std::invalid_argument, which server.cpp's ex_wrapper answers as ERROR_TYPE_INVALID_REQUEST
# through server-common.cpp format_error_response)
ENGINE_400 = {
    "error": {
        "code": 400,
        "type": "invalid_request_error",
        "message": "Field 'temperature': [json.exception.type_error.302] type must be "
        "number, but is string",
    }
}


@pytest.mark.parametrize(
    ("path", "headers", "status", "body"),
    [
        ("/v1/chat/completions", (), 400, ENGINE_400),  # passed through as it came
        (
            "/v1/messages",
            (),
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "backend error: " + ENGINE_400["error"]["message"],
                },
            },
        ),
        (
            "/v1/chat/completions",
            (VERSION,),
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "backend error: " + ENGINE_400["error"]["message"],
                },
            },
        ),
    ],
)
def test_an_engine_error_passed_through_takes_the_request_shape(
    path: str, headers: tuple[tuple[bytes, bytes], ...], status: int, body: dict[str, Any]
) -> None:
    engine = httpx.Response(400, json=ENGINE_400)
    answer = backend_response(engine, scope(path, *headers))
    assert (answer.status_code, json.loads(bytes(answer.body))) == (status, body)


def test_an_engine_5xx_is_a_502_in_the_request_shape() -> None:
    engine = httpx.Response(
        500,
        json={
            "error": {
                "code": 500,
                "type": "server_error",
                "message": "image input is not supported",
            }
        },
    )
    anthropic_answer = backend_response(engine, scope("/v1/messages"))
    assert anthropic_answer.status_code == 502
    assert json.loads(bytes(anthropic_answer.body))["error"] == {
        "type": "api_error",
        "message": "backend error: image input is not supported",
    }
    openai_answer = backend_response(engine, scope("/v1/chat/completions"))
    assert openai_answer.status_code == 502
    assert json.loads(bytes(openai_answer.body))["error"]["details"] == {"status": 500}


@pytest.mark.anyio
async def test_a_head_over_the_limit_gets_its_surface_shape(anyio_backend: str) -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused head reaches no app")

    request = {**scope("/v1/messages", (b"x-pad", b"a" * 200)), "method": "POST"}
    await Intake(app, body_timeout=1, max_header_bytes=100)(request, None, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 431
    assert json.loads(sent[1]["body"])["error"]["type"] == "invalid_request_error"
    assert json.loads(sent[1]["body"])["type"] == "error"


class Claims:
    """A plugin whose error shape claims lemoncore's ``/v1`` beside its own ``/mine``."""

    @hookimpl
    def register_error_shapes(self) -> list[ErrorShape]:
        return [ErrorShape(render=lambda e: {"mine": str(e)}, prefixes=("/v1", "/mine"))]


def test_a_shape_over_lemoncores_paths_is_warned_about_and_kept_off_them() -> None:
    host = load_plugins(allow=[], deny=(), extra={"claims": Claims()})
    (record,) = [r for r in host.records if r.name == "claims"]
    assert record.status == "loaded" and "register_error_shapes" in record.hooks
    assert record.warnings == [
        "error shape for /v1 skipped there: lemoncore's own paths answer in lemoncore's shapes"
    ]
    shapes = ErrorShapes(core_endpoints(), host)
    error = LemonError("no", 404)
    assert json.loads(shapes.body(scope("/v1/models"), error)) == error.body()
    assert json.loads(shapes.body(scope("/mine/x"), error)) == {"mine": "no"}


URL = {"url": "data:image/png;base64,AAAA"}
SOURCE = {"type": "base64", "media_type": "image/png", "data": "AAAA"}


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, None),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, None),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": URL}]}]},
            "messages[0].content[0]",
        ),
        (  # Anthropic: an image block, and one in a tool result
            {"messages": [{"role": "user", "content": [{"type": "image", "source": SOURCE}]}]},
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "x"},
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": SOURCE}],
                            },
                        ],
                    }
                ]
            },
            "messages[0].content[1].content[0]",
        ),
        ({"input": "describe it"}, None),  # Responses
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_image", "image_url": "x"}],
                    }
                ]
            },
            "input[0].output[0]",
        ),
    ],
)
def test_where_a_request_carries_an_image(body: dict[str, Any], where: str | None) -> None:
    assert first_image(body) == where
