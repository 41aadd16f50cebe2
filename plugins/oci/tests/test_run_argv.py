"""The container tool's command line, as pure decisions: ``run_argv`` from a run request
(hardened for podman, and docker's user, groups, tmpfs and proxies), the identity the
engine runs as, and the launch hook from a two-GPU host description to the argv: only the
chosen GPU, each contract's command, files and memlock, sidecar and split model files,
relabelling and container names; and each engine command checked against the engine's
own parser (the DS4 stand-in's, the NathanW fork's flags)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from lemoncore.options import declared, resolve
from lemoncore.plugin import (
    Backend,
    DeviceKind,
    HostDevice,
    HostInfo,
    LaunchContext,
    LaunchRefused,
    ModelInfo,
    Recipe,
)

from lemon_plugin_oci import OciPlugin, container_name, memory
from lemon_plugin_oci.contracts import CONTRACTS, HALOGEN, EnvSetting, ModelFile, ctx_size
from lemon_plugin_oci.engine import Identity, Mount, RunRequest, identity, run_argv
from lemon_plugin_oci.launching import model_files, run_request
from lemon_plugin_oci.policy import narrowed
from lemon_plugin_oci.recipes import CONTRIBUTIONS, RECIPES
from lemon_plugin_oci.setup import Facts

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from contract_support import DIGEST, DOCKER, FACTS, PODMAN

REQUEST = RunRequest(
    name="lemon-x-m",
    image=f"docker.io/kyuz0/t@sha256:{DIGEST}",
    command=("llama-server", "-m", "/models/m.gguf"),
    socket_dir="/run/s",
    devices=(("/dev/dri/renderD129", "/dev/dri/renderD129"),),
    env={"ROCR_VISIBLE_DEVICES": "GPU-1"},
    mounts=(
        Mount("/cache/m.gguf", "/models/m.gguf", relabel=True),
        Mount("/home/u/m2.gguf", "/models/m2.gguf"),
    ),
    labels={"org.lemoncore.owner": "abc"},
    identity=Identity(userns="keep-id", keep_groups=True),
)


def test_podman_run_is_hardened() -> None:
    argv = run_argv(PODMAN, REQUEST)
    for flag in (
        "--init",
        "--read-only",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--network=none",
        "--pull=never",
        "--http-proxy=false",
        "--ipc=private",
        "--pids-limit=4096",
        "--stop-timeout=15",
        "--userns=keep-id",
    ):
        assert flag in argv
    assert argv[argv.index("--group-add") + 1] == "keep-groups"
    assert argv[argv.index("--device") + 1] == "/dev/dri/renderD129:/dev/dri/renderD129"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == [  # only lemoncore's own file is relabelled, both read-only
        "type=bind,source=/cache/m.gguf,target=/models/m.gguf,readonly=true,relabel=shared",
        "type=bind,source=/home/u/m2.gguf,target=/models/m2.gguf,readonly=true",
    ]
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
    assert identity(rootless_podman, 1000, 100, ()) == Identity(userns="keep-id", keep_groups=True)
    assert identity(replace(DOCKER, rootless=True), 1000, 100, ()) == Identity()


TWO_GPUS = HostInfo(
    "linux",
    (
        HostDevice(DeviceKind.CPU, "Ryzen AI Max+ 395"),
        HostDevice(
            DeviceKind.AMD_GPU,
            "amd card0",
            "gfx1100",
            0,
            render_node="/dev/dri/renderD128",
            uuid="GPU-00000000000000aa",
        ),
        HostDevice(
            DeviceKind.AMD_GPU,
            "amd card1",
            "gfx1151",
            1,
            render_node="/dev/dri/renderD129",
            uuid="GPU-1b2c3d4e5f607182",
        ),
    ),
)


def backend_of(recipe: str, backend: str) -> tuple[Recipe, Backend]:
    for r in RECIPES:
        if r.name == recipe:
            return r, next(b for b in r.backends if b.name == backend)
    llamacpp = Recipe(
        name="llamacpp", display_name="llama.cpp", backends=(), options=(ctx_size(4096),)
    )
    return llamacpp, next(c.backend for c in CONTRIBUTIONS if c.backend.name == backend)


def launched_argv(
    tmp_path: Path,
    recipe: str,
    backend: str,
    facts: Facts = FACTS,
    config: dict[str, object] | None = None,
) -> list[str]:
    """The launch hook, then the start's request, for a model beside its sidecar files."""
    models = tmp_path / "models"
    if not models.exists():
        (models / "tokenizer").mkdir(parents=True)
        for name in ("m.gguf", "m.overlay.hgn", "tokenizer/tokenizer.json"):
            (models / name).write_text("x")
    model = ModelInfo(name="m", recipe=recipe, checkpoint=f"file:{models}/m.gguf")
    r, b = backend_of(recipe, backend)
    options, admin = resolve(
        declared(r, b), {"ctx_size": 4096, **(config or {})}, [], f"recipes.{recipe}"
    )  # as the core resolves them
    context = LaunchContext(
        models / "m.gguf",
        options,
        tmp_path / "install",
        "127.0.0.1",
        0,
        1,
        installed={
            "artifacts": [{"url": f"docker://docker.io/kyuz0/x:t@sha256:{DIGEST}"}],
            "result": "sha256:id",
        },
        instance="abc",
        config=admin,
        model_owned=True,
        model_dir=models,
        model_roots=(models.resolve(),),
    )
    server = OciPlugin(facts=lambda: facts).launch(r, b, model, context, TWO_GPUS)
    request = run_request(narrowed(server.contract, None, "img"), server.inputs)
    server.sockets.remove()
    return run_argv(facts.engine or PODMAN, request)


