"""Pulling models from a Hugging Face endpoint (HF_ENDPOINT) and from local paths.

The machines are offline, so the hub is a local HTTP server speaking the two requests
``huggingface_hub`` makes for a file: HEAD and GET on ``/{repo}/resolve/{rev}/{file}``.
The server serves the core test backend's recipe (``tinyplugin.py``), so nothing here needs
a backend plugin installed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from huggingface_hub.constants import DOWNLOAD_CHUNK_SIZE

from lemoncore.testing import ServerProcess, _HubHandler, running_server, serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import SCRIPT

SERVE = (str(SCRIPT),)  # lemon serve's app with only the core test backend

BLOB = b"GGUF" + bytes(range(256)) * 12_000  # about 3 MB
# Bigger than the chunk huggingface_hub reads (and counts) at a time: two counts, at least.
BIG = b"GGUF" + bytes(range(256)) * (DOWNLOAD_CHUNK_SIZE // 256 + 4096)


# A Halogen-shaped repository: weights, an overlay and a tokenizer folder, one model.
MULTI = {
    "m.hgn": BLOB,
    "m.overlay.hgn": b"overlay" * 1000,
    "tokenizer/tokenizer.json": b'{"model": {}}',
    "tokenizer/vocab.json": b"{}",
}


@pytest.fixture
def hub() -> Iterator[str]:
    with serve_hub(
        {
            "owner/tiny-GGUF/tiny.gguf": BLOB,
            **{f"owner/multi/{name}": data for name, data in MULTI.items()},
        }
    ) as url:
        yield url


@pytest.fixture
def server(tmp_path: Path, hub: str) -> Iterator[ServerProcess]:
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    with running_server(tmp_path / "lemon", env, command=SERVE) as s:
        yield s


class _HalfwayHub(_HubHandler):
    """Sends the first ``DOWNLOAD_CHUNK_SIZE`` bytes of a file, then the rest only once
    ``release`` is set: the download is caught half done for as long as a test needs."""

    release = threading.Event()

    def do_GET(self) -> None:
        if (data := self._head()) is not None:
            self.wfile.write(data[:DOWNLOAD_CHUNK_SIZE])
            self.wfile.flush()
            self.release.wait(30)  # never forever: a test that does not release fails
            self.wfile.write(data[DOWNLOAD_CHUNK_SIZE:])


@contextmanager
def halfway_hub(files: dict[str, bytes]) -> Iterator[tuple[str, threading.Event]]:
    """Like ``serve_hub``, each download halted halfway until the event is set."""
    release = threading.Event()
    handler = type("HalfwayHub", (_HalfwayHub,), {"files": files, "release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", release
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def iter_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, object]]]:
    event = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])


def events(response: httpx.Response) -> list[tuple[str, dict[str, object]]]:
    return list(iter_events(response))


def models(server: ServerProcess, show_all: bool = False) -> dict[str, dict[str, object]]:
    params = {"show_all": "true"} if show_all else {}
    data = httpx.get(server.api + "/models", params=params).json()["data"]
    return {m["id"]: m for m in data}


def test_pull_streams_progress_into_the_hf_cache_and_delete_removes_it(tmp_path: Path) -> None:
    """Progress events arrive while the file downloads, grow, and end at its size before
    ``complete``. The hub halts the download halfway until the client has seen a progress
    event from that moment, so a stream that reported only at the end would fail."""
    body = {
        "model_name": "big",
        "checkpoint": "owner/big-GGUF:big.gguf",
        "recipe": "tiny",
        "stream": True,
    }
    with (
        halfway_hub({"owner/big-GGUF/big.gguf": BIG}) as (hub, release),
        running_server(
            tmp_path / "lemon", {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}, command=SERVE
        ) as server,
    ):
        seen: list[tuple[str, dict[str, object]]] = []
        with httpx.stream("POST", server.url + "/api/v1/pull", json=body, timeout=60) as r:
            assert r.status_code == 200
            for event, data in iter_events(r):
                seen.append((event, data))
                if event == "progress" and 0 < int(str(data["bytes_downloaded"])) < len(BIG):
                    release.set()  # seen halfway: let the rest through
        assert release.is_set(), f"no progress event while the download was halfway: {seen}"
        assert [event for event, _ in seen][-1] == "complete", seen[-1]
        assert {event for event, _ in seen[:-1]} == {"progress"}, seen
        done = [int(str(data["bytes_downloaded"])) for _, data in seen[:-1]]
        total = [int(str(data["bytes_total"])) for _, data in seen[:-1]]
        assert done == sorted(done) and len(set(done)) >= 2, done  # it grows
        assert total == sorted(total) and all(map(int.__le__, done, total)), seen
        assert done[-1] == total[-1] == len(BIG)  # and ends at the file's size
        path = Path(str(seen[-1][1]["path"]))
        assert path.read_bytes() == BIG
        assert path.is_relative_to(tmp_path / "hf" / "hub" / "models--owner--big-GGUF")
        assert models(server)["big"]["downloaded"] is True
        assert models(server)["big"]["size_bytes"] == len(BIG)  # its file on disk
        deleted = httpx.post(server.url + "/api/v1/delete", json={"model_name": "big"})
        assert deleted.status_code == 200
        assert not path.exists()
        assert "big" not in models(server, show_all=True)


def test_a_model_of_several_files_is_pulled_whole_verified_and_deleted_whole(
    server: ServerProcess, tmp_path: Path
) -> None:
    extra = ["m.overlay.hgn", "tokenizer/tokenizer.json", "tokenizer/vocab.json"]
    published = {name: hashlib.sha256(data).hexdigest() for name, data in MULTI.items()}
    body = {
        "model_name": "multi",
        "checkpoint": "owner/multi:m.hgn",
        "recipe": "tiny",
        "files": extra,
        "sha256": published,
        "stream": True,
    }
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
    assert models(server)["multi"]["size_bytes"] == sum(map(len, MULTI.values()))
    (snapshot / "tokenizer/vocab.json").unlink()  # a missing part: not downloaded
    assert models(server, show_all=True)["multi"]["downloaded"] is False
    assert (
        httpx.post(server.url + "/api/v1/delete", json={"model_name": "multi"}).status_code == 200
    )
    assert not any((snapshot / name).exists() for name in MULTI)

    tampered = {
        **body,
        "model_name": "tampered",
        "stream": False,
        "sha256": {**published, "m.overlay.hgn": "0" * 64},
    }
    refused = httpx.post(server.url + "/api/v1/pull", json=tampered, timeout=60)
    assert refused.status_code == 502
    assert "does not have the published SHA-256" in refused.json()["error"]["message"]
    assert not (snapshot / "m.overlay.hgn").exists()
    truncated = {
        **tampered,
        "model_name": "truncated",
        "sha256": published,
        "sizes": {"m.overlay.hgn": 7001},
    }
    refused = httpx.post(server.url + "/api/v1/pull", json=truncated, timeout=60)
    assert refused.status_code == 502
    assert "published size 7001" in refused.json()["error"]["message"]
    escape = {**body, "model_name": "escape", "files": ["../../etc/passwd"]}
    assert httpx.post(server.url + "/api/v1/pull", json=escape).status_code == 400


def test_a_failed_pull_reports_the_error_and_leaves_no_new_model_behind(
    server: ServerProcess,
) -> None:
    """A pull that registers a model and then fails forgets that model (no ghost that is
    "not downloaded" forever); a failing pull of a model registered before keeps it."""
    body = {"model_name": "ghost", "checkpoint": "owner/tiny-GGUF:ghost.gguf", "recipe": "tiny"}
    response = httpx.post(server.url + "/api/v1/pull", json={**body, "stream": True}, timeout=60)
    assert response.status_code == 200  # streamed: the failure is the last event
    assert "ghost.gguf" in response.text and "event: error" in response.text
    assert "ghost" not in models(server, show_all=True)
    response = httpx.post(server.url + "/api/v1/pull", json=body, timeout=60)
    assert response.status_code == 502
    assert "ghost.gguf" in response.json()["error"]["message"]
    assert "ghost" not in models(server, show_all=True)

    kept = {"model_name": "kept", "checkpoint": "owner/tiny-GGUF:tiny.gguf", "recipe": "tiny"}
    assert httpx.post(server.url + "/api/v1/pull", json=kept, timeout=60).status_code == 200
    moved = {**kept, "checkpoint": "owner/tiny-GGUF:moved.gguf"}
    assert httpx.post(server.url + "/api/v1/pull", json=moved, timeout=60).status_code == 502
    assert "kept" in models(server, show_all=True)


def test_pull_registers_a_file_in_the_model_store_only(
    server: ServerProcess, tmp_path: Path
) -> None:
    local = tmp_path / "lemon" / "models" / "local.gguf"  # <cache_dir>/models
    local.parent.mkdir(exist_ok=True)
    local.write_bytes(BLOB)
    response = httpx.post(
        server.url + "/api/v1/pull",
        json={"model_name": "local", "checkpoint": str(local), "recipe": "tiny"},
    )
    assert response.status_code == 200
    assert models(server)["local"]["checkpoint"] == str(local)
    assert models(server)["local"]["size_bytes"] == len(BLOB)
    outside = tmp_path / "outside.gguf"
    outside.write_bytes(BLOB)
    refused = httpx.post(
        server.url + "/api/v1/pull",
        json={"model_name": "outside", "checkpoint": str(outside), "recipe": "tiny"},
    )
    assert refused.status_code == 403 and "model_dirs" in refused.json()["error"]["message"]
    assert "outside" not in models(server)


def test_offline_pull_fails_with_a_clear_message(tmp_path: Path, hub: str) -> None:
    env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "LEMON_OFFLINE": "1"}
    with running_server(tmp_path / "lemon", env, command=SERVE) as server:
        response = httpx.post(
            server.url + "/api/v1/pull",
            json={
                "model_name": "tiny",
                "checkpoint": "owner/tiny-GGUF:tiny.gguf",
                "recipe": "tiny",
            },
        )
    assert response.status_code == 400
    assert "offline" in response.json()["error"]["message"]


def test_a_pkg_checkpoint_naming_a_distribution_says_which_import_name_to_use(
    server: ServerProcess,
) -> None:
    refused = httpx.post(
        server.url + "/api/v1/pull",
        json={
            "model_name": "by-dist",
            "recipe": "tiny",
            "checkpoint": "pkg:pydantic-settings/py.typed",
        },
    )
    assert refused.status_code in {400, 404}, refused.text
    assert "use pkg:pydantic_settings/py.typed" in refused.json()["error"]["message"]


def test_a_file_left_in_an_older_snapshot_is_still_downloaded(
    server: ServerProcess, tmp_path: Path
) -> None:
    """When ``refs/main`` moves to a snapshot without the model's file (another file of
    the repo pulled at a later commit), the file kept in the older snapshot still counts:
    downloaded, its size, and a pull that fetches nothing (Lemonade #2300)."""
    body = {"model_name": "kept", "checkpoint": "owner/tiny-GGUF:tiny.gguf", "recipe": "tiny"}
    assert httpx.post(server.url + "/api/v1/pull", json=body, timeout=60).status_code == 200
    repo = tmp_path / "hf/hub/models--owner--tiny-GGUF"
    (repo / "snapshots" / ("0" * 40)).mkdir()
    (repo / "refs/main").write_text("0" * 40)
    card = models(server)["kept"]
    assert card["downloaded"] is True and card["size_bytes"] == len(BLOB)
    pulled = httpx.post(server.url + "/api/v1/pull", json={"model_name": "kept"}, timeout=60)
    assert pulled.status_code == 200
    assert (repo / "refs/main").read_text() == "0" * 40  # a download would have moved it
