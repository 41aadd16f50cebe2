"""Refreshing pins (``lemon lock refresh``): ask each publisher what a pin's name points
at now, show old -> new, and record new pins only when the administrator says so.

A backend's owner offers a :class:`~lemoncore.launch.PinRefresher` in its install plan
(container images: the registry's digest for the pinned tag). Accepted pins go to
``<cache_dir>/refreshed-lock.json`` with the date and where they came from; the core
loads that file after every other lock source, so an accepted refresh wins until the
next one. Nothing is downloaded here: installing the new pin is a separate step.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemoncore.jsonfile import write_json
from lemoncore.launch import Artifact

REFRESH_FILE = "refreshed-lock.json"


@dataclass(frozen=True)
class Refresh:
    """One backend's pin, and what its publisher says now (``new`` is ``None`` on error)."""

    name: str  # recipe:backend
    version: str
    platform: str
    old: Artifact
    new: Artifact | None = None
    error: str = ""

    @property
    def stale(self) -> bool:
        return self.new is not None and (self.new.url, self.new.sha256) != (
            self.old.url, self.old.sha256)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "platform": self.platform,
                "old": {"url": self.old.url, "sha256": self.old.sha256},
                "new": None if self.new is None else {"url": self.new.url,
                                                      "sha256": self.new.sha256},
                "stale": self.stale, "error": self.error}


def save(path: Path, accepted: Iterable[Refresh]) -> None:
    """Record accepted refreshes (lock-shaped, dated), keeping other backends' entries."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"backends": {}}
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    for refresh in accepted:
        assert refresh.new is not None
        recipe, _, backend = refresh.name.partition(":")
        entry = data["backends"].setdefault(recipe, {}).setdefault(
            backend, {"version": refresh.version, "platforms": {}})
        entry["version"] = refresh.version
        entry["platforms"][refresh.platform] = [{
            "url": refresh.new.url, "sha256": refresh.new.sha256,
            "extract": refresh.new.extract,
            "provenance": f"refreshed on {today}: {refresh.new.provenance} (was "
                          f"{refresh.old.sha256 or 'unpinned'})"}]
    write_json(path, data)
