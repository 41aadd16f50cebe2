"""The image contract: a recipe's launch contract (reviewed code) is the ceiling; the
image's ``org.lemonade.*`` labels may narrow it, never widen it. Pure functions over data."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import replace

from lemoncore.plugin import LaunchRefused

from lemon_plugin_oci import model_label
from lemon_plugin_oci.contracts import LaunchContract

ENV_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
FORBIDDEN_ENV = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "PYTHONPATH", "HOME"}
KNOWN_LABELS = {
    "org.lemonade.devices",
    "org.lemonade.ipc",
    "org.lemonade.network",
    "org.lemonade.port",
    "org.lemonade.env",
    model_label.LABEL,
}


def narrowed(
    contract: LaunchContract, labels: Mapping[str, str] | None, image: str
) -> LaunchContract:
    """``contract`` narrowed by the image's labels; any label asking for more refuses."""
    ours = {
        k: v for k, v in (labels or {}).items() if k.startswith(("org.lemonade.", "org.lemoncore."))
    }

    def refuse(label: str, why: str) -> LaunchRefused:
        return LaunchRefused(
            f"image {image} label {label}={ours.get(label, '')!r}: {why}; "
            "the recipe's launch contract does not allow it"
        )

    for label in ours:
        if label not in KNOWN_LABELS:
            raise refuse(
                label, "unknown or reserved label (images may not set lemoncore's own labels)"
            )
    result = contract
    if "org.lemonade.devices" in ours:
        wanted = {d.strip() for d in ours["org.lemonade.devices"].split(",") if d.strip()}
        # exact, normalised classes: no prefix match, so /dev/dri/../kfd is /dev/kfd
        extra = {d for d in wanted if posixpath.normpath(d) != d or d not in contract.devices}
        if extra:
            raise refuse("org.lemonade.devices", f"asks for {', '.join(sorted(extra))}")
        result = replace(result, devices=frozenset(wanted))
    ipc = ours.get("org.lemonade.ipc", "host" if contract.ipc_host else "private")
    if ipc not in {"private", "host"} or (ipc == "host" and not contract.ipc_host):
        raise refuse("org.lemonade.ipc", "asks for the host's IPC namespace")
    result = replace(result, ipc_host=ipc == "host")
    if ours.get("org.lemonade.network", "none") != "none":
        raise refuse("org.lemonade.network", "asks for a network; engines run without one")
    if "org.lemonade.port" in ours:
        port = ours["org.lemonade.port"]
        if not port.isascii() or not port.isdigit() or int(port) != contract.tcp_port:
            raise refuse("org.lemonade.port", f"is not the contract's port ({contract.transport})")
    if "org.lemonade.env" in ours:
        keys = {k.strip() for k in ours["org.lemonade.env"].split(",") if k.strip()}
        bad = {
            k
            for k in keys
            if not ENV_KEY.match(k)
            or k in FORBIDDEN_ENV
            or k.endswith("_PROXY")
            or k not in contract.env_keys
        }
        if bad:
            raise refuse("org.lemonade.env", f"asks for {', '.join(sorted(bad))}")
        result = replace(
            result,
            env={k: v for k, v in contract.env.items() if k in keys},
            settings=tuple(s for s in contract.settings if s.key in keys),
        )
    if model_label.LABEL in ours:
        try:
            model_label.models(ours[model_label.LABEL])
        except ValueError as exc:
            raise refuse(model_label.LABEL, str(exc)) from None
    return result
