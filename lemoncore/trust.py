"""Trust on first use, for pinned artifacts whose publisher gives no hash.

TheRock's release tarballs and llama.cpp's release assets publish no checksums, so their
pins carry ``sha256: null`` and lemoncore refuses them. With the administrator's explicit
consent (``lemon backends install NAME --trust-download``, or ``"trust_download": true``
on ``/api/v1/install``) lemoncore downloads such an artifact once, shows its SHA-256 and
size, and records them with the date and URL in ``<cache_dir>/trusted-lock.json``. Every
later lock load fills that hash into the pin of the same URL and version that has none,
so from then on the artifact is verified like any other: a changed file at the same URL is
refused. A pin that has a hash (from a plugin or the administrator) is never overridden.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from lemoncore.jsonfile import write_json

TRUST_FILE = "trusted-lock.json"


class TrustedEntry(TypedDict):
    """A :class:`Trusted` as the trust file (and ``/api/v1/install``'s ``trusted``) holds
    it."""

    name: str
    version: str
    url: str
    sha256: str
    size: int
    date: str


@dataclass(frozen=True)
class Trusted:
    """An artifact as first downloaded: what the administrator is shown and what is pinned."""

    name: str  # recipe:backend or runtime:<name>
    version: str
    url: str
    sha256: str
    size: int
    date: str = ""

    @property
    def provenance(self) -> str:
        return (
            f"trusted on first use on {self.date}: downloaded from {self.url} "
            f"({self.size} bytes), SHA-256 shown to the administrator"
        )

    def as_dict(self) -> TrustedEntry:
        return {
            "name": self.name,
            "version": self.version,
            "url": self.url,
            "sha256": self.sha256,
            "size": self.size,
            "date": self.date,
        }


def measure(path: Path, name: str, version: str, url: str) -> Trusted:
    """The SHA-256 and size of a downloaded file, dated today (UTC)."""
    import datetime  # here, with hashlib: plugins import this module (through the lock)
    import hashlib

    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return Trusted(
        name,
        version,
        url,
        sha.hexdigest(),
        path.stat().st_size,
        datetime.datetime.now(datetime.UTC).date().isoformat(),
    )


def load(trust_file: Path) -> list[Trusted]:
    if not trust_file.exists():
        return []
    return [Trusted(**entry) for entry in json.loads(trust_file.read_text())["trusted"]]


def save(trust_file: Path, new: list[Trusted]) -> None:
    """Add ``new`` to the file (replacing entries of the same URL), atomically."""
    urls = {t.url for t in new}
    entries = [t for t in load(trust_file) if t.url not in urls] + new
    write_json(trust_file, {"trusted": [t.as_dict() for t in entries]})
