"""Rootless podman, the desktop setup: lemoncore run by a non-root user (on CI the user
``scripts/rootless-user`` makes; else the user running the tests) starts the engine image in
a rootless container, chats over its unix socket and stops it, and what the real container
got is read from the host: the engine is the user (``--userns=keep-id``), its socket is the
user's in directories only the user can enter, the model is read-only, and with a GPU the
user's render group comes along (``--group-add keep-groups``, which needs crun: under runc
the group is lost and lemoncore refuses).

The flags, from podman-run(1) (podman 4.3): ``--userns=keep-id`` "creates a user namespace
where the current rootless user's UID:GID are mapped to the same values in the
container"; ``--group-add keep-groups`` "tells Podman to keep the supplementary group
access ... If file systems or devices are only accessible by the rootless user's group,
this flag tells the OCI runtime to pass the group access into the container. Currently only
available with the crun OCI runtime"; ``relabel=shared`` (``--mount``) and ``:Z`` (``-v``)
label the content for SELinux, shared or private to the container, and change nothing
where SELinux is off (go-selinux's ``label.Relabel`` returns at once), as here."""

from __future__ import annotations

import grp
import itertools
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from containers_support import CHAT, lock_for, require_container_tools
from rootless_support import RootlessPodman

require_container_tools()

SELINUX = Path("/sys/fs/selinux/enforce")
DEBIAN_PYTHON = Path("/usr/bin/python3")  # one nobody may run (the tests' may be root's)
HEALTH = (  # GET /health over the engine's socket, from a process of its own
    "import socket; s = socket.socket(socket.AF_UNIX); s.connect({!r}); "
    "s.sendall(b'GET /health HTTP/1.0\\r\\n\\r\\n'); print(s.recv(64).decode())"
)


def install_and_chat(url: str, model: Path) -> dict[str, Any]:
    """Install the backend, register ``model``, chat once: the loaded model's health."""
    installed = httpx.post(url + "/api/v1/install", json={"backend": "boxed:llama"}, timeout=300)
    assert installed.status_code == 200, installed.text
    pulled = httpx.post(
        url + "/api/v1/pull",
        json={"model_name": "boxed-smol", "recipe": "boxed", "checkpoint": f"file:{model}"},
        timeout=60,
    )
    assert pulled.status_code == 200, pulled.text
    reply = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=300)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] > 0
    loaded: list[dict[str, Any]] = httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
    return loaded[0]


def engine_process(rootless: RootlessPodman, name: str, runtime: str) -> int:
    """The engine's host pid (``podman top``: the llama-server row; pid 1 is --init's)."""
    rows = rootless.podman("top", name, "hpid", "args", runtime=runtime).splitlines()[1:]
    (hpid,) = [row.split()[0] for row in rows if row.split()[1] == "llama-server"]
    return int(hpid)


