"""Both process platforms' decisions, checked on Linux (CI has no Windows)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from lemoncore.platforms import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    Posix,
    Windows,
    default_dirs,
    path_list,
)


def test_posix_children_get_their_own_session_and_die_with_the_server() -> None:
    options = Posix(linux=True).spawn_options()
    assert options["start_new_session"] is True
    assert callable(options["preexec_fn"])
    assert "preexec_fn" not in Posix(linux=False).spawn_options()  # macOS: no pdeathsig


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
    assert windows.spawn_options()["creationflags"] == CREATE_NEW_PROCESS_GROUP
    assert windows.request_stop(4242) is True
    assert console.calls == [("GenerateConsoleCtrlEvent", (1, 4242))]  # to its group
    service = FakeKernel32(console=0)
    windows = Windows(service)
    assert windows.spawn_options()["creationflags"] == \
        CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    assert windows.request_stop(4242) is False
    assert service.calls == []


def test_windows_children_live_in_a_kill_on_close_job_per_child() -> None:
    kernel32 = FakeKernel32()
    windows = Windows(kernel32)
    assert windows.spawn_options()["creationflags"] & CREATE_NEW_PROCESS_GROUP
    windows.adopt(4242)
    names = [name for name, _ in kernel32.calls]
    assert names == ["CreateJobObjectW", "SetInformationJobObject", "OpenProcess",
                     "AssignProcessToJobObject", "CloseHandle"]
    job = kernel32.calls[0][1]
    assert kernel32.calls[1][1] == (job, 9, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE)
    assert kernel32.calls[3][1][0] == job
    windows.force_stop(4242)  # the whole tree: a PyInstaller bundle is two processes
    assert kernel32.calls[-1] == ("TerminateJobObject", job)
    windows.release(4242)
    assert kernel32.calls[-1] == ("CloseHandle", job)


def test_directories_follow_each_os() -> None:
    home = Path("/home/u")
    assert default_dirs("linux", {}, home) == (home / ".config/lemoncore",
                                               home / ".cache/lemoncore")
    assert default_dirs("linux", {"XDG_CACHE_HOME": "/x"}, home)[1] == Path("/x/lemoncore")
    config, cache = default_dirs("windows", {"APPDATA": "C:/Users/u/AppData/Roaming",
                                             "LOCALAPPDATA": "C:/Users/u/AppData/Local"}, home)
    assert config == Path("C:/Users/u/AppData/Roaming/lemoncore")
    assert cache == Path("C:/Users/u/AppData/Local/lemoncore/cache")
    assert default_dirs("darwin", {}, home)[1] == home / "Library/Caches/lemoncore"


def test_path_lists_use_the_target_os_separator() -> None:
    assert path_list("windows", "C:/rocm/bin", "", "C:/Windows") == "C:/rocm/bin;C:/Windows"
    assert path_list("linux", "/opt/rocm/lib", "/usr/lib") == "/opt/rocm/lib:/usr/lib"
