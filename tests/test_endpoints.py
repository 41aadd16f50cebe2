"""Routed endpoints as data: a plugin adds one (``register_endpoints``) and it gets what
chat gets (auth, validation, routing to its backend, usage metrics, the OpenAPI
document); a backend answers only the endpoints it declares; a plugin cannot take over a
core path. The engine is ``tinyserver.py`` (it answers any POST)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from lemoncore import Settings, create_app, hookimpl
from lemoncore.api.gateway import Gateway
from lemoncore.errors import LemonError
from lemoncore.recipes import OPENAI_ENDPOINTS, Endpoint, ModelInfo, ModelType, Recipe

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, RECIPE, tiny_plugin

pytestmark = pytest.mark.anyio
INFILL = Endpoint(path="/v1/infill", summary="Fill in the middle", required="input_prefix")


class Infill:
    """Adds ``/v1/infill``, which the tiny recipe's backend declares it serves."""

    @hookimpl
    def register_endpoints(self) -> Sequence[Endpoint]:
        return [INFILL, Endpoint(path="/v1/chat/completions", summary="a takeover")]


def serving_infill(cache_dir: Path) -> Any:
    plugin = tiny_plugin(cache_dir)
    backend = RECIPE.backends[0].model_copy(update={"endpoints": OPENAI_ENDPOINTS | {"/v1/infill"}})
    recipe = RECIPE.model_copy(update={"backends": (backend,)})

    class Tiny(type(plugin)):  # type: ignore[misc]
        @hookimpl
        def register_recipes(self) -> Sequence[Recipe]:
            return [recipe]

    return Tiny(plugin.weights, plugin.registry)


