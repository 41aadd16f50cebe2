"""Backends on this machine, behind one object: their statuses (computed by
:mod:`lemoncore.installs.assess`, cached here for planning), install and uninstall, consent
for experimental ones, trust on first use and pin refresh
(:mod:`lemoncore.installs.refresh`); the ROCm runtime lives in
:mod:`lemoncore.installs.rocm_runtime`.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from lemoncore import trust
from lemoncore.errors import LemonError
from lemoncore.hosts import HostInfo
from lemoncore.installs.assess import assess
from lemoncore.installs.backend_status import BackendError as BackendError
from lemoncore.installs.backend_status import BackendState as BackendState
from lemoncore.installs.backend_status import BackendStatus as BackendStatus
from lemoncore.installs.backend_status import check_online, unusable
from lemoncore.installs.backend_status import choose as choose
from lemoncore.installs.install import download, install_plan, partial_path, uninstall
from lemoncore.installs.record import InstallRecord, read_record, write_record
from lemoncore.installs.refresh import Refresh, ask
from lemoncore.installs.rocm_runtime import THEROCK as THEROCK
from lemoncore.installs.rocm_runtime import RocmRuntime
from lemoncore.jsonfile import read_json, write_json
from lemoncore.launch import ProgressCallback
from lemoncore.lock import Lock, platform_key
from lemoncore.options import SELECTOR, Layer, check, declared, resolve, selector
from lemoncore.plugins import PluginHost
from lemoncore.recipes import Backend, ModelInfo, Recipe, Tier
from lemoncore.settings import Settings

# Backend statuses are recomputed at most this often for planning (sooner after changes).
STATUS_TTL_S = 30.0


class Backends:
    """Answers "is this backend usable here, and where is it?"; installs and removes it."""

    def __init__(self, plugins: PluginHost, host: HostInfo, settings: Settings, lock: Lock) -> None:
        self.plugins, self.host, self.lock = plugins, host, lock
        self.sections, self.offline = settings.recipes, settings.offline
        self._configs: dict[str, dict[str, Any]] = {}
        self.allow_unverified = set(settings.unverified_allowed)
        self.allow_experimental = set(Settings._names(settings.allow_experimental))
        self.consent_file = settings.cache_dir / "consent.json"
        self.bin_dir = settings.cache_dir / "bin"
        self.downloads = settings.cache_dir / "downloads"
        self.trust_file = settings.cache_dir / trust.TRUST_FILE
        self.platform = platform_key(host.os)
        self.rocm = RocmRuntime(
            lock,
            self.platform,
            host,
            self.target(THEROCK),
            self.downloads,
            settings.cache_dir / "runtime" / "rocm.json",
            THEROCK in self.allow_unverified,
            self.offline,
            self.invalidate,
        )
        # Names this installation in ownership labels (containers it may sweep).
        self.instance = hashlib.sha256(str(settings.cache_dir.resolve()).encode()).hexdigest()[:12]
        self._declared: dict[str, ModelInfo] | None = None
        self._statuses: dict[tuple[str, str], BackendStatus] = {}
        self._statuses_at = -math.inf
        self._generation = 0
        self._refreshing = anyio.Lock()

    def declared_models(self) -> dict[str, ModelInfo]:
        """Models that installed artifacts declare (an image's label, read by its plugin
        at install), by name; read from the install records once per install change.
        Only backends still registered count; a record or a model that no longer parses
        is skipped."""
        if self._declared is None:
            found: dict[str, ModelInfo] = {}
            for recipe in self.plugins.registry.recipes.values():
                for backend in recipe.backends:
                    record = read_record(self.target(f"{recipe.name}:{backend.name}"))
                    for model in record.models if record else ():
                        found.setdefault(model.name, model)
            self._declared = found
        return self._declared

    def lookup(self, name: str) -> tuple[Recipe, Backend]:
        """``recipe:backend`` to its recipe and backend, or a 404 naming the choices."""
        recipe_name, _, backend_name = name.partition(":")
        recipe = self.plugins.registry.recipes.get(recipe_name)
        backend = recipe.backend(backend_name) if recipe else None
        if recipe is None or backend is None:
            known = [
                f"{r.name}:{b.name}"
                for r in self.plugins.registry.recipes.values()
                for b in r.backends
            ]
            raise BackendError(f"unknown backend {name!r}; known: {', '.join(known)}", 404)
        return recipe, backend

    def configuration(self, recipe: Recipe) -> dict[str, Any]:
        """The recipe's configuration section, checked against every option the recipe
        and its backends declare; an unknown or bad value is an :class:`OptionError`."""
        if recipe.name not in self._configs:
            section = f"recipes.{recipe.name}"
            layer = Layer(f"in {section} of the configuration", self.sections.get(recipe.name, {}))
            checked = check(declared(recipe), layer, admin=True, section=section)
            if (backend := selector([layer])) is not None:
                checked[SELECTOR] = backend
            self._configs[recipe.name] = checked
        return self._configs[recipe.name]

    def reconfigure(self, recipe: str, section: dict[str, object]) -> None:
        """Replace recipe ``recipe``'s configuration section; the next plan checks it."""
        self.sections[recipe] = section
        self._configs.pop(recipe, None)

    def install_config(self, recipe: Recipe, backend: Backend) -> dict[str, Any]:
        """What the ``install`` hook sees: the backend's declared defaults and configured
        values, both scopes."""
        options, admin = resolve(
            declared(recipe, backend), self.configuration(recipe), (), f"recipes.{recipe.name}"
        )
        return {**options, **admin}

    def target(self, name: str) -> Path:
        recipe, _, backend = name.partition(":")
        return self.bin_dir / recipe / backend

    # State ------------------------------------------------------------------------------

    def status(self, recipe: Recipe, backend: Backend) -> BackendStatus:
        """``recipe:backend``'s state now (:func:`~lemoncore.installs.assess.assess`)."""
        return assess(self, recipe, backend)

    def statuses(self, recipe: Recipe) -> list[BackendStatus]:
        """Every backend's status; a plugin failing for one backend makes that backend
        ``action_required`` with the error, never the others unusable."""
        found = []
        for backend in recipe.backends:
            try:
                found.append(self.status(recipe, backend))
            except LemonError as exc:
                found.append(
                    BackendStatus(
                        recipe.name,
                        backend,
                        BackendState.ACTION_REQUIRED,
                        str(exc),
                        "see the server log; report it to the backend's plugin",
                    )
                )
        return found

    # The cache: what planning reads ------------------------------------------------------

    def cached_statuses(self, recipe: Recipe) -> list[BackendStatus]:
        """The recipe's statuses as last computed (:meth:`refresh_statuses`); no I/O."""
        return [
            self._statuses[recipe.name, b.name]
            for b in recipe.backends
            if (recipe.name, b.name) in self._statuses
        ]

    def invalidate(self) -> None:
        """Something a status depends on changed (an install, consent, the runtime)."""
        self._generation += 1
        self._statuses_at = -math.inf

    async def refresh_statuses(self) -> None:
        """Recompute every backend's status in a worker thread when the cache is older
        than ``STATUS_TTL_S`` (container engines change outside lemoncore) or was
        invalidated. Status checks read files and may run a plugin's quick probes."""
        async with self._refreshing:
            if time.monotonic() - self._statuses_at < STATUS_TTL_S:
                return
            started, generation = time.monotonic(), self._generation
            found = await anyio.to_thread.run_sync(
                lambda: {
                    (r.name, s.backend.name): s
                    for r in self.plugins.registry.recipes.values()
                    for s in self.statuses(r)
                }
            )
            self._statuses, self._declared = found, None  # another process may install
            if generation == self._generation:  # not invalidated meanwhile
                self._statuses_at = started

    # Install / uninstall -----------------------------------------------------------------

    def needs_consent(self, status: BackendStatus) -> bool:
        """An experimental backend's first install needs the user's explicit consent."""
        if status.backend.tier is not Tier.EXPERIMENTAL or status.state is BackendState.INSTALLED:
            return False
        consented = set(read_json(self.consent_file, []))
        return not ({"all", status.name} & (self.allow_experimental | consented))

    def _record_consent(self, name: str) -> None:
        consented = set(read_json(self.consent_file, []))
        write_json(self.consent_file, sorted(consented | {name}))
        self.invalidate()

    async def ensure_installed(
        self,
        status: BackendStatus,
        on_progress: ProgressCallback | None = None,
        consent: bool = False,
    ) -> BackendStatus:
        """Install the backend (and decide its runtime) when no user action is needed.

        An experimental backend's first install needs ``consent`` (or the setting
        ``allow_experimental``); the consent is remembered.
        """
        if status.state is BackendState.INSTALLED:
            return status
        if why := unusable(status):
            raise BackendError(why, status=503)
        if self.needs_consent(status):
            if not consent:
                raise BackendError(
                    f"{status.name} is an experimental backend: community-developed, use at "
                    "your own risk. Consent before its first install: 'lemon backends "
                    f'install {status.name}\' (asks), POST /api/v1/install with "consent": '
                    f"true, or the setting LEMON_ALLOW_EXPERIMENTAL={status.name}",
                    status=403,
                    code="consent_required",
                )
            self._record_consent(status.name)
        assert status.install_plan is not None
        install_dir = status.install_dir
        if status.install_plan.location is None and install_dir is None:
            check_online(self.offline, status.name, status.action)
            install_dir = self.target(status.name)
            if status.install_plan.installer is not None:
                got = await status.install_plan.installer.install(on_progress)
                write_record(install_dir, InstallRecord.of(status.install_plan, got))
                self._declared = None
            else:
                await install_plan(
                    status.install_plan,
                    install_dir,
                    self.downloads,
                    on_progress,
                    allow_unverified=status.name in self.allow_unverified,
                )
        if status.install_plan.runtime == "rocm":
            await self.rocm.decide(on_progress)
        self.invalidate()
        return replace(
            status,
            state=BackendState.INSTALLED,
            install_dir=install_dir or status.install_plan.location,
        )

    async def trust_download(
        self, name: str, on_progress: ProgressCallback | None = None
    ) -> list[trust.Trusted]:
        """Trust on first use (see :mod:`lemoncore.trust`): download the artifacts of
        ``name``'s pin that have no SHA-256, record their hashes, adopt them into the lock
        and return them. The file stays where the verified install resumes from."""
        if name == THEROCK:
            pin = self.lock.runtime_pin("therock", self.platform)
        else:
            recipe, backend = self.lookup(name)
            status = await anyio.to_thread.run_sync(self.status, recipe, backend)
            if status.state is BackendState.UNSUPPORTED:  # do not fetch what cannot run
                raise BackendError(f"{name} is unsupported: {status.message}")
            pin = self.lock.backend_pin(recipe.name, backend.name, self.platform)
        if pin is None:
            raise BackendError(f"nothing is pinned for {name} on {self.platform}", 404)
        unhashed = [a for a in pin.artifacts if not a.sha256]
        if not unhashed:
            raise BackendError(
                f"{name} is already pinned with a SHA-256; nothing to trust", code="already_pinned"
            )
        check_online(self.offline, name, f"lemon backends install {name} --trust-download")
        await anyio.Path(self.downloads).mkdir(parents=True, exist_ok=True)
        trusted = []
        for artifact in unhashed:
            file = await download(artifact, self.downloads, on_progress)
            measured = await anyio.to_thread.run_sync(
                trust.measure, file, name, pin.version, artifact.url
            )
            file.replace(partial_path(replace(artifact, sha256=measured.sha256), self.downloads))
            trusted.append(measured)
        trust.save(self.trust_file, trusted)
        self.lock.adopt(trusted)
        self.invalidate()
        return trusted

    async def refresh(self, names: Sequence[str]) -> list[Refresh]:
        """What each named backend's pin points at now (:func:`lemoncore.installs.refresh.ask`)."""
        return await ask(self, names)

    async def uninstall(self, name: str) -> bool:
        """Remove lemoncore's install of ``recipe:backend`` (or ``runtime:therock``)."""
        if name != THEROCK:
            status = await anyio.to_thread.run_sync(self.status, *self.lookup(name))
            if status.install_plan is not None and status.install_plan.installer is not None:
                await status.install_plan.installer.uninstall()
        removed = await anyio.to_thread.run_sync(uninstall, self.target(name))
        self._declared = None
        self.invalidate()
        if name == THEROCK:
            self.rocm.forget_therock()
        return removed
