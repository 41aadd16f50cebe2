"""The image contract, references, run flags and setup checks: pure decisions."""

from __future__ import annotations

import pytest

from lemoncore.launch import LaunchRefused

from lemon_plugin_oci.engine import Engine, Mount, RunRequest, run_argv
from lemon_plugin_oci.policy import ContainerPolicy, effective_policy
from lemon_plugin_oci.refs import parse_ref
from lemon_plugin_oci.setup import Facts, check

DIGEST = "a" * 64
POLICY = ContainerPolicy(command=("llama-server",), devices=frozenset({"/dev/dri"}),
                         env={"HALOGEN_CTX": "{ctx_size}", "HALOGEN_KV_SLOTS": "4"})


def test_trusted_digest_pinned_refs_parse() -> None:
    ref = parse_ref(f"docker://docker.io/kyuz0/amd-strix-halo-toolboxes:vulkan@sha256:{DIGEST}")
    assert ref.pinned == f"docker.io/kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"
    assert ref.tag == "vulkan"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("docker.io/kyuz0/toolbox:latest", "by digest only"),
        (f"docker.io/evil/toolbox:x@sha256:{DIGEST}", "outside the trusted namespaces"),
        (f"ghcr.io/peonist-ai-evil/x:y@sha256:{DIGEST}", "outside the trusted namespaces"),
        (f"kyuz0/toolbox:x@sha256:{DIGEST}", "no registry host"),
        ("docker.io/kyuz0/toolbox@sha256:abc", "by digest only"),
    ],
)
def test_other_refs_are_refused(text: str, why: str) -> None:
    with pytest.raises(LaunchRefused, match=why):
        parse_ref(text)


def test_admin_configuration_extends_the_trusted_namespaces() -> None:
    ref = parse_ref(f"127.0.0.1:5000/lab/engine:1@sha256:{DIGEST}",
                    ("docker.io/kyuz0/", "127.0.0.1:5000/lab/"))
    assert ref.repository == "127.0.0.1:5000/lab/engine"


def test_no_labels_means_the_recipe_policy() -> None:
    assert effective_policy(POLICY, None, "img") == POLICY


def test_labels_narrow_the_policy() -> None:
    narrowed = effective_policy(POLICY, {"org.lemonade.devices": "/dev/dri/renderD128",
                                         "org.lemonade.env": "HALOGEN_CTX",
                                         "org.lemonade.network": "none",
                                         "org.lemonade.ipc": "private",
                                         "org.opencontainers.image.title": "fine"}, "img")
    assert narrowed.devices == {"/dev/dri/renderD128"}
    assert dict(narrowed.env) == {"HALOGEN_CTX": "{ctx_size}"}


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("org.lemonade.devices", "/dev/kfd"),
        ("org.lemonade.ipc", "host"),
        ("org.lemonade.network", "host"),
        ("org.lemonade.env", "LD_PRELOAD"),
        ("org.lemonade.env", "HTTPS_PROXY"),
        ("org.lemonade.env", "NOT_ALLOWED_BY_RECIPE"),
        ("org.lemonade.port", "80"),
        ("org.lemonade.models", '[{"name": "m", "path": "/etc/../models/x"}]'),
        ("org.lemonade.capabilities", "SYS_ADMIN"),
        ("org.lemoncore.owner", "someone-else"),
    ],
)
def test_each_escalation_is_refused_naming_the_label(label: str, value: str) -> None:
    with pytest.raises(LaunchRefused, match=label.replace(".", r"\.")):
        effective_policy(POLICY, {label: value}, "img")


REQUEST = RunRequest(name="lemon-x-m", image=f"docker.io/kyuz0/t@sha256:{DIGEST}",
                     command=("llama-server", "-m", "/models/m.gguf"), socket_dir="/tmp/s",
                     devices=("/dev/dri",), env={"HIP_VISIBLE_DEVICES": "0"},
                     mounts=(Mount("/cache/m.gguf", "/models/m.gguf", relabel=True),
                             Mount("/home/u/m2.gguf", "/models/m2.gguf")),
                     labels={"org.lemoncore.owner": "abc"}, group_ids=(44, 993))


def test_podman_run_is_hardened() -> None:
    argv = run_argv(Engine("podman", "/usr/bin/podman"), REQUEST)
    for flag in ("--init", "--read-only", "--cap-drop=all", "--security-opt=no-new-privileges",
                 "--network=none", "--pull=never", "--http-proxy=false", "--ipc=private",
                 "--pids-limit=4096", "--stop-timeout=15"):
        assert flag in argv
    assert argv[argv.index("--group-add") + 1] == "keep-groups"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == [  # only lemoncore's own file is relabelled, both read-only
        "type=bind,source=/cache/m.gguf,target=/models/m.gguf,readonly=true,relabel=shared",
        "type=bind,source=/home/u/m2.gguf,target=/models/m2.gguf,readonly=true"]
    assert "/tmp/s:/run/lemon:rw,Z" in argv
    assert argv[-4:] == [REQUEST.image, "llama-server", "-m", "/models/m.gguf"]
    assert not any(a.startswith(("--privileged", "--cap-add", "-p")) for a in argv)


def test_docker_run_uses_numeric_groups_and_explicit_tmpfs() -> None:
    argv = run_argv(Engine("docker", "/usr/bin/docker"), REQUEST)
    assert "keep-groups" not in argv and "--http-proxy=false" not in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"] == ["44", "993"]
    assert argv[argv.index("--tmpfs") + 1] == "/tmp"
    assert "type=bind,source=/cache/m.gguf,target=/models/m.gguf,readonly=true" in argv


FACTS = Facts(engine=Engine("podman", "/usr/bin/podman"), engine_works=True, rootless=True,
              groups=frozenset({"render", "video"}), present_devices=frozenset({"/dev/dri",
                                                                                "/dev/kfd"}),
              selinux_enforcing=False, selinux_devices_allowed=True, oci_runtime="crun")
GPU = frozenset({"/dev/dri", "/dev/kfd"})


@pytest.mark.parametrize(
    ("change", "message", "action"),
    [
        ({"engine": None}, "no container tool", "apt-get install -y podman"),
        ({"engine_works": False}, "does not answer", "podman.socket"),
        ({"present_devices": frozenset({"/dev/dri"})}, "/dev/kfd missing", "modprobe amdgpu"),
        ({"groups": frozenset({"video"})}, "render", "usermod -aG render,video"),
        ({"oci_runtime": "runc"}, "keep-groups needs crun", "apt-get install -y crun"),
        ({"selinux_enforcing": True, "selinux_devices_allowed": False}, "SELinux",
         "setsebool -P container_use_devices true"),
    ],
)
def test_setup_assistant_names_the_fix(change: dict[str, object], message: str,
                                       action: str) -> None:
    from dataclasses import replace

    problem = check(replace(FACTS, **change), GPU)  # type: ignore[arg-type]
    assert problem is not None
    assert message in problem.message and action in problem.action
    assert check(FACTS, GPU) is None
