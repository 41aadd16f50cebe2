"""A server's state file, ``lemon serve --detach``, ``lemon stop`` and ``lemon status``.

``lemon serve`` records itself in ``<cache_dir>/run/serve-<port>.json`` (pid, URL, log
file) once its port is bound, while it runs; ``stop`` and ``status`` find it there; on a
taken port it exits 1 saying who holds it (:func:`port_taken`). ``--detach`` starts the
same command apart from this terminal (:func:`detached_options`) with its output in
``<cache_dir>/run/serve-<port>.log`` and returns once that process has recorded itself
and answers ``/live``. ``stop`` asks the server to drain and stop (``POST
/api/v1/shutdown``, with the admin key: the same on every OS) and waits for the exit;
a server that does not answer gets a signal instead (:func:`signal_stop`: SIGTERM, which
drains too, on POSIX; on Windows that is ``TerminateProcess``, no drain, and it says
so). Whether a server answers is asked through :class:`~lemoncore.cli.remote.Remote`.

The Windows branches follow the documented APIs but have never run on Windows: the unit
tests check what they pass (``tests/test_stop.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from lemoncore.cli.common import print_result, settings_from
from lemoncore.cli.remote import Remote
from lemoncore.jsonfile import write_json

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers
    from lemoncore.settings import Settings

START_TIMEOUT_S = 120.0


class ServerState(TypedDict):
    """A running ``lemon serve``, as its state file records it."""

    pid: int
    url: str
    log: str | None  # None: its output goes to its terminal
    started: float  # epoch seconds


StopHow = Literal["asked", "signalled", "terminated"]


class Stopped(TypedDict):
    """``lemon stop --json``: the workers stopped and, if it was, the server's pid and
    how: ``asked`` (the shutdown route: drained), ``signalled`` (SIGTERM: drained),
    ``terminated`` (Windows ``TerminateProcess``: not drained)."""

    workers: list[str]
    stopped: NotRequired[int]
    how: NotRequired[StopHow]


# Windows process creation flags and show-window values (winbase.h, winuser.h), named
# here because only Windows' subprocess module defines them.
CREATE_NEW_CONSOLE, CREATE_NEW_PROCESS_GROUP = 0x00000010, 0x00000200
STARTF_USESHOWWINDOW, SW_HIDE = 0x00000001, 0


def state_file(settings: Settings) -> Path:
    return settings.cache_dir / "run" / f"serve-{settings.port}.json"


def read_state(settings: Settings) -> ServerState | None:
    """The recorded server on this port, or ``None`` (a record whose process is gone is
    removed)."""
    import psutil

    path = state_file(settings)
    try:
        state: ServerState = json.loads(path.read_text())
        alive = psutil.pid_exists(int(state["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        alive = False
    if not alive:
        path.unlink(missing_ok=True)
        return None
    return state


@contextlib.contextmanager
def recorded(settings: Settings, log_file: str | None) -> Iterator[None]:
    """Record this process as the server on its port while the block runs."""
    path = state_file(settings)  # written atomically: a reader never sees half of it
    state: ServerState = {
        "pid": os.getpid(),
        "url": Remote.for_settings(settings).url,
        "log": log_file,
        "started": time.time(),
    }
    write_json(path, state)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


def port_taken(settings: Settings, error: OSError) -> str:
    """Why a server could not bind its port, and who holds it: the recorded lemoncore
    server, another lemoncore answering there (recorded under another cache directory),
    or the listening process ``psutil`` can see (itself, when it is another user's)."""
    where = f"{settings.host}:{settings.port}"
    if error.errno != errno.EADDRINUSE:
        return f"cannot listen on {where}: {error.strerror or error}"
    fix = "choose another port (--port or LEMON_PORT)"
    if (state := read_state(settings)) is not None:
        holder = (
            f"pid {state['pid']} (lemoncore, {state['url']}); stop it with: lemon stop, or {fix}"
        )
    elif Remote.for_settings(settings).live(timeout=1):
        holder = f"another lemoncore server (not recorded in {state_file(settings).parent}); {fix}"
    else:
        holder = f"{_listener(settings.port)}; {fix}"
    return f"port {settings.port} is in use by {holder}"


def _listener(port: int) -> str:
    import psutil

    try:
        pids = {
            c.pid
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
        }
        names = sorted(f"pid {pid} ({psutil.Process(pid).name()})" for pid in pids)
    except (psutil.Error, OSError):
        names = []
    return ", ".join(names) or "another program"


def detached_options(platform: str = sys.platform) -> dict[str, Any]:
    """``Popen`` keywords that part a background server from this terminal. POSIX: a new
    session (no controlling terminal: closing it sends no SIGHUP). Windows: a console of
    its own, hidden (``CREATE_NEW_CONSOLE`` with ``STARTUPINFO.wShowWindow = SW_HIDE``),
    in a new process group: Ctrl-C here does not reach it, closing this window does not
    end it, and the engines it starts share its console, so their graceful stop
    (``CTRL_BREAK_EVENT``, :mod:`lemoncore.platforms`) still reaches them, which
    ``DETACHED_PROCESS`` (no console at all) would rule out. ``start_new_session`` is
    ignored on Windows (CPython ``subprocess`` docs: POSIX only)."""
    if platform != "win32":
        return {"start_new_session": True}
    startup = subprocess.STARTUPINFO()  # type: ignore[attr-defined,unused-ignore]
    startup.dwFlags |= STARTF_USESHOWWINDOW
    startup.wShowWindow = SW_HIDE
    return {
        "creationflags": CREATE_NEW_CONSOLE | CREATE_NEW_PROCESS_GROUP,
        "startupinfo": startup,
    }


def detach(args: argparse.Namespace, argv: list[str]) -> int:
    """Start ``lemon serve`` (``argv`` without ``--detach``) in the background."""
    settings = settings_from(args)
    if (state := read_state(settings)) is not None:
        print(
            f"a server already runs on port {settings.port} (pid {state['pid']})", file=sys.stderr
        )
        return 1
    log = state_file(settings).with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "lemoncore.cli", *argv, "--log-file", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            **detached_options(),
        )
    url = Remote.for_settings(settings).url
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print("lemon serve exited at start:\n" + "\n".join(tail), file=sys.stderr)
            return 1
        # ours once it recorded itself (after binding the port) and answers
        state = read_state(settings)
        if state is not None and state["pid"] == child.pid and Remote(url).live(timeout=1):
            print(
                f"lemoncore is serving {url}/v1 (pid {child.pid}, log {log}); "
                "stop it with: lemon stop"
            )
            return 0
        time.sleep(0.1)
    print(f"lemon serve did not answer within {START_TIMEOUT_S:.0f} s; see {log}", file=sys.stderr)
    return 1


