"""Backend state (installed, installable, ...), backend selection and installation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from lemoncore.hosts import HostInfo
from lemoncore.install import install_plan, installed_version
from lemoncore.launch import InstallPlan
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, Recipe


class BackendState(StrEnum):
    INSTALLED = "installed"
    INSTALLABLE = "installable"
    UPDATE_REQUIRED = "update_required"
    UNSUPPORTED = "unsupported"
    ACTION_REQUIRED = "action_required"


class BackendError(Exception):
    """A backend cannot be selected or made ready; ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class BackendStatus:
    recipe: str
    backend: Backend
    state: BackendState
    message: str = ""
    action: str = ""
    version: str = ""
    install_dir: Path | None = None
    plan: InstallPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        b = self.backend
        return {"state": self.state.value, "message": self.message, "action": self.action,
                "version": self.version, "tier": b.tier.value, "format": b.format.value,
                "description": b.description,
                "devices": sorted({k.value for row in b.support for k in row.devices}),
                "support": [{"os": sorted(r.os),
                             "devices": {k.value: sorted(f) for k, f in r.devices.items()}}
                            for r in b.support]}


class Backends:
    """Answers "is this backend usable here, and where is it?" and installs it."""

    def __init__(self, plugins: PluginHost, host: HostInfo, cache_dir: Path,
                 config: dict[str, dict[str, Any]], offline: bool) -> None:
        self.plugins, self.host, self.config, self.offline = plugins, host, config, offline
        self.bin_dir, self.downloads = cache_dir / "bin", cache_dir / "downloads"

    def status(self, recipe: Recipe, backend: Backend) -> BackendStatus:
        if not any(self.host.supports(row) for row in backend.support):
            needs = "; ".join(f"{'/'.join(sorted(r.os))} with "
                              f"{' or '.join(sorted(k.value for k in r.devices))}"
                              for r in backend.support)
            return BackendStatus(recipe.name, backend, BackendState.UNSUPPORTED,
                                 f"not supported on this machine; needs {needs}")
        plan = self.plugins.install_plan(recipe, backend, self.host,
                                         self.config.get(recipe.name, {}))
        if plan is None:
            return BackendStatus(recipe.name, backend, BackendState.ACTION_REQUIRED,
                                 "no installed plugin knows how to provide this backend")
        status = BackendStatus(recipe.name, backend, BackendState.INSTALLED, plan.message,
                               plan.action or "", plan.version, plan.location, plan)
        if plan.location is not None:
            return status
        if any(not a.sha256 for a in plan.artifacts):
            return replace(status, state=BackendState.ACTION_REQUIRED,
                           message="no pinned SHA-256 for its download; lemoncore refuses "
                                   "unverified installs")
        if plan.action or not plan.artifacts:
            return replace(status, state=BackendState.ACTION_REQUIRED)
        target = self.bin_dir / recipe.name / backend.name
        found = installed_version(target)
        if found == plan.version:
            return replace(status, install_dir=target)
        if found is None:
            return replace(status, state=BackendState.INSTALLABLE,
                            action=f"lemon backends install {recipe.name}:{backend.name}")
        return replace(status, state=BackendState.UPDATE_REQUIRED,
                        message=f"installed {found}, pinned {plan.version}",
                        action=f"lemon backends install {recipe.name}:{backend.name}")

    def statuses(self, recipe: Recipe) -> list[BackendStatus]:
        return [self.status(recipe, b) for b in recipe.backends]

    def select(self, recipe: Recipe, requested: str | None) -> BackendStatus:
        """The requested backend, else the first installed, installable, or supported one."""
        if requested:
            backend = recipe.backend(requested)
            if backend is None:
                raise BackendError(f"recipe {recipe.name!r} has no backend {requested!r}; "
                                   f"choose one of {[b.name for b in recipe.backends]}")
            return self.status(recipe, backend)
        statuses = self.statuses(recipe)
        usable = [s for s in statuses if s.state is not BackendState.UNSUPPORTED]
        if not usable:
            raise BackendError(f"no backend of {recipe.name!r} runs on this machine: "
                               + "; ".join(f"{s.backend.name}: {s.message}" for s in statuses))
        rank = [BackendState.INSTALLED, BackendState.INSTALLABLE, BackendState.UPDATE_REQUIRED]
        return min(usable, key=lambda s: rank.index(s.state) if s.state in rank else len(rank))

    async def ensure_installed(self, status: BackendStatus,
                               on_progress: Callable[[int, int], None] | None = None
                               ) -> BackendStatus:
        """Install the backend when that is possible without a user's action."""
        name = f"{status.recipe}:{status.backend.name}"
        if status.state is BackendState.INSTALLED:
            return status
        if status.state not in {BackendState.INSTALLABLE, BackendState.UPDATE_REQUIRED}:
            fix = f" Fix: {status.action}" if status.action else ""
            raise BackendError(f"backend {name} is {status.state.value}: {status.message}"
                               f"{fix}", status=503)
        if self.offline:
            raise BackendError(f"backend {name} is not installed and lemoncore is offline; "
                               f"install it with network access: {status.action}", status=503)
        assert status.plan is not None
        target = self.bin_dir / status.recipe / status.backend.name
        await install_plan(status.plan, target, self.downloads, on_progress)
        return replace(status, state=BackendState.INSTALLED, install_dir=target)
