"""Pulling models from a Hugging Face endpoint (HF_ENDPOINT) and from local paths.

The machines are offline, so the hub is a local HTTP server speaking the two requests
``huggingface_hub`` makes for a file: HEAD and GET on ``/{repo}/resolve/{rev}/{file}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.testing import ServerProcess, running_server, serve_hub

BLOB = b"GGUF" + bytes(range(256)) * 12_000  # about 3 MB


# A Halogen-shaped repository: weights, an overlay and a tokenizer folder, one model.
MULTI = {"m.hgn": BLOB, "m.overlay.hgn": b"overlay" * 1000,
         "tokenizer/tokenizer.json": b'{"model": {}}', "tokenizer/vocab.json": b"{}"}


@pytest.fixture
def hub() -> Iterator[str]:
    with serve_hub({"owner/tiny-GGUF/tiny.gguf": BLOB,
                    **{f"owner/multi/{name}": data for name, data in MULTI.items()}}) as url:
        yield url


@pytest.fixture
def server(tmp_path: Path, hub: str) -> Iterator[ServerProcess]:
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    with running_server(tmp_path / "lemon", env) as s:
        yield s


def events(response: httpx.Response) -> list[tuple[str, dict[str, object]]]:
    out, event = [], ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            out.append((event, json.loads(line[6:])))
    return out


def models(server: ServerProcess, show_all: bool = False) -> dict[str, dict[str, object]]:
    params = {"show_all": "true"} if show_all else {}
    data = httpx.get(server.api + "/models", params=params).json()["data"]
    return {m["id"]: m for m in data}


def test_pull_streams_progress_into_the_hf_cache_and_delete_removes_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    body = {"model_name": "tiny", "checkpoint": "owner/tiny-GGUF:tiny.gguf",
            "recipe": "llamacpp", "stream": True}
    with httpx.stream("POST", server.url + "/api/v1/pull", json=body, timeout=60) as r:
        assert r.status_code == 200
        seen = events(r)
    assert seen[-1][0] == "complete"
    path = Path(str(seen[-1][1]["path"]))
    assert path.read_bytes() == BLOB
    assert path.is_relative_to(tmp_path / "hf" / "hub" / "models--owner--tiny-GGUF")
    assert models(server)["tiny"]["downloaded"] is True
    deleted = httpx.post(server.url + "/api/v1/delete", json={"model_name": "tiny"})
    assert deleted.status_code == 200
    assert not path.exists()
    assert "tiny" not in models(server, show_all=True)


def test_a_model_of_several_files_is_pulled_whole_verified_and_deleted_whole(
    server: ServerProcess, tmp_path: Path
) -> None:
    extra = ["m.overlay.hgn", "tokenizer/tokenizer.json", "tokenizer/vocab.json"]
    published = {name: hashlib.sha256(data).hexdigest() for name, data in MULTI.items()}
    body = {"model_name": "multi", "checkpoint": "owner/multi:m.hgn", "recipe": "llamacpp",
            "files": extra, "sha256": published, "stream": True}
    with httpx.stream("POST", server.url + "/api/v1/pull", json=body, timeout=60) as r:
        assert r.status_code == 200
        seen = events(r)
    assert seen[-1][0] == "complete", seen[-1]
    progress = [data for event, data in seen if event == "progress"]
    assert progress and progress[-1]["bytes_total"] == sum(map(len, MULTI.values()))
    assert Path(str(seen[-1][1]["path"])).read_bytes() == BLOB
    [snapshot] = (tmp_path / "hf/hub/models--owner--multi/snapshots").iterdir()
    for name, data in MULTI.items():  # one snapshot, each file where the engine looks
        assert (snapshot / name).read_bytes() == data
    assert models(server)["multi"]["downloaded"] is True
    (snapshot / "tokenizer/vocab.json").unlink()  # a missing part: not downloaded
    assert models(server, show_all=True)["multi"]["downloaded"] is False
    assert httpx.post(server.url + "/api/v1/delete", json={"model_name": "multi"}
                      ).status_code == 200
    assert not any((snapshot / name).exists() for name in MULTI)

    tampered = {**body, "model_name": "tampered", "stream": False,
                "sha256": {**published, "m.overlay.hgn": "0" * 64}}
    refused = httpx.post(server.url + "/api/v1/pull", json=tampered, timeout=60)
    assert refused.status_code == 502
    assert "does not have the published SHA-256" in refused.json()["error"]["message"]
    assert not (snapshot / "m.overlay.hgn").exists()
    truncated = {**tampered, "model_name": "truncated", "sha256": published,
                 "sizes": {"m.overlay.hgn": 7001}}
    refused = httpx.post(server.url + "/api/v1/pull", json=truncated, timeout=60)
    assert refused.status_code == 502
    assert "published size 7001" in refused.json()["error"]["message"]
    escape = {**body, "model_name": "escape", "files": ["../../etc/passwd"]}
    assert httpx.post(server.url + "/api/v1/pull", json=escape).status_code == 400


def test_pull_of_a_missing_file_reports_an_error(server: ServerProcess) -> None:
    body = {"model_name": "ghost", "checkpoint": "owner/tiny-GGUF:ghost.gguf",
            "recipe": "llamacpp"}
    response = httpx.post(server.url + "/api/v1/pull", json=body, timeout=60)
    assert response.status_code == 502
    assert "ghost.gguf" in response.json()["error"]["message"]


def test_pull_registers_a_file_in_the_model_store_only(server: ServerProcess,
                                                       tmp_path: Path) -> None:
    local = tmp_path / "lemon" / "models" / "local.gguf"  # <cache_dir>/models
    local.parent.mkdir()
    local.write_bytes(BLOB)
    response = httpx.post(server.url + "/api/v1/pull", json={
        "model_name": "local", "checkpoint": str(local), "recipe": "llamacpp"})
    assert response.status_code == 200
    assert models(server)["local"]["checkpoint"] == str(local)
    outside = tmp_path / "outside.gguf"
    outside.write_bytes(BLOB)
    refused = httpx.post(server.url + "/api/v1/pull", json={
        "model_name": "outside", "checkpoint": str(outside), "recipe": "llamacpp"})
    assert refused.status_code == 403 and "model_dirs" in refused.json()["error"]["message"]
    assert "outside" not in models(server)


def test_offline_pull_fails_with_a_clear_message(tmp_path: Path, hub: str) -> None:
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "LEMON_OFFLINE": "1"}
    with running_server(tmp_path / "lemon", env) as server:
        response = httpx.post(server.url + "/api/v1/pull", json={
            "model_name": "tiny", "checkpoint": "owner/tiny-GGUF:tiny.gguf",
            "recipe": "llamacpp"})
    assert response.status_code == 400
    assert "offline" in response.json()["error"]["message"]
