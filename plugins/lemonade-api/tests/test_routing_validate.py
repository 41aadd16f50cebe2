"""Lemonade's POST /routing/validate (lemon_plugin_lemonade_api.routing_routes) through the
app in process: Lemonade's own tests of it (server_endpoints.py test_021zs … test_021zr),
its four prefixes, and its refusals of a body that is not JSON."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.plugin import Settings, create_app

import lemon_plugin_lemonade_api

pytestmark = pytest.mark.anyio

PAIR = ["Qwen3-8B-GGUF", "vllm.qwen3-32b"]


def policy(rules: list[dict[str, Any]] | None = None, **routing: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"candidates": PAIR, "default_model": "Qwen3-8B-GGUF", **routing}
    if rules is not None:
        body["rules"] = rules
    return {"version": "1", "recipe": "collection.router", "components": PAIR, "routing": body}


def rule(rule_id: str, match: dict[str, Any]) -> dict[str, Any]:
    return {"id": rule_id, "match": match, "route_to": "vllm.qwen3-32b"}


NO_RULES = {  # test_021zq / test_021zr: only the request fields are at fault
    "version": "1",
    "recipe": "collection.router",
    "components": ["Qwen3-8B-GGUF"],
    "routing": {"candidates": ["Qwen3-8B-GGUF"], "default_model": "Qwen3-8B-GGUF"},
}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"lemonade-api": lemon_plugin_lemonade_api},
        ui=False,
    )
    transport = httpx.ASGITransport(app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:13305") as http,
    ):
        yield http


async def validate(client: httpx.AsyncClient, body: Any, prefix: str = "/api/v1") -> Any:
    return await client.post(prefix + "/routing/validate", json=body)


async def test_021zs_a_deterministic_rule_matches_with_its_trace(
    client: httpx.AsyncClient,
) -> None:
    code = {"keywords_any": ["def ", "function", "stack trace", "compile"]}
    rules = [
        rule("code-to-big", {"any": [code, {"regex": "```[a-z]*"}]}),
        rule("long-context-to-big", {"min_chars": 4000}),
    ]
    body = {"policy": policy(rules), "prompt": "please write a def to reverse a list"}
    for prefix in ("/api/v1", "/v1", "/api/v0", "/v0"):  # register_post's four prefixes
        answer = await validate(client, body, prefix)
        assert answer.status_code == 200, (prefix, answer.text)
        reply = answer.json()
        assert reply["decision"] == {
            "version": "1",
            "route_to": "vllm.qwen3-32b",
            "matched_rule": "code-to-big",
            "default_used": False,
            "outputs": {},
            "trace": [{"condition": "keywords_any", "result": True}],
        }
        assert reply["normalized_policy"] == body["policy"]


async def test_021zt_a_prompt_matching_no_rule_falls_to_the_default(
    client: httpx.AsyncClient,
) -> None:
    rules = [rule("code-to-big", {"keywords_any": ["def ", "function"]})]
    answer = await validate(
        client, {"policy": policy(rules), "prompt": "what's the weather like today?"}
    )
    assert answer.status_code == 200
    decision = answer.json()["decision"]
    assert (decision["route_to"], decision["default_used"]) == ("Qwen3-8B-GGUF", True)
    assert decision["trace"] == [{"condition": "keywords_any", "result": False}]


async def test_021zu_a_policy_without_routing_is_a_400(client: httpx.AsyncClient) -> None:
    bad = {"version": "1", "recipe": "collection.router", "components": ["Qwen3-8B-GGUF"]}
    answer = await validate(client, {"policy": bad, "prompt": "hello"})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": "Invalid routing policy: collection is missing required key 'routing'"
    }


async def test_021zv_undeclared_components_are_a_400(client: httpx.AsyncClient) -> None:
    undeclared = policy([rule("code-to-big", {"keywords_any": ["def "]})])
    undeclared["components"] = ["Qwen3-8B-GGUF"]
    answer = await validate(client, {"policy": undeclared, "prompt": "hello"})
    assert answer.status_code == 400, answer.text
    assert "vllm.qwen3-32b" in answer.json()["error"]

    classifier = {
        "id": "pii",
        "type": "classifier",
        "model": "undeclared-classifier-model",
        "labels": ["safe", "unsafe"],
    }
    flagged = rule("flag-to-big", {"classifier": "pii", "label": "unsafe"})
    answer = await validate(
        client, {"policy": policy([flagged], classifiers=[classifier]), "prompt": "hello"}
    )
    assert answer.status_code == 400, answer.text
    assert "undeclared-classifier-model" in answer.json()["error"]


async def test_021zm_an_llm_router_fails_open_with_a_200(client: httpx.AsyncClient) -> None:
    router_policy = {
        "version": "1",
        "recipe": "collection.router",
        "components": [
            "Qwen3-8B-GGUF",
            "Qwen3.5-35B-A3B-GGUF",
            "nonexistent-router-model-021zm",
        ],
        "routing": {
            "candidates": ["Qwen3-8B-GGUF", "Qwen3.5-35B-A3B-GGUF"],
            "default_model": "Qwen3-8B-GGUF",
            "router": {
                "type": "llm",
                "model": "nonexistent-router-model-021zm",
                "prompt": "Reply with ONLY a model name.",
            },
        },
    }
    answer = await validate(client, {"policy": router_policy, "prompt": "hello"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["decision"]["default_used"]
    assert body["decision"]["route_to"] == "Qwen3-8B-GGUF"
    routing = body["normalized_policy"]["routing"]
    assert "router" not in routing
    assert [(c["id"], c["type"]) for c in routing["classifiers"]] == [("__router", "llm")]
    assert [r["id"] for r in routing["rules"]] == ["__route_0", "__route_1"]
    assert body["normalized_policy"]["components"] == router_policy["components"]


@pytest.mark.parametrize(
    ("flag", "match"), [("has_images", "vision-to-big"), ("has_tools", "tools-to-big")]
)
async def test_021zn_021zo_the_feature_flags_reach_the_rules(
    client: httpx.AsyncClient, flag: str, match: str
) -> None:
    body = {"policy": policy([rule(match, {flag: True})]), "prompt": "describe this"}
    without = await validate(client, {**body, flag: False})
    assert without.status_code == 200 and without.json()["decision"]["default_used"]
    with_flag = await validate(client, {**body, flag: True})
    assert with_flag.status_code == 200
    decision = with_flag.json()["decision"]
    assert (decision["matched_rule"], decision["default_used"]) == (match, False)


async def test_021zp_metadata_reaches_a_metadata_rule(client: httpx.AsyncClient) -> None:
    tenant = rule("tenant-to-big", {"metadata": {"key": "tenant", "equals": "acme"}})
    body = {"policy": policy([tenant]), "prompt": "hello"}
    for metadata, matched in ((None, ""), ({"tenant": "other"}, ""), ({"tenant": "acme"}, "x")):
        sent = body if metadata is None else {**body, "metadata": metadata}
        answer = await validate(client, sent)
        assert answer.status_code == 200
        decision = answer.json()["decision"]
        assert decision["default_used"] is not bool(matched)
        assert decision["matched_rule"] == ("tenant-to-big" if matched else "")


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"metadata": "not-an-object"}, "'metadata' must be a JSON object of string values"),
        ({"metadata": {"tenant": 123}}, "'metadata' value for key 'tenant' must be a string"),
        ({"prompt": 12345}, "'prompt' must be a string"),
        ({"has_images": "yes"}, "'has_images' must be a boolean"),
        ({"has_tools": "yes"}, "'has_tools' must be a boolean"),
        ({"policy": None}, "'policy' must be a JSON object"),
    ],
)
async def test_021zq_021zr_bad_fields_are_a_400_naming_them(
    client: httpx.AsyncClient, fields: dict[str, Any], error: str
) -> None:
    answer = await validate(client, {"policy": NO_RULES, "prompt": "hello", **fields})
    assert answer.status_code == 400
    assert answer.json() == {"error": error}


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"", "Request body is required but was empty"),
        (b"{", "Invalid JSON in request body: "),
        (b'{"policy": NaN}', "Invalid JSON in request body: "),
        (b'{"policy": {}, "prompt": "\\ud800"}', "Invalid JSON in request body: "),
        (b"[1]", "'policy' must be a JSON object"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_a_400(
    client: httpx.AsyncClient, content: bytes, error: str
) -> None:
    answer = await client.post("/api/v1/routing/validate", content=content)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(error)


async def test_a_get_is_refused(client: httpx.AsyncClient) -> None:
    answer = await client.get("/api/v1/routing/validate")
    assert answer.status_code == 405
