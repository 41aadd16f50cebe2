"""What may route to a model: its type (from its labels) and its backend's endpoints
decide, before any load or eviction; an endpoint's declared ``request`` model checks
bodies and documents them; a model card says what the model is and whether a delete
would remove anything. The engine is ``tinyserver.py`` (it answers any POST)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel, ConfigDict, Field

from lemoncore import Settings, create_app, hookimpl
from lemoncore.recipes import Endpoint, ModelInfo, ModelType, Recipe

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, RECIPE, tiny_plugin

pytestmark = pytest.mark.anyio
OTHER, VOICE = "tiny-other", "tiny-voice"  # another model of the backend; a speech model


class SpeakRequest(BaseModel):
    """The body of ``/v1/speak``, as a plugin declares it."""

    model_config = ConfigDict(extra="allow")

    input: str = Field(min_length=1, max_length=40)
    voice: str
    response_format: Literal["wav", "pcm"] = "wav"
    speed: float = Field(1.0, ge=0.25, le=4.0)


SPEAK = Endpoint(
    path="/v1/speak",
    summary="Text to speech",
    model_type=ModelType.SPEECH,
    required="input",
    streams=False,
    media_type="audio/wav",
    request=SpeakRequest,
)


def speech_only(cache_dir: Path) -> Any:
    """The tiny plugin, its one backend serving only ``/v1/speak``, with three models."""
    plugin = tiny_plugin(cache_dir)
    backend = RECIPE.backends[0].model_copy(update={"endpoints": frozenset({SPEAK.path})})
    recipe = RECIPE.model_copy(update={"backends": (backend,)})
    weights = f"file:{plugin.weights}"

    class Speech(type(plugin)):  # type: ignore[misc]
        @hookimpl
        def register_recipes(self) -> Sequence[Recipe]:
            return [recipe]

        @hookimpl
        def register_models(self) -> Sequence[ModelInfo]:
            return [
                ModelInfo(name=n, recipe="tiny", checkpoint=weights, labels=labels)
                for n, labels in ((MODEL, ()), (OTHER, ()), (VOICE, ("speech",)))
            ]

        @hookimpl
        def register_endpoints(self) -> Sequence[Endpoint]:
            return [SPEAK]

    return Speech(plugin.weights, plugin.registry)


@asynccontextmanager
async def lemon(tmp_path: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    cache = tmp_path / "cache"
    app = create_app(
        Settings(cache_dir=cache, plugins_allow="", **settings),
        plugins={"tiny": speech_only(cache)},
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        yield client


async def _loaded(client: httpx.AsyncClient) -> list[str]:
    health = (await client.get("/api/v1/health")).json()
    return [m["model_name"] for m in health["all_models_loaded"]]


async def test_requests_a_model_cannot_serve_are_refused_before_any_load(
    tmp_path: Path, anyio_backend: str
) -> None:
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    async with lemon(tmp_path, max_loaded_models=1) as client:
        voice = await client.post("/v1/chat/completions", json={"model": VOICE, **chat})
        assert voice.status_code == 400, voice.text
        assert voice.json()["error"]["code"] == "model_type_mismatch"
        assert voice.json()["error"]["param"] == "model"
        assert "is a speech model; /v1/chat/completions serves only llm" in voice.text
        assert await _loaded(client) == []
        # an llm model whose backend serves no chat: refused without loading it, and
        # without evicting the model in the one slot
        (await client.post("/api/v1/load", json={"model_name": OTHER})).raise_for_status()
        for path, body in (
            ("/v1/chat/completions", chat),
            ("/v1/completions", {"prompt": "Hi"}),
            ("/v1/messages", chat),
        ):
            refused = await client.post(path, json={"model": MODEL, **body})
            assert refused.status_code == 400, (path, refused.text)
            assert "tiny:cpu does not serve" in refused.json()["error"]["message"], path
            assert await _loaded(client) == [OTHER], path
        # a loaded model is refused just the same
        loaded = await client.post("/v1/chat/completions", json={"model": OTHER, **chat})
        assert loaded.json()["error"]["code"] == "endpoint_not_served"


async def test_an_endpoints_request_model_checks_and_documents_its_body(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        good = {"model": VOICE, "input": "Hello.", "voice": "en", "extra": [1]}
        answered = await client.post("/v1/speak", json=good)  # extra fields allowed
        assert answered.status_code == 200, answered.text
        for change, param in (
            ({"speed": 9}, "speed"),
            ({"speed": "fast"}, "speed"),  # strict JSON types, as lemoncore's own fields
            ({"response_format": "mp3"}, "response_format"),
            ({"input": "x" * 41}, "input"),
            ({"voice": None}, "voice"),
            ({"keep_alive": []}, "keep_alive"),
        ):
            refused = await client.post("/v1/speak", json={**good, **change})
            assert refused.status_code == 400, (change, refused.text)
            assert refused.json()["error"]["param"] == param, refused.text
        chat_model = await client.post("/v1/speak", json={**good, "model": MODEL})
        assert chat_model.json()["error"]["code"] == "model_type_mismatch"
        document = (await client.get("/openapi.json")).json()
        schemas = document["components"]["schemas"]
        operation = document["paths"]["/v1/speak"]["post"]
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        speak = schemas[ref.rsplit("/", 1)[1]]
        assert {"model", "keep_alive", "input", "voice", "speed"} <= set(speak["properties"])
        assert not {"stream", "max_tokens"} & set(speak["properties"])  # it does not stream
        assert speak["properties"]["speed"]["maximum"] == 4.0
        assert set(operation["responses"]["200"]["content"]) == {"audio/wav"}
        chat = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
        chat_ref = chat["content"]["application/json"]["schema"]["$ref"]
        assert "stream" in schemas[chat_ref.rsplit("/", 1)[1]]["properties"]


async def test_cards_say_what_a_model_is_and_a_refused_delete_unloads_nothing(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        cards = {c["id"]: c for c in (await client.get("/v1/models")).json()["data"]}
        assert cards[VOICE]["model_type"] == "speech" and cards[MODEL]["model_type"] == "llm"
        assert not cards[VOICE]["deletable"]  # a file: catalogue model is not a download
        (await client.post("/api/v1/load", json={"model_name": VOICE})).raise_for_status()
        refused = await client.post("/api/v1/delete", json={"model_name": VOICE})
        assert refused.status_code == 422, refused.text
        assert await _loaded(client) == [VOICE]
