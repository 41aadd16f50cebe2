"""What plugins hand the core to install and start a backend: plain data only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class LaunchRefused(Exception):
    """A plugin refuses to start a server; the message says what was wrong and the fix."""


class RequestRefused(Exception):
    """A plugin refuses a request its backend cannot serve (answered with a 400)."""


@dataclass(frozen=True)
class Artifact:
    """A pinned downloadable file; the core verifies ``sha256`` before using it.

    ``sha256`` is ``None`` only for a pin whose hash is not known yet: such a file is
    refused unless the user allows unverified installs for that backend.
    """

    url: str
    sha256: str | None
    extract: bool = True
    provenance: str = ""


@dataclass(frozen=True)
class InstallPlan:
    """Where a backend's executable comes from.

    Exactly one of: ``artifacts`` the core downloads, verifies and installs into
    ``<cache>/bin/<recipe>/<backend>/``; ``location``, an existing directory (a binary on
    ``PATH``, a wheel's data); or ``action``, the command a user must run to provide it.
    """

    version: str
    artifacts: tuple[Artifact, ...] = ()
    location: Path | None = None
    action: str | None = None
    message: str = ""
    runtime: str | None = None  # e.g. "rocm": the core decides and records the runtime


@dataclass(frozen=True)
class LaunchContext:
    """Everything a plugin needs to build a launch spec."""

    model_path: Path
    options: Mapping[str, Any]
    install_dir: Path
    host: str
    port: int
    server_pid: int
    runtime_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchSpec:
    """A native process to start. ``env`` is added to lemoncore's own environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    cwd: Path | None = None
