"""The facts the contract tests share: a digest, the two container tools, and the host
facts of a machine where everything is set up (podman, the GPU groups, both devices)."""

from __future__ import annotations

from lemon_plugin_oci.engine import Engine
from lemon_plugin_oci.setup import Facts

DIGEST = "a" * 64
PODMAN = Engine("podman", "/usr/bin/podman")
DOCKER = Engine("docker", "/usr/bin/docker")
FACTS = Facts(
    engine=PODMAN,
    engine_works=True,
    groups=frozenset({"render", "video"}),
    present_devices=frozenset({"/dev/dri", "/dev/kfd"}),
    selinux_enforcing=False,
    selinux_devices_allowed=True,
    oci_runtime="crun",
    gpu_group_ids=(993, 44),
    memlock_grantable=True,
)
