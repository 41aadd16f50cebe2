"""What the report says of the software under test: the versions of lemoncore, the
server and the plugins, the backend (owner, tier, state, lock pin) and its install
record, and what the plugins loaded in this process say of it (:class:`PluginSide`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lemoncore import __version__
from lemoncore.api.system_info import BackendInfo, SystemInfo
from lemoncore.fieldchecks import FieldCheck
from lemoncore.installs.record import read_record
from lemoncore.validation.facts import BackendFacts, InstalledFacts, LockPin, Versions
from lemoncore.validation.options import Options, Run


def install_record(cache_dir: Path, backend: str) -> InstalledFacts | None:
    """The installed version and artifacts (URL, SHA-256) lemoncore recorded, if any."""
    recipe, _, name = backend.partition(":")
    record = read_record(cache_dir / "bin" / recipe / name)
    if record is None:
        return None
    facts: InstalledFacts = {
        "version": record.version,
        "artifacts": [{"url": a.url, "sha256": a.sha256} for a in record.artifacts],
    }
    if record.result is not None:
        facts["result"] = record.result
    return facts


def versions(info: Mapping[str, object]) -> Versions:
    """The versions of lemoncore, Python and what ``info`` (``/api/v1/system-info``'s
    reply) says of the server and its plugins."""
    import platform

    served = SystemInfo.model_validate(info)
    return {
        "lemoncore": __version__,
        "server": served.version,
        "python": platform.python_version(),
        "plugins": {
            p.name: {"version": p.version, "distribution": p.distribution, "status": p.status}
            for p in served.plugins
        },
    }


def backend_info(
    options: Options,
    state: BackendInfo,
    owner: str,
    pin: LockPin | None,
    record: InstalledFacts | None,
) -> BackendFacts:
    return {
        "name": options.backend,
        "owner plugin": owner,
        "tier": state.tier.value,
        "format": state.format.value,
        "state": state.state.value,
        "version": state.version,
        "pin": pin or "none pinned",
        "installed": record or "no install record (installed outside lemoncore's cache)",
    }


@dataclass
class PluginSide:
    """What the plugins loaded here say of the backend: its field checks, owner, lock
    pin, endpoints and the model types they serve (chat and completions, for chat
    models, when they do not know the backend)."""

    checks: list[FieldCheck] = field(default_factory=list)
    owner: str = ""
    pin: LockPin | None = None
    endpoints: frozenset[str] = frozenset({"/v1/chat/completions", "/v1/completions"})
    model_types: frozenset[str] = frozenset({"llm"})


def plugin_side(options: Options, run: Run) -> PluginSide:
    from lemoncore.core import build_core

    core = build_core(run.settings, run.plugins)
    recipe_name, _, name = options.backend.partition(":")
    recipe = core.plugins.registry.recipes.get(recipe_name)
    backend = recipe.backend(name) if recipe is not None else None
    if recipe is None or backend is None:
        return PluginSide()
    pin = core.backends.lock.backend_pin(recipe_name, name, core.backends.platform)
    pinned: LockPin | None = (
        None
        if pin is None
        else {
            "version": pin.version,
            "artifacts": [
                {"url": a.url, "sha256": a.sha256 or "UNVERIFIED", "provenance": a.provenance}
                for a in pin.artifacts
            ],
        }
    )
    return PluginSide(
        core.plugins.field_checks(recipe, backend),
        core.plugins.owner(recipe, backend) or "",
        pinned,
        frozenset(backend.endpoints),
        frozenset(
            e.model_type.value
            for path in backend.endpoints
            if (e := core.plugins.registry.endpoints.get(path)) is not None
        ),
    )