@asynccontextmanager
async def lemon(
    tmp_path: Path, infill_backend: bool = True, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    cache = tmp_path / "cache"
    tiny = serving_infill(cache) if infill_backend else tiny_plugin(cache)
    app = create_app(
        Settings(cache_dir=cache, plugins_allow="", **settings),
        plugins={"tiny": tiny, "infill": Infill()},
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        yield client


async def test_a_plugin_endpoint_is_routed_like_chat(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path, api_key=SecretStr("k")) as client:
        body = {"model": MODEL, "input_prefix": "def f(", "input_suffix": ")"}
        assert (await client.post("/v1/infill", json=body)).status_code == 401
        auth = {"Authorization": "Bearer k"}
        for path in ("/v1/infill", "/api/v1/infill"):
            answer = await client.post(path, json=body, headers=auth)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == f"ok from {MODEL}"
        missing = await client.post("/v1/infill", json={"model": MODEL}, headers=auth)
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "input_prefix"
        metrics = (await client.get("/metrics", headers=auth)).text
        assert f'lemon_tokens_total{{model="{MODEL}",kind="completion"}} 6' in metrics
        document = (await client.get("/openapi.json")).json()
        assert document["paths"]["/v1/infill"]["post"]["summary"] == "Fill in the middle"
        plugins = (await client.get("/api/v1/system-info", headers=auth)).json()["plugins"]
        [infill] = [p for p in plugins if p["name"] == "infill"]
        assert "endpoint /v1/chat/completions skipped: already routed" in infill["warnings"]


async def test_a_backend_answers_only_the_endpoints_it_declares(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path, infill_backend=False) as client:
        refused = await client.post("/v1/infill", json={"model": MODEL, "input_prefix": "x"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "endpoint_not_served"
        assert "tiny:cpu does not serve /v1/infill" in refused.json()["error"]["message"]
        health = (await client.get("/api/v1/health")).json()
        assert health["all_models_loaded"] == []  # refused before loading the model
        # Anthropic's Messages is translated to the chat the engine serves
        anthropic = await client.post(
            "/v1/messages",
            json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert anthropic.status_code == 200, anthropic.text
        assert anthropic.json()["content"] == [{"type": "text", "text": f"ok from {MODEL}"}]
        wrong = await client.post(
            "/v1/messages",
            json={
                "model": MODEL,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
        )
        assert wrong.status_code == 400
        assert wrong.json()["type"] == "error"  # Anthropic's shape on its endpoint
        assert wrong.json()["error"]["type"] == "invalid_request_error"


class Echo:
    """Another API surface: ``/echo/chat`` answers through the gateway; ``/echo/pull``
    is a management path; a route at ``/v1/models`` or ``/live`` would take over a core
    route."""

    @hookimpl
    def register_routes(self) -> Sequence[BaseRoute]:
        async def chat(request: Request) -> Response:
            gateway, body = Gateway.of(request), await request.json()
            if body.get("stream"):
                chunks = [c async for c in gateway.stream("/v1/chat/completions", body)]
                return JSONResponse({"chunks": len(chunks)})
            try:
                answer = await gateway.complete("/v1/chat/completions", body)
            except LemonError as exc:
                return JSONResponse({"refused": str(exc)}, exc.status)
            return JSONResponse(
                {
                    "said": answer["choices"][0]["message"]["content"],
                    "loaded": [m.model_name for m in gateway.loaded()],
                }
            )

        async def pull(request: Request) -> Response:
            return JSONResponse({"pulled": True})

        return [
            Route("/echo/chat", chat, methods=["POST"]),
            Route("/echo/pull", pull),
            Route("/v1/models", pull),
            Route("/live", pull),
        ]


async def test_a_plugin_serves_its_own_routes_through_the_gateway(
    tmp_path: Path, anyio_backend: str
) -> None:
    cache = tmp_path / "cache"
    app = create_app(
        Settings(
            cache_dir=cache,
            plugins_allow="",
            api_key=SecretStr("k"),
            admin_api_key=SecretStr("admin"),
        ),
        plugins={"tiny": tiny_plugin(cache), "echo": Echo()},
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        auth = {"Authorization": "Bearer k"}
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        assert (await client.post("/echo/chat", json=chat)).status_code == 401
        answer = await client.post("/echo/chat", json=chat, headers=auth)
        assert answer.json() == {"said": f"ok from {MODEL}", "loaded": [MODEL]}, answer.text
        unknown = await client.post("/echo/chat", json={**chat, "model": "nope"}, headers=auth)
        assert unknown.status_code == 404 and "nope" in unknown.json()["refused"]
        metrics = (await client.get("/metrics", headers=auth)).text
        assert f'lemon_tokens_total{{model="{MODEL}",kind="completion"}} 3' in metrics
        assert (await client.get("/echo/pull", headers=auth)).status_code == 401
        pulled = await client.get("/echo/pull", headers={"Authorization": "Bearer admin"})
        assert pulled.json() == {"pulled": True}
        assert (await client.get("/v1/models", headers=auth)).json()["object"] == "list"
        assert (await client.get("/live")).json() == {"status": "ok"}
        plugins = (await client.get("/api/v1/system-info", headers=auth)).json()["plugins"]
        [echo] = [p for p in plugins if p["name"] == "echo"]
        assert echo["warnings"] == [
            "route /v1/models skipped: lemoncore routes it",
            "route /live skipped: lemoncore routes it",
        ]


TRANSCRIBE = Endpoint(
    path="/v1/audio/transcriptions",
    summary="Speech to text",
    model_type=ModelType.TRANSCRIPTION,
    body="multipart",
    required="file",
    max_body_bytes=64 * 1024,
)
WHISPER = "tiny-whisper"


class Transcribe:
    """A speech-to-text plugin: the multipart endpoint, a backend of the tiny recipe that
    serves it, and a transcription model."""

    def __init__(self, weights: Path) -> None:
        self.weights = weights

    @hookimpl
    def register_endpoints(self) -> Sequence[Endpoint]:
        return [TRANSCRIBE]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(
                name=WHISPER,
                recipe="tiny",
                checkpoint=f"file:{self.weights}",
                labels=("transcription",),
            )
        ]


async def test_a_plugin_multipart_endpoint_takes_uploads(
    tmp_path: Path, anyio_backend: str
) -> None:
    cache = tmp_path / "cache"
    tiny = tiny_plugin(cache)
    backend = RECIPE.backends[0].model_copy(
        update={"endpoints": OPENAI_ENDPOINTS | {TRANSCRIBE.path}}
    )
    recipe = RECIPE.model_copy(update={"backends": (backend,)})

    class Tiny(type(tiny)):  # type: ignore[misc]
        @hookimpl
        def register_recipes(self) -> Sequence[Recipe]:
            return [recipe]

    app = create_app(
        Settings(cache_dir=cache, plugins_allow="", api_key=SecretStr("k")),
        plugins={"tiny": Tiny(tiny.weights, tiny.registry), "whisper": Transcribe(tiny.weights)},
    )
    audio = bytes(range(256)) * 16  # 4 KiB of "audio"
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as http,
        openai.AsyncOpenAI(base_url="http://localhost/v1", api_key="k", http_client=http) as client,
    ):
        heard = await client.audio.transcriptions.create(
            model=WHISPER, file=("talk.wav", audio, "audio/wav"), language="en"
        )
        assert heard.text == "heard talk.wav: 4096 bytes"  # the engine got the upload whole
        raw = await http.post(
            "/v1/audio/transcriptions",
            headers={"x-api-key": "k"},
            data={"model": WHISPER, "prompt": "names"},
            files={"file": ("a.wav", audio)},
        )
        assert raw.json()["fields"] == {"model": WHISPER, "prompt": "names"}
        stranger = openai.AsyncOpenAI(
            base_url="http://localhost/v1", api_key="wrong", http_client=http
        )  # closing it would close `http`
        with pytest.raises(openai.AuthenticationError):
            await stranger.audio.transcriptions.create(model=WHISPER, file=("a.wav", audio))
        with pytest.raises(openai.APIStatusError) as too_big:
            await client.audio.transcriptions.create(
                model=WHISPER, file=("long.wav", audio * 17, "audio/wav")
            )
        assert too_big.value.status_code == 413
        with pytest.raises(openai.BadRequestError) as chat_model:
            await client.audio.transcriptions.create(model=MODEL, file=("a.wav", audio))
        assert "is a llm model; /v1/audio/transcriptions serves only transcription" in str(
            chat_model.value
        )
        assert chat_model.value.code == "model_type_mismatch"
        no_file = await http.post(
            "/v1/audio/transcriptions",
            headers={"x-api-key": "k"},
            data={"model": WHISPER},
            files={"other": ("x", b"1")},
        )
        assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
        as_json = await http.post(
            "/v1/audio/transcriptions",
            headers={"x-api-key": "k"},
            json={"model": WHISPER, "file": "x"},
        )
        assert as_json.status_code == 400 and "multipart/form-data" in as_json.text
        metrics = (await http.get("/metrics", headers={"x-api-key": "k"})).text
        assert (
            f'lemon_backend_answers_total{{model="{WHISPER}",endpoint='
            f'"/v1/audio/transcriptions",status="200"}} 2'
        ) in metrics
        document = (await http.get("/openapi.json")).json()
        upload = document["paths"]["/v1/audio/transcriptions"]["post"]["requestBody"]
        assert set(upload["content"]) == {"multipart/form-data"}
