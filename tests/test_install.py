"""The install engine against a real local HTTP server: verify, extract, swap, refuse."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from lemoncore.install import InstallError, install_plan, installed_version
from lemoncore.launch import Artifact, InstallPlan
from lemoncore.testing import serve_directory

pytestmark = pytest.mark.anyio


def make_zip(path: Path, entries: dict[str, bytes], mode: int = 0o755) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_verified_archive_installs_atomically_and_keeps_modes(
    tmp_path: Path, anyio_backend: str
) -> None:
    www = tmp_path / "www"
    www.mkdir()
    sha = make_zip(www / "tool-1.zip", {"build/bin/tool": b"#!/bin/sh\necho 1\n"})
    target = tmp_path / "bin" / "recipe" / "backend"
    seen: list[int] = []
    with serve_directory(www) as url:
        await install_plan(InstallPlan("1", (Artifact(f"{url}/tool-1.zip", sha),)), target,
                           tmp_path / "downloads", lambda done, total: seen.append(done))
    tool = target / "build/bin/tool"
    assert tool.read_bytes().startswith(b"#!/bin/sh")
    assert tool.stat().st_mode & 0o111
    assert installed_version(target) == "1"
    assert seen and seen[-1] == (www / "tool-1.zip").stat().st_size
    assert not list((tmp_path / "downloads").iterdir())  # archive and partial cleaned up
    assert not list(target.parent.glob("*.staging")) and not list(target.parent.glob("*.old"))


async def test_hash_mismatch_discards_download_and_keeps_previous_install(
    tmp_path: Path, anyio_backend: str
) -> None:
    www = tmp_path / "www"
    www.mkdir()
    good = make_zip(www / "v1.zip", {"tool": b"one"})
    make_zip(www / "v2.zip", {"tool": b"two"})
    target = tmp_path / "target"
    with serve_directory(www) as url:
        await install_plan(InstallPlan("1", (Artifact(f"{url}/v1.zip", good),)), target,
                           tmp_path / "dl")
        with pytest.raises(InstallError, match="does not match the pinned"):
            await install_plan(InstallPlan("2", (Artifact(f"{url}/v2.zip", good),)), target,
                               tmp_path / "dl")
        with pytest.raises(InstallError, match="no pinned SHA-256"):
            await install_plan(InstallPlan("2", (Artifact(f"{url}/v2.zip", None),)), target,
                               tmp_path / "dl")
        with pytest.raises(InstallError, match="404"):
            await install_plan(InstallPlan("2", (Artifact(f"{url}/gone.zip", good),)), target,
                               tmp_path / "dl")
    assert (target / "tool").read_bytes() == b"one"
    assert installed_version(target) == "1"
    assert not list((tmp_path / "dl").iterdir())


def tar_with_symlink(path: Path) -> str:
    with tarfile.open(path, "w:gz") as tf:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
        data = b"x"
        info = tarfile.TarInfo("escape/../../owned")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "a/../../evil"])
async def test_zip_entries_escaping_the_target_are_refused(
    tmp_path: Path, name: str, anyio_backend: str
) -> None:
    www = tmp_path / "www"
    www.mkdir()
    sha = make_zip(www / "bad.zip", {"ok": b"fine", name: b"evil"})
    with serve_directory(www) as url, pytest.raises(InstallError, match="escapes"):
        await install_plan(InstallPlan("1", (Artifact(f"{url}/bad.zip", sha),)),
                           tmp_path / "t", tmp_path / "dl")
    assert not (tmp_path / "t").exists()
    assert not (tmp_path / "evil").exists()


async def test_tar_links_escaping_the_target_are_refused(
    tmp_path: Path, anyio_backend: str
) -> None:
    www = tmp_path / "www"
    www.mkdir()
    sha = tar_with_symlink(www / "bad.tar.gz")
    with serve_directory(www) as url, pytest.raises(InstallError, match="refused"):
        await install_plan(InstallPlan("1", (Artifact(f"{url}/bad.tar.gz", sha),)),
                           tmp_path / "t", tmp_path / "dl")
    assert not (tmp_path / "t").exists()
