"""Refreshing pins (``lemon lock refresh``): ask each publisher what a pin's name points
at now, show old -> new, and record new pins only when the administrator says so. A
backend's owner offers a :class:`~lemoncore.launch.PinRefresher` in its install plan
(container images: the registry's digest for the pinned tag). Accepted pins go to
``<cache_dir>/refreshed-lock.json`` with the date and where they came from; the core
loads that file after every other lock source, so an accepted refresh wins until the
next one. Nothing is downloaded here: installing the new pin is a separate step.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from lemoncore.installs.backend_status import BackendError
from lemoncore.jsonfile import write_json
from lemoncore.launch import Artifact
from lemoncore.lock import LockData, LockedArtifact, LockEntry

if TYPE_CHECKING:
    from lemoncore.installs.backends import Backends

REFRESH_FILE = "refreshed-lock.json"


class PinJSON(TypedDict):
    url: str
    sha256: str | None


class RefreshJSON(TypedDict):
    name: str
    version: str
    platform: str
    old: PinJSON
    new: PinJSON | None
    stale: bool
    error: str


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
            self.old.url,
            self.old.sha256,
        )

    def as_dict(self) -> RefreshJSON:
        return {
            "name": self.name,
            "version": self.version,
            "platform": self.platform,
            "old": {"url": self.old.url, "sha256": self.old.sha256},
            "new": None if self.new is None else {"url": self.new.url, "sha256": self.new.sha256},
            "stale": self.stale,
            "error": self.error,
        }


async def ask(backends: Backends, names: Sequence[str]) -> list[Refresh]:
    """What each named backend's pin (every refreshable one when ``names`` is empty) points
    at now, on every platform it is pinned for, asked of its publisher through its
    plugin's refresher. Changes nothing; one publisher failing is that pin's ``error``."""
    wanted = [backends.lookup(n) for n in names] or [
        (r, b) for r in backends.plugins.registry.recipes.values() for b in r.backends
    ]
    found = []
    for recipe, backend in wanted:
        name = f"{recipe.name}:{backend.name}"
        entry = backends.lock.backend_entry(recipe.name, backend.name)
        asked = 0
        for key in entry.platforms if entry else {}:  # every platform, not this host's
            pin = backends.lock.backend_pin(recipe.name, backend.name, key)
            refresher = (
                None
                if pin is None or not pin.artifacts
                else backends.plugins.refresher(
                    recipe, backend, backends.install_config(recipe, backend), pin
                )
            )
            if pin is None or refresher is None:
                continue
            asked += 1
            old = Refresh(name, pin.version, key, pin.artifacts[0])
            try:
                found.append(replace(old, new=await refresher.latest()))
            except Exception as exc:  # noqa: BLE001 - one publisher failing is reported
                found.append(replace(old, error=str(exc) or type(exc).__name__))
        if names and not asked:
            raise BackendError(f"{name} has no pin its plugin can refresh", 400)
    return found


def save(path: Path, accepted: Iterable[Refresh]) -> None:
    """Record accepted refreshes (lock-shaped, dated), keeping other backends' entries and
    the refreshed backends' other platforms."""
    data = LockData.model_validate_json(path.read_bytes()) if path.exists() else LockData()
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    backends = {recipe: dict(entries) for recipe, entries in data.backends.items()}
    for refresh in accepted:
        assert refresh.new is not None
        recipe, _, backend = refresh.name.partition(":")
        before = backends.setdefault(recipe, {}).get(backend)
        pinned = LockedArtifact(
            url=refresh.new.url,
            sha256=refresh.new.sha256,
            extract=refresh.new.extract,
            provenance=f"refreshed on {today}: {refresh.new.provenance} (was "
            f"{refresh.old.sha256 or 'unpinned'})",
        )
        backends[recipe][backend] = LockEntry(
            version=refresh.version,
            platforms={**(before.platforms if before else {}), refresh.platform: (pinned,)},
        )
    saved = LockData(backends=backends, runtimes=data.runtimes)
    write_json(path, saved.model_dump(mode="json", exclude=None if data.runtimes else {"runtimes"}))
