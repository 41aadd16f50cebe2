"""Operating-system specifics, behind one small interface.

:class:`Posix` (Linux, macOS): children start in their own session, die with lemoncore
through ``PR_SET_PDEATHSIG`` (Linux: set by a tiny exec helper, :data:`DIE_WITH_PARENT`,
not by a ``preexec_fn``, which CPython documents as unsafe while threads run) and are
stopped with SIGTERM then SIGKILL to their process group. :class:`Windows`: children
start in their own process group inside a Job object created with kill-on-close, so they
die when lemoncore's process ends however it ends. A console control event reaches only
processes attached to the sender's console, so a child shares lemoncore's console when it
has one and is stopped with CTRL_BREAK_EVENT to its group (VTE unloads and exits 0 on
SIGBREAK: ``http_server.py`` ``_install_signal_handlers``), then the job is terminated;
without a console (a service, ``pythonw``) the child gets none either
(``CREATE_NO_WINDOW``: no window pops up), no event can reach it, and the job is
terminated at once. The config and cache directories follow each OS's conventions
(:mod:`platformdirs`, where it names the directories lemoncore has always used).

The signals that ask lemoncore itself (``lemon serve``, ``lemon worker``) to stop
gracefully (:func:`stop_signals`, :func:`on_stop_signal`): POSIX SIGINT (Ctrl-C) and
SIGTERM; Windows SIGINT and SIGBREAK, the two console control events Python turns into
signals (Python docs, ``signal``: "On Windows, signal() can only be called with SIGABRT,
SIGFPE, SIGILL, SIGINT, SIGSEGV, SIGTERM, or SIGBREAK"). SIGTERM is left alone there:
``os.kill(pid, SIGTERM)`` is ``TerminateProcess``, which runs no handler. asyncio's
``add_signal_handler`` (what ``anyio.open_signal_receiver`` uses) raises
``NotImplementedError`` on Windows, so the handlers are installed with
:func:`signal.signal` on every OS (one tested path) and hand over to the event loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

#: The exec helper (``python -I -S -c DIE_WITH_PARENT PARENT_PID ARGV...``): asks the
#: kernel to SIGKILL this process when the thread that spawned it ends (Linux
#: ``PR_SET_PDEATHSIG``, kept across ``execve`` except into set-user-ID programs), exits if
#: that parent already ended before the request (it would never be signalled), restores
#: the signal dispositions Python's start-up changed (as ``subprocess`` does for
#: ``restore_signals``), then replaces itself with ARGV, keeping its pid, session,
#: environment and working directory. All of it runs after ``exec`` in a fresh
#: single-threaded interpreter, so nothing depends on the state of the spawning process's
#: other threads, unlike a ``preexec_fn``. It imports ``_signal``, not ``signal`` (whose
#: ``enum`` import would double its start-up time).
DIE_WITH_PARENT = """\
import _signal, ctypes, os, sys
parent, argv = int(sys.argv[1]), sys.argv[2:]
if ctypes.CDLL(None, use_errno=True).prctl(1, _signal.SIGKILL):  # PR_SET_PDEATHSIG
    print("lemoncore: PR_SET_PDEATHSIG failed:", os.strerror(ctypes.get_errno()),
          file=sys.stderr)
if os.getppid() != parent:
    os._exit(125)
for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
    if hasattr(_signal, name):
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    print(f"lemoncore: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
    os._exit(127)
"""


class ProcessPlatform(Protocol):
    def command(self, argv: Sequence[str]) -> list[str]:
        """What to execute for ``argv``: ``argv`` itself, or a wrapper that ends in
        executing it (same pid, environment and working directory)."""

    def spawn_options(self) -> dict[str, Any]:
        """Extra keyword arguments for ``asyncio.create_subprocess_exec``."""

    def adopt(self, pid: int) -> None:
        """Tie a just-started child's lifetime to lemoncore's."""

    def request_stop(self, pid: int) -> bool:
        """Ask the child (and its descendants) to exit; ``False`` when no request can
        reach it (then there is no point waiting before :meth:`force_stop`)."""

    def force_stop(self, pid: int) -> None:
        """End the child (and its descendants) now."""

    def release(self, pid: int) -> None:
        """Forget an exited child (free what :meth:`adopt` took)."""


class Posix:
    def __init__(
        self, linux: bool = sys.platform == "linux", python: str | None = sys.executable
    ) -> None:
        self._helper = python if linux and python else None  # macOS: no pdeathsig

    def command(self, argv: Sequence[str]) -> list[str]:
        """On Linux, ``argv`` through the :data:`DIE_WITH_PARENT` exec helper (a few ms
        of interpreter start-up per launch); elsewhere ``argv``."""
        if self._helper is None:
            return list(argv)
        return [self._helper, "-I", "-S", "-c", DIE_WITH_PARENT, str(os.getpid()), *argv]

    def spawn_options(self) -> dict[str, Any]:
        """Its own session: its pid is its process group's, which stops signal."""
        return {"start_new_session": True}

    def adopt(self, pid: int) -> None:
        pass

    def request_stop(self, pid: int) -> bool:
        self._signal(pid, signal.SIGTERM)
        return True

    def force_stop(self, pid: int) -> None:
        self._signal(pid, signal.SIGKILL)

    def release(self, pid: int) -> None:
        pass

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)  # the child leads its own session: its group is its pid


# Windows constants (winbase.h / winnt.h)
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000
CTRL_BREAK_EVENT = 1
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9
PROCESS_SET_QUOTA, PROCESS_TERMINATE = 0x0100, 0x0001


