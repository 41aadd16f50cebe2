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
import pytest
from pydantic import SecretStr

from lemoncore import Settings, create_app, hookimpl
from lemoncore.recipes import OPENAI_ENDPOINTS, Endpoint, Recipe

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
    backend = RECIPE.backends[0].model_copy(
        update={"endpoints": OPENAI_ENDPOINTS | {"/v1/infill"}})
    recipe = RECIPE.model_copy(update={"backends": (backend,)})

    class Tiny(type(plugin)):  # type: ignore[misc]
        @hookimpl
        def register_recipes(self) -> Sequence[Recipe]:
            return [recipe]

    return Tiny(plugin.weights, plugin.registry)


@asynccontextmanager
async def lemon(tmp_path: Path, infill_backend: bool = True,
                **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    cache = tmp_path / "cache"
    tiny = serving_infill(cache) if infill_backend else tiny_plugin(cache)
    app = create_app(Settings(cache_dir=cache, plugins_allow="", **settings),
                     plugins={"tiny": tiny, "infill": Infill()})
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost",
            timeout=30) as client:
        yield client


async def test_a_plugin_endpoint_is_routed_like_chat(tmp_path: Path,
                                                     anyio_backend: str) -> None:
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
        tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path, infill_backend=False) as client:
        refused = await client.post("/v1/infill", json={"model": MODEL, "input_prefix": "x"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "endpoint_not_served"
        assert "tiny:cpu does not serve /v1/infill" in refused.json()["error"]["message"]
        anthropic = await client.post("/v1/messages", json={
            "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert anthropic.status_code == 400
        assert anthropic.json()["type"] == "error"  # Anthropic's shape on its endpoint
        assert anthropic.json()["error"]["type"] == "invalid_request_error"
