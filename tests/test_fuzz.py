"""The generated OpenAPI document against the answers the app really gives.

Schemathesis fuzzes every operation of the document: no input may cause a 5xx but a
documented refusal (a download while offline, a pin without a hash), input the document
calls invalid must be refused, and every answer must be in the document (a documented
status, media type and headers, and a body, or each event of a stream, that validates
against that status's schema: the models of lemoncore/api/replies.py). Generated input
rarely names a real model or backend, so a second test walks each operation's successful
path with the core test backend (``tinyplugin.py``; no backend plugin needed) and checks
those answers against the document the same way.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis import checks  # noqa: E402

from lemoncore import Settings, create_app  # noqa: E402
from lemoncore.api.openapi import document  # noqa: E402
from lemoncore.recipes import core_endpoints  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, PKG_CHECKPOINT, tiny_plugin  # noqa: E402

CASES_PER_OPERATION = 60  # 14 operations: over 800 cases in all
# Answers must be documented; input the document calls invalid must be refused (so the
# handlers validate what the document says they do).
RESPONSE_CHECKS = [
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]
os.environ.setdefault("LEMON_CONFIG_FILE", "/nonexistent/lemon-fuzz.toml")
CACHE = Path(tempfile.mkdtemp(prefix="lemon-fuzz-"))
# Schemathesis's ASGI client is "testclient", not a loopback address: without
# allow_remote_admin every management call would be a 403 and its handler never run.
# Offline: nothing generated may download (hypothesis also draws strings from lemoncore's
# source, such as "runtime:therock"); /install's "trust_download" is not a schema
# property for the same reason.
APP = create_app(
    Settings(
        cache_dir=CACHE,
        plugins_allow="",
        allow_remote_admin=True,
        offline=True,
        allowed_hosts=["testserver"],
    ),  # the Host schemathesis sends
    plugins={"tiny": tiny_plugin(CACHE)},
)
# Not the shutdown route: after it, every request would be refused (tested on its own).
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path_regex="/shutdown$")


@schema.parametrize()
@settings(max_examples=CASES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_survives_generated_input(case: schemathesis.Case) -> None:
    response = case.call()
    if response.status_code >= 500:  # a refusal the API documents, not an unhandled error
        error = response.json()["error"]
        refusal = {
            503: error["type"] != "server_error",
            501: error["type"] == "not_supported_error",
        }
        assert refusal.get(response.status_code, False), (
            f"{case.method} {case.path}: {response.text[:300]}"
        )
    case.validate_response(response, checks=RESPONSE_CHECKS)


@pytest.fixture
async def client(tmp_path: Path, anyio_backend: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow=""), plugins={"tiny": tiny_plugin(tmp_path)}
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=60
        ) as c,
    ):
        yield c


@pytest.mark.anyio
async def test_successful_answers_match_the_document(client: httpx.AsyncClient) -> None:
    async def call(
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        status: int = 200,
        documented: str = "",
    ) -> httpx.Response:
        response = await client.request(method, path, json=body)
        assert response.status_code == status, f"{method} {path}: {response.text[:500]}"
        operation = schema[documented or response.request.url.path][method]
        operation.validate_response(response)  # raises, saying where, if it does not fit
        return response

    assert (await call("GET", "/openapi.json")).json() == document(core_endpoints())
    await call("GET", "/live")
    await call("GET", "/metrics")
    await call("GET", "/v1/models?show_all=true")
    await call("GET", f"/v1/models/{MODEL}", documented="/v1/models/{model_id}")
    await call("GET", "/api/v1/system-info")
    installed = await call("POST", "/api/v1/install", {"backend": "tiny:cpu"})
    assert installed.json()["state"] == "installed"
    streamed = await call(
        "POST", "/api/v1/install", {"backend": "cpu", "recipe": "tiny", "stream": True}
    )
    assert "event: complete" in streamed.text
    plan = await call("POST", "/api/v1/load", {"model_name": MODEL, "dry_run": True})
    assert plan.json()["dry_run"] is True
    await call("POST", "/api/v1/load", {"model": MODEL, "pinned": True, "ctx_size": 512})
    health = await call("GET", "/api/v1/health")
    assert [m["model_name"] for m in health.json()["all_models_loaded"]] == [MODEL]
    await call(
        "POST",
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 4,
            "temperature": 0,
        },
    )
    await call("POST", "/api/v1/load", {"model_name": MODEL, "ctx_size": "big"}, 400)
    await call("POST", "/api/v1/pull", {"model_name": MODEL})
    pulled = await call(
        "POST",
        "/api/v1/pull",
        {
            "model_name": "tiny-copy",
            "checkpoint": PKG_CHECKPOINT,
            "recipe": "tiny",
            "labels": ["chat"],
            "stream": True,
        },
    )
    assert "event: complete" in pulled.text
    await call("GET", "/v1/models/tiny-copy", documented="/v1/models/{model_id}")
    await call("POST", "/api/v1/unload", {"model_name": MODEL})
    await call("POST", "/api/v1/unload", {})
    await call("POST", "/api/v1/uninstall", {"backend": "tiny:cpu"})
    await call("POST", "/api/v1/shutdown")  # last: then every request is refused


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body", "param", "needle"),
    [
        (
            "/api/v1/load",
            {"model_name": MODEL, "pinned": "yes"},
            "pinned",
            "invalid field 'pinned': Input should be a valid boolean",
        ),
        ("/api/v1/load", {"pinned": True}, "model_name", "missing field 'model_name'"),
        ("/api/v1/pull", {"model": MODEL, "labels": "chat"}, "labels", "valid list"),
        (
            "/api/v1/pull",
            {"model_name": "m", "sizes": {"m.gguf": "1"}},
            "sizes",
            "invalid field 'sizes.m.gguf'",
        ),
        ("/api/v1/install", {"recipe": "tiny"}, "backend", "missing field 'backend'"),
        ("/api/v1/unload", {"model_name": ""}, "model_name", "at least 1 character"),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [], "max_tokens": "8"},
            "max_tokens",
            "valid integer",
        ),
        ("/v1/completions", {"model": MODEL, "prompt": None}, "prompt", "invalid field"),
    ],
)
async def test_a_body_that_does_not_fit_is_a_400_naming_the_field(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str, needle: str
) -> None:
    response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error")
    assert needle in error["message"]
    assert (await client.get("/api/v1/health")).json()["all_models_loaded"] == []
