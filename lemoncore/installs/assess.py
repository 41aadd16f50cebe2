"""One backend's state on this machine, computed: its support rows against the host, its
plugin's install plan (for the configured options and the lock's pin), the install record
of an artifact install, and the ROCm runtime a ROCm backend needs. Reads files and may run
a plugin's quick probes; :class:`~lemoncore.installs.backends.Backends` caches the answers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lemoncore.installs.backend_status import BackendState, BackendStatus, trust_fix
from lemoncore.installs.install import restore_interrupted
from lemoncore.installs.record import read_record
from lemoncore.installs.rocm_runtime import THEROCK
from lemoncore.launch import InstallPlan
from lemoncore.options import OptionError
from lemoncore.recipes import Backend, Recipe

if TYPE_CHECKING:
    from lemoncore.installs.backends import Backends


def assess(backends: Backends, recipe: Recipe, backend: Backend) -> BackendStatus:
    """``recipe:backend``'s state here, with the message and the action that fixes it."""
    if not any(backends.host.supports(row) for row in backend.support):
        needs = "; ".join(
            f"{'/'.join(sorted(r.os))} with "
            + " or ".join(
                sorted(
                    f"{k.value}{'(' + ','.join(sorted(f)) + ')' if f else ''}"
                    for k, f in r.devices.items()
                )
            )
            for r in backend.support
        )
        return BackendStatus(
            recipe.name,
            backend,
            BackendState.UNSUPPORTED,
            f"not supported on this machine; needs {needs}",
        )
    pin = backends.lock.backend_pin(recipe.name, backend.name, backends.platform)
    try:
        config = backends.install_config(recipe, backend)
    except OptionError as exc:
        return BackendStatus(
            recipe.name,
            backend,
            BackendState.ACTION_REQUIRED,
            str(exc),
            f"fix recipes.{recipe.name} in the configuration file",
        )
    plan = backends.plugins.install_plan(recipe, backend, backends.host, config, pin)
    if plan is None:
        return BackendStatus(
            recipe.name,
            backend,
            BackendState.ACTION_REQUIRED,
            "no installed plugin knows how to provide this backend",
        )
    if plan.unsupported:
        return BackendStatus(recipe.name, backend, BackendState.UNSUPPORTED, plan.message)
    status = BackendStatus(
        recipe.name,
        backend,
        BackendState.INSTALLED,
        plan.message,
        plan.action or "",
        plan.version,
        plan.location,
        plan,
    )
    if plan.location is None:
        if plan.action or not plan.artifacts:
            return replace(status, state=BackendState.ACTION_REQUIRED)
        status = _artifact_status(backends, status, plan)
    rocm = backends.rocm
    if (
        plan.runtime != "rocm"
        or rocm.decision() is not None
        or status.state not in {BackendState.INSTALLED, BackendState.INSTALLABLE}
    ):
        return status
    if rocm.status()[0] is BackendState.ACTION_REQUIRED and not rocm.system_rocm_found():
        return replace(
            status,
            state=BackendState.ACTION_REQUIRED,
            message="it needs the TheRock ROCm runtime, whose publisher "
            "gives no SHA-256, and no system ROCm was found",
            action=f"{trust_fix(THEROCK)}; then lemon backends install {status.name}",
        )
    if status.state is BackendState.INSTALLED:
        return replace(
            status,
            state=BackendState.INSTALLABLE,
            message="its ROCm runtime has not been chosen yet",
            action=f"lemon backends install {status.name}",
        )
    return status


def _artifact_status(backends: Backends, status: BackendStatus, plan: InstallPlan) -> BackendStatus:
    install = f"lemon backends install {status.name}"
    if any(not a.sha256 for a in plan.artifacts) and status.name not in backends.allow_unverified:
        return replace(
            status,
            state=BackendState.ACTION_REQUIRED,
            message="its publisher gives no SHA-256 for the download, and "
            "lemoncore does not install unverified files",
            action=trust_fix(status.name),
        )
    target = backends.target(status.name)
    restore_interrupted(target)
    found = read_record(target)
    if found is not None and found.installs(plan):
        return replace(status, install_dir=target)
    if found is None:
        return replace(status, state=BackendState.INSTALLABLE, action=install)
    return replace(
        status,
        state=BackendState.UPDATE_REQUIRED,
        action=install,
        message=f"installed {found.version}, pinned {plan.version}",
    )
