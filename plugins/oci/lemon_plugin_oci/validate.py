"""Field checks for ``lemon validate`` on a container backend: the running container,
as the container tool inspects it, keeps the launch contract (read-only root, every
capability dropped but the contract's, no new privileges, no network but ``lo``, only
the GPU devices the contract names, one render node). Registered by
``OciPlugin.register_field_checks``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lemoncore.plugin import CheckSkipped, FieldCheck, FieldContext, FieldResult, detect_host

from lemon_plugin_oci.contracts import LaunchContract


def inspect(argv: list[str]) -> tuple[dict[str, Any], str]:
    """The container a launch command ran (its tool's ``container inspect``), and its
    name."""
    if "--name" not in argv:
        raise CheckSkipped("the engine does not run in a container")
    # the tool is what ran ``run`` (through ``LEMON_OCI_ENGINE_VIA``, several words)
    tool, name = argv[: argv.index("run")], argv[argv.index("--name") + 1]
    done = subprocess.run(
        [*tool, "container", "inspect", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{Path(tool[-1]).name} container inspect {name}: {done.stderr}"
    state: dict[str, Any] = json.loads(done.stdout)[0]
    return state, name


def _caps(names: Any) -> set[str]:
    return {str(n).upper().removeprefix("CAP_") for n in names or ()}


def differences(state: Mapping[str, Any], contract: LaunchContract) -> list[str]:
    """How an inspected container breaks ``contract`` (empty: it keeps it)."""
    host = state.get("HostConfig") or {}
    found = []
    if not host.get("ReadonlyRootfs"):
        found.append("the root file system is writable (not --read-only)")
    if host.get("Privileged"):
        found.append("the container is privileged")
    if host.get("NetworkMode") != "none":
        found.append(f"network mode {host.get('NetworkMode')!r}, not 'none'")
    if not any("no-new-privileges" in str(o) for o in host.get("SecurityOpt") or ()):
        found.append("no-new-privileges is not set")
    allowed = _caps(contract.cap_add)
    if "EffectiveCaps" in state:  # podman: what the engine holds
        extra = _caps(state.get("EffectiveCaps")) - allowed
    else:  # docker: all dropped, the contract's added
        extra = (_caps(host.get("CapAdd")) - allowed) | (
            set() if "ALL" in _caps(host.get("CapDrop")) else {"(not all dropped)"}
        )
    if extra:
        found.append(f"capabilities beyond the contract: {sorted(extra)}")
    inside = sorted(str(d.get("PathInContainer")) for d in host.get("Devices") or ())
    nodes = [p for p in inside if p.startswith("/dev/dri/")]
    unexpected = [
        p
        for p in inside
        if not (
            (p == "/dev/kfd" and "/dev/kfd" in contract.devices)
            or (p.startswith("/dev/dri/renderD") and "/dev/dri" in contract.devices)
        )
    ]
    if unexpected:
        found.append(f"devices beyond the contract: {unexpected}")
    if len(nodes) > 1:
        found.append(f"more than one GPU: {nodes}")
    return found


def interfaces(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The network interfaces of ``pid``'s namespace."""
    lines = (proc / str(pid) / "net/dev").read_text().splitlines()[2:]
    return [line.split(":")[0].strip() for line in lines]


def contract_check(
    contracts: Mapping[tuple[str, str], LaunchContract],
) -> Callable[[FieldContext], FieldResult]:
    def check(context: FieldContext) -> FieldResult:
        recipe, _, backend = context.backend.partition(":")
        contract = contracts[recipe, backend]
        state, name = inspect(list(context.loaded["launch_command"]))
        problems = differences(state, contract)
        pid = int((state.get("State") or {}).get("Pid") or 0)
        seen = interfaces(pid) if pid else []
        if seen != ["lo"]:
            problems.append(f"network interfaces {seen}, not only 'lo'")
        assert not problems, f"container {name} breaks its launch contract:\n- " + "\n- ".join(
            problems
        )
        devices = sorted(
            str(d.get("PathOnHost")) for d in (state.get("HostConfig") or {}).get("Devices") or ()
        )
        gpus = {d.render_node: d.name for d in detect_host().devices if d.render_node}
        used = [f"{gpus.get(p, p)} ({p})" for p in devices if p.startswith("/dev/dri/")]
        return FieldResult(
            {
                "container": name,
                "image": str(state.get("ImageName") or state.get("Image", "")),
                "interfaces": ", ".join(seen),
                "devices": ", ".join(devices) or "none",
                "gpu": ", ".join(used) or "none",
            }
        )

    return check


def field_checks(contracts: Mapping[tuple[str, str], LaunchContract]) -> list[FieldCheck]:
    return [
        FieldCheck(
            "container-contract",
            "the running container keeps its launch "
            "contract: read-only, capabilities, network, devices",
            contract_check(contracts),
            tuple(f"{r}:{b}" for r, b in contracts),
        )
    ]
