"""Contracts, labels, references, run flags, the chosen GPU, files, sockets and setup
checks: pure decisions, and the launch hook from a host description to the argv."""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import LaunchContext, LaunchRefused
from lemoncore.options import declared, resolve
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, Recipe

from lemon_plugin_oci import OciPlugin, container_name, model_label
from lemon_plugin_oci.contracts import (
    CONTRACTS,
    HALOGEN,
    EnvSetting,
    LaunchContract,
    ModelFile,
    ctx_size,
)
from lemon_plugin_oci.drift import drift
from lemon_plugin_oci.engine import Engine, Identity, Mount, RunRequest, identity, run_argv
from lemon_plugin_oci.launching import model_files, run_request
from lemon_plugin_oci.memory import GIB, Memory, problem
from lemon_plugin_oci.policy import narrowed
from lemon_plugin_oci.recipes import CONTRIBUTIONS, RECIPES
from lemon_plugin_oci.refs import carries, parse_ref
from lemon_plugin_oci.setup import Facts, check
from lemon_plugin_oci.sockets import SocketDirs

DIGEST = "a" * 64
PODMAN = Engine("podman", "/usr/bin/podman")
DOCKER = Engine("docker", "/usr/bin/docker")
CONTRACT = LaunchContract(command=("llama-server",), devices=frozenset({"/dev/dri"}),
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
        (f"docker.io/kyuz0/../evil/x:y@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/a..b:y@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/x:t\u00e4g@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/x:t@sha256:{DIGEST}\n", "by digest only"),
    ],
)
def test_other_refs_are_refused(text: str, why: str) -> None:
    with pytest.raises(LaunchRefused, match=why):
        parse_ref(text)


def test_docker_familiar_repo_digests_match_the_pin() -> None:
    """docker shows Docker Hub names without ``docker.io/`` (and ``library/``);
    podman shows them in full. Both carry the pin; another repository does not."""
    ref = parse_ref(f"docker.io/kyuz0/amd-strix-halo-toolboxes:x@sha256:{DIGEST}")
    assert carries([f"kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"], ref)
    assert carries([f"docker.io/kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"], ref)
    assert not carries([f"kyuz0/other@sha256:{DIGEST}"], ref)
    assert not carries([f"kyuz0/amd-strix-halo-toolboxes@sha256:{'b' * 64}"], ref)
    official = parse_ref(f"docker.io/library/ubuntu:24.04@sha256:{DIGEST}",
                         ("docker.io/library/",))
    assert carries([f"ubuntu@sha256:{DIGEST}"], official)


def test_admin_configuration_extends_the_trusted_namespaces() -> None:
    ref = parse_ref(f"127.0.0.1:5000/lab/engine:1@sha256:{DIGEST}",
                    ("docker.io/kyuz0/", "127.0.0.1:5000/lab"))
    assert ref.repository == "127.0.0.1:5000/lab/engine"
    with pytest.raises(LaunchRefused, match="outside the trusted namespaces"):
        parse_ref(f"ghcr.io/peonist-ai/x:1@sha256:{DIGEST}", ("ghcr.io/peon",))


def test_no_labels_means_the_contract() -> None:
    assert narrowed(CONTRACT, None, "img") == CONTRACT


