"""Bad input gets an OpenAI-shaped JSON error with the right status, never a traceback.

The models and recipe are the core test backend's (``tinyplugin.py``), so these pass with
no backend plugin installed. One test is of the llama.cpp plugin's integration (its
reserved llama-server flags) and is skipped, saying so, without that plugin.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from lemoncore import Settings, create_app
from lemoncore.api.gateway import Gateway
from lemoncore.app import core_of
from lemoncore.errors import LemonError

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import tiny_plugin

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(
    settings: Settings, plugins: dict[str, object] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, plugins=plugins)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://localhost") as c,
    ):
        yield c


@pytest.fixture
async def client(tmp_path: Path, anyio_backend: str) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(
        Settings(cache_dir=tmp_path, plugins_allow=""), {"tiny": tiny_plugin(tmp_path)}
    ) as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    [
        ("POST", "/v1/chat/completions", b"{not json", 400, "not valid JSON"),
        ("POST", "/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
        ("POST", "/v1/chat/completions", b'{"messages": []}', 400, "'model'"),
        (
            "POST",
            "/api/v1/chat/completions",
            b'{"model": "nope", "messages": []}',
            404,
            "not found",
        ),
        ("POST", "/v1/chat/completions", b'{"model": "tiny-chat"}', 400, "'messages'"),
        (
            "POST",
            "/v1/embeddings",
            b'{"model": "tiny-chat", "input": "x"}',
            400,
            "is a llm model; /v1/embeddings serves only embedding models",
        ),
        ("POST", "/v1/completions", b'{"model": 3, "prompt": "x"}', 400, "'model'"),
        ("GET", "/v1/chat/completions", None, 405, "not allowed"),
        ("GET", "/v1/nothing-here", None, 404, "no route"),
        ("POST", "/api/v1/unload", b'{"model_name": "tiny-chat"}', 404, "not loaded"),
        ("POST", "/api/v1/load", b'{"model_name": "tiny-chat", "pinned": "yes"}', 400, "'pinned'"),
        ("POST", "/api/v1/load", b"{}", 400, "model_name"),
        ("POST", "/api/v1/pull", b'{"model_name": "unknown-model"}', 404, "not registered"),
        (
            "POST",
            "/api/v1/pull",
            b'{"model_name": "m", "checkpoint": "x/y:z.gguf", "recipe": "nope"}',
            400,
            "unknown recipe",
        ),
        (
            "POST",
            "/api/v1/pull",
            b'{"model_name": "m", "checkpoint": "no-colon", "recipe": "tiny"}',
            400,
            "checkpoint",
        ),
        ("POST", "/api/v1/delete", b'{"model_name": "unknown-model"}', 422, "not found"),
        # nested past the parser's recursion limit, and past lemoncore's own (#30, item 8)
        (
            "POST",
            "/v1/chat/completions",
            b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            400,
            "more than 64 deep",
        ),
        (
            "POST",
            "/api/v1/pull",
            b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            400,
            "more than 64 deep",
        ),
        (
            "POST",
            "/api/v1/load",
            b'{"model_name": "tiny-chat", "x": ' + b"[" * 65 + b"]" * 65 + b"}",
            400,
            "more than 64 deep",
        ),
    ],
)
async def test_errors_are_openai_shaped(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    needle: str,
) -> None:
    response = await client.request(method, path, content=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert needle in error["message"]
    assert error["type"]
    assert "Traceback" not in response.text


async def test_reserved_llama_server_flags_are_refused_before_launch(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The llama.cpp plugin's integration: its recipe refuses a flag lemoncore sets itself."""
    pytest.importorskip(
        "lemon_plugin_llamacpp",
        reason="tests the llama.cpp plugin's recipe (pip install -e plugins/llamacpp)",
    )
    async with serving(Settings(cache_dir=tmp_path, plugins_allow="llamacpp")) as client:
        response = await client.post(
            "/api/v1/load", json={"model_name": "smollm2", "llamacpp_args": "--threads 1 --port=9"}
        )
        assert response.status_code == 400
        assert "--port" in response.json()["error"]["message"]
        assert (await client.get("/api/v1/health")).json()["all_models_loaded"] == []


