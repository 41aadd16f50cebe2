"""Fetch, verify and atomically install pinned artifacts.

A download streams to ``<name>.partial`` while its SHA-256 is computed; nothing is
extracted unless the hash matches the pin. Archives extract into a staging directory
that replaces the install directory in one rename, with the previous install restored
on any failure.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import anyio
import httpx

from lemoncore.launch import Artifact, InstallPlan

VERSION_MARKER = "version.txt"


class InstallError(Exception):
    """An install was refused or failed; nothing was changed. The message names the fix."""


def installed_version(target: Path) -> str | None:
    try:
        return (target / VERSION_MARKER).read_text().strip()
    except OSError:
        return None


async def install_plan(plan: InstallPlan, target: Path, downloads: Path,
                       on_progress: Callable[[int, int], None] | None = None) -> None:
    """Install ``plan``'s artifacts into ``target`` (replacing it atomically)."""
    for artifact in plan.artifacts:
        if not artifact.sha256:
            raise InstallError(f"{artifact.url} has no pinned SHA-256; lemoncore does not "
                               "install unverified downloads")
    await anyio.Path(downloads).mkdir(parents=True, exist_ok=True)
    files = [await _download(a, downloads, on_progress) for a in plan.artifacts]
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for artifact, file in zip(plan.artifacts, files, strict=True):
            if artifact.extract:
                extract(file, staging)
            else:
                shutil.copy2(file, staging / file.name)
        (staging / VERSION_MARKER).write_text(plan.version)
        _commit(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for file in files:
        file.unlink(missing_ok=True)


async def _download(artifact: Artifact, downloads: Path,
                    on_progress: Callable[[int, int], None] | None) -> Path:
    name = PurePosixPath(httpx.URL(artifact.url).path).name
    final, partial = downloads / name, downloads / f"{name}.partial"
    digest = hashlib.sha256()
    try:
        async with httpx.AsyncClient(follow_redirects=True, timeout=60) as client, \
                client.stream("GET", artifact.url) as response:
            response.raise_for_status()
            total, done = int(response.headers.get("content-length", 0)), 0
            with partial.open("wb") as out:
                async for chunk in response.aiter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    if on_progress:
                        on_progress(done, total)
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        raise InstallError(f"download of {artifact.url} failed: {exc}") from exc
    if digest.hexdigest() != artifact.sha256:
        partial.unlink(missing_ok=True)
        raise InstallError(f"{name}: SHA-256 {digest.hexdigest()} does not match the pinned "
                           f"{artifact.sha256}; the download was discarded, nothing installed")
    partial.replace(final)
    return final


def extract(archive: Path, dest: Path) -> None:
    """Extract a zip or tar.* archive, refusing entries that would land outside ``dest``."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member(info.filename, dest)
                is_link = stat.S_ISLNK(info.external_attr >> 16)
                if is_link:
                    raise InstallError(f"{archive.name}: link entry {info.filename!r} refused")
                zf.extract(info, dest)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    (dest / info.filename).chmod(mode)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            try:
                tf.extractall(dest, filter="data")
            except tarfile.TarError as exc:
                raise InstallError(f"{archive.name}: {exc}; refused") from exc
    else:
        raise InstallError(f"{archive.name} is neither a zip nor a tar archive")


def _check_member(name: str, dest: Path) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise InstallError(f"archive entry {name!r} escapes the install directory; refused")
    if not (dest / name).resolve().is_relative_to(dest.resolve()):
        raise InstallError(f"archive entry {name!r} escapes the install directory; refused")


def _commit(staging: Path, target: Path) -> None:
    backup = target.with_name(target.name + ".old")
    shutil.rmtree(backup, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.rename(backup)
    try:
        staging.rename(target)
    except OSError:
        if backup.exists():
            backup.rename(target)
        raise
    shutil.rmtree(backup, ignore_errors=True)