def values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.mark.parametrize(("recipe", "backend"), list(CONTRACTS))
def test_only_the_chosen_gpu_reaches_each_engine(tmp_path: Path, recipe: str, backend: str) -> None:
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
    assert (
        f"--user={os.geteuid()}:{os.getegid()}" if os.geteuid() else "--user=65534:65534"
    ) in argv


def test_each_contract_s_command_and_files(tmp_path: Path) -> None:
    ds4 = launched_argv(tmp_path, "ds4", "rocm")
    assert ds4[ds4.index("ds4-server") :][:10] == [
        "ds4-server",
        "-m",
        "/models/m.gguf",
        "--ctx",
        "4096",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--ssd-streaming",
    ]
    assert "--cap-add=SYS_PTRACE" in ds4
    assert "DS4_ROCM_ENABLE_MXFP4_TILE4=1" in values(ds4, "--env")
    halogen = launched_argv(tmp_path, "halogen", "rocm", config={"kv_pool_positions": 262144})
    env = values(halogen, "--env")
    for expected in (
        "HALOGEN_CHECKPOINT=/models/m.gguf",
        "HALOGEN_CK_OVERLAY=/models/m.overlay.hgn",
        "HALOGEN_TOKENIZER=/models/tokenizer",
        "HALOGEN_API_PORT=8731",
        "HALOGEN_KV_POOL_POSITIONS=262144",
        "HALOGEN_CTX=4096",
    ):
        assert expected in env
    mounts = values(halogen, "--mount")
    assert any("target=/models/tokenizer/tokenizer.json" in m for m in mounts)
    assert halogen[-2:] == [f"docker.io/kyuz0/x@sha256:{DIGEST}", "all"]  # entrypoint mode
    nathanw = launched_argv(tmp_path, "llamacpp", "nathanw")
    assert nathanw[nathanw.index("llama-server") :][:7] == [  # answers name the served model
        "llama-server",
        "-m",
        "/models/m.gguf",
        "--alias",
        "m",
        "--host",
        "/run/lemon/engine.sock",
    ]


