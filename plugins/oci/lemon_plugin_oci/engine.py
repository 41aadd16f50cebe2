"""The container tool (podman first, docker as fallback) and the one function that holds
every podman/docker difference in the run command."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import anyio

from lemoncore.launch import LaunchRefused

SOCKET_DIR = "/run/lemon"
SOCKET = f"{SOCKET_DIR}/engine.sock"


@dataclass(frozen=True)
class Engine:
    kind: str  # podman | docker
    exe: str


def find_engine(which: Callable[[str], str | None] = shutil.which) -> Engine | None:
    for kind in ("podman", "docker"):
        if (exe := which(kind)) is not None:
            return Engine(kind, exe)
    return None


@dataclass(frozen=True)
class Mount:
    """A host file bind-mounted read-only. ``relabel`` (podman, SELinux) only for files
    lemoncore owns: relabelling a user's file would change it for every other program."""

    source: str
    target: str
    relabel: bool = False


@dataclass(frozen=True)
class RunRequest:
    """Everything a container run needs, decided before the command is built."""

    name: str
    image: str  # repository@sha256:...
    command: tuple[str, ...]
    socket_dir: str
    devices: tuple[str, ...] = ()
    ipc_host: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    group_ids: tuple[int, ...] = ()  # docker: numeric video/render GIDs
    stop_timeout: int = 15
    pids_limit: int = 4096


def run_argv(engine: Engine, req: RunRequest) -> list[str]:
    """The run command. Every flag is a decision; see the OCI plugin's README for why."""
    podman = engine.kind == "podman"
    argv = [engine.exe, "run", "-d", "--name", req.name,
            "--init", "--read-only", "--cap-drop=all", "--security-opt=no-new-privileges",
            "--network=none", f"--pids-limit={req.pids_limit}",
            f"--stop-timeout={req.stop_timeout}", "--pull=never",
            "--ipc=host" if req.ipc_host else "--ipc=private"]
    if podman:
        argv.append("--http-proxy=false")
    else:
        # docker adds no tmpfs to a read-only container; these paths are inside it
        argv += ["--tmpfs", "/tmp", "--tmpfs", "/run"]  # noqa: S108
    for device in req.devices:
        argv += ["--device", device]
    if req.devices:
        argv += ["--group-add", "keep-groups"] if podman else [
            a for gid in req.group_ids for a in ("--group-add", str(gid))]
    argv += ["--env", "HOME=/tmp"]
    for key, value in sorted(req.env.items()):
        argv += ["--env", f"{key}={value}"]
    for mount in req.mounts:
        if "," in mount.source + mount.target:  # --mount is comma-separated
            raise LaunchRefused(f"{mount.source}: a file whose path has ',' cannot be "
                                "mounted into a container; rename it")
        spec = f"type=bind,source={mount.source},target={mount.target},readonly=true"
        argv += ["--mount", spec + (",relabel=shared" if podman and mount.relabel else "")]
    argv += ["-v", f"{req.socket_dir}:{SOCKET_DIR}:{'rw,Z' if podman else 'rw'}"]
    for key, value in sorted(req.labels.items()):
        argv += ["--label", f"{key}={value}"]
    return [*argv, req.image, *req.command]


async def run(engine: Engine, *args: str) -> tuple[int, str, str]:
    """Run the container tool; (exit code, stdout, stderr)."""
    result = await anyio.run_process([engine.exe, *args], check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()
