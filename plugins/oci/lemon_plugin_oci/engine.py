"""The container tool (podman first, docker as fallback) and the one function that holds
every podman/docker difference in the run command.

lemoncore in a container or a toolbox drives the host's tool (:class:`HostView`): through
the host's podman or docker socket (``CONTAINER_HOST``, ``DOCKER_HOST``: the CLI talks to
that service, whose filesystem is the host's), or through a command that runs the tool on
the host (``LEMON_OCI_ENGINE_VIA="flatpak-spawn --host"`` in a Fedora toolbox). The paths
lemoncore passes (model files, the socket directory) are then the host's: each prefix in
``LEMON_OCI_HOST_PATHS`` (``inside=host,...``) maps lemoncore's view to the host's, and a
path outside every mapped prefix is refused, naming the setting."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import anyio

from lemoncore.plugin import LaunchRefused

from lemon_plugin_oci.contracts import SOCKET_DIR

PROXY_KEYS = tuple(
    k
    for base in ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
    for k in (base, base.lower())
)
NOBODY = "65534:65534"


HOST_PATHS, ENGINE_VIA = "LEMON_OCI_HOST_PATHS", "LEMON_OCI_ENGINE_VIA"


@dataclass(frozen=True)
class HostView:
    """How the tool's host reaches what lemoncore names: ``via``, the command that runs
    the tool there (empty: the tool runs here); ``paths``, (lemoncore's prefix, the host's
    prefix) pairs (empty: the host sees lemoncore's paths as they are)."""

    via: tuple[str, ...] = ()
    paths: tuple[tuple[str, str], ...] = ()

    def host_path(self, path: str) -> str:
        """``path`` as the host names it: through the longest mapped prefix it is under;
        unchanged without mappings; refused when mappings are set and none covers it."""
        if not self.paths:
            return path
        pure = PurePosixPath(path)
        for inside, host in sorted(self.paths, key=lambda p: -len(p[0])):
            if pure == PurePosixPath(inside) or PurePosixPath(inside) in pure.parents:
                return str(PurePosixPath(host) / pure.relative_to(inside))
        mapped = ", ".join(inside for inside, _ in self.paths)
        raise LaunchRefused(
            f"{path} is not in a directory the container tool's host shares with lemoncore "
            f"({HOST_PATHS} maps {mapped}): mount its directory into lemoncore's container "
            f"and add it to {HOST_PATHS} as INSIDE=HOST"
        )


def host_view(environ: Mapping[str, str]) -> HostView:
    """The :class:`HostView` ``environ`` describes (``LEMON_OCI_ENGINE_VIA``, a command
    line; ``LEMON_OCI_HOST_PATHS``, ``INSIDE=HOST`` pairs separated by commas, absolute
    paths); ``LaunchRefused`` naming the setting when it is malformed."""
    paths = []
    for pair in filter(None, (p.strip() for p in environ.get(HOST_PATHS, "").split(","))):
        inside, sep, host = pair.partition("=")
        if not sep or not inside.startswith("/") or not host.startswith("/"):
            raise LaunchRefused(
                f"{HOST_PATHS}: {pair!r} is not INSIDE=HOST with two absolute paths "
                "(e.g. /data=/home/me/.cache/lemoncore)"
            )
        paths.append((inside.rstrip("/") or "/", host.rstrip("/") or "/"))
    return HostView(tuple(shlex.split(environ.get(ENGINE_VIA, ""))), tuple(paths))


@dataclass(frozen=True)
class Engine:
    """The container tool. ``rootless``: it runs containers in the invoking user's user
    namespace (rootless podman, or a rootless docker daemon); ``remote``: it is a service
    elsewhere (a socket, or the host through ``host.via``), so rootless is the service's
    word (``info``), not this process's uid."""

    kind: str  # podman | docker
    exe: str
    rootless: bool = False
    host: HostView = HostView()
    remote: bool = False

    @property
    def command(self) -> list[str]:
        """What runs the tool: ``exe``, through ``host.via`` when set."""
        return [*self.host.via, self.exe]


@dataclass(frozen=True)
class Identity:
    """Who the engine runs as: never real root. ``user`` is ``uid:gid`` for ``--user``;
    ``userns`` a podman user-namespace mode; ``keep_groups`` keeps the invoking user's
    ``render``/``video`` groups (rootless podman), else ``group_ids`` are added."""

    user: str = ""
    userns: str = ""
    keep_groups: bool = False
    group_ids: tuple[int, ...] = ()

    @property
    def uid(self) -> int | None:
        """The host uid that owns the engine's files, when lemoncore must chown them."""
        return int(self.user.split(":")[0]) if self.user else None


def identity(engine: Engine, uid: int, gid: int, group_ids: tuple[int, ...]) -> Identity:
    """Rootless podman maps the user in (``keep-id``: the engine is the user, with the
    user's groups); a rootless docker daemon's root is the user already. A rootful tool
    would run the engine as real root: give it lemoncore's own uid, or ``nobody`` when
    lemoncore itself is root, and the GPU groups by number (names resolve in the image)."""
    if engine.rootless:
        if engine.kind == "podman":
            return Identity(userns="keep-id", keep_groups=True)
        return Identity()
    return Identity(user=f"{uid}:{gid}" if uid else NOBODY, group_ids=group_ids)


def find_engine(which: Callable[[str], str | None] = shutil.which) -> Engine | None:
    """podman, else docker; an administrator picks one with ``LEMON_OCI_ENGINE`` (which
    ``LEMON_OCI_ENGINE_VIA`` requires: the tool is found on the host, not here).
    Rootless podman is podman run by a user; a remote service's, or a rootless docker
    daemon's, is only known from ``info`` (the setup facts)."""
    chosen = os.environ.get("LEMON_OCI_ENGINE", "")
    view = host_view(os.environ)
    for kind in (chosen,) if chosen in {"podman", "docker"} else ("podman", "docker"):
        # through ``via`` the tool is the host's: its name, resolved there
        if (exe := kind if view.via and kind == chosen else which(kind)) is not None:
            service = os.environ.get("CONTAINER_HOST" if kind == "podman" else "DOCKER_HOST")
            remote = bool(view.via or service)
            rootless = kind == "podman" and not remote and os.geteuid() != 0
            return Engine(kind, exe, rootless, view, remote)
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
    devices: tuple[tuple[str, str], ...] = ()  # (host path, path in the container)
    ipc_host: bool = False
    memlock_unlimited: bool = False
    cap_add: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    identity: Identity = Identity()
    stop_timeout: int = 15
    pids_limit: int = 4096


def run_argv(engine: Engine, req: RunRequest) -> list[str]:
    """The run command. Every flag is a decision; see the OCI plugin's README for why."""
    podman = engine.kind == "podman"
    argv = [
        *engine.command,
        "run",
        "-d",
        "--name",
        req.name,
        "--init",
        "--read-only",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--network=none",
        f"--pids-limit={req.pids_limit}",
        f"--stop-timeout={req.stop_timeout}",
        "--pull=never",
        "--ipc=host" if req.ipc_host else "--ipc=private",
    ]
    if req.memlock_unlimited:
        argv.append("--ulimit=memlock=-1:-1")
    for cap in req.cap_add:
        argv.append(f"--cap-add={cap}")
    who = req.identity
    if who.user:
        argv.append(f"--user={who.user}")
    if who.userns:
        argv.append(f"--userns={who.userns}")
    env = {"HOME": "/tmp", **req.env}  # noqa: S108 - a tmpfs inside the container
    if podman:
        argv.append("--http-proxy=false")
    else:
        # docker adds no tmpfs to a read-only container; these paths are inside it
        argv += ["--tmpfs", "/tmp", "--tmpfs", "/run"]  # noqa: S108
        # the docker CLI copies ~/.docker/config.json's proxies into any key not given
        # (docker/cli cli/config/configfile/file.go ParseProxyConfig)
        env = {**dict.fromkeys(PROXY_KEYS, ""), **env}
    for host, inside in req.devices:
        argv += ["--device", f"{host}:{inside}"]
    if req.devices:
        argv += (
            ["--group-add", "keep-groups"]
            if who.keep_groups
            else [a for gid in who.group_ids for a in ("--group-add", str(gid))]
        )
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    for mount in req.mounts:
        if "," in mount.source + mount.target:  # --mount is comma-separated
            raise LaunchRefused(
                f"{mount.source}: a file whose path has ',' cannot be "
                "mounted into a container; rename it"
            )
        source = engine.host.host_path(mount.source)
        spec = f"type=bind,source={source},target={mount.target},readonly=true"
        argv += ["--mount", spec + (",relabel=shared" if podman and mount.relabel else "")]
    socket_dir = engine.host.host_path(req.socket_dir)
    argv += ["-v", f"{socket_dir}:{SOCKET_DIR}:{'rw,Z' if podman else 'rw'}"]
    for key, value in sorted(req.labels.items()):
        argv += ["--label", f"{key}={value}"]
    return [*argv, req.image, *req.command]


RELAY = """\
import os, socket, sys, threading
path, port = sys.argv[1], int(sys.argv[2])
os.umask(0o077)
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(64)
def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def serve(client):
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()
while True:
    client, _ = server.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
"""
"""Bridges the unix socket to a TCP port on the container's loopback, run inside the
engine's container (so inside its network namespace, which has only ``lo``) by the
image's own Python, as Cockpit's relay does (runtime/isolated_api.py); unlike Cockpit's,
one process serves every connection, without a ``podman exec`` per connection."""


def relay_argv(
    engine: Engine, container: str, program: tuple[str, ...], socket: str, port: int
) -> list[str]:
    """``exec -d`` of the relay in the engine's container."""
    return [*engine.command, "exec", "-d", container, *program, RELAY, socket, str(port)]


async def run(engine: Engine, *args: str) -> tuple[int, str, str]:
    """Run the container tool; (exit code, stdout, stderr)."""
    result = await anyio.run_process([*engine.command, *args], check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def running_with_label(engine: Engine, label: str) -> list[str]:
    """The names of the running containers labelled ``label`` (``key=value``), any owner
    this tool shows; none when it cannot say. The same ``ps --filter label=…`` as the boot
    sweep (``server.sweep``, run under podman and docker by the container tests)."""
    code, out, _ = await run(engine, "ps", "--filter", f"label={label}", "--format", "{{.Names}}")
    return out.split() if code == 0 else []
