"""Downloading a Hugging Face checkpoint: the checkpoint, then every file it needs beside
it at the same revision (so all land in one snapshot), in a worker thread, with progress
reported from the event loop. The catalogue's sizes and SHA-256 values are compared with
the hub's published file metadata before the first byte (:mod:`~lemoncore.models.published`;
a mismatch downloads nothing) and checked again on each file once it has arrived."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import huggingface_hub
import structlog
from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

from lemoncore.launch import ProgressCallback
from lemoncore.models import published
from lemoncore.models.checkpoints import Checkpoint, ModelError, snapshot_revision
from lemoncore.recipes import ModelInfo

log = structlog.get_logger("lemoncore.models")


@dataclass
class _Counter:
    done: int = 0
    total: int = 0


async def download(
    model: ModelInfo, cp: Checkpoint, on_progress: ProgressCallback | None = None
) -> str:
    """The path of ``model``'s checkpoint (``cp``, a Hugging Face one) in the cache, its
    files fetched where missing; (bytes done, total) reported four times a second and once
    at the end. A file that differs from its published size or hash is removed and a
    :class:`ModelError` (502), as is any other failure."""
    progress = _Counter()
    done = threading.Event()

    def fetch(name: str, revision: str | None) -> str:
        """One file, from the cache or downloaded (then checked against its published
        SHA-256); its path in the snapshot."""
        cached = huggingface_hub.try_to_load_from_cache(cp.location, name, revision=revision)
        if isinstance(cached, str):
            return cached
        got = str(
            huggingface_hub.hf_hub_download(
                cp.location, name, revision=revision, tqdm_class=_progress_tqdm(progress)
            )
        )
        size, want = model.sizes.get(name), model.sha256.get(name)
        wrong = (
            f"size {size}"
            if size and Path(got).stat().st_size != size
            else f"SHA-256 {want}"
            if want and _sha256(Path(got)) != want
            else ""
        )
        if wrong:
            Path(got).resolve().unlink(missing_ok=True)
            Path(got).unlink(missing_ok=True)
            raise ModelError(
                f"{cp.location}/{name} does not have the published {wrong}; it was removed",
                status=502,
            )
        return got

    def download_all() -> str:
        """The checkpoint, then every other file at the checkpoint's revision, so all
        land in one snapshot (a moved branch cannot split them); what is missing is
        compared with the hub's metadata first."""
        try:
            before_first_byte(model, cp)
            first = fetch(cp.filename, None)
            revision = snapshot_revision(first, cp.filename)
            for name in model.files:
                fetch(name, revision)
            return first
        finally:
            done.set()

    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        if on_progress is not None:
            tg.start_soon(_report, progress, done, on_progress)
        try:
            path_text = await anyio.to_thread.run_sync(download_all)
        except Exception as exc:  # noqa: BLE001 - reported below, outside the group
            failure = exc
    if isinstance(failure, ModelError):
        raise failure
    if failure is not None:
        raise ModelError(
            f"download of {model.checkpoint!r} failed: {failure}", status=502
        ) from failure
    return path_text


def before_first_byte(model: ModelInfo, cp: Checkpoint) -> None:
    """Compare the catalogue's SHA-256 and sizes of the files still missing with what the
    hub publishes (:func:`~lemoncore.models.published.lookup`), before any is fetched: a
    difference is a :class:`ModelError` (502) naming both values. When the hub cannot be
    asked or publishes no SHA-256 for a file, the log says so and the download goes on
    (each file is still checked once it has arrived)."""
    cached = huggingface_hub.try_to_load_from_cache(cp.location, cp.filename)
    revision = snapshot_revision(cached, cp.filename) if isinstance(cached, str) else None
    missing = [
        name
        for name in (cp.filename, *model.files)
        if revision is None
        or not isinstance(
            huggingface_hub.try_to_load_from_cache(cp.location, name, revision=revision), str
        )
    ]
    hashes = {n: model.sha256[n] for n in missing if n in model.sha256}
    sizes = {n: model.sizes[n] for n in missing if n in model.sizes}
    if not hashes and not sizes:
        return
    try:
        found = published.lookup(cp.location, sorted({*hashes, *sizes}), revision)
    except Exception as exc:  # noqa: BLE001 - offline, no such API (a mirror): checked after
        log.warning(
            "the hub's file metadata could not be read; the files are checked after their download",
            repo=cp.location,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        return
    if why := published.refusal(cp.location, revision, hashes, sizes, found):
        raise ModelError(why, status=502)
    if left := published.unchecked(hashes, found):
        log.warning(
            "the hub publishes no SHA-256 for these files (not LFS); they are checked "
            "after their download",
            repo=cp.location,
            files=left,
        )
    if checked := sorted(set(hashes) - set(left)):
        log.info("the catalogue's SHA-256 matches the hub's", repo=cp.location, files=checked)


async def _report(progress: _Counter, done: threading.Event, on_progress: ProgressCallback) -> None:
    """Report from the event loop what the download thread counts, once the first file's
    size is known, and a last time when it ends."""
    while True:
        await anyio.sleep(0.25)
        finished = done.is_set()
        if progress.total:
            on_progress(progress.done, progress.total)
        if finished:
            return


def _progress_tqdm(progress: _Counter) -> type[hf_tqdm]:
    class ProgressTqdm(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            progress.total += int(kwargs.get("total") or 0)  # files of a model add up
            progress.done += int(kwargs.get("initial") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            progress.done += int(n or 0)
            return None

    return ProgressTqdm


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()
