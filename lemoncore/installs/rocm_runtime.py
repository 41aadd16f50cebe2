"""The ROCm runtime a ROCm backend runs on: TheRock (pinned, installed by lemoncore) or a
compatible system ROCm, chosen once at install (:func:`lemoncore.installs.rocm.resolve_rocm`) and
recorded; a launch reads only the record."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lemoncore.hosts import HostInfo
from lemoncore.installs.backend_status import BackendError, BackendState, check_online, trust_fix
from lemoncore.installs.install import InstallError, install_plan
from lemoncore.installs.record import read_record
from lemoncore.installs.rocm import (
    RocmUnavailable,
    RuntimeDecision,
    has_hip_runtime,
    probe_system_rocm,
    resolve_rocm,
)
from lemoncore.launch import InstallPlan, ProgressCallback
from lemoncore.lock import Lock

THEROCK = "runtime:therock"


class RocmRuntime:
    def __init__(
        self,
        lock: Lock,
        platform: str,
        host: HostInfo,
        target: Path,
        downloads: Path,
        record: Path,
        allow_unverified: bool,
        offline: bool,
        on_change: Callable[[], None],
    ) -> None:
        self.lock, self.platform, self.host = lock, platform, host
        self.target, self.downloads, self.record = target, downloads, record
        self.allow_unverified, self.offline, self.on_change = allow_unverified, offline, on_change

    def decision(self) -> RuntimeDecision | None:
        """The recorded decision; launch uses only this."""
        return RuntimeDecision.load(self.record)

    def status(self) -> tuple[BackendState, InstallPlan | None]:
        """TheRock's state here and its install plan (``None`` when nothing is pinned)."""
        pin = self.lock.runtime_pin("therock", self.platform)
        if pin is None:
            return BackendState.UNSUPPORTED, None
        plan = InstallPlan(pin.version, pin.artifacts)
        if any(not a.sha256 for a in pin.artifacts) and not self.allow_unverified:
            return BackendState.ACTION_REQUIRED, plan
        record = read_record(self.target)
        if record is not None and record.installs(plan) and has_hip_runtime(self.target):
            return BackendState.INSTALLED, plan
        return BackendState.INSTALLABLE, plan

    def system_rocm_found(self) -> bool:
        return bool(probe_system_rocm(self.host.os, os.environ))

    async def decide(self, on_progress: ProgressCallback | None = None) -> RuntimeDecision:
        """Choose TheRock or a compatible system ROCm once, install TheRock if that is the
        only way, and record the choice."""
        state, plan = self.status()
        pinned = plan.version if plan else ""
        therock = self.target if state is BackendState.INSTALLED else None
        system = probe_system_rocm(self.host.os, os.environ)
        try:
            decision = resolve_rocm(pinned, therock, system)
        except RocmUnavailable as exc:
            if state is not BackendState.INSTALLABLE or plan is None:
                raise BackendError(str(exc), status=503) from exc
            await self._install(plan, on_progress)
            decision = resolve_rocm(pinned, self.target, system)
        decision.save(self.record)
        self.on_change()
        return decision

    async def install(self, on_progress: ProgressCallback | None = None) -> RuntimeDecision:
        """Install TheRock (``lemon backends install runtime:therock``), then decide."""
        state, plan = self.status()
        if plan is None or state is BackendState.ACTION_REQUIRED:
            raise InstallError(
                f"TheRock is not installable here ({state.value}): its pin has "
                f"no SHA-256. Fix: {trust_fix(THEROCK)}"
            )
        if state is not BackendState.INSTALLED:
            await self._install(plan, on_progress)
        return await self.decide(on_progress)

    def forget_therock(self) -> None:
        """TheRock was uninstalled: a decision for it no longer holds."""
        if (decision := self.decision()) and decision.source == "therock":
            self.record.unlink(missing_ok=True)
            self.on_change()

    async def _install(self, plan: InstallPlan, on_progress: ProgressCallback | None) -> None:
        check_online(self.offline, THEROCK, f"lemon backends install {THEROCK}")
        await install_plan(
            plan, self.target, self.downloads, on_progress, allow_unverified=self.allow_unverified
        )