def test_labels_narrow_the_contract() -> None:
    narrow = narrowed(HALOGEN, {"org.lemonade.devices": "/dev/dri",
                                "org.lemonade.env": "HALOGEN_CTX,HALOGEN_KV_SLOTS",
                                "org.lemonade.network": "none", "org.lemonade.ipc": "private",
                                "org.lemonade.port": "8731",
                                "org.opencontainers.image.title": "fine"}, "img")
    assert narrow.devices == {"/dev/dri"}
    assert dict(narrow.env) == {"HALOGEN_CTX": "{ctx_size}"}
    assert [s.key for s in narrow.settings] == ["HALOGEN_KV_SLOTS"]
    assert not narrow.ipc_host


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("org.lemonade.devices", "/dev/kfd"),
        ("org.lemonade.devices", "/dev/dri/../kfd"),
        ("org.lemonade.devices", "/dev/dri/renderD128"),
        ("org.lemonade.ipc", "host"),
        ("org.lemonade.network", "host"),
        ("org.lemonade.env", "LD_PRELOAD"),
        ("org.lemonade.env", "HTTPS_PROXY"),
        ("org.lemonade.env", "NOT_ALLOWED_BY_RECIPE"),
        ("org.lemonade.port", "80"),
        ("org.lemonade.models", '[{"name": "m", "path": "/etc/../models/x"}]'),
        ("org.lemonade.models", '[{"name": "m", "path": 7}]'),
        ("org.lemonade.models", '{"name": "m"}'),
        ("org.lemonade.models", "not json"),
        ("org.lemonade.models", '[{"name": "m", "checkpoint": "file:/etc/shadow"}]'),
        ("org.lemonade.capabilities", "SYS_ADMIN"),
        ("org.lemoncore.owner", "someone-else"),
    ],
)
def test_each_escalation_is_refused_naming_the_label(label: str, value: str) -> None:
    with pytest.raises(LaunchRefused, match=label.replace(".", r"\.")):
        narrowed(CONTRACT, {label: value}, "img")


REQUEST = RunRequest(name="lemon-x-m", image=f"docker.io/kyuz0/t@sha256:{DIGEST}",
                     command=("llama-server", "-m", "/models/m.gguf"), socket_dir="/run/s",
                     devices=(("/dev/dri/renderD129", "/dev/dri/renderD129"),),
                     env={"ROCR_VISIBLE_DEVICES": "GPU-1"},
                     mounts=(Mount("/cache/m.gguf", "/models/m.gguf", relabel=True),
                             Mount("/home/u/m2.gguf", "/models/m2.gguf")),
                     labels={"org.lemoncore.owner": "abc"},
                     identity=Identity(userns="keep-id", keep_groups=True))


def test_podman_run_is_hardened() -> None:
    argv = run_argv(PODMAN, REQUEST)
    for flag in ("--init", "--read-only", "--cap-drop=all", "--security-opt=no-new-privileges",
                 "--network=none", "--pull=never", "--http-proxy=false", "--ipc=private",
                 "--pids-limit=4096", "--stop-timeout=15", "--userns=keep-id"):
        assert flag in argv
    assert argv[argv.index("--group-add") + 1] == "keep-groups"
    assert argv[argv.index("--device") + 1] == "/dev/dri/renderD129:/dev/dri/renderD129"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == [  # only lemoncore's own file is relabelled, both read-only
        "type=bind,source=/cache/m.gguf,target=/models/m.gguf,readonly=true,relabel=shared",
        "type=bind,source=/home/u/m2.gguf,target=/models/m2.gguf,readonly=true"]
    assert "/run/s:/run/lemon:rw,Z" in argv
    assert argv[-4:] == [REQUEST.image, "llama-server", "-m", "/models/m.gguf"]
    assert not any(a.startswith(("--privileged", "--cap-add", "-p", "--ulimit")) for a in argv)


def test_docker_run_gets_a_user_numeric_groups_tmpfs_and_no_injected_proxies() -> None:
    who = identity(DOCKER, uid=1000, gid=1000, group_ids=(993, 44))
    argv = run_argv(DOCKER, replace(REQUEST, identity=who))
    assert "--user=1000:1000" in argv and "keep-groups" not in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"] == ["993", "44"]
    assert argv[argv.index("--tmpfs") + 1] == "/tmp"
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    for key in ("HTTP_PROXY", "https_proxy", "NO_PROXY", "all_proxy"):
        assert f"{key}=" in env  # set empty, so ~/.docker/config.json's are not copied in
    assert "type=bind,source=/cache/m.gguf,target=/models/m.gguf,readonly=true" in argv


