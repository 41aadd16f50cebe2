"""What the report says of the software under test: the versions of lemoncore, the
server and the plugins, the backend (owner, tier, state, lock pin) and its install
record, and what the plugins loaded in this process say of it (:class:`PluginSide`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemoncore import __version__
from lemoncore.fieldchecks import FieldCheck
from lemoncore.installs.install import RECORD
from lemoncore.validation.options import Options, Run


def install_record(cache_dir: Path, backend: str) -> dict[str, Any] | None:
    """The installed version and artifacts (URL, SHA-256) lemoncore recorded, if any."""
    recipe, _, name = backend.partition(":")
    try:
        data = json.loads((cache_dir / "bin" / recipe / name / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return {k: data[k] for k in ("version", "artifacts", "result") if k in data}


def versions(info: Mapping[str, Any]) -> dict[str, Any]:
    import platform

    return {"lemoncore": __version__, "server": info.get("version", ""),
            "python": platform.python_version(),
            "plugins": {p["name"]: {"version": p["version"], "distribution":
                                    p.get("distribution", ""), "status": p["status"]}
                        for p in info.get("plugins", [])}}


def backend_info(options: Options, state: Mapping[str, Any], owner: str,
                 pin: Mapping[str, Any] | None, record: Mapping[str, Any] | None
                 ) -> dict[str, Any]:
    return {"name": options.backend, "owner plugin": owner, "tier": state.get("tier", ""),
            "format": state.get("format", ""), "state": state.get("state", ""),
            "version": state.get("version", ""), "pin": dict(pin) if pin else "none pinned",
            "installed": dict(record) if record else "no install record (installed "
                                                      "outside lemoncore's cache)"}


@dataclass
class PluginSide:
    """What the plugins loaded here say of the backend: its field checks, owner, lock
    pin and endpoints (chat and completions when they do not know the backend)."""

    checks: list[FieldCheck] = field(default_factory=list)
    owner: str = ""
    pin: dict[str, Any] | None = None
    endpoints: frozenset[str] = frozenset({"/v1/chat/completions", "/v1/completions"})


def plugin_side(options: Options, run: Run) -> PluginSide:
    from lemoncore.core import build_core

    core = build_core(run.settings, run.plugins)
    recipe_name, _, name = options.backend.partition(":")
    recipe = core.plugins.registry.recipes.get(recipe_name)
    backend = recipe.backend(name) if recipe is not None else None
    if recipe is None or backend is None:
        return PluginSide()
    pin = core.backends.lock.backend_pin(recipe_name, name, core.backends.platform)
    pinned = None if pin is None else {"version": pin.version, "artifacts": [
        {"url": a.url, "sha256": a.sha256 or "UNVERIFIED", "provenance": a.provenance}
        for a in pin.artifacts]}
    return PluginSide(core.plugins.field_checks(recipe, backend),
                      core.plugins.owner(recipe, backend) or "", pinned,
                      frozenset(backend.endpoints))