class Windows:
    """One kill-on-close Job object per child, so a child's whole process tree (a
    PyInstaller bundle is two processes) is stopped with it, and every tree dies when
    lemoncore's process ends and Windows closes the job handles. Win32 calls go through
    ``kernel32`` (ctypes)."""

    def __init__(self, kernel32: Any = None) -> None:
        self._kernel32 = kernel32
        self._jobs: dict[int, int] = {}

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)  # the job object ties its lifetime to lemoncore's

    def spawn_options(self) -> dict[str, Any]:
        """Own process group; lemoncore's console shared when it has one (no new window
        opens), else none at all."""
        flags = CREATE_NEW_PROCESS_GROUP | (0 if self._has_console() else CREATE_NO_WINDOW)
        return {"creationflags": flags}

    def _has_console(self) -> bool:
        return bool(self._api().GetConsoleWindow())

    def _api(self) -> Any:
        if self._kernel32 is None:
            self._kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
        return self._kernel32

    def _new_job(self) -> int:
        api = self._api()
        job = api.CreateJobObjectW(None, None)
        info = _extended_limit_information()
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if not job or not api.SetInformationJobObject(
            job, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.byref(info), ctypes.sizeof(info)
        ):
            raise OSError("cannot create a kill-on-close job object")
        return int(job)

    def adopt(self, pid: int) -> None:
        api = self._api()
        job = self._new_job()
        handle = api.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
        try:
            if not handle or not api.AssignProcessToJobObject(job, handle):
                api.CloseHandle(job)
                raise OSError(f"cannot put process {pid} in a job object")
        finally:
            if handle:
                api.CloseHandle(handle)
        self._jobs[pid] = job

    def request_stop(self, pid: int) -> bool:
        """CTRL_BREAK_EVENT to the child's process group (its pid), through the console
        it shares with lemoncore; ``False`` without a shared console."""
        if not self._has_console():
            return False
        return bool(self._api().GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid))

    def force_stop(self, pid: int) -> None:
        job = self._jobs.get(pid)
        if job is not None:
            self._api().TerminateJobObject(job, 1)

    def release(self, pid: int) -> None:
        job = self._jobs.pop(pid, None)
        if job is not None:
            self._api().CloseHandle(job)


def _extended_limit_information() -> Any:
    class IoCounters(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_ulonglong)
            for n in (
                "ReadOperationCount",
                "WriteOperationCount",
                "OtherOperationCount",
                "ReadTransferCount",
                "WriteTransferCount",
                "OtherTransferCount",
            )
        ]

    class BasicLimits(ctypes.Structure):
        _fields_ = [
            ("PerProcessUserTimeLimit", ctypes.c_int64),
            ("PerJobUserTimeLimit", ctypes.c_int64),
            ("LimitFlags", ctypes.c_uint32),
            ("MinimumWorkingSetSize", ctypes.c_size_t),
            ("MaximumWorkingSetSize", ctypes.c_size_t),
            ("ActiveProcessLimit", ctypes.c_uint32),
            ("Affinity", ctypes.c_size_t),
            ("PriorityClass", ctypes.c_uint32),
            ("SchedulingClass", ctypes.c_uint32),
        ]

    class ExtendedLimits(ctypes.Structure):
        _fields_ = [
            ("BasicLimitInformation", BasicLimits),
            ("IoInfo", IoCounters),
            ("ProcessMemoryLimit", ctypes.c_size_t),
            ("JobMemoryLimit", ctypes.c_size_t),
            ("PeakProcessMemoryUsed", ctypes.c_size_t),
            ("PeakJobMemoryUsed", ctypes.c_size_t),
        ]

    return ExtendedLimits()


def current() -> ProcessPlatform:
    return Windows() if sys.platform == "win32" else Posix()


SIGBREAK = 21  # signal.SIGBREAK, which only Windows' signal module defines (CPython signal.c)


def stop_signals(platform: str = sys.platform) -> tuple[int, ...]:
    """The signal numbers that mean "stop gracefully" on ``platform`` (``sys.platform``)."""
    if platform == "win32":
        return (signal.SIGINT, SIGBREAK)
    return (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def on_stop_signal(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a stop signal calls ``stop`` in the running event loop's
    thread (as a callback, never inside the handler); the previous handlers come back
    after. Enter it from the main thread, inside the asyncio loop."""
    import asyncio

    loop = asyncio.get_running_loop()

    def handler(signum: int, frame: object) -> None:
        loop.call_soon_threadsafe(stop)

    previous = {number: signal.signal(number, handler) for number in stop_signals()}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


APP = "lemoncore"  # the directories' name


def default_dirs() -> tuple[Path, Path]:
    """(config directory, cache directory) of this OS, by :mod:`platformdirs`: Linux
    ``$XDG_CONFIG_HOME/lemoncore`` and ``$XDG_CACHE_HOME/lemoncore`` (else under
    ``~/.config`` and ``~/.cache``), macOS ``~/Library/Application Support/lemoncore`` and
    ``~/Library/Caches/lemoncore`` (the XDG variables win there too), Windows the roaming
    ``%APPDATA%\\lemoncore`` and ``%LOCALAPPDATA%\\lemoncore\\Cache``."""
    from platformdirs import PlatformDirs

    dirs = PlatformDirs(APP, appauthor=False, roaming=True)
    return Path(dirs.user_config_dir), Path(dirs.user_cache_dir)


def path_list(os_name: str, *parts: str) -> str:
    """Join PATH-like entries with the separator of ``os_name`` (not of this machine)."""
    return (";" if os_name == "windows" else ":").join(p for p in parts if p)
