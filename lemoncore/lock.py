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

import copy
import json
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class Lock:
    backends: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    runtimes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def merge(self, data: Mapping[str, Any], source: str) -> None:
        try:
            for recipe, backends in data.get("backends", {}).items():
                for backend, entry in backends.items():
                    _check_entry(entry)
                    self.backends.setdefault(recipe, {})[backend] = copy.deepcopy(entry)
            for name, entry in data.get("runtimes", {}).items():
                _check_entry(entry)
                self.runtimes[name] = copy.deepcopy(entry)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise LockError(f"lock data from {source} is malformed: {exc}") from exc

    def adopt(self, trusted: Iterable[Trusted]) -> None:
        """Fill each hash-less artifact whose URL and version were trusted on first use."""
        by_url = {(t.url, t.version): t for t in trusted}
        entries = [e for bs in self.backends.values() for e in bs.values()]
        for entry in [*entries, *self.runtimes.values()]:
            for artifacts in entry["platforms"].values():
                for i, a in enumerate(artifacts):
                    url = a["url"].format(version=entry["version"])
                    if not a.get("sha256") and (t := by_url.get((url, entry["version"]))):
                        artifacts[i] = {**a, "sha256": t.sha256, "provenance": t.provenance}

    def backend_pin(self, recipe: str, backend: str, platform_key: str) -> Pin | None:
        return _pin(self.backends.get(recipe, {}).get(backend), platform_key)

    def runtime_pin(self, name: str, platform_key: str) -> Pin | None:
        return _pin(self.runtimes.get(name), platform_key)

    def artifacts(self) -> Iterable[tuple[str, str, str, Artifact]]:
        """Every pinned artifact as (kind/name, version, platform, artifact)."""
        entries = [(f"{r}:{b}", e) for r, bs in self.backends.items() for b, e in bs.items()]
        entries += [(f"runtime:{n}", e) for n, e in self.runtimes.items()]
        for name, entry in entries:
            for key in entry["platforms"]:
                pin = _pin(entry, key)
                assert pin is not None
                for artifact in pin.artifacts:
                    yield name, pin.version, key, artifact


def _check_entry(entry: Mapping[str, Any]) -> None:
    if not isinstance(entry["version"], str):
        raise ValueError("'version' must be a string")
    for key, artifacts in entry["platforms"].items():
        for a in artifacts:
            if not isinstance(a["url"], str):
                raise ValueError(f"{key}: artifact 'url' must be a string")
            sha = a.get("sha256")
            if sha is not None and (len(sha) != 64 or set(sha) - set("0123456789abcdef")):
                raise ValueError(f"{key}: sha256 {sha!r} is not 64 lowercase hex digits")


def _pin(entry: Mapping[str, Any] | None, platform_key: str) -> Pin | None:
    if entry is None or platform_key not in entry["platforms"]:
        return None
    version = entry["version"]
    return Pin(version, tuple(
        Artifact(a["url"].format(version=version), a.get("sha256"), a.get("extract", True),
                 a.get("provenance", ""))
        for a in entry["platforms"][platform_key]))


def platform_key(os_name: str) -> str:
    machine = platform.machine().lower()
    return f"{os_name}-{ {'amd64': 'x86_64', 'aarch64': 'arm64'}.get(machine, machine)}"


def load_lock(plugin_locks: Iterable[tuple[str, Mapping[str, Any]]],
              admin_files: Iterable[Path]) -> Lock:
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
