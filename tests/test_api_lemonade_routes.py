"""Lemonade Server's routes and fields lemoncore answers as it does: per-model options
(``/api/v1/models/{id}/options``), ``/api/v1/stats``, ``is_busy``/``is_streaming`` in
health, ``/api/v1/tokenize`` and ``/api/v1/slots`` without a model, the rerank aliases,
``ctx_size`` in an inference body, the launch command as shown, system-info's keys.
The engine is ``tinyserver.py``."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from lemoncore import Settings, create_app
from lemoncore.api import telemetry
from lemoncore.api.loaded import shown_command
from lemoncore.options import OptionError, saved_changes
from lemoncore.serving.answer import Answer

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, RECIPE, tiny_plugin

pytestmark = pytest.mark.anyio
OPTIONS = f"/api/v1/models/{MODEL}/options"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@asynccontextmanager
async def lemon(tmp_path: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    cache = tmp_path / "cache"
    app = create_app(
        Settings(cache_dir=cache, plugins_allow="", **settings),
        plugins={"tiny": tiny_plugin(cache)},
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        yield client


async def _loaded(client: httpx.AsyncClient) -> dict[str, Any]:
    [model] = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    return dict(model)


async def test_options_are_saved_shown_and_used_by_the_next_load(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        first = (await client.get(OPTIONS)).json()
        assert first["saved"] == {}
        assert first["effective"] == {"ctx_size": 4096, "tiny_args": "", "model_name": MODEL}
        assert first["defaults"] == first["effective"] and first["resolved_ctx_size"] == 4096
        posted = await client.post(OPTIONS, json={"ctx_size": 8192, "model_name": MODEL})
        assert posted.status_code == 200, posted.text
        assert posted.json()["saved"] == {"ctx_size": 8192}
        assert posted.json()["effective"]["ctx_size"] == 8192
        assert posted.json()["defaults"]["ctx_size"] == 4096
        card = (await client.get(f"/v1/models/{MODEL}")).json()
        assert card["recipe_options"]["ctx_size"] == 8192 and card["context_length"] == 8192
        assert (await client.get("/api/v1/health")).json()["all_models_loaded"] == []
        merged = (await client.post(OPTIONS, json={"tiny_args": "-t 2"})).json()
        assert merged["saved"] == {"ctx_size": 8192, "tiny_args": "-t 2"}
        for query, words in [("", "requires action"), ("?action=wipe", "Unknown action: wipe")]:
            bad = await client.post(f"/api/v1/slots/0{query}")
            assert bad.status_code == 400 and words in bad.json()["error"]["message"]
        erase = await client.post("/api/v1/slots/0?action=erase")
        assert erase.json()["error"]["code"] == "no_model_loaded"
        assert (await client.post("/api/v1/load", json={"model_name": MODEL})).status_code == 200
        assert (await _loaded(client))["recipe_options"]["ctx_size"] == 8192
        cleared = (await client.post(OPTIONS, json={"tiny_args": "", "ctx_size": None})).json()
        assert cleared["saved"] == {} and cleared["effective"]["ctx_size"] == 4096
        preview = (await client.post(OPTIONS, json={"ctx_size": 1024, "dry_run": True})).json()
        assert preview["effective"]["ctx_size"] == 1024 and preview["saved"] == {}
        assert (await client.get(OPTIONS)).json()["saved"] == {}
        await client.post(OPTIONS, json={"ctx_size": 2048})
        erased = await client.delete(OPTIONS)
        assert erased.status_code == 200 and erased.json()["saved"] == {}
        assert erased.json()["effective"] == erased.json()["defaults"]


async def test_bad_options_are_refused_and_nothing_is_saved(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        for body in (
            {"nonsense": 1},
            {"nonsense": None},
            {"ctx_size": "8192"},
            {"ctx_size": ""},
            {"ctx_size": 4096.5},
            {"ctx_size": -5},
            {"ctx_size": 10**20},
            {"pinned": True},
            {"system_bin": "/bin/sh"},
            {"tiny_args": "--model /etc/passwd"},
            {"ctx_size": 1024, "dry_run": "yes"},
        ):
            refused = await client.post(OPTIONS, json=body)
            assert refused.status_code == 400, body
            assert refused.json()["error"]["type"] == "invalid_request_error", body
        assert (await client.get(OPTIONS)).json()["saved"] == {}
        missing = await client.get("/api/v1/models/no-such-model/options")
        assert missing.status_code == 404


async def test_changing_options_needs_the_admin_key(tmp_path: Path, anyio_backend: str) -> None:
    keys = {"api_key": SecretStr("k"), "admin_api_key": SecretStr("admin")}
    async with lemon(tmp_path, **keys) as client:
        user, admin = {"Authorization": "Bearer k"}, {"Authorization": "Bearer admin"}
        assert (await client.get(OPTIONS, headers=user)).status_code == 200
        for call in (
            client.post(OPTIONS, json={"ctx_size": 1}, headers=user),
            client.delete(OPTIONS, headers=user),
        ):
            refused = await call
            assert (
                refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
            )
        done = await client.post(OPTIONS, json={"ctx_size": 1024}, headers=admin)
        assert done.status_code == 200 and done.json()["saved"] == {"ctx_size": 1024}


def test_saved_changes_clear_with_null_or_empty_text_only() -> None:
    specs = RECIPE.options
    assert saved_changes(specs, {"ctx_size": None, "tiny_args": ""}, "here") == {
        "ctx_size": None,
        "tiny_args": None,
    }
    assert saved_changes(specs, {"ctx_size": 8, "backend": "cpu"}, "here") == {
        "ctx_size": 8,
        "backend": "cpu",
    }
    with pytest.raises(OptionError):
        saved_changes(specs, {"ctx_size": ""}, "here")


async def test_stats_and_streaming_flags(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path) as client:
        empty = (await client.get("/api/v1/stats")).json()
        assert empty["request_count_total"] == 0 and empty["cache_tokens"] is None
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        stats = (await client.get("/api/v1/stats")).json()
        assert stats["request_count_total"] == 1
        assert (stats["input_tokens"], stats["output_tokens"]) == (1, 3)
        assert stats["output_tokens_total"] == 3 and stats["prompt_tokens"] == 1
        loaded = await _loaded(client)
        assert loaded["is_busy"] is False and loaded["is_streaming"] is False
        health = (await client.get("/api/v1/health")).json()
        assert health["telemetry"] == {"enabled": False}


def test_request_stats_prefer_engine_timings() -> None:
    body = (
        b'{"choices":[{"message":{"content":"say \\"timings\\": 1"}}],'
        b'"usage":{"prompt_tokens":31,"completion_tokens":5,'
        b'"prompt_tokens_details":{"cached_tokens":30}},'
        b'"timings":{"cache_n":30,"prompt_n":1,"prompt_ms":10.5,"predicted_n":5,'
        b'"predicted_per_second":98.0}}'
    )
    timings = telemetry.timings_of(body)
    assert timings is not None and timings["prompt_ms"] == 10.5
    found = telemetry.request_stats({"prompt_tokens": 31, "completion_tokens": 5}, timings, 9, 9)
    assert found == telemetry.RequestStats(1, 5, 31, 30, 0.0105, 98.0)
    timed = telemetry.request_stats({"prompt_tokens": 2, "completion_tokens": 10}, None, 0.5, 2.0)
    assert timed == telemetry.RequestStats(2, 10, 2, None, 0.5, 5.0)
    assert telemetry.request_stats(None, None, 1, 1) is None


async def test_a_stream_counts_until_its_answer_closes(anyio_backend: str) -> None:
    router: Any = type("Router", (), {})()  # weakly referenced, as a router is
    server: Any = SimpleNamespace(model=SimpleNamespace(name="m"))
    answer = Answer(server, httpx.Response(200), AsyncExitStack())
    telemetry.watch(router, answer, 0.0, stream=True)
    state = telemetry.activity(router)
    assert state.streaming["m"] == 1
    answer.usage = {"prompt_tokens": 3, "completion_tokens": 4}
    await answer.aclose()
    assert "m" not in state.streaming
    assert state.stats.request_count_total == 1 and state.stats.output_tokens == 4


async def test_tokenize_slots_and_rerank_routes(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path) as client:
        for call in (
            client.post("/api/v1/tokenize", json={"content": "hi"}),
            client.get("/api/v1/slots"),
        ):
            refused = await call
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == "no_model_loaded"
        for query, words in [("", "requires action"), ("?action=wipe", "Unknown action: wipe")]:
            bad = await client.post(f"/api/v1/slots/0{query}")
            assert bad.status_code == 400 and words in bad.json()["error"]["message"]
        erase = await client.post("/api/v1/slots/0?action=erase")
        assert erase.json()["error"]["code"] == "no_model_loaded"
        for action in ("save", "restore"):  # refused whatever is loaded: no disk writes
            refused = await client.post(f"/api/v1/slots/0?action={action}", json={"filename": "x"})
            assert refused.status_code == 501, refused.text
            assert refused.json()["error"]["type"] == "not_supported_error"
        assert (await client.post("/api/v1/load", json={"model_name": MODEL})).status_code == 200
        # the loaded model was chosen: its backend says it does not tokenize
        tokens = (await client.post("/v1/tokenize", json={"content": "hi"})).json()
        assert tokens["error"]["code"] == "endpoint_not_served"
        assert "tiny:cpu does not serve /tokenize" in tokens["error"]["message"]
        for path in ("/api/v1/reranking", "/v1/reranker"):
            rerank = await client.post(
                path, json={"model": MODEL, "query": "q", "documents": ["d"]}
            )
            assert rerank.status_code == 400, path
            assert rerank.json()["error"]["code"] == "model_type_mismatch"


async def test_ctx_size_in_a_chat_loads_the_model_with_it(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        answer = await client.post("/v1/chat/completions", json={**CHAT, "ctx_size": 8192})
        assert answer.status_code == 200, answer.text
        assert (await _loaded(client))["recipe_options"]["ctx_size"] == 8192
        again = await client.post("/v1/chat/completions", json={**CHAT, "ctx_size": 1024})
        assert again.status_code == 200  # loaded: a request's ctx_size changes nothing
        assert (await _loaded(client))["recipe_options"]["ctx_size"] == 8192


def test_the_launch_command_names_the_file_as_its_checkpoint_does() -> None:
    blob, named = "/hub/models--o--r/blobs/abc", "/hub/models--o--r/snapshots/1/m.gguf"
    argv = ["llama-server", "-m", blob, f"--mmproj={blob}", "--port", "1"]
    assert shown_command(argv, blob, named) == [
        "llama-server",
        "-m",
        named,
        f"--mmproj={named}",
        "--port",
        "1",
    ]


async def test_system_info_has_lemonades_keys(tmp_path: Path, anyio_backend: str) -> None:
    async with lemon(tmp_path) as client:
        info = (await client.get("/api/v1/system-info")).json()
        assert {"OS Version", "Processor", "Physical Memory", "os", "recipes"} <= set(info)
        assert {"cpu", "amd_gpu", "amd_npu"} <= set(info["devices"])
        assert info["Physical Memory"].endswith(" GB") or info["Physical Memory"] == "unknown"


async def test_a_null_in_a_saving_load_keeps_the_saved_option(
    tmp_path: Path, anyio_backend: str
) -> None:
    async with lemon(tmp_path) as client:
        await client.post(OPTIONS, json={"tiny_args": "-t 1"})
        body = {"model_name": MODEL, "tiny_args": None, "ctx_size": 2048, "save_options": True}
        assert (await client.post("/api/v1/load", json=body)).status_code == 200
        assert (await client.get(OPTIONS)).json()["saved"] == {
            "tiny_args": "-t 1",
            "ctx_size": 2048,
        }
