"""Both process platforms' decisions, checked on Linux (CI has no Windows), and the
POSIX ones with real processes."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lemoncore.platforms import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    DIE_WITH_PARENT,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    Posix,
    Windows,
    default_dirs,
    path_list,
)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")


def test_posix_children_get_their_own_session_and_die_with_the_server() -> None:
    """No ``preexec_fn`` (unsafe while threads run): a session of its own, and on Linux
    the exec helper in front of the engine's argv."""
    linux = Posix(linux=True, python="/usr/bin/python3")
    assert linux.spawn_options() == {"start_new_session": True}
    assert linux.command(["llama-server", "-m", "a b.gguf"]) == [
        "/usr/bin/python3",
        "-I",
        "-S",
        "-c",
        DIE_WITH_PARENT,
        str(os.getpid()),
        "llama-server",
        "-m",
        "a b.gguf",
    ]
    macos = Posix(linux=False)  # no pdeathsig there
    assert macos.spawn_options() == {"start_new_session": True}
    assert macos.command(["llama-server"]) == ["llama-server"]
    assert Posix(linux=True, python="").command(["x"]) == ["x"]  # no interpreter to run


def spawn(argv: list[str], **options: Any) -> subprocess.Popen[str]:
    posix = Posix()
    return subprocess.Popen(
        posix.command(argv), stdout=subprocess.PIPE, text=True, **posix.spawn_options(), **options
    )


@linux_only
def test_the_engine_gets_its_argv_env_cwd_and_own_session_through_the_helper(
    tmp_path: Path,
) -> None:
    report = (
        "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
        "'cwd': os.getcwd(), 'env': os.environ.get('ENGINE_KEY'), 'pid': os.getpid(), "
        "'sid': os.getsid(0), 'pgid': os.getpgid(0), 'ppid': os.getppid()}))"
    )
    argv = ["--model", "a model.gguf", "ünïcode", "", "--flag=$HOME"]
    child = spawn(
        [sys.executable, "-c", report, *argv],
        cwd=tmp_path,
        env={**os.environ, "ENGINE_KEY": "secret"},
    )
    out, _ = child.communicate(timeout=30)
    seen = json.loads(out)
    assert child.returncode == 0
    assert seen["argv"] == argv
    assert (seen["cwd"], seen["env"]) == (str(tmp_path), "secret")
    assert seen["pid"] == child.pid  # the helper exec'd the engine: one process
    assert seen["sid"] == seen["pgid"] == child.pid  # its own session and group
    assert seen["ppid"] == os.getpid()


@linux_only
def test_the_engine_gets_default_signal_dispositions() -> None:
    """Python ignores SIGPIPE; the helper restores it before exec, as subprocess's
    ``restore_signals`` does, so an engine writing to a closed pipe dies as it would."""
    child = spawn(["grep", "SigIgn", "/proc/self/status"])
    out, _ = child.communicate(timeout=30)
    ignored = int(out.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))