def test_the_engine_never_runs_as_real_root() -> None:
    assert identity(PODMAN, 0, 0, (993,)) == Identity(user="65534:65534", group_ids=(993,))
    assert identity(DOCKER, 1000, 100, ()).user == "1000:100"
    rootless_podman = replace(PODMAN, rootless=True)
    assert identity(rootless_podman, 1000, 100, ()) == Identity(userns="keep-id",
                                                                keep_groups=True)
    assert identity(replace(DOCKER, rootless=True), 1000, 100, ()) == Identity()


TWO_GPUS = HostInfo("linux", (
    HostDevice(DeviceKind.CPU, "Ryzen AI Max+ 395"),
    HostDevice(DeviceKind.AMD_GPU, "amd card0", "gfx1100", 0,
               render_node="/dev/dri/renderD128", uuid="GPU-00000000000000aa"),
    HostDevice(DeviceKind.AMD_GPU, "amd card1", "gfx1151", 1,
               render_node="/dev/dri/renderD129", uuid="GPU-1b2c3d4e5f607182")))
FACTS = Facts(engine=PODMAN, engine_works=True,
              groups=frozenset({"render", "video"}),
              present_devices=frozenset({"/dev/dri", "/dev/kfd"}), selinux_enforcing=False,
              selinux_devices_allowed=True, oci_runtime="crun", gpu_group_ids=(993, 44),
              memlock_grantable=True)


def backend_of(recipe: str, backend: str) -> tuple[Recipe, Backend]:
    for r in RECIPES:
        if r.name == recipe:
            return r, next(b for b in r.backends if b.name == backend)
    llamacpp = Recipe(name="llamacpp", display_name="llama.cpp", backends=(),
                      options=(ctx_size(4096),))
    return llamacpp, next(c.backend for c in CONTRIBUTIONS if c.backend.name == backend)


def launched_argv(tmp_path: Path, recipe: str, backend: str, facts: Facts = FACTS,
                  config: dict[str, object] | None = None) -> list[str]:
    """The launch hook, then the start's request, for a model beside its sidecar files."""
    models = tmp_path / "models"
    if not models.exists():
        (models / "tokenizer").mkdir(parents=True)
        for name in ("m.gguf", "m.overlay.hgn", "tokenizer/tokenizer.json"):
            (models / name).write_text("x")
    model = ModelInfo(name="m", recipe=recipe, checkpoint=f"file:{models}/m.gguf")
    r, b = backend_of(recipe, backend)
    options, admin = resolve(declared(r, b), {"ctx_size": 4096, **(config or {})}, [],
                             f"recipes.{recipe}")  # as the core resolves them
    context = LaunchContext(
        models / "m.gguf", options, tmp_path / "install", "127.0.0.1", 0, 1,
        installed={"artifacts": [{"url": f"docker://docker.io/kyuz0/x:t@sha256:{DIGEST}"}],
                   "result": "sha256:id"},
        instance="abc", config=admin, model_owned=True, model_dir=models,
        model_roots=(models.resolve(),))
    server = OciPlugin(facts=lambda: facts).launch(r, b, model, context, TWO_GPUS)
    request = run_request(narrowed(server.contract, None, "img"), server.inputs)
    server.sockets.remove()
    return run_argv(facts.engine or PODMAN, request)


