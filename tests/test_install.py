"""The install engine against a real HTTP server on loopback: verify, resume, extract,
swap atomically, refuse."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lemoncore.installs import install as engine
from lemoncore.installs.install import InstallError, install_plan
from lemoncore.installs.record import RECORD, InstallRecord, read_record, write_record
from lemoncore.launch import Artifact, Installed, InstallPlan
from lemoncore.recipes import ModelInfo

pytestmark = pytest.mark.anyio


@dataclass
class Mirror:
    """Serves ``files`` with range support; a name in ``cut`` is cut off halfway once."""

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    cut: set[str] = field(default_factory=set)
    ranges: list[str] = field(default_factory=list)

    def add(self, name: str, data: bytes) -> tuple[str, str]:
        self.files[name] = data
        return f"{self.url}/{name}", hashlib.sha256(data).hexdigest()


@pytest.fixture
def mirror() -> Iterator[Mirror]:
    state = Mirror()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = state.files.get(self.path.lstrip("/"))
            if data is None:
                self.send_error(404)
                return
            start = 0
            if (header := self.headers.get("Range")) is not None:
                state.ranges.append(header)
                start = int(header.removeprefix("bytes=").rstrip("-"))
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if self.path.lstrip("/") in state.cut:
                state.cut.discard(self.path.lstrip("/"))
                body = body[: len(body) // 2]
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def zip_bytes(entries: dict[str, bytes], mode: int = 0o755) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
    return buffer.getvalue()


def plan(version: str, *artifacts: tuple[str, str | None]) -> InstallPlan:
    return InstallPlan(version, tuple(Artifact(url, sha) for url, sha in artifacts))


async def test_verified_archive_installs_atomically_and_keeps_modes(
    tmp_path: Path, mirror: Mirror, anyio_backend: str
) -> None:
    artifact = mirror.add("tool-1.zip", zip_bytes({"build/bin/tool": b"#!/bin/sh\necho 1\n"}))
    target = tmp_path / "bin" / "recipe" / "backend"
    seen: list[int] = []
    await install_plan(
        plan("1", artifact), target, tmp_path / "downloads", lambda done, total: seen.append(done)
    )
    tool = target / "build/bin/tool"
    assert tool.read_bytes().startswith(b"#!/bin/sh")
    assert tool.stat().st_mode & 0o111
    assert json.loads((target / RECORD).read_text()) == {
        "version": "1",
        "artifacts": [{"url": artifact[0], "sha256": artifact[1]}],
    }
    record = read_record(target)
    assert record is not None and record.installs(plan("1", artifact))
    assert not record.installs(plan("2", artifact))
    assert seen and seen[-1] == len(mirror.files["tool-1.zip"])
    assert not list((tmp_path / "downloads").iterdir())  # archive and partial cleaned up
    assert sorted(p.name for p in target.parent.iterdir()) == ["backend"]


async def test_hash_mismatch_discards_download_and_keeps_previous_install(
    tmp_path: Path, mirror: Mirror, anyio_backend: str
) -> None:
    v1 = mirror.add("v1.zip", zip_bytes({"tool": b"one"}))
    v2_url, _ = mirror.add("v2.zip", zip_bytes({"tool": b"two"}))
    target, downloads = tmp_path / "target", tmp_path / "dl"
    await install_plan(plan("1", v1), target, downloads)
    with pytest.raises(InstallError, match="does not match the pinned"):
        await install_plan(plan("2", (v2_url, v1[1])), target, downloads)
    with pytest.raises(InstallError, match="no pinned SHA-256"):
        await install_plan(plan("2", (v2_url, None)), target, downloads)
    with pytest.raises(InstallError, match="404"):
        await install_plan(plan("2", (f"{mirror.url}/gone.zip", v1[1])), target, downloads)
    assert (target / "tool").read_bytes() == b"one"
    assert getattr(read_record(target), "version", None) == "1"
    assert not list(downloads.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl", "target"]


async def test_unverified_install_only_when_allowed(
    tmp_path: Path, mirror: Mirror, anyio_backend: str
) -> None:
    url, _ = mirror.add("free.zip", zip_bytes({"tool": b"x"}))
    await install_plan(
        plan("1", (url, None)), tmp_path / "t", tmp_path / "dl", allow_unverified=True
    )
    assert (tmp_path / "t/tool").read_bytes() == b"x"


async def test_interrupted_download_resumes_with_a_range_request(
    tmp_path: Path, mirror: Mirror, anyio_backend: str
) -> None:
    data = zip_bytes({"big": bytes(range(256)) * 4096})
    artifact = mirror.add("big.zip", data)
    mirror.cut.add("big.zip")
    with pytest.raises(InstallError, match=r"interrupted after .* install again to resume"):
        await install_plan(plan("1", artifact), tmp_path / "t", tmp_path / "dl")
    partial = next((tmp_path / "dl").glob("*.partial"))
    kept = partial.stat().st_size
    assert 0 < kept < len(data)
    assert not (tmp_path / "t").exists()
    await install_plan(plan("1", artifact), tmp_path / "t", tmp_path / "dl")
    assert mirror.ranges == [f"bytes={kept}-"]
    assert (tmp_path / "t/big").read_bytes() == bytes(range(256)) * 4096


async def test_failure_mid_commit_rolls_back(
    tmp_path: Path, mirror: Mirror, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "t"
    await install_plan(
        plan("1", mirror.add("a.zip", zip_bytes({"tool": b"one"}))), target, tmp_path / "dl"
    )
    real_rename = Path.rename

    def failing_rename(self: Path, to: Path) -> Path:
        if self.name.endswith(".staging"):
            raise OSError("disk full")
        return real_rename(self, to)

    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(OSError, match="disk full"):
        await install_plan(
            plan("2", mirror.add("b.zip", zip_bytes({"tool": b"two"}))), target, tmp_path / "dl"
        )
    monkeypatch.undo()
    assert (target / "tool").read_bytes() == b"one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl", "t"]


def test_restore_interrupted_puts_back_a_backup_left_by_a_crash(tmp_path: Path) -> None:
    backup = tmp_path / "t.old"
    backup.mkdir()
    (backup / "tool").write_text("one")
    engine.restore_interrupted(tmp_path / "t")
    assert (tmp_path / "t/tool").read_text() == "one"
    assert engine.uninstall(tmp_path / "t") is True
    assert list(tmp_path.iterdir()) == []


def tar_with_link(link_target: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, link_target
        tf.addfile(link)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("dotdot.zip", zip_bytes({"ok": b"fine", "../evil": b"evil"})),
        ("abs.zip", zip_bytes({"ok": b"fine", "/abs/evil": b"evil"})),
        ("nested.zip", zip_bytes({"a/../../evil": b"evil"})),
        ("link.tar.gz", tar_with_link("/etc/passwd")),
        ("uplink.tar.gz", tar_with_link("../../outside")),
    ],
)
async def test_entries_escaping_the_target_are_refused(
    tmp_path: Path, mirror: Mirror, name: str, data: bytes, anyio_backend: str
) -> None:
    with pytest.raises(InstallError, match=r"escapes|refused"):
        await install_plan(plan("1", mirror.add(name, data)), tmp_path / "t", tmp_path / "dl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl"]


def test_an_install_says_what_it_checked() -> None:
    sha = "ab" * 32
    assert (
        engine.provenance(InstallPlan("1", artifacts=(Artifact("https://h/a.zip", sha),)))
        == f"verified SHA-256 {sha[:12]}…"
    )
    assert (
        engine.provenance(InstallPlan("1", location=Path("/usr/bin")))
        == "located at /usr/bin, not verified (the plugin points to it)"
    )
    assert engine.provenance(
        InstallPlan(
            "1", artifacts=(Artifact("https://h/a.zip", sha), Artifact("https://h/b.zip", None))
        )
    ).startswith("NOT verified")


MODEL = {"name": "m", "recipe": "r", "checkpoint": "o/r:m.gguf"}


@pytest.mark.parametrize(
    ("text", "version", "models"),
    [
        # as lemoncore has written them: artifacts it installed; an installer's, with models
        ('{"version": "1", "artifacts": [{"url": "https://h/a.zip", "sha256": null}]}', "1", []),
        (
            json.dumps(
                {
                    "version": "2",
                    "artifacts": [],
                    "result": "sha256:img",
                    "models": [MODEL, {"name": "bad name!"}],
                }
            ),
            "2",
            ["m"],
        ),
        ('{"version": "3", "extra": {"from": "a newer lemoncore"}}', "3", []),
        ('{"artifacts": []}', None, []),  # no version: not a record
        ('["not", "a", "record"]', None, []),
        ("{half", None, []),
    ],
)
def test_records_read_tolerantly(
    tmp_path: Path, text: str, version: str | None, models: list[str]
) -> None:
    (tmp_path / RECORD).write_text(text)
    record = read_record(tmp_path)
    assert getattr(record, "version", None) == version
    assert ([m.name for m in record.models] if record else []) == models
    assert read_record(tmp_path / "missing") is None


def test_an_installer_record_round_trips_through_the_atomic_writer(tmp_path: Path) -> None:
    pinned = InstallPlan("7", (Artifact("docker://h/i:7@sha256:ab", "ab" * 32, False),))
    model = ModelInfo.model_validate(MODEL)
    record = InstallRecord.of(pinned, Installed("sha256:img", (model,)))
    write_record(tmp_path / "t", record)
    assert read_record(tmp_path / "t") == record
    assert (
        json.loads((tmp_path / "t" / RECORD).read_text())
        == record.as_json()
        == {
            "version": "7",
            "artifacts": [{"url": "docker://h/i:7@sha256:ab", "sha256": "ab" * 32}],
            "result": "sha256:img",
            "models": [model.model_dump(mode="json")],
        }
    )
    assert [p.name for p in (tmp_path / "t").iterdir()] == [RECORD]  # no temporary left
