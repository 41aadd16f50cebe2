"""What Hugging Face publishes about a repository's files before any is downloaded: each
file's size and, for a file stored with LFS (or Xet), its SHA-256, from one
``paths-info`` request. :func:`refusal` compares them with what a catalogue records
(third-party values until now checked only after a download of up to 124 GB).

Source: ``huggingface_hub`` ``hf_api.py`` (huggingface/huggingface_hub @ee0a451,
2026-08-20): ``HfApi.get_paths_info`` POSTs ``{endpoint}/api/models/{repo}/paths-info/
{revision}`` (``HF_ENDPOINT`` honoured through ``constants.ENDPOINT``) and returns a
``RepoFile`` per existing file, whose ``size`` is the file's, and whose ``lfs``
(``BlobLfsInfo``, built from the reply's ``lfs.oid`` and ``lfs.size``) is ``None`` for a
file kept in git itself; ``expand=True`` only adds the last commit and security scan, so it
is not asked for (it also cuts pages from 1,000 paths to 50). ``get_hf_file_metadata``
(``file_download.py``) was not used: it is one HEAD per file, and its ``etag`` is the LFS
SHA-256 for an LFS file but the git blob SHA-1 otherwise, so it cannot say which it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import huggingface_hub


@dataclass(frozen=True)
class Published:
    """A file as the hub lists it: its size and, when it is an LFS file, its SHA-256."""

    size: int
    sha256: str | None = None


def lookup(repo: str, names: Sequence[str], revision: str | None) -> dict[str, Published]:
    """What the hub lists for ``names`` of ``repo`` at ``revision`` (``None``: main); a
    name the hub does not list is absent. Network and HTTP errors propagate."""
    found = huggingface_hub.HfApi().get_paths_info(repo, list(names), revision=revision)
    return {
        entry.path: Published(entry.size, entry.lfs.sha256 if entry.lfs else None)
        for entry in found
        if isinstance(entry, huggingface_hub.hf_api.RepoFile)
    }


def refusal(
    repo: str,
    revision: str | None,
    sha256: Mapping[str, str],
    sizes: Mapping[str, int],
    published: Mapping[str, Published],
) -> str:
    """Why the download must not start ("" when it may): a file whose published size or
    SHA-256 differs from the catalogue's, both values named, and what to do. A file the
    hub does not list is not refused here (a mirror may not answer ``paths-info``; a file
    that is truly missing fails its download)."""
    where = f"{repo} at {revision or 'main'}"
    fix = (
        "Nothing was downloaded. The catalogue's value is a third-party record: check the "
        f"file on the hub ({repo}), then correct the model's sha256/sizes (a plugin's "
        "models.json, an image's org.lemonade.models label, or the registered model), or "
        "pin a revision whose file matches."
    )
    problems = []
    for name in sorted({*sha256, *sizes}):
        found = published.get(name)
        if found is None:
            continue
        if (want := sizes.get(name)) is not None and want != found.size:
            problems.append(
                f"{name}: the catalogue's size {want} differs from the published {found.size}"
            )
        if (want_sha := sha256.get(name)) and found.sha256 and want_sha != found.sha256:
            problems.append(
                f"{name}: the catalogue's SHA-256 {want_sha} differs from the published "
                f"{found.sha256} (Hugging Face's LFS metadata)"
            )
    if not problems:
        return ""
    return f"{where}: " + "; ".join(problems) + ". " + fix


def unchecked(sha256: Mapping[str, str], published: Mapping[str, Published]) -> list[str]:
    """The hashed files whose SHA-256 the hub does not publish (not listed, or not LFS):
    checked only after their download."""
    return sorted(n for n in sha256 if (found := published.get(n)) is None or not found.sha256)
