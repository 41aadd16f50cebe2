"""The image contract: a recipe's policy (reviewed code) is the ceiling; the image's
``org.lemonade.*`` labels may narrow it, never widen it. Pure functions over data."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from lemoncore.launch import LaunchRefused

ENV_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
FORBIDDEN_ENV = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "PYTHONPATH", "HOME"}
KNOWN_LABELS = {"org.lemonade.devices", "org.lemonade.ipc", "org.lemonade.network",
                "org.lemonade.port", "org.lemonade.env", "org.lemonade.models"}


@dataclass(frozen=True)
class ContainerPolicy:
    """What a recipe's container may have. ``command`` is the engine argv inside the
    container; ``{model}``, ``{socket}`` and ``{ctx_size}`` are filled in by the plugin."""

    command: tuple[str, ...]
    devices: frozenset[str] = frozenset()
    ipc_host: bool = False
    env: Mapping[str, str] = field(default_factory=dict)  # allowed keys -> value templates
    min_memory_gb: float = 0.0
    health_path: str = "/health"


def effective_policy(policy: ContainerPolicy, labels: Mapping[str, str] | None,
                     image: str) -> ContainerPolicy:
    """Narrow ``policy`` by the image's labels; refuse any label asking for more."""
    labels = labels or {}
    ours = {k: v for k, v in labels.items() if k.startswith(("org.lemonade.", "org.lemoncore."))}

    def refuse(label: str, why: str) -> LaunchRefused:
        return LaunchRefused(f"image {image} label {label}={ours.get(label, '')!r}: {why}; "
                             "the recipe's policy does not allow it")

    for label in ours:
        if label not in KNOWN_LABELS:
            raise refuse(label, "unknown or reserved label (images may not set lemoncore's "
                                "own labels)")
    result = policy
    if "org.lemonade.devices" in ours:
        wanted = frozenset(d.strip() for d in ours["org.lemonade.devices"].split(",")
                           if d.strip())
        extra = {d for d in wanted if not any(d == p or d.startswith(p + "/")
                                                for p in policy.devices)}
        if extra:
            raise refuse("org.lemonade.devices", f"asks for {', '.join(sorted(extra))}")
        result = replace(result, devices=wanted)
    ipc = ours.get("org.lemonade.ipc", "private")
    if ipc not in {"private", "host"} or (ipc == "host" and not policy.ipc_host):
        raise refuse("org.lemonade.ipc", "asks for the host's IPC namespace")
    result = replace(result, ipc_host=policy.ipc_host and ipc == "host")
    if ours.get("org.lemonade.network", "none") != "none":
        raise refuse("org.lemonade.network", "asks for a network; engines run without one")
    if "org.lemonade.port" in ours:
        port = ours["org.lemonade.port"]
        if not port.isdigit() or not 1024 <= int(port) <= 65535:
            raise refuse("org.lemonade.port", "is not a port between 1024 and 65535")
    if "org.lemonade.env" in ours:
        keys = {k.strip() for k in ours["org.lemonade.env"].split(",") if k.strip()}
        bad = {k for k in keys if not ENV_KEY.match(k) or k in FORBIDDEN_ENV
               or k.endswith("_PROXY") or k not in policy.env}
        if bad:
            raise refuse("org.lemonade.env", f"asks for {', '.join(sorted(bad))}")
        result = replace(result, env={k: v for k, v in policy.env.items() if k in keys})
    if "org.lemonade.models" in ours:
        _check_models(ours["org.lemonade.models"], refuse)
    return result


def _check_models(text: str, refuse: Callable[[str, str], LaunchRefused]) -> None:
    try:
        models = json.loads(text) if len(text) <= 4096 else None
        paths = [m["path"] for m in models]  # type: ignore[union-attr]
    except (ValueError, TypeError, KeyError):
        raise refuse("org.lemonade.models", "is not a list of {name, path}") from None
    if len(set(paths)) != len(paths) or any(
            not p.startswith("/models/") or ".." in p for p in paths):
        raise refuse("org.lemonade.models", "paths must be unique, under /models/, no '..'")
