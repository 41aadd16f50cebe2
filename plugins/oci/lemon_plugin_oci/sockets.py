"""Where an engine's unix socket lives, so the engine cannot point lemoncore elsewhere.

Each container gets two directories under lemoncore's runtime directory (a size-limited
tmpfs: ``$XDG_RUNTIME_DIR`` or ``/run``; else the cache): ``engine/``, the only host path
the engine may write, mounted at ``/run/lemon``; and ``lemon/``, which the engine never
sees. Once the engine has bound its socket, :meth:`SocketDirs.adopt` moves it into
``lemon/`` (a bound socket keeps listening under its new name) and checks, there, beyond
the engine's reach, that it is a socket owned by the engine's uid: a symlink to another
program's socket, a file or a directory is refused. What the engine writes into its
directory is checked (entries and bytes) by the drift watch.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from lemoncore.plugin import LaunchRefused

SOCKET_NAME = "engine.sock"
MAX_ENGINE_DIR_BYTES = 1024 * 1024
MAX_ENGINE_DIR_ENTRIES = 64


def runtime_base(fallback: Path, shared: Callable[[str], object] = str) -> Path:
    """Where the socket directories go: the runtime directory (``$XDG_RUNTIME_DIR``, or
    ``/run`` for root), else ``fallback/run``; the first the container tool's host can
    see (``shared``, :meth:`~lemon_plugin_oci.engine.HostView.host_path`, raises for one it
    cannot: lemoncore in a container shares its cache, not its ``/run``)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    candidates = [Path(runtime) / "lemoncore"] if runtime and Path(runtime).is_dir() else []
    candidates += [Path("/run/lemoncore")] if os.geteuid() == 0 else []
    for base in candidates:
        try:
            shared(str(base))
        except LaunchRefused:
            continue
        return base
    return fallback / "run"


class SocketDirs:
    def __init__(self, base: Path, owner: int | None) -> None:
        """``owner``: the host uid the engine runs as, when lemoncore must hand it the
        directory (a rootful engine with ``--user``); else lemoncore's own uid."""
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="c-", dir=base))
        self.engine = self.root / "engine"
        self.lemon = self.root / "lemon"
        self.engine.mkdir(mode=0o700)
        self.lemon.mkdir(mode=0o700)
        self.owner = os.geteuid() if owner is None else owner
        if owner is not None and owner != os.geteuid():
            os.chown(self.engine, owner, -1)  # the tool bind-mounts it; no traversal needed

    @property
    def socket(self) -> Path:
        """The path lemoncore connects to."""
        return self.lemon / SOCKET_NAME

    def bound(self) -> bool:
        return os.path.lexists(self.engine / SOCKET_NAME)

    def adopt(self) -> None:
        """Move the engine's socket out of its reach, then check what was moved."""
        os.rename(self.engine / SOCKET_NAME, self.socket)  # moves a symlink, not its target
        info = os.lstat(self.socket)
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != self.owner:
            _remove(self.socket)
            kind = (
                "a symlink"
                if stat.S_ISLNK(info.st_mode)
                else (
                    f"a socket of uid {info.st_uid}"
                    if stat.S_ISSOCK(info.st_mode)
                    else "a directory"
                    if stat.S_ISDIR(info.st_mode)
                    else "not a socket"
                )
            )
            raise LaunchRefused(
                f"the engine's {SOCKET_NAME} is {kind}; expected a socket "
                f"owned by uid {self.owner}. Refused"
            )

    def engine_usage(self) -> tuple[int, int]:
        """Entries and bytes the engine has written into its directory (blocking: run it
        in a thread)."""
        entries = size = 0
        for dirpath, directories, names in os.walk(self.engine):
            for name in (*directories, *names):
                entries += 1
                try:
                    size += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    pass
        return entries, size

    def reset(self) -> None:
        """Forget a removed container's socket and files, for the next launch."""
        _remove(self.socket)
        for entry in self.engine.iterdir() if self.engine.is_dir() else ():
            _remove(entry)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
