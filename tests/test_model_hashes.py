"""A catalogue's SHA-256 and sizes are third-party values: they are compared with the
hub's published file metadata before the first byte is downloaded (and checked again on
each file once it has arrived). The comparison is pure; the download runs against a local
Hugging Face-shaped server that answers ``paths-info`` as the Hub does (the requests
``huggingface_hub`` makes: ``POST /api/models/{repo}/paths-info/{revision}``, then HEAD
and GET on ``/{repo}/resolve/{revision}/{file}``), and one that does not, as a mirror
may not. No test needs the internet."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import pytest
import structlog
from huggingface_hub import constants

from lemoncore.models import Checkpoint, ModelError
from lemoncore.models.download import download
from lemoncore.models.published import Published, refusal, unchecked
from lemoncore.recipes import ModelInfo
from lemoncore.testing import _HubHandler, _serving

WEIGHTS, TOKENIZER = b"w" * 5000, b'{"vocab": 1}'
FILES = {"owner/big/m.hgn": WEIGHTS, "owner/big/tokenizer/tokenizer.json": TOKENIZER}
SHA = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}
LFS = frozenset({"owner/big/m.hgn"})  # the tokenizer is kept in git, as small files are


class PathsInfoHub(_HubHandler):
    """lemoncore's test hub plus ``paths-info``: each existing path listed with its size
    and, for ``lfs`` paths, LFS metadata; ``answers_paths_info`` off: 501, as a plain
    file mirror would. Every request is recorded in ``seen``."""

    seen: list[str]
    lfs: frozenset[str] = LFS
    answers_paths_info = True

    def do_HEAD(self) -> None:
        self.seen.append(f"HEAD {self.path}")
        super().do_HEAD()

    def do_GET(self) -> None:
        if "/resolve/" in self.path:  # not huggingface_hub's own look-ups (agent-harnesses)
            self.seen.append(f"GET {self.path}")
        super().do_GET()

    def do_POST(self) -> None:
        self.seen.append(f"POST {self.path}")
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
        found = re.fullmatch(r"/api/models/([^/]+/[^/]+)/paths-info/[^/]+", self.path)
        if not self.answers_paths_info or found is None:
            self.send_error(501)
            return
        listed = []
        for path in form.get("paths", []):
            data = self.files.get(f"{found[1]}/{path}")
            if data is None:
                continue  # the Hub ignores paths that do not exist
            entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data)}
            entry["oid"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            if f"{found[1]}/{path}" in self.lfs:
                entry["lfs"] = {
                    "oid": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 134,
                }
            listed.append(entry)
        body = json.dumps(listed).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def hub(monkeypatch: pytest.MonkeyPatch, cache: Path, **attrs: object) -> Iterator[list[str]]:
    """Serve ``FILES``; point ``huggingface_hub`` at it, with its cache in ``cache``;
    yield the requests it receives."""
    seen: list[str] = []
    handler = type("Hub", (PathsInfoHub,), {"files": FILES, "seen": seen, **attrs})
    with _serving(handler) as url:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(
            constants,
            "HUGGINGFACE_CO_URL_TEMPLATE",
            url + "/{repo_id}/resolve/{revision}/{filename}",
        )
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
        yield seen


def model(sha256: Mapping[str, str], sizes: Mapping[str, int] | None = None) -> ModelInfo:
    return ModelInfo(
        name="big",
        recipe="r",
        checkpoint="owner/big:m.hgn",
        files=("tokenizer/tokenizer.json",),
        sha256=sha256,
        sizes=sizes or {},
    )


PUBLISHED = {n.removeprefix("owner/big/"): h for n, h in SHA.items()}


def fetch(info: ModelInfo) -> str:
    return anyio.run(download, info, Checkpoint.parse(info.checkpoint))


def test_the_comparison_names_both_values_and_what_to_do() -> None:
    lfs = {"m.hgn": Published(5000, "a" * 64), "t.json": Published(12)}
    assert refusal("o/r", None, {"m.hgn": "a" * 64}, {"m.hgn": 5000, "t.json": 12}, lfs) == ""
    wrong = refusal("o/r", None, {"m.hgn": "b" * 64}, {}, lfs)
    assert wrong.startswith("o/r at main: m.hgn: the catalogue's SHA-256 " + "b" * 64)
    assert f"differs from the published {'a' * 64} (Hugging Face's LFS metadata)" in wrong
    assert "Nothing was downloaded" in wrong and "models.json" in wrong
    short = refusal("o/r", "c" * 40, {}, {"m.hgn": 4999}, lfs)
    assert "at " + "c" * 40 in short and "size 4999 differs from the published 5000" in short
    # a file kept in git publishes no SHA-256, a file not listed nothing: checked after
    assert refusal("o/r", None, {"t.json": "b" * 64, "gone": "b" * 64}, {}, lfs) == ""
    assert unchecked({"m.hgn": "a" * 64, "t.json": "b" * 64, "gone": "c" * 64}, lfs) == [
        "gone",
        "t.json",
    ]


def test_a_wrong_catalogue_hash_is_refused_before_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub(monkeypatch, tmp_path / "hf") as seen:
        with pytest.raises(ModelError) as refused:
            fetch(model({**PUBLISHED, "m.hgn": "0" * 64}))
    assert refused.value.status == 502
    message = str(refused.value)
    assert "m.hgn: the catalogue's SHA-256 " + "0" * 64 in message
    assert "differs from the published " + PUBLISHED["m.hgn"] in message
    assert [r.split(" ")[0] for r in seen] == ["POST"]  # metadata only: no HEAD, no GET
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").rglob("*.hgn"))


def test_a_wrong_catalogue_size_is_refused_before_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub(monkeypatch, tmp_path / "hf") as seen:
        with pytest.raises(ModelError, match="size 86720111488 differs from the published 5000"):
            fetch(model(PUBLISHED, {"m.hgn": 86720111488}))
    assert all(r.startswith("POST") for r in seen)


def test_matching_metadata_downloads_and_the_log_says_what_was_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hub(monkeypatch, tmp_path / "hf") as seen, structlog.testing.capture_logs() as logs:
        path = fetch(model(PUBLISHED, {"m.hgn": len(WEIGHTS)}))
    assert Path(path).read_bytes() == WEIGHTS
    assert seen[0].startswith("POST /api/models/owner/big/paths-info/main")
    events = {e["event"]: e for e in logs}
    assert events["the catalogue's SHA-256 matches the hub's"]["files"] == ["m.hgn"]
    # the tokenizer is not an LFS file: its hash is checked after its download
    kept = events[
        "the hub publishes no SHA-256 for these files (not LFS); they are checked "
        "after their download"
    ]
    assert kept["files"] == ["tokenizer/tokenizer.json"]
    with hub(monkeypatch, tmp_path / "hf") as again:
        fetch(model(PUBLISHED))
    assert again == []  # all cached: nothing asked, nothing fetched


def test_a_hub_without_file_metadata_downloads_and_still_checks_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        hub(monkeypatch, tmp_path / "hf", answers_paths_info=False) as seen,
        structlog.testing.capture_logs() as logs,
    ):
        with pytest.raises(ModelError, match="does not have the published SHA-256"):
            fetch(model({**PUBLISHED, "m.hgn": "0" * 64}))
    assert seen[0].startswith("POST") and any(r.startswith("GET") for r in seen)
    [warned] = [e for e in logs if "could not be read" in e["event"]]
    assert warned["repo"] == "owner/big" and "501" in warned["error"]
