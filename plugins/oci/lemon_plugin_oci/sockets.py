"""Where an engine's unix socket lives, so the engine cannot point lemoncore elsewhere.

Each container gets two directories under lemoncore's runtime directory (a size-limited
tmpfs: ``$XDG_RUNTIME_DIR`` or ``/run``; else the cache): ``engine/``, the only host path
the engine may write, mounted at ``/run/lemon``; and ``lemon/``, which the engine never
sees. Once the engine has bound its socket, :meth:`SocketDirs.adopt` moves it into
``lemon/`` (a bound socket keeps listening under its new name) and checks, there, beyond
the engine's reach, that it is a socket owned by the engine's uid: a symlink to another
program's socket, or a file, is refused. The engine's directory is capped in size.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from lemoncore.launch import LaunchRefused

SOCKET_NAME = "engine.sock"
MAX_ENGINE_DIR_BYTES = 1024 * 1024


def runtime_base(fallback: Path) -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "lemoncore"
    if os.geteuid() == 0:
        return Path("/run/lemoncore")
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
            os.chown(self.engine, owner, -1)
            os.chmod(self.root, 0o711)  # noqa: S103 - the engine passes through, cannot list

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
            self.socket.unlink()
            kind = "a symlink" if stat.S_ISLNK(info.st_mode) else (
                f"a socket of uid {info.st_uid}" if stat.S_ISSOCK(info.st_mode) else
                "not a socket")
            raise LaunchRefused(f"the engine's {SOCKET_NAME} is {kind}; expected a socket "
                                f"owned by uid {self.owner}. Refused")

    def engine_usage(self) -> int:
        """Bytes the engine has written into its directory."""
        total = 0
        for dirpath, _, names in os.walk(self.engine):
            for name in names:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    pass
        return total

    def reset(self) -> None:
        """Forget a removed container's socket and files, for the next launch."""
        self.socket.unlink(missing_ok=True)
        for entry in self.engine.iterdir() if self.engine.is_dir() else ():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