INTERMEDIATE = """\
import subprocess, sys, threading, time
from lemoncore.platforms import Posix
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # threads run
posix = Posix()
child = subprocess.Popen(posix.command(["sleep", "60"]), **posix.spawn_options())
print(child.pid, flush=True)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie nobody has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def program(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except FileNotFoundError:
        return b""


def within(seconds: float, condition: Any) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@linux_only
def test_the_engine_dies_when_the_process_that_started_it_is_killed() -> None:
    """SIGKILL leaves the parent no chance to stop its children: the kernel does it."""
    with subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            engine = int(parent.stdout.readline())
            assert within(10, lambda: program(engine) == b"sleep")  # past the helper
            assert os.getsid(engine) == engine
            parent.kill()
            parent.wait()
            assert within(10, lambda: gone(engine))
        finally:
            parent.kill()


@linux_only
def test_the_helper_runs_nothing_once_its_parent_has_already_died(tmp_path: Path) -> None:
    """Had lemoncore died between the fork and the helper's prctl, no signal would ever
    come: the helper sees another parent and exits before exec."""
    marker = tmp_path / "ran"
    helper = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        DIE_WITH_PARENT,
        str(os.getpid() + 1_000_000),
        "touch",
        str(marker),
    ]
    assert subprocess.run(helper, check=False, timeout=30).returncode == 125
    assert not marker.exists()


@linux_only
def test_an_engine_that_cannot_run_is_reported_by_the_helper(tmp_path: Path) -> None:
    child = spawn([str(tmp_path / "missing-engine")], stderr=subprocess.STDOUT)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 127
    assert (
        out == f"lemoncore: cannot run {tmp_path / 'missing-engine'}: No such file or directory\n"
    )


class FakeKernel32:
    """Records the Win32 calls the Windows platform makes, answering like Windows does."""

    def __init__(self, console: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.next_handle = 100
        self.console = console  # GetConsoleWindow: 0 for a process without a console

    def GetConsoleWindow(self) -> int:
        # learn.microsoft.com/windows/console/getconsolewindow: the window handle of the
        # calling process's console, or NULL when it has none (a service, pythonw).
        return self.console

    def GenerateConsoleCtrlEvent(self, event: int, group: int) -> int:
        # learn.microsoft.com/windows/console/generateconsolectrlevent: sends the event to
        # the process group ``group`` among processes sharing the caller's console;
        # CTRL_BREAK_EVENT is 1 (wincon.h). Nonzero on success.
        self.calls.append(("GenerateConsoleCtrlEvent", (event, group)))
        return 1

    def _handle(self) -> int:
        self.next_handle += 1
        return self.next_handle

    def CreateJobObjectW(self, attributes: object, name: object) -> int:
        handle = self._handle()
        self.calls.append(("CreateJobObjectW", handle))
        return handle

    def SetInformationJobObject(self, job: int, klass: int, info: Any, size: int) -> int:
        limits = ctypes.cast(info, ctypes.POINTER(ctypes.c_int64 * 3)).contents
        self.calls.append(("SetInformationJobObject", (job, klass, limits[2] & 0xFFFFFFFF)))
        return 1

    def OpenProcess(self, access: int, inherit: bool, pid: int) -> int:
        self.calls.append(("OpenProcess", pid))
        return self._handle()

    def AssignProcessToJobObject(self, job: int, process: int) -> int:
        self.calls.append(("AssignProcessToJobObject", (job, process)))
        return 1

    def TerminateJobObject(self, job: int, code: int) -> int:
        self.calls.append(("TerminateJobObject", job))
        return 1

    def CloseHandle(self, handle: int) -> int:
        self.calls.append(("CloseHandle", handle))
        return 1


def test_windows_stop_breaks_through_a_shared_console_else_ends_the_job_at_once() -> None:
    """A console control event reaches only processes on the sender's console. With one,
    the child shares it (no new window) and gets CTRL_BREAK_EVENT, on which VTE unloads
    and exits 0; without one (a service), the child gets no console either and the stop
    goes straight to the job, instead of waiting out the grace period for nothing."""
    console = FakeKernel32(console=0x1234)
    windows = Windows(console)
    assert windows.command(["vte.exe", "--port", "1"]) == ["vte.exe", "--port", "1"]
    assert windows.spawn_options()["creationflags"] == CREATE_NEW_PROCESS_GROUP
    assert windows.request_stop(4242) is True
    assert console.calls == [("GenerateConsoleCtrlEvent", (1, 4242))]  # to its group
    service = FakeKernel32(console=0)
    windows = Windows(service)
    assert windows.spawn_options()["creationflags"] == CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    assert windows.request_stop(4242) is False
    assert service.calls == []


def test_windows_children_live_in_a_kill_on_close_job_per_child() -> None:
    kernel32 = FakeKernel32()
    windows = Windows(kernel32)
    assert windows.spawn_options()["creationflags"] & CREATE_NEW_PROCESS_GROUP
    windows.adopt(4242)
    names = [name for name, _ in kernel32.calls]
    assert names == [
        "CreateJobObjectW",
        "SetInformationJobObject",
        "OpenProcess",
        "AssignProcessToJobObject",
        "CloseHandle",
    ]
    job = kernel32.calls[0][1]
    assert kernel32.calls[1][1] == (job, 9, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
    assert kernel32.calls[3][1][0] == job
    windows.force_stop(4242)  # the whole tree: a PyInstaller bundle is two processes
    assert kernel32.calls[-1] == ("TerminateJobObject", job)
    windows.release(4242)
    assert kernel32.calls[-1] == ("CloseHandle", job)


@pytest.mark.skipif(sys.platform != "linux", reason="the XDG rules are Linux's")
@pytest.mark.parametrize(
    ("env", "config", "cache"),
    [
        ({}, "/home/u/.config/lemoncore", "/home/u/.cache/lemoncore"),
        ({"XDG_CACHE_HOME": "/x"}, "/home/u/.config/lemoncore", "/x/lemoncore"),
        ({"XDG_CONFIG_HOME": "/c/", "XDG_CACHE_HOME": "/x"}, "/c/lemoncore", "/x/lemoncore"),
        ({"XDG_CONFIG_HOME": "rel"}, "/home/u/.config/lemoncore", "/home/u/.cache/lemoncore"),
    ],
)
def test_directories_follow_the_xdg_rules(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], config: str, cache: str
) -> None:
    """platformdirs' answer on Linux: the XDG variables when absolute (the spec ignores a
    relative one), else under the home directory."""
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"HOME": "/home/u", **env}.items():
        monkeypatch.setenv(name, value)
    assert default_dirs() == (Path(config), Path(cache))


def test_path_lists_use_the_target_os_separator() -> None:
    assert path_list("windows", "C:/rocm/bin", "", "C:/Windows") == "C:/rocm/bin;C:/Windows"
    assert path_list("linux", "/opt/rocm/lib", "/usr/lib") == "/opt/rocm/lib:/usr/lib"
