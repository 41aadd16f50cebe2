"""Fetch, verify and atomically install pinned artifacts.

A download streams to a ``.partial`` file while its SHA-256 is computed; an interrupted
download resumes with an HTTP range request. Nothing is extracted unless the hash
matches the pin. Archives extract into a staging directory that replaces the install
directory by rename, with the previous install restored on any failure (also after a
crash between the two renames: see :func:`restore_interrupted`). Each install records what it
installed (:mod:`lemoncore.installs.record`); a different pin means the install is out of date.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import anyio
import httpx

from lemoncore.errors import InstallError as InstallError  # re-exported
from lemoncore.installs.record import InstallRecord, write_record
from lemoncore.launch import Artifact, InstallPlan, ProgressCallback


def restore_interrupted(target: Path) -> None:
    """Finish what an interrupted commit left: restore the backup if the target is gone."""
    backup = _sibling(target, "old")
    if backup.exists() and not target.exists():
        backup.rename(target)


def uninstall(target: Path) -> bool:
    """Remove an install (renamed away first, so a crash never leaves half of one)."""
    restore_interrupted(target)
    if not target.exists():
        return False
    trash = _sibling(target, "trash")
    shutil.rmtree(trash, ignore_errors=True)
    target.rename(trash)
    shutil.rmtree(trash)
    return True


def provenance(plan: InstallPlan) -> str:
    """What an install of ``plan`` checked, in words that are true of it."""
    if plan.location is not None:
        return f"located at {plan.location}, not verified (the plugin points to it)"
    if plan.installer is not None:
        return "installed by its plugin's installer (images are pulled by their pinned digest)"
    if plan.artifacts and all(a.sha256 for a in plan.artifacts):
        return "verified SHA-256 " + ", ".join(
            f"{a.sha256[:12]}…" for a in plan.artifacts if a.sha256
        )
    return "NOT verified: an artifact has no pinned SHA-256 (allow_unverified)"


async def install_plan(
    plan: InstallPlan,
    target: Path,
    downloads: Path,
    on_progress: ProgressCallback | None = None,
    allow_unverified: bool = False,
) -> None:
    """Install ``plan``'s artifacts into ``target``, replacing what was there."""
    if not allow_unverified and any(not a.sha256 for a in plan.artifacts):
        raise InstallError(
            "an artifact has no pinned SHA-256 and unverified installs are not allowed"
        )
    await anyio.Path(downloads).mkdir(parents=True, exist_ok=True)
    files = [await download(a, downloads, on_progress) for a in plan.artifacts]
    staging = _sibling(target, "staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for artifact, file in zip(plan.artifacts, files, strict=True):
            if artifact.extract:
                extract(file, staging)
            else:
                shutil.copy2(file, staging / PurePosixPath(httpx.URL(artifact.url).path).name)
        write_record(staging, InstallRecord.of(plan))
        commit(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for file in files:
        file.unlink(missing_ok=True)


def partial_path(artifact: Artifact, downloads: Path) -> Path:
    """Where ``artifact``'s download accumulates (and resumes from)."""
    name = PurePosixPath(httpx.URL(artifact.url).path).name or "download"
    return downloads / f"{name}.{(artifact.sha256 or 'unverified')[:16]}.partial"


async def download(
    artifact: Artifact, downloads: Path, on_progress: ProgressCallback | None = None
) -> Path:
    """Download (resuming a partial file) and verify; return the verified file."""
    name = PurePosixPath(httpx.URL(artifact.url).path).name or "download"
    partial = partial_path(artifact, downloads)
    digest = hashlib.sha256()
    offset = partial.stat().st_size if partial.exists() else 0
    if offset:
        with partial.open("rb") as existing:
            for block in iter(lambda: existing.read(1 << 20), b""):
                digest.update(block)
    # identity: the pinned hash is of the file as published, not of a re-encoding of it
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
    done = offset
    try:
        async with (
            httpx.AsyncClient(follow_redirects=True, timeout=60) as client,
            client.stream("GET", artifact.url, headers=headers) as response,
        ):
            if offset and response.status_code == 416:  # already complete
                pass
            else:
                response.raise_for_status()
                if response.status_code != 206:  # no range support: start over
                    digest, done = hashlib.sha256(), 0
                total = done + int(response.headers.get("content-length", 0))
                with partial.open("ab" if done else "wb") as out:
                    async for chunk in response.aiter_bytes():
                        digest.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if on_progress:
                            on_progress(done, total)
    except httpx.HTTPStatusError as exc:
        raise InstallError(f"download of {artifact.url} failed: {exc}") from exc
    except httpx.TransportError as exc:
        raise InstallError(
            f"download of {artifact.url} was interrupted after {done} bytes "
            f"({exc!r}); install again to resume"
        ) from exc
    if artifact.sha256 and digest.hexdigest() != artifact.sha256:
        partial.unlink(missing_ok=True)
        raise InstallError(
            f"{name}: SHA-256 {digest.hexdigest()} does not match the pinned "
            f"{artifact.sha256}; the download was discarded, nothing installed"
        )
    final = downloads / name
    partial.replace(final)
    return final


def extract(archive: Path, dest: Path) -> None:
    """Extract a zip or tar.* archive, refusing entries that would land outside ``dest``."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member(info.filename, dest)
                if stat.S_ISLNK(info.external_attr >> 16):
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
    if (
        path.is_absolute()
        or ".." in path.parts
        or not (dest / name).resolve().is_relative_to(dest.resolve())
    ):
        raise InstallError(f"archive entry {name!r} escapes the install directory; refused")


def commit(staging: Path, target: Path) -> None:
    """Swap ``staging`` in as ``target``; on failure the previous ``target`` is restored."""
    backup = _sibling(target, "old")
    shutil.rmtree(backup, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.rename(backup)
    try:
        staging.rename(target)
    except BaseException:
        restore_interrupted(target)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _sibling(target: Path, suffix: str) -> Path:
    return target.with_name(f"{target.name}.{suffix}")