def test_memlock_is_asked_for_only_where_the_host_can_grant_it(tmp_path: Path) -> None:
    argv = launched_argv(tmp_path, "halogen", "rocm", facts=replace(FACTS, memlock_grantable=False))
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
    found = model_files(
        (ModelFile("{file}"),), first, first.name, models, (models.resolve(),), owned=False
    )
    assert [m.target for m in found.mounts] == [
        f"/models/big-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert found.model == "/models/big-00001-of-00003.gguf"
    (models / "big-00003-of-00003.gguf").unlink()
    with pytest.raises(LaunchRefused, match=r"big-00003-of-00003\.gguf beside"):
        model_files(
            (ModelFile("{file}"),), first, first.name, models, (models.resolve(),), owned=False
        )


def test_only_files_in_lemoncore_s_own_root_are_relabelled(tmp_path: Path) -> None:
    cache, admin = tmp_path / "cache", tmp_path / "admin"
    cache.mkdir()
    admin.mkdir()
    (cache / "m.gguf").write_text("x")
    (admin / "m.overlay.hgn").write_text("x")
    (cache / "m.overlay.hgn").symlink_to(admin / "m.overlay.hgn")
    found = model_files(
        HALOGEN.files[:2], cache / "m.gguf", "m.gguf", cache, (cache, admin), owned=True
    )
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


STANDINS = Path(__file__).with_name("standins")


def standin(name: str) -> ModuleType:
    """An engine stand-in of the test image as a module, not run (``common`` from here)."""
    if str(STANDINS) not in sys.path:
        sys.path.append(str(STANDINS))
    loader = SourceFileLoader(name.replace("-", "_"), str(STANDINS / name))
    module = ModuleType(loader.name)
    module.__file__ = loader.path
    loader.exec_module(module)
    return module


def test_the_ds4_command_is_one_the_pinned_image_s_ds4_server_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rocm-7.14 image builds kyuz0/ds4 main, not antirez/ds4 @8d57664 (which refuses
    --ssd-streaming, --prefill-chunk, --ssd-streaming-cache-experts): its parse_options,
    as the ds4-server stand-in reproduces it, takes the whole command, expert cache
    included (half of a 60 GiB pool, as lemoncore renders it)."""
    found = memory.Memory(200 * memory.GIB, gtt=60 * memory.GIB)
    monkeypatch.setattr(memory, "read", lambda *_: found)
    argv = launched_argv(tmp_path, "ds4", "rocm")
    command = argv[argv.index("ds4-server") + 1 :]
    assert command[-5:] == [
        "--ssd-streaming",
        "--prefill-chunk",
        "2048",
        "--ssd-streaming-cache-experts",
        "30GB",
    ]
    ds4 = standin("ds4-server")
    settings = {"model": "/models/m.gguf", "ctx": "4096", "host": "127.0.0.1", "port": "8000"}
    assert ds4.parse(command) == settings
    # the fork's other streaming and GPU switches, as Cockpit's server_runner.py sends them
    assert ds4.parse(["--rocm", "--ssd-streaming-full-layers", "2", "--ssd-streaming-cold"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cuda"], "unknown option: --cuda"),  # a -DDS4_ROCM_BUILD build: --rocm instead
        (["--role", "worker"], "unknown option: --role"),  # not reproduced: refused here
        (["--ssd-streaming-full-layers"], "missing value for --ssd-streaming-full-layers"),
        (["--ssd-streaming-cache-experts", "0GB"], "a positive count or <number>GB"),
        (["--ssd-streaming-cache-experts", "30G"], "a positive count or <number>GB"),
        (["--prefill-chunk", "0"], "invalid value for --prefill-chunk: 0"),
        (["--ctx", "4k"], "invalid value for --ctx: 4k"),
        (["--backend", "cuda"], "valid server backends are: metal, rocm, cpu"),
        (["--kv-cache-cold-max-tokens", "100"], "must be 0 or >= --kv-cache-min-tokens"),
    ],
)
def test_the_ds4_server_stand_in_refuses_what_kyuz0_ds4_refuses(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """kyuz0/ds4 ds4_server.c @67f2ca9 parse_options: exit 2 with its own message."""
    with pytest.raises(SystemExit) as exited:
        standin("ds4-server").parse(["-m", "m.gguf", *extra])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_ds4_server_fails_on_a_socket_host_only_after_loading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """listen_on is IPv4 only and runs after the engine opened: a unix socket path as
    --host is taken by the parser and fails once the model is in, before serving."""
    ds4 = standin("ds4-server")
    opened: list[str] = []
    monkeypatch.setattr(ds4.common, "require_rocm_device", lambda: opened.append("rocm"))
    monkeypatch.setattr(ds4.common, "require_host_ipc", lambda: opened.append("ipc"))
    monkeypatch.setattr(ds4.common, "llama_server", lambda *a: pytest.fail("served"))
    monkeypatch.setattr(sys, "argv", ["ds4-server", "--host", "/run/lemon/engine.sock"])
    with pytest.raises(SystemExit) as exited:
        ds4.main()
    assert exited.value.code == 1 and opened == ["rocm", "ipc"]
    err = capsys.readouterr().err
    assert "ds4-server: failed to listen on /run/lemon/engine.sock:8000: Invalid argument" in err


# Nathanw1014/llama.cpp common/arg.cpp @cc961f7 and @0f1424d, common_params_parser_init:
# the server flags NATHANW sends and the values their handlers take (None: any).
NATHANW_FORK = {
    "-m": None,
    "--alias": None,
    "--host": None,
    "--ctx-size": None,
    "--jinja": (),
    "-ngl": None,
    "-fa": {"on", "off", "auto", "enabled", "disabled", "true", "false", "1", "0", "-1"},
    "--load-mode": {"auto", "none", "mmap", "mlock", "mmap+mlock", "dio"},
}


def test_the_nathanw_command_is_the_fork_s_own_cli(tmp_path: Path) -> None:
    """Every flag lemoncore sends the NathanW image is one its fork defines, with a value
    the fork's handler takes; none of the forms it deprecates (--mmap/--no-mmap/--mlock,
    'DEPRECATED in favor of --load-mode'); the host a .sock path ('bind to an UNIX socket
    if the address ends with .sock')."""
    argv = launched_argv(tmp_path, "llamacpp", "nathanw")
    command = argv[argv.index("llama-server") + 1 :]
    i = 0
    while i < len(command):
        flag = command[i]
        assert flag in NATHANW_FORK, flag
        accepted = NATHANW_FORK[flag]
        if accepted == ():
            i += 1
            continue
        assert accepted is None or command[i + 1] in accepted, (flag, command[i + 1])
        i += 2
    assert values(command, "--host")[0].endswith(".sock")


def run_standin(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A stand-in run here as the image runs it (``common`` from here), until it exits."""
    script = (
        f"import runpy, sys; sys.path.insert(0, {str(STANDINS)!r}); "
        f"sys.argv = [{name!r}, *sys.argv[1:]]; "
        f"runpy.run_path({str(STANDINS / name)!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-I", "-c", script, *args],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), **env},
        timeout=60,
    )


def test_halogen_refuses_a_context_past_the_native_one_without_rope_yarn(
    tmp_path: Path,
) -> None:
    """HG deploy/entrypoint.sh @04f446b: before any mode, exit 2; an explicit overlay or
    tokenizer must exist (only the defaults warn or fall back)."""
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "tokenizer.json").write_text("{}")
    (tmp_path / "m.hgn").write_text("x")
    base = {"HALOGEN_CHECKPOINT": str(tmp_path / "m.hgn"), "HALOGEN_CK_OVERLAY": "none"}
    past = run_standin("halogen-entrypoint", **base, HALOGEN_CTX="524288")
    assert past.returncode == 2 and "need HALOGEN_ROPE_YARN=<factor>" in past.stderr
    overlay = run_standin("halogen-entrypoint", **{**base, "HALOGEN_CK_OVERLAY": "/nope.hgn"})
    assert overlay.returncode == 1 and "HALOGEN_CK_OVERLAY=/nope.hgn does not exist" in (
        overlay.stderr
    )
    tokenizer = run_standin("halogen-entrypoint", **base, HALOGEN_TOKENIZER=str(tmp_path))
    assert tokenizer.returncode == 1 and f"no tokenizer.json in {tmp_path}" in tokenizer.stderr


def test_rocmfpx_refuses_what_its_fork_predates() -> None:
    """charlie12345/ROCmFPX @baed43e common/arg.cpp defines neither --load-mode nor, e.g.,
    --cors-origins: 'error: invalid argument', exit 1, before any device is opened."""
    for flag in ("--load-mode", "--cors_origins"):
        refused = run_standin("rocmfpx-llama-server", "-m", "m.gguf", flag, "x")
        assert refused.returncode == 1
        assert f"error: invalid argument: {flag.replace('_', '-')}" in refused.stderr