def _exited(pid: int, within: float) -> bool:
    """Whether ``pid`` exits within ``within`` seconds (a zombie has: only its parent's
    wait is missing)."""
    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def signal_stop(pid: int, platform: str = sys.platform) -> StopHow:
    """Signal ``pid`` to stop: SIGTERM (POSIX: a lemoncore process drains on it); on
    Windows ``os.kill(pid, SIGTERM)`` is ``TerminateProcess`` (CPython ``os.kill`` docs),
    so ``terminated``: no drain, and its engines end with its job objects."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return "terminated" if platform == "win32" else "signalled"


def ask_to_stop(settings: Settings, state: ServerState) -> str | None:
    """``POST /api/v1/shutdown`` to the recorded server; ``None`` once it agreed, else
    why it did not (not answering, an older server without the route, a wrong key)."""
    from lemoncore.cli.remote import RemoteError

    remote = Remote.for_settings(settings, state["url"])
    try:
        remote.post("/api/v1/shutdown", {}, timeout=10)
    except RemoteError as exc:
        return str(exc)
    return None


def cmd_stop(args: argparse.Namespace) -> int:
    """Stop the server recorded on this port and the RPC workers (``lemon worker``)
    recorded on this machine."""
    from lemoncore.rpc.records import read_worker_states

    settings = settings_from(args)
    state, workers = read_state(settings), read_worker_states(settings.cache_dir)
    if state is None and not workers:
        print(
            f"no server recorded on port {settings.port} (lemon serve writes "
            f"{state_file(settings)}), and no lemon worker",
            file=sys.stderr,
        )
        return 1
    stopped: Stopped = {"workers": []}
    within = settings.stop_grace + 15
    for worker in workers:  # no HTTP API: a signal
        pid = int(worker["pid"])
        signal_stop(pid)
        if _exited(pid, within):
            stopped["workers"].append(worker["endpoint"])
            if not args.json:
                print(f"stopped the RPC worker {worker['endpoint']} (pid {pid})")
        else:
            print(
                f"the RPC worker {worker['endpoint']} (pid {pid}) is still stopping",
                file=sys.stderr,
            )
    if state is not None:
        pid = int(state["pid"])
        how: StopHow = "asked"
        if (refused := ask_to_stop(settings, state)) is not None:
            how = signal_stop(pid)
            print(
                f"the server did not take the shutdown request ({refused}); "
                + (
                    "terminated it: requests in flight were cut"
                    if how == "terminated"
                    else "sent it SIGTERM"
                ),
                file=sys.stderr,
            )
        if not _exited(pid, within):
            print(
                f"the server (pid {pid}) is still stopping; see {state.get('log')}", file=sys.stderr
            )
            return 1
        stopped["stopped"], stopped["how"] = pid, how
        if not args.json:
            print(f"stopped the server (pid {pid})")
    if args.json:
        print(json.dumps(stopped))
    return 0 if len(stopped["workers"]) == len(workers) else 1


def cmd_status(args: argparse.Namespace) -> int:
    """The server recorded on this port, and this machine's RPC workers."""
    from lemoncore.rpc.records import describe, read_worker_states

    settings = settings_from(args)
    state, workers = read_state(settings), read_worker_states(settings.cache_dir)

    def show() -> None:
        if state is None:
            print(f"no server recorded on port {settings.port}")
        else:
            print(
                f"pid {state['pid']} serving {state['url']}/v1 "
                f"({'answering' if live else 'not answering'}); "
                f"log: {state['log'] or 'its terminal'}"
            )
        for worker in workers:
            print(describe(worker))

    live = state is not None and Remote(state["url"]).live(timeout=2)
    result = {"running": state is not None, "answering": live, **(state or {}), "workers": workers}
    print_result(result, args.json, show)
    return 0 if live else 1


def add_stop(sub: Subparsers) -> None:
    for name, func, text in (
        ("stop", cmd_stop, "stop the server (drain, stop backends) and this machine's RPC workers"),
        ("status", cmd_status, "is the server running, and where; this machine's RPC workers"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--port", type=int)
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)
