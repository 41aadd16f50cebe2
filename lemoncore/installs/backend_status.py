"""A backend's state on this machine, as data: what ``lemon backends`` shows and what the
planner chooses from (:func:`choose`, pure).

States: ``unsupported`` (no support row matches this machine), ``action_required`` (the
user must do something: the message and ``action`` say what), ``installable``,
``update_required`` (installed, but not what the lock pins now) and ``installed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypedDict

from lemoncore.errors import LemonError
from lemoncore.launch import InstallPlan
from lemoncore.recipes import Backend, Recipe


class BackendState(StrEnum):
    INSTALLED = "installed"
    INSTALLABLE = "installable"
    UPDATE_REQUIRED = "update_required"
    UNSUPPORTED = "unsupported"
    ACTION_REQUIRED = "action_required"


class BackendError(LemonError):
    """A backend cannot be selected or made ready."""

    status, type = 400, "backend_error"


class SupportJSON(TypedDict):
    os: list[str]
    devices: dict[str, list[str]]  # device kind -> required features


class BackendJSON(TypedDict):
    """A status as ``lemon backends`` and ``/api/v1/system-info`` show it."""

    state: str
    message: str
    action: str
    version: str
    tier: str
    format: str
    description: str
    devices: list[str]
    support: list[SupportJSON]


@dataclass(frozen=True)
class BackendStatus:
    recipe: str
    backend: Backend
    state: BackendState
    message: str = ""
    action: str = ""
    version: str = ""
    install_dir: Path | None = None
    install_plan: InstallPlan | None = None

    @property
    def name(self) -> str:
        return f"{self.recipe}:{self.backend.name}"

    def as_dict(self) -> BackendJSON:
        b = self.backend
        return {
            "state": self.state.value,
            "message": self.message,
            "action": self.action,
            "version": self.version,
            "tier": b.tier.value,
            "format": b.format.value,
            "description": b.description,
            "devices": sorted({k.value for row in b.support for k in row.devices}),
            "support": [
                {"os": sorted(r.os), "devices": {k.value: sorted(f) for k, f in r.devices.items()}}
                for r in b.support
            ],
        }


def choose(
    recipe: Recipe, statuses: Sequence[BackendStatus], requested: str | None
) -> BackendStatus:
    """The requested backend, else the first installed, installable, or supported one."""
    if requested:
        found = next((s for s in statuses if s.backend.name == requested), None)
        if found is None:
            raise BackendError(
                f"recipe {recipe.name!r} has no backend {requested!r}; "
                f"choose one of {[b.name for b in recipe.backends]}"
            )
        return found
    usable = [s for s in statuses if s.state is not BackendState.UNSUPPORTED]
    if not usable:
        raise BackendError(
            f"no backend of {recipe.name!r} runs on this machine: "
            + "; ".join(f"{s.backend.name}: {s.message}" for s in statuses)
        )
    rank = [BackendState.INSTALLED, BackendState.INSTALLABLE, BackendState.UPDATE_REQUIRED]
    return min(usable, key=lambda s: rank.index(s.state) if s.state in rank else len(rank))


def trust_fix(name: str) -> str:
    return (
        f"lemon backends install {name} --trust-download (downloads it once, shows its "
        "SHA-256 and pins it), or pin its SHA-256 in a lock file (setting lock_files)"
    )


def check_online(offline: bool, name: str, action: str) -> None:
    """Refuse a download while lemoncore is offline, naming the command to run later."""
    if offline:
        raise BackendError(
            f"{name} is not installed and lemoncore is offline (setting "
            f"offline): install it with network access first: {action}",
            status=503,
        )


def unusable(status: BackendStatus) -> str:
    """Why ``status``'s backend can neither run nor be installed without the user (its
    state, message and fix); ``""`` when it is installed or lemoncore may install it."""
    if status.state in {
        BackendState.INSTALLED,
        BackendState.INSTALLABLE,
        BackendState.UPDATE_REQUIRED,
    }:
        return ""
    fix = f" Fix: {status.action}" if status.action else ""
    return f"backend {status.name} is {status.state.value}: {status.message}.{fix}"
