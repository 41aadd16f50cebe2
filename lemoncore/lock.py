"""The lock: pinned versions and SHA-256s for everything lemoncore downloads.

Lock data comes from lemoncore (``lemoncore/data/lock.json``: runtimes such as TheRock),
from each plugin (``register_lock``) and last from the administrator's lock files
(setting ``lock_files``), later sources replacing earlier ones per backend::

    {"backends": {"<recipe>": {"<backend>": {"version": "b7000",
        "platforms": {"linux-x86_64": [{"url": "...", "sha256": "<hex>" | null,
                                        "provenance": "how the hash was obtained"}]}}}},
     "runtimes": {"<name>": {...same shape as a backend...}}}

A ``null`` hash is allowed in the file but refused at install time unless the
administrator trusted that download on first use (:mod:`lemoncore.trust`, applied by
:meth:`Lock.adopt`) or allows unverified installs for that backend.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lemoncore.errors import LemonError
from lemoncore.launch import Artifact
from lemoncore.trust import Trusted


class LockError(LemonError):
    """A lock file is unreadable or malformed; the message names the file."""

    code = "invalid_lock"


@dataclass(frozen=True)
class Pin:
    """What to install for one backend (or runtime) on one platform."""

    version: str
    artifacts: tuple[Artifact, ...]


class ReplacedPin(BaseModel):
    """The pin an accepted refresh replaced (``lemon lock refresh``): its version, URL (as
    installed, ``{version}`` filled in) and hash."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    version: str
    url: str
    sha256: str | None = None


class LockedArtifact(BaseModel):
    """One pinned download: ``url`` may contain ``{version}``; ``sha256`` may be null (see
    above). ``replaces``: set on a refreshed pin only, what it replaced."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    url: str
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    extract: bool = True
    provenance: str = ""
    replaces: ReplacedPin | None = None


class LockEntry(BaseModel):
    """A backend's (or runtime's) version and its artifacts per platform."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    version: str
    platforms: dict[str, tuple[LockedArtifact, ...]]

    def pin(self, platform_key: str) -> Pin | None:
        if platform_key not in self.platforms:
            return None
        return Pin(
            self.version,
            tuple(
                Artifact(a.url.format(version=self.version), a.sha256, a.extract, a.provenance)
                for a in self.platforms[platform_key]
            ),
        )


class LockData(BaseModel):
    """A lock file, or a plugin's ``register_lock`` answer. Keys starting with ``_`` (a
    ``_comment``, at any level) are ignored; any other unknown key is refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    backends: dict[str, dict[str, LockEntry]] = Field(default_factory=dict)
    runtimes: dict[str, LockEntry] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _drop_comments(cls, data: Any) -> Any:
        return _without_comments(data)


@dataclass
class Lock:
    backends: dict[str, dict[str, LockEntry]] = field(default_factory=dict)
    runtimes: dict[str, LockEntry] = field(default_factory=dict)

    def merge(self, data: Mapping[str, Any], source: str) -> None:
        """Add ``data`` (checked), replacing earlier entries per backend and runtime."""
        try:
            checked = LockData.model_validate(data)
        except ValidationError as exc:
            why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise LockError(f"lock data from {source} is malformed: {why}") from None
        for recipe, backends in checked.backends.items():
            self.backends.setdefault(recipe, {}).update(backends)
        self.runtimes.update(checked.runtimes)

    def adopt(self, trusted: Iterable[Trusted]) -> None:
        """Fill each hash-less artifact whose URL and version were trusted on first use."""
        by_url = {(t.url, t.version): t for t in trusted}

        def filled(entry: LockEntry) -> LockEntry:
            def one(a: LockedArtifact) -> LockedArtifact:
                t = by_url.get((a.url.format(version=entry.version), entry.version))
                return (
                    a
                    if a.sha256 or t is None
                    else a.model_copy(update={"sha256": t.sha256, "provenance": t.provenance})
                )

            return entry.model_copy(
                update={
                    "platforms": {
                        key: tuple(one(a) for a in arts) for key, arts in entry.platforms.items()
                    }
                }
            )

        self.backends = {
            r: {b: filled(e) for b, e in bs.items()} for r, bs in self.backends.items()
        }
        self.runtimes = {n: filled(e) for n, e in self.runtimes.items()}

    def backend_entry(self, recipe: str, backend: str) -> LockEntry | None:
        return self.backends.get(recipe, {}).get(backend)

    def backend_pin(self, recipe: str, backend: str, platform_key: str) -> Pin | None:
        entry = self.backend_entry(recipe, backend)
        return None if entry is None else entry.pin(platform_key)

    def runtime_pin(self, name: str, platform_key: str) -> Pin | None:
        entry = self.runtimes.get(name)
        return None if entry is None else entry.pin(platform_key)

    def artifacts(self) -> Iterable[tuple[str, str, str, Artifact]]:
        """Every pinned artifact as (kind/name, version, platform, artifact)."""
        entries = [(f"{r}:{b}", e) for r, bs in self.backends.items() for b, e in bs.items()]
        entries += [(f"runtime:{n}", e) for n, e in self.runtimes.items()]
        for name, entry in entries:
            for key in entry.platforms:
                pin = entry.pin(key)
                assert pin is not None
                for artifact in pin.artifacts:
                    yield name, pin.version, key, artifact


def _without_comments(data: Any) -> Any:
    if isinstance(data, Mapping):
        return {k: _without_comments(v) for k, v in data.items() if not str(k).startswith("_")}
    if isinstance(data, list):
        return [_without_comments(v) for v in data]
    return data


def platform_key(os_name: str) -> str:
    """The key a lock file's ``platforms`` use for this machine: ``os_name`` and the CPU
    architecture, ``linux-x86_64``, ``darwin-arm64``, ``windows-x86_64``."""
    machine = platform.machine().lower()
    return f"{os_name}-{ {'amd64': 'x86_64', 'aarch64': 'arm64'}.get(machine, machine) }"


def load_lock(
    plugin_locks: Iterable[tuple[str, Mapping[str, Any]]], admin_files: Iterable[Path]
) -> Lock:
    from importlib.resources import files  # here: plugins import this module

    lock = Lock()
    core = json.loads(files("lemoncore").joinpath("data/lock.json").read_text())
    lock.merge(core, "lemoncore")
    for name, data in plugin_locks:
        lock.merge(data, f"plugin {name!r}")
    for path in admin_files:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise LockError(f"lock file {path}: {exc}") from exc
        lock.merge(data, str(path))
    return lock