@pytest.mark.parametrize(
    "name", ["../escape", "/etc/passwd", "a\x00b", "x" * 200, "a b", ".hidden", "C:\\\\models\\\\m"]
)
async def test_hostile_model_names_are_refused(client: httpx.AsyncClient, name: str) -> None:
    response = await client.post(
        "/api/v1/pull",
        json={"model_name": name, "checkpoint": "file:/tmp/m.gguf", "recipe": "tiny"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "model_name"
    assert "invalid model registration" in error["message"] or "control char" in error["message"]


LONG = "x" * 5000
REGISTER = {"model_name": "m", "recipe": "tiny"}


@pytest.mark.parametrize(
    ("path", "body", "param", "needle"),
    [  # each of these was a 500 (#30, item 8), or an answer from deep inside a lookup
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "file:/tmp/a\x00b.gguf"},
            "checkpoint",
            "control characters (found U+0000 at index 11)",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "owner/repo:a\nb.gguf"},
            "checkpoint",
            "U+000A",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "ow\x00ner/repo:m.gguf"},
            "checkpoint",
            "U+0000",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "pkg:__main__/x"},
            "checkpoint",
            "no installed distribution provides '__main__'",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "pkg:os/x"},
            "checkpoint",
            "pkg: names a package that an installed distribution provides",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "pkg:lemoncore/" + "x" * 300},
            "checkpoint",
            "File name too long",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "o/" + "x" * 300 + ":m.gguf"},
            "checkpoint",
            "is not a Hugging Face repo id",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "file:/" + LONG},
            "checkpoint",
            "at most 4096 characters",
        ),
        (
            "/api/v1/pull",
            {**REGISTER, "checkpoint": "owner/repo:m.gguf", "files": ["a\x00b"]},
            "files",
            "control characters",
        ),
        ("/api/v1/pull", {"model_name": LONG}, "model_name", "at most 256 characters"),
        ("/api/v1/pull", {"model_name": "a\x00b"}, "model_name", "control characters"),
        ("/api/v1/load", {"model_name": LONG}, "model_name", "at most 256 characters"),
        ("/api/v1/load", {"model": "a\x1bb"}, "model", "U+001B"),
        ("/api/v1/unload", {"model_name": LONG}, "model_name", "at most 256 characters"),
        ("/api/v1/delete", {"model_name": "a\u2028b"}, "model_name", "U+2028"),
        (
            "/v1/chat/completions",
            {"model": LONG, "messages": []},
            "model",
            "at most 256 characters",
        ),
        ("/v1/chat/completions", {"model": "a\x00b", "messages": []}, "model", "U+0000"),
        ("/v1/embeddings", {"model": "a\x7fb", "input": "x"}, "model", "U+007F"),
    ],
)
async def test_bad_names_and_checkpoints_are_400s_naming_the_field(
    client: httpx.AsyncClient, path: str, body: dict[str, object], param: str, needle: str
) -> None:
    response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert needle in error["message"]
    assert error["param"] == param
    assert (await client.get("/v1/models/m")).status_code == 404  # nothing registered


@pytest.mark.parametrize(
    ("name", "why"), [("x" * 5000, "at most 256 characters"), ("tiny\x00chat", "U+0000 at index 4")]
)
async def test_a_plugin_asking_the_gateway_for_a_hostile_name_gets_a_400(
    tmp_path: Path, name: str, why: str, anyio_backend: str
) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow=""), plugins={"tiny": tiny_plugin(tmp_path)}
    )
    with pytest.raises(LemonError) as caught:
        Gateway(core_of(app)).model(name)
    assert caught.value.status == 400 and caught.value.code == "invalid_model_name"
    assert why in str(caught.value) and len(str(caught.value)) < 200


def test_a_registered_model_that_no_longer_validates_is_skipped(tmp_path: Path) -> None:
    """A user model stored before a check existed does not stop the server starting."""
    from lemoncore.jsonfile import write_json
    from lemoncore.models import ModelStore

    good = {"name": "good", "recipe": "tiny", "checkpoint": "owner/repo:m.gguf"}
    write_json(
        tmp_path / "user_models.json",
        [good, {**good, "name": "bad", "checkpoint": "owner/repo:a\x00.gguf"}],
    )
    assert list(ModelStore({}, tmp_path)._user) == ["good"]


def test_every_error_lemoncore_reports_is_a_lemon_error() -> None:
    """One hierarchy: each exception class lemoncore defines derives from LemonError, so
    the API answers it with its own status and code (a flow-control signal excepted)."""
    import importlib
    import inspect
    import pkgutil

    import lemoncore
    from lemoncore.errors import LemonError

    found = {}
    for info in pkgutil.walk_packages(lemoncore.__path__, "lemoncore."):
        if info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        found.update(
            {
                f"{c.__module__}.{c.__name__}": c
                for _, c in inspect.getmembers(module, inspect.isclass)
                if issubclass(c, BaseException) and c.__module__ == info.name
            }
        )
    outside = {name for name, c in found.items() if not issubclass(c, LemonError)}
    assert outside == {
        "lemoncore.fieldchecks.CheckSkipped",  # a check's outcome
        "lemoncore.echo_engine.BadRequest",  # the placeholder engine's own
        "lemoncore.models.gguf._Truncated",  # a header cut short: read_gguf_metadata's own
        "lemoncore.routing.conditions.PolicyError",  # the parser's: each caller words it
    }
    assert len(found) >= 14