def values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.mark.parametrize(("recipe", "backend"), list(CONTRACTS))
def test_only_the_chosen_gpu_reaches_each_engine(tmp_path: Path, recipe: str,
                                                 backend: str) -> None:
    """Two AMD GPUs; the backends support gfx1151, the second. Only its render node is
    passed (and /dev/kfd for ROCm), and ROCm is pinned to it by UUID: inside the
    container it is the only GPU ROCm can open, so it is HIP device 0."""
    argv = launched_argv(tmp_path, recipe, backend)
    contract = CONTRACTS[recipe, backend]
    devices = values(argv, "--device")
    env = values(argv, "--env")
    assert "/dev/dri/renderD129:/dev/dri/renderD129" in devices
    assert not any("renderD128" in d or d.startswith("/dev/dri:") for d in devices)
    rocm = "/dev/kfd" in contract.devices
    assert ("/dev/kfd:/dev/kfd" in devices) is rocm
    assert ("ROCR_VISIBLE_DEVICES=GPU-1b2c3d4e5f607182" in env) is rocm
    assert ("HIP_VISIBLE_DEVICES=0" in env) is rocm
    assert ("--ipc=host" in argv) is contract.ipc_host
    assert ("--ulimit=memlock=-1:-1" in argv) is contract.memlock_unlimited
    assert values(argv, "--group-add") == ["993", "44"]
    assert (f"--user={os.geteuid()}:{os.getegid()}" if os.geteuid() else
            "--user=65534:65534") in argv


def test_each_contract_s_command_and_files(tmp_path: Path) -> None:
    ds4 = launched_argv(tmp_path, "ds4", "rocm")
    assert ds4[ds4.index("ds4-server"):][:10] == [
        "ds4-server", "-m", "/models/m.gguf", "--ctx", "4096", "--host", "127.0.0.1",
        "--port", "8000", "--ssd-streaming"]
    assert "--cap-add=SYS_PTRACE" in ds4
    assert "DS4_ROCM_ENABLE_MXFP4_TILE4=1" in values(ds4, "--env")
    halogen = launched_argv(tmp_path, "halogen", "rocm", config={"kv_pool_positions": 262144})
    env = values(halogen, "--env")
    for expected in ("HALOGEN_CHECKPOINT=/models/m.gguf",
                     "HALOGEN_CK_OVERLAY=/models/m.overlay.hgn",
                     "HALOGEN_TOKENIZER=/models/tokenizer", "HALOGEN_API_PORT=8731",
                     "HALOGEN_KV_POOL_POSITIONS=262144", "HALOGEN_CTX=4096"):
        assert expected in env
    mounts = values(halogen, "--mount")
    assert any("target=/models/tokenizer/tokenizer.json" in m for m in mounts)
    assert halogen[-2:] == [f"docker.io/kyuz0/x@sha256:{DIGEST}", "all"]  # entrypoint mode
    nathanw = launched_argv(tmp_path, "llamacpp", "nathanw")
    assert nathanw[nathanw.index("llama-server"):][:7] == [  # answers name the served model
        "llama-server", "-m", "/models/m.gguf", "--alias", "m", "--host",
        "/run/lemon/engine.sock"]


def test_memlock_is_asked_for_only_where_the_host_can_grant_it(tmp_path: Path) -> None:
    argv = launched_argv(tmp_path, "halogen", "rocm",
                         facts=replace(FACTS, memlock_grantable=False))
    assert not any(a.startswith("--ulimit") for a in argv)
    assert "hard memlock limit" in replace(FACTS, memlock_grantable=False).memlock_advice


def test_missing_or_escaping_sidecar_files_are_refused(tmp_path: Path) -> None:
    launched_argv(tmp_path, "halogen", "rocm")
    (tmp_path / "models/m.overlay.hgn").unlink()
    with pytest.raises(LaunchRefused, match=r"m\.overlay\.hgn beside m\.gguf"):
        launched_argv(tmp_path, "halogen", "rocm")
    (tmp_path / "secret").write_text("x")
    (tmp_path / "models/m.overlay.hgn").symlink_to(tmp_path / "secret")
    with pytest.raises(LaunchRefused, match="outside the model directories"):
        launched_argv(tmp_path, "halogen", "rocm")