def lines(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/status").read_text().splitlines()


def status(pid: int) -> dict[str, list[int]]:
    """``Uid``, ``Gid`` and ``Groups`` of a process, as the host sees them."""
    return {
        key: [int(v) for v in value.split()]
        for key, _, value in (line.partition(":") for line in lines(pid))
        if key in {"Uid", "Gid", "Groups"}
    }


def the_socket(rootless: RootlessPodman) -> Path:
    (found,) = (rootless.runtime_dir / "lemoncore").glob("c-*/lemon/engine.sock")
    return found


@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_a_rootless_engine_is_the_user_behind_a_socket_only_the_user_reaches(
    rootless: RootlessPodman, images: dict[str, str], runtime: str
) -> None:
    model = rootless.model()
    lock = lock_for(rootless.registry, "llama", images["plain"])
    with rootless.serving(lock, runtime) as url:
        server = install_and_chat(url, model)
        argv = server["launch_command"]
        name = argv[argv.index("--name") + 1]
        assert "--userns=keep-id" in argv and not any(a.startswith("--user=") for a in argv)
        inspected = json.loads(rootless.podman("container", "inspect", name, runtime=runtime))[0]
        assert inspected["OCIRuntime"] == runtime
        # keep-id: the user's uid and gid inside, mapped to the user's own on the host
        assert inspected["Config"]["User"] == f"{rootless.uid}:{rootless.gid}"
        assert f"{rootless.uid}:0:1" in inspected["HostConfig"]["IDMappings"]["UidMap"]
        pid = engine_process(rootless, name, runtime)
        ids = status(pid)
        assert ids["Uid"] == [rootless.uid] * 4 and ids["Gid"] == [rootless.gid] * 4
        uid_map = [line.split() for line in Path(f"/proc/{pid}/uid_map").read_text().splitlines()]
        assert [str(rootless.uid), str(rootless.uid), "1"] in uid_map  # host view: itself
        inside = rootless.podman(
            "exec",
            name,
            "python3",
            "-I",
            "-c",
            "import os; print(os.getuid(), os.getgid())",
            runtime=runtime,
        )
        assert inside == f"{rootless.uid} {rootless.gid}"
        top = rootless.podman("top", name, "user", "huser", runtime=runtime).splitlines()[1:]
        assert {tuple(row.split()) for row in top} == {(rootless.user, rootless.user)}

        # the socket: bound by the engine, so the user's; moved where the engine cannot
        # reach, in directories only the user may enter
        sock = the_socket(rootless)
        info = os.lstat(sock)
        assert stat.S_ISSOCK(info.st_mode)
        assert (info.st_uid, info.st_gid) == (rootless.uid, rootless.gid)
        for directory in (sock.parent, sock.parent.parent, sock.parent.parent.parent):
            mode = os.lstat(directory)
            assert (mode.st_uid, stat.S_IMODE(mode.st_mode)) == (rootless.uid, 0o700), directory
        engine_dir = sock.parent.parent / "engine"
        assert (os.lstat(engine_dir).st_uid, stat.S_IMODE(os.lstat(engine_dir).st_mode)) == (
            rootless.uid,
            0o700,
        )
        print(
            f"{runtime}: engine pid {pid} uid/gid {ids['Uid'][0]}/{ids['Gid'][0]} groups "
            f"{ids['Groups']}; socket {sock} uid {info.st_uid} gid {info.st_gid} mode "
            f"{stat.filemode(info.st_mode)} ({oct(stat.S_IMODE(info.st_mode))})"
        )
        health = HEALTH.format(str(sock))
        mine = rootless.run(sys.executable, "-I", "-c", health, runtime=runtime)
        assert mine.stdout.startswith("HTTP/1.1 200"), mine.stderr
        if os.geteuid() == 0 and DEBIAN_PYTHON.exists():  # another user cannot reach it
            nobody = rootless.run(str(DEBIAN_PYTHON), "-I", "-c", health, as_uid=65534)
            assert "PermissionError" in nobody.stderr, nobody.stderr

        # the model: mounted read-only, relabelled (shared) as lemoncore's own file
        mount = next(a for a in argv if a.startswith("type=bind,") and "/models/" in a)
        assert mount.endswith(",readonly=true,relabel=shared") and str(model) in mount
        (mounted,) = [m for m in inspected["Mounts"] if m["Destination"] == "/models/smol.gguf"]
        assert mounted["Source"] == str(model) and mounted["RW"] is False
        write = rootless.run(
            "podman",
            "exec",
            name,
            "python3",
            "-I",
            "-c",
            "open('/models/smol.gguf', 'r+b')",
            runtime=runtime,
        )
        assert "Read-only file system" in write.stderr, write.stderr
        if SELINUX.exists() and SELINUX.read_text().strip() == "1":
            model_label = os.getxattr(model, "security.selinux").decode().rstrip("\0")
            dir_label = os.getxattr(engine_dir, "security.selinux").decode().rstrip("\0")
            assert model_label.split(":")[2:] == ["container_file_t", "s0"], model_label
            assert dir_label.split(":")[2] == "container_file_t", dir_label
            assert len(dir_label.split(":")) == 5, dir_label  # Z: the container's categories
        else:
            print(f"{runtime}: SELinux is off here: relabel=shared and :Z change no label")

        # the drift check (each second) saw nothing to relaunch: the same container
        assert rootless.podman("inspect", "--format", "{{.Id}}", name) == inspected["Id"]
        # rootless on cgroup v1 podman drops resource limits ("Resource limits are not
        # supported and ignored on cgroups V1 rootless systems": podman
        # pkg/specgen/generate/validate.go): the engine then shares lemoncore's cgroup
        hwm = next(v for k, _, v in (line.partition(":") for line in lines(pid)) if k == "VmHWM")
        print(
            f"{runtime}: PidsLimit {inspected['HostConfig']['PidsLimit']}, cgroup "
            f"{inspected['State']['CgroupPath']!r}; lemoncore's peak_memory_bytes "
            f"{server['peak_memory_bytes']}, the engine's VmHWM {hwm.strip()}"
        )
        unloaded = httpx.post(url + "/api/v1/unload", json={"model_name": "boxed-smol"})
        assert unloaded.status_code == 200, unloaded.text
        assert rootless.podman("ps", "-a", "--filter", f"name={name}", "--format", "{{.ID}}") == ""
        assert not sock.parent.parent.exists()


OPEN_DEVICES = (
    "import os\n"
    "for path in ('/dev/kfd', '/dev/dri/renderD128'):\n"
    "    os.close(os.open(path, os.O_RDWR))\n"
    "print(os.getuid(), os.getgid(), sorted(os.getgroups()))\n"
)


def test_keep_groups_brings_the_users_render_group_to_a_rootless_gpu_engine(
    rootless: RootlessPodman, images: dict[str, str]
) -> None:
    """The GPU's nodes are root:render 0660, so only a member of render opens them. The
    user is one; with keep-groups (crun) the engine still is, on the host's books, and
    inside it opens both nodes; the unmapped groups show there as the overflow gid."""
    if os.geteuid() != 0:
        pytest.skip("making stand-in device nodes needs root (mknod)")
    render = grp.getgrnam("render").gr_gid
    assert render in rootless.groups  # scripts/rootless-user adds the user to render
    gpu = rootless.stand_in_gpu()
    lock = lock_for(rootless.registry, "llama", images["plain"])
    with rootless.serving(lock, "crun", gpu) as url:
        server = install_and_chat(url, rootless.model())
        argv = server["launch_command"]
        name = argv[argv.index("--name") + 1]
        pairs = set(itertools.pairwise(argv))
        assert {
            ("--group-add", "keep-groups"),
            ("--device", f"{gpu[0]}:/dev/dri/renderD128"),
            ("--device", f"{gpu[1]}:/dev/kfd"),
        } <= pairs, argv
        pid = engine_process(rootless, name, "crun")
        ids = status(pid)
        assert set(ids["Groups"]) == set(rootless.groups), ids  # the host's gids, all kept
        inside = rootless.podman("exec", name, "python3", "-I", "-c", OPEN_DEVICES)
        overflow = int(Path("/proc/sys/kernel/overflowgid").read_text())
        print(f"keep-groups: host Groups {ids['Groups']}; inside (uid gid groups): {inside}")
        assert inside == (
            f"{rootless.uid} {rootless.gid} "
            f"{sorted([rootless.gid] + [overflow] * (len(rootless.groups) - 1))}"
        )
        # (podman top's hgroups maps the overflow gid back through the container's gid map,
        # 65534 -> a subordinate gid, so the host's own /proc is what is read above)
        assert httpx.post(url + "/api/v1/unload", json={"model_name": "boxed-smol"}).is_success


def test_under_runc_keep_groups_is_lost_so_lemoncore_refuses_a_rootless_gpu_engine(
    rootless: RootlessPodman, images: dict[str, str]
) -> None:
    """podman-run(1): keep-groups is "only available with the crun OCI runtime". runc
    accepts it and drops the groups: the same container cannot open the render group's
    node under runc and can under crun. So lemoncore, rootless under runc, refuses a GPU
    engine at install and names crun."""
    if os.geteuid() != 0:
        pytest.skip("making stand-in device nodes needs root (mknod)")
    render_node, kfd = rootless.stand_in_gpu()
    image = f"{rootless.registry.host}/lemontest/llama@{images['plain']}"
    rootless.podman("pull", "-q", image)
    opened = {}
    for runtime in ("crun", "runc"):
        opened[runtime] = rootless.run(
            "podman",
            "run",
            "--rm",
            "--network=none",
            "--userns=keep-id",
            "--group-add",
            "keep-groups",
            "--device",
            f"{render_node}:/dev/dri/renderD128",
            "--device",
            f"{kfd}:/dev/kfd",
            image,
            "python3",
            "-I",
            "-c",
            OPEN_DEVICES,
            runtime=runtime,
        )
        print(f"{runtime}: rc {opened[runtime].returncode} {opened[runtime].stdout.strip()}")
    assert opened["crun"].returncode == 0, opened["crun"].stderr
    assert "PermissionError" in opened["runc"].stderr, opened["runc"].stderr
    lock = lock_for(rootless.registry, "llama", images["plain"])
    with rootless.serving(lock, "runc", (render_node, kfd)) as url:
        info = httpx.get(url + "/api/v1/system-info").json()
        backend = info["recipes"]["boxed"]["backends"]["llama"]
        assert backend["state"] == "action_required"
        assert "--group-add keep-groups needs crun; podman uses runc" in backend["message"]
        assert 'runtime = "crun"' in backend["action"]
        installed = httpx.post(url + "/api/v1/install", json={"backend": "boxed:llama"})
        assert installed.status_code == 400 and "needs crun" in installed.text, installed.text
