"""Refreshing pins (``lemon lock refresh``): ask each publisher what a pin's name points
at now, show old -> new, and record new pins only when the administrator says so. A
backend's owner offers a :class:`~lemoncore.launch.PinRefresher` in its install plan
(container images: the registry's digest for the pinned tag). Accepted pins go to
``<cache_dir>/refreshed-lock.json`` with the date, where they came from and the pin each
replaced (``replaces``). The core applies that file over every other lock source
(:func:`apply`), per backend and platform, only while the pin a refresh replaced is still
the one shipped (or the administrator's): a newer plugin's pin wins over an older refresh.
Nothing is downloaded here: installing the new pin is a separate step.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from pydantic import ValidationError

from lemoncore.installs.backend_status import BackendError
from lemoncore.jsonfile import write_json
from lemoncore.launch import Artifact
from lemoncore.lock import Lock, LockData, LockedArtifact, LockEntry, LockError, ReplacedPin

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
    """Record accepted refreshes (lock-shaped, dated, each with the pin it replaced: the
    shipped one, also when it refreshes an earlier refresh), keeping other backends'
    entries and the refreshed backends' other platforms."""
    data = read(path)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    backends = {recipe: dict(entries) for recipe, entries in data.backends.items()}
    for refresh in accepted:
        assert refresh.new is not None
        recipe, _, backend = refresh.name.partition(":")
        before = backends.setdefault(recipe, {}).get(backend)
        earlier = before.platforms.get(refresh.platform, ()) if before else ()
        pinned = LockedArtifact(
            url=refresh.new.url,
            sha256=refresh.new.sha256,
            extract=refresh.new.extract,
            provenance=f"refreshed on {today}: {refresh.new.provenance} (was "
            f"{refresh.old.sha256 or 'unpinned'})",
            # a refresh of a refreshed pin still replaces the shipped one
            replaces=earlier[0].replaces
            if earlier
            and (earlier[0].url, earlier[0].sha256) == (refresh.old.url, refresh.old.sha256)
            else ReplacedPin(
                version=refresh.version, url=refresh.old.url, sha256=refresh.old.sha256
            ),
        )
        backends[recipe][backend] = LockEntry(
            version=refresh.version,
            platforms={**(before.platforms if before else {}), refresh.platform: (pinned,)},
        )
    saved = LockData(backends=backends, runtimes=data.runtimes)
    write_json(path, saved.model_dump(mode="json", exclude=None if data.runtimes else {"runtimes"}))


def read(path: Path) -> LockData:
    """The accepted refreshes saved at ``path`` (none when there is no file); a
    :class:`~lemoncore.lock.LockError` naming the file when it is unreadable."""
    try:
        return LockData.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return LockData()
    except (OSError, ValidationError) as exc:
        raise LockError(f"lock file {path}: {exc}") from exc


def apply(lock: Lock, refreshed: LockData) -> list[str]:
    """Put each accepted refresh in ``lock`` (the shipped and administrator's pins, trusted
    hashes adopted) where the pin it replaced is still the one there; say why each other
    one is left out, a line each, for the log. Runtimes are never refreshed: they pass
    unchanged."""
    left_out = []
    for recipe, entries in refreshed.backends.items():
        for backend, entry in entries.items():
            current = lock.backend_entry(recipe, backend)
            platforms = dict(current.platforms) if current else {}
            for key, artifacts in entry.platforms.items():
                if (why := _superseded(current, key, entry.version, artifacts)) is None:
                    platforms[key] = artifacts
                else:
                    left_out.append(f"{recipe}:{backend} on {key}: refresh left out: {why}")
            if current is not None:
                lock.backends[recipe][backend] = current.model_copy(update={"platforms": platforms})
    lock.runtimes.update(refreshed.runtimes)
    return left_out


def _superseded(
    current: LockEntry | None, key: str, version: str, artifacts: Sequence[LockedArtifact]
) -> str | None:
    """Why a refreshed pin no longer applies over ``current``'s pin for platform ``key``,
    or ``None`` when it does. One saved before refreshes recorded ``replaces`` applies
    while the version is the same."""
    pin = current.pin(key) if current else None
    if pin is None or not pin.artifacts or not artifacts:
        return "that backend is no longer pinned there"
    replaced, now = artifacts[0].replaces, pin.artifacts[0]
    if replaced is None:
        return None if pin.version == version else f"the pinned version is now {pin.version}"
    if (pin.version, now.url, now.sha256) != (replaced.version, replaced.url, replaced.sha256):
        return f"a newer pin was shipped since ({pin.version}, {now.url})"
    return None