def test_split_models_mount_every_shard_and_name_a_missing_one(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    for i in (1, 2, 3):
        (models / f"big-0000{i}-of-00003.gguf").write_text("x")
    first = models / "big-00001-of-00003.gguf"
    found = model_files((ModelFile("{file}"),), first, first.name, models,
                        (models.resolve(),), owned=False)
    assert [m.target for m in found.mounts] == [
        f"/models/big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert found.model == "/models/big-00001-of-00003.gguf"
    (models / "big-00003-of-00003.gguf").unlink()
    with pytest.raises(LaunchRefused, match=r"big-00003-of-00003\.gguf beside"):
        model_files((ModelFile("{file}"),), first, first.name, models, (models.resolve(),),
                    owned=False)


def test_only_files_in_lemoncore_s_own_root_are_relabelled(tmp_path: Path) -> None:
    cache, admin = tmp_path / "cache", tmp_path / "admin"
    cache.mkdir()
    admin.mkdir()
    (cache / "m.gguf").write_text("x")
    (admin / "m.overlay.hgn").write_text("x")
    (cache / "m.overlay.hgn").symlink_to(admin / "m.overlay.hgn")
    found = model_files(HALOGEN.files[:2], cache / "m.gguf", "m.gguf", cache,
                        (cache, admin), owned=True)
    assert [m.relabel for m in found.mounts] == [True, False]


def test_container_names_are_unique_per_model() -> None:
    assert container_name("i", "a+b") != container_name("i", "a-b")
    assert container_name("i", "a+b").startswith("lemon-i-a-b-")
    assert len(container_name("i", "a+b").rsplit("-", 1)[1]) == 16


def test_typed_env_settings_come_only_from_declared_options() -> None:
    setting = next(s for s in HALOGEN.settings if s.key == "HALOGEN_KV_POOL_POSITIONS")
    assert isinstance(setting, EnvSetting)
    assert (setting.option.type, setting.option.scope.value) == ("int", "admin")
    assert setting.option.maximum == 1048576


def test_memory_messages_give_gib_and_the_setting() -> None:
    assert problem(0, 16, Memory(available=64 * GIB), "") == ""
    # Strix Halo, 512 MiB carve-out: Halogen's RAM and GPU parts both come from RAM
    short = problem(68, 35, Memory(available=96 * GIB, gtt=90 * GIB, vram=GIB // 2),
                    HALOGEN.memory_hint)
    assert "needs about 103 GiB (68 in RAM, 35 on the GPU)" in short
    assert "96.0 GiB of RAM" in short and "kv_pool_positions = 262144" in short
    # a 96 GiB carve-out holds the GPU part; RAM must still hold the pinned weights
    assert problem(68, 35, Memory(available=28 * GIB, vram=96 * GIB), "") != ""
    assert problem(68, 35, Memory(available=70 * GIB, vram=96 * GIB), "") == ""
    # GTT too small for the GPU part: say so, and how to raise it
    gtt = problem(0, 35, Memory(available=120 * GIB, gtt=30 * GIB, vram=GIB // 2), "")
    assert "amdgpu.gttsize" in gtt
    assert problem(0, 0, Memory(available=0), "") == ""


def test_drift_lists_each_difference() -> None:
    before = {"memory": 0, "devices": ["a"], "image": "x", "cgroup limits": {"pids.max": "9"}}
    assert drift(before, dict(before)) == []
    assert drift(before, {**before, "memory": 536870912}) == ["memory: 0 -> 536870912"]
    assert drift(before, {**before, "cgroup limits": {"pids.max": "8"}}) == [
        "cgroup limits: {'pids.max': '9'} -> {'pids.max': '8'}"]
    assert drift(before, {**before, "cgroup limits": {}}) == []  # unreadable: not compared


def test_a_socket_is_adopted_only_if_it_is_the_engine_s_own(tmp_path: Path) -> None:
    dirs = SocketDirs(tmp_path / "run", None)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(dirs.engine / "engine.sock"))
    listener.listen()
    dirs.adopt()
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(dirs.socket))  # the moved socket still reaches the listener
    client.close()
    listener.close()
    dirs.reset()
    other = tmp_path / "other.sock"
    elsewhere = socket.socket(socket.AF_UNIX)
    elsewhere.bind(str(other))
    (dirs.engine / "engine.sock").symlink_to(other)
    with pytest.raises(LaunchRefused, match="a symlink"):
        dirs.adopt()
    (dirs.engine / "engine.sock").write_text("x")
    with pytest.raises(LaunchRefused, match="not a socket"):
        dirs.adopt()
    (dirs.engine / "engine.sock").mkdir()
    with pytest.raises(LaunchRefused, match="a directory"):
        dirs.adopt()
    assert not dirs.socket.exists() and other.exists()
    dirs.owner = os.geteuid() + 1  # a socket, but not the engine's
    stranger = socket.socket(socket.AF_UNIX)
    stranger.bind(str(dirs.engine / "engine.sock"))
    with pytest.raises(LaunchRefused, match=f"a socket of uid {os.geteuid()}"):
        dirs.adopt()
    stranger.close()
    elsewhere.close()
    dirs.remove()


GPU = frozenset({"/dev/dri", "/dev/kfd"})


@pytest.mark.parametrize(
    ("change", "message", "action"),
    [
        ({"engine": None}, "no container tool", "apt-get install -y podman"),
        ({"engine_works": False}, "does not answer", "podman.socket"),
        ({"engine": DOCKER, "engine_works": False}, "daemon cannot be reached",
         "usermod -aG docker"),
        ({"present_devices": frozenset({"/dev/dri"})}, "/dev/kfd missing", "modprobe amdgpu"),
        ({"engine": DOCKER, "userns_remap": True}, "userns-remap", "use podman"),
        ({"gpu_group_ids": ()}, "no render or video group", "udev"),
        ({"engine": replace(PODMAN, rootless=True), "groups": frozenset({"video"})},
         "render", "usermod -aG render,video"),
        ({"engine": replace(PODMAN, rootless=True), "oci_runtime": "runc"},
         "keep-groups needs crun", "apt-get install -y crun"),
        ({"selinux_enforcing": True, "selinux_devices_allowed": False}, "SELinux",
         "setsebool -P container_use_devices true"),
    ],
)
def test_setup_assistant_names_the_fix(change: dict[str, object], message: str,
                                       action: str) -> None:
    problem_ = check(replace(FACTS, **change), GPU)  # type: ignore[arg-type]
    assert problem_ is not None
    assert message in problem_.message and action in problem_.action
    assert check(FACTS, GPU) is None


def test_each_curated_model_brings_every_file_its_engine_reads(tmp_path: Path) -> None:
    """A curated model is one catalogue entry with all its files: laid out as a pull
    leaves them (one snapshot folder), its contract finds each file it mounts."""
    from lemoncore.models import Checkpoint

    from lemon_plugin_oci import _curated_models

    curated = _curated_models()
    assert {m.recipe for m in curated} == {"ds4", "rocmfpx", "halogen"}
    for model in curated:
        snapshot = tmp_path / model.name
        name = Checkpoint.parse(model.checkpoint).filename
        for file in (name, *model.files):
            (snapshot / file).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / file).write_text("x")
        assert set(model.sha256) <= {name, *model.files}
        contract = CONTRACTS[model.recipe, "rocm"]
        found = model_files(contract.files, snapshot / name, name, snapshot,
                            (tmp_path.resolve(),), owned=True)
        assert len(found.mounts) == 1 + len(model.files), model.name


@pytest.mark.anyio
async def test_tag_digest_follows_docker_hub_s_token_challenge(anyio_backend: str) -> None:
    """The registry exchange as Docker Hub answers it (distribution's token auth spec):
    401 with a Bearer challenge, an anonymous token from the realm, the digest header;
    official images live under library/; a registry that omits the header gets its
    manifest hashed."""
    import hashlib

    import httpx

    from lemon_plugin_oci.registry import tag_digest

    seen: list[str] = []
    manifest = b'{"schemaVersion": 2}'

    def hub(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url}")
        if request.url.host == "auth.docker.io":
            assert request.url.params["scope"] == "repository:library/ubuntu:pull"
            return httpx.Response(200, json={"token": "t0k"})
        if request.headers.get("authorization") != "Bearer t0k":
            return httpx.Response(401, headers={"www-authenticate": (
                'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                'scope="repository:library/ubuntu:pull"')})
        if request.method == "HEAD" and "noheader" not in str(request.url):
            return httpx.Response(200, headers={"docker-content-digest": f"sha256:{'d' * 64}"})
        return httpx.Response(200, content=manifest)

    async with httpx.AsyncClient(transport=httpx.MockTransport(hub)) as client:
        assert await tag_digest(client, "docker.io/ubuntu", "24.04") == f"sha256:{'d' * 64}"
        assert seen[0] == "HEAD https://registry-1.docker.io/v2/library/ubuntu/manifests/24.04"
        hashed = await tag_digest(client, "docker.io/ubuntu", "noheader")
    assert hashed == f"sha256:{hashlib.sha256(manifest).hexdigest()}"


SHA = "b" * 64


def declaring(**entry: object) -> str:
    return json.dumps([{"name": "Qwen-Declared", "checkpoint": "org/repo:w.hgn",
                        "files": {"w.hgn": {"size": 10, "sha256": SHA},
                                  "tokenizer/tokenizer.json": {"size": 2, "sha256": SHA}},
                        **entry}])


def test_an_image_label_declares_installable_models_of_its_backend() -> None:
    [model] = model_label.models(declaring(labels=["chat"], description="Small."), "halogen",
                              "rocm", "ghcr.io/x/halogen@sha256:1")
    assert model.checkpoint == "org/repo:w.hgn" and model.files == ("tokenizer/tokenizer.json",)
    assert model.sha256 == {"w.hgn": SHA, "tokenizer/tokenizer.json": SHA}
    assert model.sizes == {"w.hgn": 10, "tokenizer/tokenizer.json": 2}
    assert model.recipe == "halogen" and model.recipe_options == {"backend": "rocm"}
    assert model.description == "Small. Declared by the image ghcr.io/x/halogen@sha256:1."
    # Lemonade's earlier {name, path} form is valid and declares nothing to fetch
    assert model_label.models('[{"name": "m", "path": "/models/m.gguf"}]', "r", "b", "i") == ()


@pytest.mark.parametrize(("entry", "why"), [
    ({"checkpoint": "file:/etc/shadow"}, "Hugging Face"),
    ({"checkpoint": "https://evil.example/x:w.hgn"}, "Hugging Face"),
    ({"checkpoint": "org/repo:other.gguf"}, "the checkpoint's 'other.gguf' included"),
    ({"files": {"w.hgn": {"size": 10}}}, "sha256 of 64"),
    ({"files": {"w.hgn": {"size": -1, "sha256": SHA}}}, "positive integer size"),
    ({"files": {"w.hgn": {"size": 10, "sha256": SHA},
                "../../x": {"size": 1, "sha256": SHA}}}, "without '..'"),
    ({"name": "a b"}, "name: String should match pattern"),
    ({"url": "http://x"}, "unknown keys url"),
    ({"labels": "chat"}, "labels"),
])
def test_a_bad_models_label_says_what_is_wrong(entry: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        model_label.models(declaring(**entry), "r", "b", "i")
    with pytest.raises(LaunchRefused, match=r"org\.lemonade\.models"):
        narrowed(CONTRACT, {"org.lemonade.models": declaring(**entry)}, "img")


def test_a_models_label_is_size_capped() -> None:
    many = json.dumps([{"name": f"m{i}", "path": f"/models/m{i}"} for i in range(17)])
    with pytest.raises(ValueError, match="more than 16"):
        model_label.parse(many)
    with pytest.raises(ValueError, match="longer than"):
        model_label.parse(" " * (model_label.MAX_LABEL + 1))
